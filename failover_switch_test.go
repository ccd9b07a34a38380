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

// Many +switch-master messages under a closed-loop INCR load (commands and
// pipelines), MaxRetries -1 and go-redis's default: at each one go-redis
// closes every connection to the old master, those a command holds
// included (sentinel.go onFailover, pool.Filter); one it is initialising
// is handed out after all on v9.23 (initConn sets it IDLE again) and
// refused with redis.ErrClosed on v9.24. A command that took such a
// connection and has not written must not fail ("set tcp ...: use of
// closed network connection", "redis: client is closed": it runs on a
// connection to the new master), one waiting for its reply must not lose
// it, and every acknowledged INCR is applied once.
func TestFailoverClientManySwitchesFailNothing(t *testing.T) {
	for _, retries := range []int{-1, 0} {
		t.Run(retriesName(retries), func(t *testing.T) {
			e := newEnv(t)
			ds := e.newDiscovery()
			g := maint.NewGroup(maint.WithLogf(t.Logf))
			opt := dsOptions(ds, retries)
			opt.PoolSize = 16
			rdb := g.NewFailoverClient(opt)
			t.Cleanup(func() {
				_ = rdb.Close()
				_ = g.Close()
			})
			require.NoError(t, rdb.Ping(context.Background()).Err())
			const prefix, pipePrefix = "sw:", "swp:"
			l := startIncr(rdb, 24, prefix)
			p := startPipelinedIncr(rdb, 8, pipePrefix)
			nodes := [2]*mainttest.Endpoint{e.old, e.new}
			waitFor(t, "load on the first master", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
			waitFor(t, "go-redis subscribed to +switch-master", 5*time.Second, func() bool { return ds.Stats().Subscribed > 0 })
			const switches = 40
			for i := 1; i <= switches; i++ {
				to := nodes[i%2]
				before := to.Stats().Served
				ds.SetMaster(to)
				waitFor(t, "load on the new master", 10*time.Second, func() bool { return to.Stats().Served > before+100 })
			}
			l.stop()
			p.stop()
			require.EqualValues(t, switches, ds.Stats().Switches)
			t.Logf("commands run again (closed at a switch before they were written): %d", g.Stats().NotWrittenReruns)
			l.check(t, e.emu.Miniredis(), prefix)
			p.check(t, e.emu.Miniredis(), pipePrefix)
		})
	}
}

// startPipelinedIncr is startIncr with pipelines of two INCRs of the
// worker's key.
func startPipelinedIncr(rdb *redis.Client, workers int, prefix string) *incrLoad {
	return startIncrOp(workers, prefix, 2, func(key string) (int64, error) {
		ctx := context.Background()
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, key)
			p.Incr(ctx, key)
			return nil
		})
		if err != nil {
			return 0, err
		}
		return cmds[1].(*redis.IntCmd).Val(), nil
	})
}
