package maint_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// Contract (cluster.go fromReload), checked on v9.23.0 and v9.24.0:
// go-redis's ClusterClient sends the slot-map load of its reload (CLUSTER
// SHARDS from v9.24.0 on, CLUSTER SLOTS before and as its fallback)
// through a node client, from (*ClusterClient).loadState, on the goroutine
// whose stack the node client's hooks run on: the first load, and the
// reload ReloadState asks for. The application's own CLUSTER SLOTS and
// SHARDS, through the ClusterClient or a node client, are not. The
// command, its arguments and its context do not tell them apart. If this
// fails, maint either takes the application's slot-map commands for
// go-redis's reload (answering them from its served map, retiring nodes on
// a map go-redis does not have) or no longer sees go-redis's reload (the
// SMIGRATED handoff is then off: ReloadsUnseen).
func TestContractClusterReloadFromLoadState(t *testing.T) {
	t.Logf("go-redis %s", redis.Version())
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)

	var mu sync.Mutex
	var seen []bool // per slot-map load a node hook saw: from go-redis's reload
	record := funcHook{process: func(next redis.ProcessHook) redis.ProcessHook {
		return func(ctx context.Context, cmd redis.Cmder) error {
			switch cmd.(type) {
			case *redis.ClusterSlotsCmd, *redis.ClusterShardsCmd:
				mu.Lock()
				seen = append(seen, maint.FromReload(ctx))
				mu.Unlock()
			}
			return next(ctx, cmd)
		}
	}}
	loads := func() []bool {
		mu.Lock()
		defer mu.Unlock()
		out := append([]bool(nil), seen...)
		seen = nil
		return out
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(record)
			return c
		}})
	t.Cleanup(func() { _ = cc.Close() })
	ctx := context.Background()
	require.NoError(t, cc.Ping(ctx).Err())
	first := loads()
	require.NotEmpty(t, first, "the first load did not pass through a node client's hooks")
	for _, r := range first {
		assert.True(t, r, "go-redis's first slot-map load is not sent from %s", "(*ClusterClient).loadState")
	}

	cc.ReloadState(ctx)
	var reload []bool
	require.Eventually(t, func() bool { reload = append(reload, loads()...); return len(reload) > 0 }, 5*time.Second, 5*time.Millisecond,
		"ReloadState's load did not pass through a node client's hooks")
	for _, r := range reload {
		assert.True(t, r, "go-redis's reload is not sent from (*ClusterClient).loadState")
	}

	require.NoError(t, cc.ClusterSlots(ctx).Err())
	require.NoError(t, cc.ClusterShards(ctx).Err())
	require.NoError(t, cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		if err := node.ClusterSlots(ctx).Err(); err != nil {
			return err
		}
		return node.ClusterShards(ctx).Err()
	}))
	// ForEachShard reloads first (ReloadOrGet): go-redis's own, from
	// loadState. Every other load is the application's.
	app := 0
	got := loads()
	for _, r := range got {
		if !r {
			app++
		}
	}
	assert.Equal(t, 2+2*len(cl.Nodes()), app, "the application's CLUSTER SLOTS/SHARDS, told from go-redis's reloads (%v)", got)
}
