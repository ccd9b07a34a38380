package maint_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// Many +switch-master messages under a closed-loop INCR load (commands and
// pipelines), MaxRetries -1 and go-redis's default: at each one go-redis
// closes every connection to the old master, those a command holds
// included (sentinel.go onFailover, pool.Filter), and one it is
// initialising is handed out after all (initConn sets it IDLE again). A
// command that took such a connection and has not written must not fail
// with "set tcp ...: use of closed network connection" (it runs on a
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

// pipelinedIncr is a closed-loop load of pipelines of two INCRs of one key
// per worker, every acknowledgement counted.
type pipelinedIncr struct {
	acked, failed []atomic.Int64
	errs          sync.Map
	cancel        context.CancelFunc
	wg            sync.WaitGroup
}

func startPipelinedIncr(rdb *redis.Client, workers int, prefix string) *pipelinedIncr {
	ctx, cancel := context.WithCancel(context.Background())
	l := &pipelinedIncr{acked: make([]atomic.Int64, workers), failed: make([]atomic.Int64, workers), cancel: cancel}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			key := prefix + strconv.Itoa(w)
			for ctx.Err() == nil {
				cmds, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
					p.Incr(context.Background(), key)
					p.Incr(context.Background(), key)
					return nil
				})
				if err != nil {
					l.failed[w].Add(1)
					l.errs.Store(err.Error(), true)
					continue
				}
				if got, n := l.acked[w].Add(2), cmds[1].(*redis.IntCmd).Val(); got != n {
					l.errs.Store(key+": reply "+strconv.FormatInt(n, 10)+" for acknowledged INCR number "+strconv.FormatInt(got, 10), true)
					l.acked[w].Store(n)
				}
			}
		}(w)
	}
	return l
}

func (l *pipelinedIncr) stop() { l.cancel(); l.wg.Wait() }

func (l *pipelinedIncr) check(t *testing.T, mr interface{ Get(string) (string, error) }, prefix string) {
	t.Helper()
	for w := range l.acked {
		v, _ := mr.Get(prefix + strconv.Itoa(w))
		final, _ := strconv.ParseInt(v, 10, 64)
		assert.Equal(t, l.acked[w].Load(), final, "pipelined key %d: acknowledged INCRs and the final value", w)
		assert.Zero(t, l.failed[w].Load(), "pipelines failed")
	}
	var errs []string
	l.errs.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
	assert.Empty(t, errs, "pipeline errors and replies that skipped a value")
}
