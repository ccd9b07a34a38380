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

// Contract (group.go clientClosed), checked on v9.23.0 and v9.24.0:
// (*redis.Client).AutoPipelineWithOptions, asked with maint.ClosedAsk (a
// negative batch size), answers redis.ErrClosed once the client is closed
// (by its own Close, a ClusterClient's Close for its node clients, a
// Ring's for its shards, or the Close of a WithTimeout clone sharing its
// pools), and otherwise refuses the options, or returns the autopipeliner
// the application made: without running any hook of the client's, without
// dialling, without taking or writing on an idle connection, and without
// building an autopipeliner (no goroutine: TestMain's goleak), as often as
// it is asked. If this fails, the Group's sweeper either cannot tell a
// closed client (and keeps its Maint), or starts goroutines or I/O on
// every quiet client.
func TestContractAutoPipelineAnswersClosed(t *testing.T) {
	ctx := context.Background()
	t.Logf("go-redis %s", redis.Version())
	ask := func(c *redis.Client) error {
		_, err := c.AutoPipelineWithOptions(maint.ClosedAsk)
		return err
	}
	open := func(c *redis.Client, what string) {
		t.Helper()
		for range 3 {
			err := ask(c)
			assert.Error(t, err, "%s: the options are refused", what)
			assert.NotErrorIs(t, err, redis.ErrClosed, "%s: an open client", what)
		}
	}
	closed := func(c *redis.Client, what string) {
		t.Helper()
		for range 2 {
			assert.ErrorIs(t, ask(c), redis.ErrClosed, "%s: a closed client", what)
		}
	}

	var dials atomic.Int64
	refuse := func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, net.ErrClosed
	}
	never := redis.NewClient(&redis.Options{Addr: "127.0.0.9:1", Dialer: refuse})
	hook := &hookLog{}
	never.AddHook(hook)
	open(never, "never dialled")
	assert.Zero(t, dials.Load(), "no dial")
	require.NoError(t, never.Close())
	closed(never, "never dialled")
	assert.Empty(t, hook.seen(), "the client's hook saw the asks")

	// An idle connection is neither taken nor written on.
	e := newEnv(t)
	rdb := redis.NewClient(e.options(2))
	hook = &hookLog{}
	rdb.AddHook(hook)
	require.NoError(t, rdb.Ping(ctx).Err()) // one idle connection
	served, seen := e.old.Stats().Served, hook.seen()
	open(rdb, "one idle connection")
	assert.Equal(t, served, e.old.Stats().Served, "nothing written on the idle connection")
	st := rdb.PoolStats()
	assert.EqualValues(t, 1, st.TotalConns, "the idle connection stays")
	assert.EqualValues(t, 1, st.IdleConns, "the idle connection is not taken")
	require.NoError(t, rdb.Close())
	closed(rdb, "one idle connection")
	assert.Equal(t, seen, hook.seen(), "the client's hook saw the asks")

	// The application's own autopipeliner is returned while it lives.
	own := redis.NewClient(&redis.Options{Addr: "127.0.0.9:1", Dialer: refuse})
	ap, err := own.AutoPipeline()
	require.NoError(t, err)
	got, err := own.AutoPipelineWithOptions(maint.ClosedAsk)
	require.NoError(t, err, "a client with an autopipeliner of its own")
	assert.Same(t, ap, got)
	require.NoError(t, own.Close())
	closed(own, "with an autopipeliner of its own")

	// A WithTimeout clone's Close closes the pools it shares.
	parent := redis.NewClient(&redis.Options{Addr: "127.0.0.9:1", Dialer: refuse})
	clone := parent.WithTimeout(time.Second)
	require.NoError(t, clone.Close())
	closed(parent, "whose WithTimeout clone was closed")
	_ = parent.Close()

	// A ClusterClient's Close closes the node clients it made, a Ring's
	// its shards.
	var nodes []*redis.Client
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.9:1"}, Dialer: refuse,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			nodes = append(nodes, c)
			return c
		}})
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	_ = cc.Ping(short).Err() // loading the slot map makes the seed's node client
	stop()
	require.NotEmpty(t, nodes)
	for _, c := range nodes {
		open(c, "a live ClusterClient's node client")
	}
	require.NoError(t, cc.Close())
	for _, c := range nodes {
		closed(c, "a closed ClusterClient's node client")
	}
	var shards []*redis.Client
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.9:2"}, Dialer: refuse,
		HeartbeatFrequency: time.Hour,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			shards = append(shards, c)
			return c
		}})
	require.NotEmpty(t, shards)
	for _, c := range shards {
		open(c, "a live Ring's shard")
	}
	require.NoError(t, ring.Close())
	for _, c := range shards {
		closed(c, "a closed Ring's shard")
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
