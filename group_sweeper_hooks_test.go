package maint_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// The Group's sweeper tells a quiet client closed without running any
// hook of the application's, wherever the application put it before
// maint's: inside its own ClusterOptions.NewClient (a cluster node client)
// or RingOptions.NewClient (a ring shard), both called by the Group's
// per-node constructor before maint's hooks are added, and on a
// *redis.Client before Instrument, and on an instrumented Ring whose
// shards are all down (the sweeper asks such a Ring whether it is closed
// at every sweep). Over several sweeps none of those hooks sees a command
// of the sweeper's, and once the clients are closed their Maints are
// forgotten and the Ring is no longer watched, still with nothing seen.
func TestGroupSweeperRunsNoHookAddedBeforeMaints(t *testing.T) {
	g := maint.NewGroup(maint.WithLogf(func(string, ...any) {}))
	t.Cleanup(func() { _ = g.Close() })
	maint.SetClusterGone(g, 400*time.Millisecond) // the sweeper runs every 100ms
	refuse := func(context.Context, string, string) (net.Conn, error) { return nil, net.ErrClosed }

	nodeHook, shardHook, clientHook := &hookLog{}, &hookLog{}, &hookLog{}
	cc := g.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"127.0.0.9:1"}, Dialer: refuse, MaxRedirects: -1,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(nodeHook) // the application's own, before maint's
			return c
		},
	})
	short, stop := context.WithTimeout(context.Background(), 2*time.Second)
	_ = cc.Get(short, "k").Err() // loading the slot map makes the seed's node client
	stop()
	ring := g.NewRing(&redis.RingOptions{
		Addrs: map[string]string{"a": "127.0.0.9:2"}, Dialer: refuse,
		HeartbeatFrequency: time.Hour, // no heartbeat PING: every PING would be the sweeper's
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(shardHook)
			return c
		},
	})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.9:3", Dialer: refuse})
	rdb.AddHook(clientHook) // before Instrument
	require.NoError(t, g.Instrument(rdb))
	downHook := &hookLog{}
	down := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.9:4"}, Dialer: refuse,
		HeartbeatFrequency: 10 * time.Millisecond})
	down.AddHook(downHook) // the Ring's own, before Instrument
	waitFor(t, "the down Ring's shard down", 5*time.Second, func() bool { return down.Len() == 0 })
	require.NoError(t, g.Instrument(down))
	require.Equal(t, 1, maint.WatchedRings(g))
	require.Len(t, g.Maints(), 3, "a node client, a ring shard, an instrumented client (the down Ring's shard has none)")
	before := map[string][]string{"node": nodeHook.seen(), "shard": shardHook.seen(), "client": clientHook.seen(), "down ring": downHook.seen()}
	t.Logf("before the sweeps the application's hooks saw %q", before)

	// Quiet at one sweep, asked at every one after it.
	from := maint.Sweeps(g)
	waitFor(t, "six sweeps", 10*time.Second, func() bool { return maint.Sweeps(g) >= from+6 })
	assert.Len(t, g.Maints(), 3, "live clients' Maints are kept")
	hooks := map[string]*hookLog{"node": nodeHook, "shard": shardHook, "client": clientHook, "down ring": downHook}
	for name, h := range hooks {
		assert.Zero(t, pings(h.seen()), "the application's hook on the %s client saw the sweeper's PINGs: %q", name, h.seen())
		assert.Equal(t, before[name], h.seen(), "the application's hook on the %s client saw the sweeper's commands", name)
	}

	require.NoError(t, cc.Close())
	require.NoError(t, ring.Close())
	require.NoError(t, rdb.Close())
	require.NoError(t, down.Close())
	waitFor(t, "the closed clients' Maints forgotten", 10*time.Second, func() bool { return len(g.Maints()) == 0 })
	waitFor(t, "the closed Ring no longer watched", 10*time.Second, func() bool { return maint.WatchedRings(g) == 0 })
	for name, h := range hooks {
		assert.Equal(t, before[name], h.seen(), "the application's hook on the %s client saw the sweeper's commands", name)
	}
}

// ConfigureCluster, and ConfigureRing, on options a Group configured and
// then closed wrap nothing a second time: the options' NewClient is the
// first Group's, so a node client made through them gets no Maint of the
// second Group's, and the application's own NewClient runs once per node.
func TestConfigureAfterClosedGroupWrapsNoSecondTime(t *testing.T) {
	refuse := func(context.Context, string, string) (net.Conn, error) { return nil, net.ErrClosed }
	var made int
	appNew := func(o *redis.Options) *redis.Client { made++; return redis.NewClient(o) }
	copt := &redis.ClusterOptions{Addrs: []string{"127.0.0.9:1"}, Dialer: refuse, NewClient: appNew}
	ropt := &redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.9:2"}, Dialer: refuse, NewClient: appNew}
	quiet := maint.WithLogf(func(string, ...any) {})
	g1 := maint.NewGroup(quiet)
	g1.ConfigureCluster(copt)
	g1.ConfigureRing(ropt)
	require.NoError(t, g1.Close())

	g2 := maint.NewGroup(quiet)
	t.Cleanup(func() { _ = g2.Close() })
	g2.ConfigureCluster(copt)
	g2.ConfigureRing(ropt)
	for name, newClient := range map[string]func(*redis.Options) *redis.Client{"cluster": copt.NewClient, "ring": ropt.NewClient} {
		made = 0
		c := newClient(&redis.Options{Addr: "127.0.0.9:3", Dialer: refuse})
		assert.Equal(t, 1, made, "%s: the application's NewClient ran once", name)
		assert.Empty(t, g2.Maints(), "%s: the second Group wrapped the options' NewClient again", name)
		require.NoError(t, c.Close())
	}
}
