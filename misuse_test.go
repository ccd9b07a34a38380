package maint_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// Configure twice on the same options is idempotent: one dial
// path, one handshake per connection.
func TestConfigureTwiceIsIdempotent(t *testing.T) {
	e := newEnv(t)
	m := maint.New(maint.WithLogf(t.Logf))
	defer m.Close()
	opt := e.options(4)
	handshakes := 0
	var mu sync.Mutex
	opt.OnConnect = func(context.Context, *redis.Conn) error {
		mu.Lock()
		handshakes++
		mu.Unlock()
		return nil
	}
	m.Configure(opt)
	m.Configure(opt)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	rdb.AddHook(m)
	for i := 0; i < 20; i++ {
		require.NoError(t, rdb.Ping(context.Background()).Err())
	}
	conns := e.old.Stats().Opened
	require.NotZero(t, conns)
	mu.Lock()
	assert.Equal(t, conns, handshakes, "the application's OnConnect ran once per connection")
	mu.Unlock()
	assert.Equal(t, conns, e.old.Stats().OptedIn, "one opt-in per connection")
	assert.Equal(t, conns, len(e.dials.Conns()), "one dial per connection: the dial path is wrapped once")
}

// hidingConn wraps a net.Conn in a type without SyscallConn.
type hidingConn struct{ net.Conn }

type hider struct{}

func (hider) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return hidingConn{c}, nil
	}
}
func (hider) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (hider) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// misuseAfterPings adds hooks (maint's among them, in the order given) to
// a client, runs 1500 PINGs, and returns the misuse events and how many
// log lines named SyscallConn.
func misuseAfterPings(t *testing.T, hooks func(m *maint.Maint) []redis.Hook) ([]maint.Event, int) {
	t.Helper()
	e := newEnv(t)
	logs := &logLines{}
	ev := &eventLog{}
	m := maint.New(maint.WithOnEvent(ev.add), maint.WithLogf(logs.logf))
	defer m.Close()
	rdb := redis.NewClient(e.options(2))
	defer rdb.Close()
	for _, h := range hooks(m) {
		rdb.AddHook(h)
	}
	for i := 0; i < 1500; i++ {
		require.NoError(t, rdb.Ping(context.Background()).Err())
	}
	var out []maint.Event
	if e1, ok := ev.first(maint.EventMisuse); ok {
		out = append(out, e1)
	}
	return out, logs.count("SyscallConn")
}

// A DialHook that hides maint's SyscallConn (so retired connections
// can no longer be refused to the pool) is detected and said once.
func TestHiddenHealthCheckIsSaidOnce(t *testing.T) {
	evs, lines := misuseAfterPings(t, func(m *maint.Maint) []redis.Hook {
		return []redis.Hook{hider{}, m} // hider outermost: it wraps maint's connections
	})
	assert.Equal(t, 1, lines, "said once")
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0].Detail, "add maint's hook first", "the advice")
}

// Following the advice, maint's hook added first and the hiding hook
// after it, hides nothing: go-redis's first hook is the outermost, so its
// health check reaches maint's connection, and nothing is said.
func TestHookOrderAdviceHolds(t *testing.T) {
	evs, _ := misuseAfterPings(t, func(m *maint.Maint) []redis.Hook {
		return []redis.Hook{m, hider{}} // hider inner: it wraps the dialled net.Conn, maint wraps it
	})
	assert.Empty(t, evs, "maint's hook first hid its health check")
}

// The same client without the hiding hook says nothing.
func TestVisibleHealthCheckSaysNothing(t *testing.T) {
	evs, _ := misuseAfterPings(t, func(m *maint.Maint) []redis.Hook { return []redis.Hook{m} })
	assert.Empty(t, evs)
}

// Configure on the options of a client that already exists (rdb.Options(),
// the live client's own copy) says so once, as a misuse; Configure on
// options not yet given to NewClient says nothing.
func TestConfigureOnALiveClientsOptionsIsSaid(t *testing.T) {
	ev := &eventLog{}
	m := maint.New(maint.WithOnEvent(ev.add), maint.WithLogf(t.Logf))
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.9:1"})
	defer rdb.Close()
	m.Configure(rdb.Options())
	_, said := ev.first(maint.EventMisuse)
	assert.True(t, said, "Configure on rdb.Options(): %s", ev)

	ev2 := &eventLog{}
	m2 := maint.New(maint.WithOnEvent(ev2.add), maint.WithLogf(t.Logf))
	defer m2.Close()
	m2.Configure(&redis.Options{Addr: "127.0.0.9:1", Network: "tcp", PoolSize: 4, Dialer: (&net.Dialer{}).DialContext})
	_, said = ev2.first(maint.EventMisuse)
	assert.False(t, said, "Configure before NewClient: %s", ev2)
}

// Two failover clients built from one FailoverOptions: the second would
// have two Maints on its data-node connections, and this is said.
func TestTwoFailoverClientsFromOneOptionsIsSaid(t *testing.T) {
	ev := &eventLog{}
	g := maint.NewGroup(maint.WithOnEvent(ev.add), maint.WithLogf(t.Logf))
	defer g.Close()
	opt := &redis.FailoverOptions{MasterName: "db", SentinelAddrs: []string{"127.0.0.9:1"}}
	a := g.NewFailoverClient(opt)
	defer a.Close()
	_, said := ev.first(maint.EventMisuse)
	require.False(t, said, "the first client: %s", ev)
	b := g.NewFailoverClient(opt)
	defer b.Close()
	_, said = ev.first(maint.EventMisuse)
	assert.True(t, said, "the second client from the same options: %s", ev)
}
