package maint_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// A Group forgets the Maints of a closed client of every kind, on both
// routes (made by the Group, or Instrument on a client the application
// built), within a few sweeps: the sweeper asks each quiet node client
// whether it is closed (clientClosed), so none waits for a timeout, and
// none is kept for ever.
func TestGroupForgetsEveryKindOnceClosed(t *testing.T) {
	e := quietEnv(t)
	k := newEveryKind(t, e)
	ctx := context.Background()
	plainOpt, clusterOpt, failoverOpt := k.plain, k.cluster, k.failover
	ringOpt := func() *redis.RingOptions { return k.ring(map[string]string{"a": e.old.Addr()}) }
	instrumented := func(g *maint.Group, c redis.UniversalClient) redis.UniversalClient {
		require.NoError(t, g.Instrument(c))
		return c
	}
	mk := map[string]func(g *maint.Group) redis.UniversalClient{
		"NewClient":   func(g *maint.Group) redis.UniversalClient { return g.NewClient(plainOpt()) },
		"NewCluster":  func(g *maint.Group) redis.UniversalClient { return g.NewClusterClient(clusterOpt()) },
		"NewRing":     func(g *maint.Group) redis.UniversalClient { return g.NewRing(ringOpt()) },
		"NewFailover": func(g *maint.Group) redis.UniversalClient { return g.NewFailoverClient(failoverOpt()) },
		"InstrClient": func(g *maint.Group) redis.UniversalClient { return instrumented(g, redis.NewClient(plainOpt())) },
		"InstrCluster": func(g *maint.Group) redis.UniversalClient {
			return instrumented(g, redis.NewClusterClient(clusterOpt()))
		},
		"InstrRing": func(g *maint.Group) redis.UniversalClient { return instrumented(g, redis.NewRing(ringOpt())) },
		"InstrFailover": func(g *maint.Group) redis.UniversalClient {
			return instrumented(g, redis.NewFailoverClient(failoverOpt()))
		},
	}
	for name, f := range mk {
		g := maint.NewGroup(maint.WithLogf(func(string, ...any) {}))
		maint.SetClusterGone(g, 400*time.Millisecond)
		c := f(g)
		require.NoError(t, c.Set(ctx, "k", 1, 0).Err())
		before := len(g.Maints())
		require.NoError(t, c.Close())
		require.NotZero(t, before, "%s: its Maints", name)
		waitFor(t, name+": its Maints forgotten once it is closed", 10*time.Second, func() bool { return len(g.Maints()) == 0 })
		g.Close()
	}
}

// everyKind is a world with a node of every kind beside e's: a
// FailoverClient's master behind an emulated Discovery Service (a node of
// its own: a MOVING of e.old is for the others) and a 3-node cluster, with
// the options of a client of each kind on it, small pools, every connection
// through the emulator's Recorder.
type everyKind struct {
	fo *mainttest.Endpoint
	ds *mainttest.Sentinel
	cl *mainttest.Cluster

	plain    func() *redis.Options
	cluster  func() *redis.ClusterOptions
	ring     func(addrs map[string]string) *redis.RingOptions
	failover func() *redis.FailoverOptions
}

func newEveryKind(t *testing.T, e *env) *everyKind {
	t.Helper()
	k := &everyKind{}
	var err error
	k.fo, err = e.emu.AddEndpoint("127.0.0.5:0")
	require.NoError(t, err)
	k.ds, err = e.emu.AddSentinel("127.0.0.9:0", "db", k.fo)
	require.NoError(t, err)
	k.cl, err = e.emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	k.plain = func() *redis.Options {
		o := e.options(2)
		o.Dialer = e.emu.Dialer() // the Recorder keeps every connection
		return o
	}
	k.cluster = func() *redis.ClusterOptions {
		return &redis.ClusterOptions{Addrs: k.cl.Addrs(), Dialer: e.emu.Dialer(), Protocol: 3, PoolSize: 2}
	}
	k.ring = func(addrs map[string]string) *redis.RingOptions {
		o := ringOptions(addrs)
		o.MinIdleConns = 0
		return o
	}
	k.failover = func() *redis.FailoverOptions {
		o := dsOptions(k.ds, -1)
		o.MinIdleConns, o.PoolSize = 0, 2
		return o
	}
	return k
}
