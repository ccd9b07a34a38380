package maint_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// incrLoad runs workers that INCR keys of their own and count what was
// acknowledged, so that a write run twice shows in the final values.
type incrLoad struct {
	acked  []atomic.Int64
	failed []atomic.Int64
	errs   sync.Map
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startIncr(rdb *redis.Client, workers int, prefix string) *incrLoad {
	return startIncrOp(workers, prefix, 1, func(key string) (int64, error) {
		return rdb.Incr(context.Background(), key).Result()
	})
}

// startIncrOp is startIncr with op as the load's unit: it applies step
// INCRs to key and returns the value after the last.
func startIncrOp(workers int, prefix string, step int64, op func(key string) (int64, error)) *incrLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &incrLoad{acked: make([]atomic.Int64, workers), failed: make([]atomic.Int64, workers), cancel: cancel}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			key := prefix + strconv.Itoa(w)
			for ctx.Err() == nil {
				// Each command has its own context, not the load's: a
				// command cut short by the test's stop would count as failed.
				n, err := op(key)
				if err != nil {
					l.failed[w].Add(1)
					l.errs.Store(err.Error(), true)
					continue
				}
				if got := l.acked[w].Add(step); got != n {
					l.errs.Store(fmt.Sprintf("%s: reply %d for acknowledged INCR number %d", key, n, got), true)
					l.acked[w].Store(n)
				}
			}
		}(w)
	}
	return l
}

func (l *incrLoad) stop() { l.cancel(); l.wg.Wait() }

// check compares every key's final value with the INCRs acknowledged.
func (l *incrLoad) check(t *testing.T, mr interface{ Get(string) (string, error) }, prefix string) {
	t.Helper()
	var acked, failed int64
	for w := range l.acked {
		v, err := mr.Get(prefix + strconv.Itoa(w))
		final := int64(0)
		if err == nil {
			final, _ = strconv.ParseInt(v, 10, 64)
		}
		a, f := l.acked[w].Load(), l.failed[w].Load()
		acked += a
		failed += f
		assert.Equal(t, a, final, "key %d: %d acknowledged, %d failed, final value %d (more: a write ran twice; less: lost)", w, a, f, final)
	}
	var errs []string
	l.errs.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
	t.Logf("INCRs acknowledged %d, failed %d; errors %v", acked, failed, errs)
	assert.Zero(t, failed, "failed commands: %v", errs)
	assert.Empty(t, errs, "errors and INCR replies that skipped a value (a write run twice)")
}

// Item 19: maint never makes a write run twice. During a MIGRATING whose
// replies are slower than ReadTimeout, a MOVING of the same node retires
// its connections with replies still owed past the drain cap: maint leaves
// them open until the replies come. With go-redis's default retries (which
// retry a command whose connection was closed under it), every
// acknowledged INCR is applied exactly once and none fails.
func TestSlowRepliesAtAMovingRunOnce(t *testing.T) {
	e := newEnv(t)
	opt := e.options(16)
	opt.MaxRetries = 3 // go-redis's default: a connection closed under a command retries it
	opt.ReadTimeout = 500 * time.Millisecond
	rdb, m, ev := e.client(routes[1], opt)
	l := startIncr(rdb, 16, "incr:")
	waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
	// Replies 2.5s slow: past ReadTimeout, past the drain cap (+1.5s after
	// the MOVING, which comes 0.5s in), before the window's end (+3s).
	// The commands run at once; their replies are slow (a command given up
	// on has run: retrying it runs it twice).
	e.old.SetLatencyAfterExecution(true)
	e.old.SetMaintLatency(2500 * time.Millisecond)
	e.old.Migrating(0, `["1"]`)
	waitFor(t, "relaxation", 10*time.Second, func() bool { _, ok := ev.first(maint.EventRelax); return ok })
	// The replies owed now are slower than ReadTimeout: let them be
	// outstanding for longer than that before the MOVING.
	time.Sleep(opt.ReadTimeout)
	waitFor(t, "slow replies in flight", 10*time.Second, func() bool { return e.old.Stats().Pending >= 8 })
	window := 3 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new})
	e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
	waitFor(t, "load on the new node", 10*time.Second, func() bool { return e.new.Stats().Served > 200 })
	l.stop()
	st := m.Stats()
	t.Logf("maint %+v; old node %+v; events:\n%s", st, e.old.Stats(), ev)
	l.check(t, e.emu.Miniredis(), "incr:")
	assert.NotZero(t, st.OwedAtCap, "some connections had a reply owed at the cap")
	assert.Zero(t, e.old.Stats().OwedAtClose, "no reply was still owed when the server closed")
}
