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
