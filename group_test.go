package maint_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// groupChurn is how many ClusterClients TestGroupForgetsClosedClusterClients
// makes and closes (fewer under -race, to fit CI).
func groupChurn() int {
	if raceOn {
		return 300
	}
	return 1000
}

// A Group that makes and closes many ClusterClients, on the same options
// again and on new ones, ends with the Maints of one live client's node
// clients: a closed client's node Maints are forgotten (the sweeper asks
// them without I/O whether they are closed), not kept until the Group's
// Close. goleak (TestMain) checks that nothing outlives the test.
func TestGroupForgetsClosedClusterClients(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	g := maint.NewGroup(maint.WithLogf(func(string, ...any) {}))
	t.Cleanup(func() { _ = g.Close() })
	maint.SetClusterGone(g, 400*time.Millisecond) // the sweeper runs every 100ms
	ctx := context.Background()
	options := func() *redis.ClusterOptions {
		return &redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3, PoolSize: 2}
	}

	live := g.NewClusterClient(options())
	t.Cleanup(func() { _ = live.Close() })
	require.NoError(t, live.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	want := len(g.Maints())

	same := options()
	n := groupChurn()
	for i := range n {
		opt := same
		if i%2 == 1 {
			opt = options()
		}
		cc := g.NewClusterClient(opt)
		require.NoError(t, cc.Set(ctx, "k", i, 0).Err())
		require.NoError(t, cc.Close())
	}
	require.Greater(t, len(g.Maints()), want, "the closed clients' node Maints are there before the sweep")
	waitFor(t, "the closed clients' node Maints forgotten", 30*time.Second, func() bool { return len(g.Maints()) == want })
	require.NoError(t, live.Set(ctx, "k", "live", 0).Err(), "the live client is served")
	require.Len(t, g.Maints(), want, "the live client's Maints are kept")
	t.Logf("%d ClusterClients made and closed; %d Maints left, the live client's", n, want)
}

// useRingConns is useConns on every shard of a Ring that is up.
func useRingConns(t *testing.T, rng *redis.Ring, n int) {
	t.Helper()
	for _, c := range ringShards(rng) {
		useConns(t, c, n)
	}
}

// The Ring options route: every shard client gets its own Maint before its
// first connection, so MinIdleConns connections of every shard are watched.
func TestRingOptionsRouteWatchesMinIdleConns(t *testing.T) {
	e := newEnv(t)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	rng := g.NewRing(ringOptions(map[string]string{"a": e.old.Addr(), "b": e.new.Addr()}))
	defer rng.Close()
	waitFor(t, "MinIdleConns dialled", 10*time.Second, func() bool {
		return e.old.Stats().Opened >= 2 && e.new.Stats().Opened >= 2
	})
	useRingConns(t, rng, 2)
	allOptedIn(t, e.old, 2)
	allOptedIn(t, e.new, 2)
	require.NoError(t, rng.Set(context.Background(), "k", "v", 0).Err())
	assert.Len(t, g.Maints(), 2, "one Maint per shard")
}

// A shard down when the Ring is created is watched from its first
// connection once it returns.
func TestRingShardDownAtInstallIsWatchedOnReturn(t *testing.T) {
	e := newEnv(t)
	e.new.RefuseNew(true)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	rng := g.NewRing(ringOptions(map[string]string{"a": e.old.Addr(), "b": e.new.Addr()}))
	defer rng.Close()
	// Down longer than the sweeper's grace (1.5 s here): its Maint is kept,
	// the heartbeat still reaching the shard client.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.Len(t, g.Maints(), 2, "the down shard keeps its Maint")
		time.Sleep(50 * time.Millisecond)
	}
	assert.Zero(t, e.new.Stats().Opened)
	e.new.RefuseNew(false)
	waitFor(t, "b back in the Ring", 10*time.Second, func() bool {
		return len(ringShards(rng)) == 2
	})
	useRingConns(t, rng, 2)
	// go-redis's pool may have dialled a probe connection and closed it
	// unused (tryDial): every connection open now has opted in.
	waitFor(t, "every open connection of b opted in", 10*time.Second, func() bool {
		st := e.new.Stats()
		return st.Open >= 1 && st.OpenOptedIn == st.Open
	})
	allOptedIn(t, e.old, 2)
}

// Ten rounds of SetAddrs leave the Group at the live shard count: the
// Maints of the shards the Ring closed are closed and forgotten, their
// counters kept.
func TestRingSetAddrsKeepsGroupBounded(t *testing.T) {
	for _, route := range []string{"options", "Instrument"} {
		t.Run(route, func(t *testing.T) {
			e := newEnv(t)
			eps := append([]*mainttest.Endpoint{e.old, e.new}, e.shards(2)...)
			g := maint.NewGroup(maint.WithLogf(t.Logf))
			defer g.Close()
			opt := ringOptions(map[string]string{"a": eps[0].Addr(), "b": eps[1].Addr()})
			var rng *redis.Ring
			if route == "options" {
				rng = g.NewRing(opt)
			} else {
				rng = redis.NewRing(opt)
				require.NoError(t, g.Instrument(rng))
			}
			defer rng.Close()
			ctx := context.Background()
			for round := 0; round < 10; round++ {
				a, b := eps[round%4], eps[(round+1)%4]
				rng.SetAddrs(map[string]string{"a": a.Addr(), "b": b.Addr()})
				require.NoError(t, rng.Set(ctx, "k", round, 0).Err())
			}
			before := g.Stats().Handshakes
			waitFor(t, "the Group back to the live shard count", 20*time.Second, func() bool {
				return len(g.Maints()) == 2
			})
			assert.GreaterOrEqual(t, g.Stats().Handshakes, before, "counters of forgotten Maints are kept")
			require.NoError(t, rng.Set(ctx, "k", "after", 0).Err())
		})
	}
}

// ConfigureRing on the options of a Ring the Group made (Ring.Options:
// go-redis's copy, carrying the Group's per-node constructor) changes
// nothing: a shard added afterwards gets one Maint, not a second that
// would serve nothing, and no misuse is reported.
func TestConfigureRingOnTheRingsOwnOptionsAddsNoMaint(t *testing.T) {
	e := newEnv(t)
	logs := &logLines{}
	g := maint.NewGroup(maint.WithLogf(logs.logf))
	defer g.Close()
	rng := g.NewRing(ringOptions(map[string]string{"a": e.old.Addr()}))
	defer rng.Close()
	g.ConfigureRing(rng.Options())
	rng.SetAddrs(map[string]string{"a": e.old.Addr(), "b": e.new.Addr()})
	useRingConns(t, rng, 2)
	assert.Len(t, g.Maints(), 2, "one Maint per shard")
	assert.Zero(t, logs.count("already configured"), "no misuse said")
}

// Instrument on an existing Ring: a shard down when it ran gets a Maint
// once it is up again, and what was dialled before is said once.
func TestInstrumentRingShardDownGetsMaintOnReturn(t *testing.T) {
	e := newEnv(t)
	e.new.RefuseNew(true)
	logs := &logLines{}
	rng := redis.NewRing(ringOptions(map[string]string{"a": e.old.Addr(), "b": e.new.Addr()}))
	defer rng.Close()
	waitFor(t, "b marked down", 10*time.Second, func() bool { return len(ringShards(rng)) == 1 && e.old.Stats().Opened >= 2 })
	g, err := maint.Instrument(rng, maint.WithLogf(logs.logf))
	require.NoError(t, err)
	defer g.Close()
	assert.Len(t, g.Maints(), 1, "the shard that is up")
	assert.Equal(t, 1, logs.count("dialled before maint was installed"), "said once")
	e.new.RefuseNew(false)
	waitFor(t, "a Maint for b", 10*time.Second, func() bool { return len(g.Maints()) == 2 })
}

// An instrumented Ring that is closed is no longer polled: the Group
// stops watching it, and forgets its shards' Maints.
func TestInstrumentedRingClosedIsNoLongerWatched(t *testing.T) {
	e := newEnv(t)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	for i := 0; i < 3; i++ {
		rng := redis.NewRing(ringOptions(map[string]string{"a": e.old.Addr()}))
		require.NoError(t, g.Instrument(rng))
		require.NoError(t, rng.Ping(context.Background()).Err())
		require.NoError(t, rng.Close())
	}
	live := redis.NewRing(ringOptions(map[string]string{"a": e.new.Addr()}))
	defer live.Close()
	require.NoError(t, g.Instrument(live))
	waitFor(t, "the closed Rings unwatched", 20*time.Second, func() bool { return maint.WatchedRings(g) == 1 })
	waitFor(t, "the closed Rings' shard Maints forgotten", 20*time.Second, func() bool { return len(g.Maints()) == 1 })
	require.NoError(t, live.Ping(context.Background()).Err())
}

// A Maint of Group.Configure, whose client the group cannot see, is kept
// while it is open and forgotten once the application closes it, its
// counters kept in the group's Stats: a program that configures a client
// per tenant and closes each (client, then Maint) leaves nothing behind.
func TestGroupForgetsAConfiguredMaintOnceClosed(t *testing.T) {
	e := newEnv(t)
	g := maint.NewGroup(maint.WithLogf(func(string, ...any) {}))
	t.Cleanup(func() { _ = g.Close() })
	maint.SetClusterGone(g, 400*time.Millisecond) // the sweeper runs every 100ms
	ctx := context.Background()
	const n = 20
	var open *redis.Client
	for i := range n + 1 {
		opt := e.options(1)
		m := g.Configure(opt)
		rdb := redis.NewClient(opt)
		rdb.AddHook(m)
		require.NoError(t, rdb.Set(ctx, "k", i, 0).Err())
		if i == n {
			open = rdb // its Maint stays open
			break
		}
		require.NoError(t, rdb.Close())
		require.NoError(t, m.Close())
	}
	defer open.Close()
	waitFor(t, "the closed Maints forgotten", 10*time.Second, func() bool { return len(g.Maints()) == 1 })
	require.NoError(t, open.Set(ctx, "k", "open", 0).Err(), "the open one serves")
	assert.Len(t, g.Maints(), 1, "the open Maint is kept")
	assert.EqualValues(t, n+1, g.Stats().Handshakes, "every Maint's opt-ins counted, the forgotten ones' included")
}
