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
	fo, err := e.emu.AddEndpoint("127.0.0.5:0")
	require.NoError(t, err)
	ds, err := e.emu.AddSentinel("127.0.0.9:0", "db", fo)
	require.NoError(t, err)
	cl, err := e.emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	plainOpt := func() *redis.Options { o := e.options(2); o.Dialer = e.emu.Dialer(); return o }
	clusterOpt := func() *redis.ClusterOptions {
		return &redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: e.emu.Dialer(), Protocol: 3, PoolSize: 2}
	}
	ringOpt := func() *redis.RingOptions {
		o := ringOptions(map[string]string{"a": e.old.Addr()})
		o.MinIdleConns = 0
		return o
	}
	failoverOpt := func() *redis.FailoverOptions { o := dsOptions(ds, -1); o.MinIdleConns, o.PoolSize = 0, 2; return o }
	mk := map[string]func(g *maint.Group) redis.UniversalClient{
		"NewClient":   func(g *maint.Group) redis.UniversalClient { return g.NewClient(plainOpt()) },
		"NewCluster":  func(g *maint.Group) redis.UniversalClient { return g.NewClusterClient(clusterOpt()) },
		"NewRing":     func(g *maint.Group) redis.UniversalClient { return g.NewRing(ringOpt()) },
		"NewFailover": func(g *maint.Group) redis.UniversalClient { return g.NewFailoverClient(failoverOpt()) },
		"InstrClient": func(g *maint.Group) redis.UniversalClient {
			c := redis.NewClient(plainOpt())
			require.NoError(t, g.Instrument(c))
			return c
		},
		"InstrCluster": func(g *maint.Group) redis.UniversalClient {
			c := redis.NewClusterClient(clusterOpt())
			require.NoError(t, g.Instrument(c))
			return c
		},
		"InstrRing": func(g *maint.Group) redis.UniversalClient {
			c := redis.NewRing(ringOpt())
			require.NoError(t, g.Instrument(c))
			return c
		},
		"InstrFailover": func(g *maint.Group) redis.UniversalClient {
			c := redis.NewFailoverClient(failoverOpt())
			require.NoError(t, g.Instrument(c))
			return c
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
