package maint_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// Contract (group.go probeOf, clientClosed), checked on v9.23.0 and
// v9.24.0: a *redis.Conn taken from a *redis.Client runs its commands
// through the hooks the client had when the Conn was taken, never through
// one added to the client afterwards; and, on a client with no connection
// or an idle one, it answers a command whose context was cancelled before
// it was sent with the context's error while the client lives and with
// redis.ErrClosed once the client is closed, without dialling, without
// writing on the idle connection and without taking it, as often as it is
// asked. A ClusterClient's Close closes its node clients. If this fails,
// the Group's sweeper either cannot tell a closed client without I/O (and
// keeps its Maint), or runs its probe through the application's hooks.
func TestContractConnSnapshotsHooksAndAnswersClosed(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	t.Logf("go-redis %s", redis.Version())

	var dials atomic.Int64
	never := redis.NewClient(&redis.Options{Addr: "127.0.0.9:1", Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return nil, net.ErrClosed
	}})
	probe := never.Conn()
	later := &hookLog{}
	never.AddHook(later) // after the Conn was taken
	for range 3 {
		err := probe.Ping(cancelled).Err()
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, redis.ErrClosed)
	}
	assert.Zero(t, dials.Load(), "no dial")
	require.NoError(t, never.Close())
	assert.ErrorIs(t, probe.Ping(cancelled).Err(), redis.ErrClosed)
	assert.ErrorIs(t, probe.Ping(cancelled).Err(), redis.ErrClosed, "asked again")
	assert.Empty(t, later.seen(), "a hook added to the client after the Conn was taken saw the Conn's commands")
	_ = probe.Close()

	e := newEnv(t)
	rdb := redis.NewClient(e.options(2))
	before := &hookLog{}
	rdb.AddHook(before)
	probe = rdb.Conn()
	after := &hookLog{}
	rdb.AddHook(after)
	require.NoError(t, rdb.Ping(ctx).Err()) // one idle connection
	served := e.old.Stats().Served
	for range 3 {
		err := probe.Ping(cancelled).Err()
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, redis.ErrClosed)
	}
	assert.Equal(t, served, e.old.Stats().Served, "nothing written on the idle connection")
	st := rdb.PoolStats()
	assert.EqualValues(t, 1, st.TotalConns, "the idle connection stays")
	assert.EqualValues(t, 1, st.IdleConns, "the idle connection is not taken")
	require.NoError(t, rdb.Ping(ctx).Err(), "the client serves beside the probe")
	t.Logf("hooks added before the Conn was taken saw %q, after %q", before.seen(), after.seen())
	assert.Equal(t, 2, pings(after.seen()), "a hook added after the Conn was taken sees the client's two PINGs, not the Conn's")
	assert.Equal(t, 5, pings(before.seen()), "a hook the client had when the Conn was taken sees the Conn's PINGs too")
	require.NoError(t, rdb.Close())
	assert.ErrorIs(t, probe.Ping(cancelled).Err(), redis.ErrClosed)
	_ = probe.Close()

	// A ClusterClient's Close closes the node clients it made.
	var nodes []*redis.Client
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.9:1"},
		Dialer: func(context.Context, string, string) (net.Conn, error) { return nil, net.ErrClosed },
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			nodes = append(nodes, c)
			return c
		}})
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	_ = cc.Ping(short).Err() // loading the slot map makes the seed's node client
	stop()
	require.NoError(t, cc.Close())
	require.NotEmpty(t, nodes)
	for _, c := range nodes {
		p := c.Conn()
		assert.ErrorIs(t, p.Ping(cancelled).Err(), redis.ErrClosed)
		_ = p.Close()
	}
}

// The Group's sweeper asks a quiet client whether it is closed without
// going through a hook the application added to it: over several sweeps,
// an application's hook on a client of g.NewClient that holds no
// connection sees no command, and the client's Maint is forgotten once the
// client is closed, still with nothing seen by the hook.
func TestGroupSweeperRunsNoApplicationHook(t *testing.T) {
	e := newEnv(t)
	g := maint.NewGroup(maint.WithLogf(func(string, ...any) {}))
	t.Cleanup(func() { _ = g.Close() })
	maint.SetClusterGone(g, 400*time.Millisecond) // the sweeper runs every 100ms
	opt := e.options(1)
	opt.MinIdleConns = 0
	rdb := g.NewClient(opt) // no command: no connection, quiet from the first sweep
	app := &hookLog{}
	rdb.AddHook(app)
	require.Len(t, g.Maints(), 1)

	// Quiet at one sweep, asked at every one after it: five asks.
	from := maint.Sweeps(g)
	waitFor(t, "six sweeps", 10*time.Second, func() bool { return maint.Sweeps(g) >= from+6 })
	assert.Len(t, g.Maints(), 1, "a live client's Maint is kept")
	assert.Empty(t, app.seen(), "the application's hook saw the sweeper's commands")

	require.NoError(t, rdb.Close())
	waitFor(t, "the closed client's Maint forgotten", 10*time.Second, func() bool { return len(g.Maints()) == 0 })
	assert.Empty(t, app.seen(), "the application's hook saw the sweeper's commands")
}

// pings counts the PINGs among what a hookLog saw.
func pings(seen []string) int {
	n := 0
	for _, s := range seen {
		if s == "ping" {
			n++
		}
	}
	return n
}
