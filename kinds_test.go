package maint_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// useConns initialises n connections of cli at once (go-redis initialises
// idle connections, MinIdleConns ones among them, at their first use).
func useConns(t *testing.T, cli *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	var cs []*redis.Conn
	for i := 0; i < n; i++ {
		cn := cli.Conn()
		require.NoError(t, cn.Ping(ctx).Err())
		cs = append(cs, cn)
	}
	for _, cn := range cs {
		_ = cn.Close()
	}
}

// useRingConns is useConns on every shard of a Ring that is up.
func useRingConns(t *testing.T, rng *redis.Ring, n int) {
	t.Helper()
	for _, c := range ringShards(rng) {
		useConns(t, c, n)
	}
}

// ringShards returns the shard clients of a Ring that are up.
func ringShards(rng *redis.Ring) []*redis.Client {
	var mu sync.Mutex
	var cs []*redis.Client
	_ = rng.ForEachShard(context.Background(), func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		cs = append(cs, c)
		mu.Unlock()
		return nil
	})
	return cs
}

// allOptedIn waits until every connection an endpoint accepted has opted in:
// the options route watched (and opted in) each of them from its first byte.
func allOptedIn(t *testing.T, ep *mainttest.Endpoint, atLeast int) {
	t.Helper()
	waitFor(t, "every connection of "+ep.Addr()+" opted in", 10*time.Second, func() bool {
		st := ep.Stats()
		return st.Opened >= atLeast && st.OptedIn == st.Opened
	})
}

// shards adds n more endpoints to e's emulator.
func (e *env) shards(n int) []*mainttest.Endpoint {
	var eps []*mainttest.Endpoint
	for i := 0; i < n; i++ {
		ep, err := e.emu.AddEndpoint("127.0.0.4:0")
		require.NoError(e.t, err)
		eps = append(eps, ep)
	}
	return eps
}

func ringOptions(addrs map[string]string) *redis.RingOptions {
	return &redis.RingOptions{
		Addrs:              addrs,
		Protocol:           3,
		MinIdleConns:       2,
		PoolSize:           2,
		HeartbeatFrequency: 50 * time.Millisecond,
		DialTimeout:        500 * time.Millisecond,
		ReadTimeout:        500 * time.Millisecond,
		MaxRetries:         -1,
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
		return st.Open >= 1 && st.OptedIn == st.Open
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

// The Universal route, one address: a *redis.Client whose connections are
// all opted in.
func TestUniversalOneAddress(t *testing.T) {
	e := newEnv(t)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	rdb := g.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{e.old.Addr()}, Protocol: 3, MinIdleConns: 2, PoolSize: 2})
	defer rdb.Close()
	c, ok := rdb.(*redis.Client)
	require.True(t, ok, "%T", rdb)
	waitFor(t, "MinIdleConns dialled", 10*time.Second, func() bool { return e.old.Stats().Opened >= 2 })
	useConns(t, c, 2)
	allOptedIn(t, e.old, 2)
	assert.Len(t, g.Maints(), 1)
}

// The Universal route, several addresses and cluster mode: a ClusterClient
// whose node clients each get a Maint before their first connection. (The
// emulated cluster comes from elsewhere: only the wiring is asserted.)
func TestUniversalClusterShapes(t *testing.T) {
	for _, shape := range []string{"several", "IsClusterMode"} {
		t.Run(shape, func(t *testing.T) {
			e := newEnv(t)
			opt := &redis.UniversalOptions{Addrs: []string{e.old.Addr(), e.new.Addr()}, Protocol: 3, MaxRetries: -1}
			if shape == "IsClusterMode" {
				opt.Addrs = opt.Addrs[:1]
				opt.IsClusterMode = true
			}
			g := maint.NewGroup(maint.WithLogf(t.Logf))
			defer g.Close()
			rdb := g.NewUniversalClient(opt)
			defer rdb.Close()
			_, ok := rdb.(*redis.ClusterClient)
			require.True(t, ok, "%T", rdb)
			_ = rdb.Ping(context.Background()).Err() // the emulator is no cluster: CLUSTER SLOTS fails
			waitFor(t, "node Maints", 5*time.Second, func() bool { return len(g.Maints()) > 0 })
			// go-redis picks a seed at random: either endpoint's connection.
			waitFor(t, "the seed node's connection opted in", 5*time.Second, func() bool {
				return e.old.Stats().OptedIn+e.new.Stats().OptedIn > 0
			})
		})
	}
}

// The Universal route with MasterName: a failover client whose data-node
// connections (MinIdleConns ones included, dialled while the client is
// being built) are opted in, and whose sentinel connections never receive
// the handshake.
func TestUniversalMasterName(t *testing.T) {
	e := newEnv(t)
	s := newFakeSentinel(t, e.old.Addr())
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	rdb := g.NewUniversalClient(&redis.UniversalOptions{
		MasterName: "db", Addrs: []string{s.addr()}, Protocol: 3, MinIdleConns: 2, PoolSize: 2, MaxRetries: -1,
	})
	defer rdb.Close()
	waitFor(t, "MinIdleConns dialled", 10*time.Second, func() bool { return e.old.Stats().Opened >= 2 })
	useConns(t, rdb.(*redis.Client), 2)
	allOptedIn(t, e.old, 2)
	for _, c := range s.commands() {
		assert.False(t, strings.HasPrefix(c, "client maint_notifications"), "the sentinel got %q", c)
	}
	assert.NotEmpty(t, s.commands())
	assert.Len(t, g.Maints(), 1)
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
