//go:build unix

package maint_test

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With maint on, a go-redis client allocates no more per command than
// plain go-redis on the same in-memory server: single commands and
// pipelines, counted exactly (testing.AllocsPerRun), so the guard cannot
// flake on a busy machine. (Without the race detector: with it, sync.Pool
// drops items at random and go-redis's own counts vary.)
func TestClientAllocatesNoMoreThanPlain(t *testing.T) {
	if raceOn {
		t.Skip("the race detector makes go-redis's pooled allocations vary (sync.Pool drops items at random)")
	}
	ctx := context.Background()
	allocs := map[string][2]float64{}
	for _, c := range benchClients {
		opt := &redis.Options{Addr: "memory:6379", Dialer: func(context.Context, string, string) (net.Conn, error) {
			return newMemConn()
		}}
		rdb, closeClient := c.open(opt)
		require.NoError(t, rdb.Set(ctx, benchKey, benchValue, 0).Err())
		pipe := rdb.Pipeline()
		get := func() {
			if err := rdb.Get(ctx, benchKey).Err(); err != nil {
				t.Fatal(err)
			}
		}
		pipeline := func() {
			for range 20 {
				pipe.Get(ctx, benchKey)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		get()
		pipeline()
		allocs[c.name] = [2]float64{testing.AllocsPerRun(500, get), testing.AllocsPerRun(100, pipeline)}
		closeClient()
	}
	t.Logf("allocations per GET, per pipeline of 20: %v", allocs)
	assert.LessOrEqual(t, allocs["maint"][0], allocs["plain"][0], "GET")
	assert.LessOrEqual(t, allocs["maint"][1], allocs["plain"][1], "pipeline of 20")
}
