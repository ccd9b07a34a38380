package maint_test

import (
	"context"
	"errors"
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

// While a node is relaxed, its connections stay busy with slow replies for
// longer than go-redis's PoolTimeout expects: a command that timed out
// waiting for a pool connection (it was never written) gets more turns,
// bounded by its context and the relaxed timeout, instead of failing.
func TestPoolTimeoutDuringRelaxationIsRetried(t *testing.T) {
	e := newEnv(t)
	opt := e.options(2)
	opt.ReadTimeout = 300 * time.Millisecond
	opt.PoolTimeout = 200 * time.Millisecond
	rdb, m, _ := e.client(routes[0], opt, maint.WithRelaxedTimeout(3*time.Second))
	ctx := context.Background()
	assert.NoError(t, rdb.Ping(ctx).Err())
	e.old.SetMaintLatency(600 * time.Millisecond)
	e.old.Migrating(0, `["1"]`)
	waitFor(t, "relaxation", 10*time.Second, func() bool {
		_ = rdb.Ping(ctx).Err() // reads the MIGRATING
		return m.Stats().Relaxations > 0
	})
	var wg sync.WaitGroup
	var failed atomic.Int64
	errs := sync.Map{}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rdb.Ping(ctx).Err(); err != nil {
				failed.Add(1)
				errs.Store(err.Error(), true)
			}
		}()
	}
	wg.Wait()
	var es []string
	errs.Range(func(k, _ any) bool { es = append(es, k.(string)); return true })
	assert.Zero(t, failed.Load(), "failed: %v", es)
	assert.NotZero(t, m.Stats().PoolRetries, "some commands waited more than one pool timeout")
}

// Relaxation covers a slow server during MIGRATING; after
// MIGRATED and the tail, the configured timeout is back.
func TestRelaxationDuringMigrating(t *testing.T) {
	e := newEnv(t)
	ev := &eventLog{}
	const tail = 300 * time.Millisecond
	m := newMaint(t, ev, maint.WithRelaxedTimeout(3*time.Second), maint.WithRelaxedTail(tail))
	rdb := e.directClient(e.old, m, 500*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	e.old.SetCommandLatency("ECHO", 1500*time.Millisecond)

	err := rdb.Echo(ctx, "x").Err()
	require.True(t, isTimeout(err), "a 1.5s command must time out before maintenance: %v", err)
	require.NoError(t, rdb.Ping(ctx).Err()) // a new connection: the timeout closed the old one

	e.old.Migrating(0, shards)
	require.NoError(t, rdb.Ping(ctx).Err())
	for i := 0; i < 2; i++ {
		require.NoError(t, rdb.Echo(ctx, "x").Err(), "during MIGRATING; events:\n%s", ev)
	}

	e.old.Migrated(shards)
	var end maint.Event
	waitFor(t, "relax-end", 5*time.Second, func() bool {
		require.NoError(t, rdb.Ping(ctx).Err())
		var ok bool
		end, ok = ev.first(maint.EventRelaxEnd)
		return ok
	})
	waitFor(t, "the tail to pass", 5*time.Second, func() bool { return time.Since(end.At) > tail+50*time.Millisecond })
	err = rdb.Echo(ctx, "x").Err()
	assert.True(t, isTimeout(err), "after MIGRATED and the tail a 1.5s command must time out again: %v", err)
}

// Relaxation is a floor. An infinite block stays
// infinite, and a longer configured timeout is not shortened.
func TestRelaxationIsAFloor(t *testing.T) {
	e := newEnv(t)
	ev := &eventLog{}
	m := newMaint(t, ev, maint.WithRelaxedTimeout(500*time.Millisecond))
	ctx := context.Background()

	t.Run("BLPOP 0 outlives twice the relaxed timeout", func(t *testing.T) {
		rdb := e.directClient(e.old, m, 3*time.Second)
		require.NoError(t, rdb.Ping(ctx).Err())
		e.old.Migrating(0, shards)
		require.NoError(t, rdb.Ping(ctx).Err()) // reads the MIGRATING
		_, ok := ev.first(maint.EventRelax)
		require.True(t, ok)
		res := make(chan error, 1)
		go func() { res <- rdb.BLPop(ctx, 0, "q").Err() }()
		pusher := redis.NewClient(&redis.Options{Addr: e.new.Addr()})
		defer pusher.Close()
		time.Sleep(1200 * time.Millisecond) // the BLPOP must still be blocked after 2x the relaxed timeout
		require.NoError(t, pusher.RPush(ctx, "q", "v").Err())
		select {
		case err := <-res:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("BLPOP never returned")
		}
	})

	t.Run("a 10s ReadTimeout is not shortened", func(t *testing.T) {
		m2 := newMaint(t, ev, maint.WithRelaxedTimeout(time.Second))
		rdb := e.directClient(e.new, m2, 10*time.Second)
		require.NoError(t, rdb.Ping(ctx).Err())
		e.new.Migrating(0, shards)
		require.NoError(t, rdb.Ping(ctx).Err())
		e.new.SetCommandLatency("ECHO", 2*time.Second)
		defer e.new.SetCommandLatency("ECHO", 0)
		require.NoError(t, rdb.Echo(ctx, "x").Err())
	})
}

// Relaxation on node A leaves node B's timeouts alone, even
// with one Maint for both.
func TestRelaxationIsPerNode(t *testing.T) {
	e := newEnv(t)
	ev := &eventLog{}
	m := newMaint(t, ev, maint.WithRelaxedTimeout(3*time.Second))
	a := e.directClient(e.old, m, 500*time.Millisecond)
	b := e.directClient(e.new, m, 500*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, a.Ping(ctx).Err())
	require.NoError(t, b.Ping(ctx).Err())
	e.old.SetCommandLatency("ECHO", 1500*time.Millisecond)
	e.new.SetCommandLatency("ECHO", 1500*time.Millisecond)
	e.old.Migrating(0, shards)
	require.NoError(t, a.Ping(ctx).Err())
	require.NoError(t, a.Echo(ctx, "x").Err(), "node A is migrating: relaxed")
	err := b.Echo(ctx, "x").Err()
	assert.True(t, isTimeout(err), "node B is not migrating: %v", err)
}

// Short timeouts, relaxation off, steady load, a MOVING
// whose DNS lags the window: held work is not failed by its own timeout.
// The timeouts are short against the hold (the DNS lags the window by 1.5 s,
// the timeouts are 600 ms) but not so short that a starved test machine fails
// commands that no maintenance touched.
func TestShortTimeoutsRelaxationOffKeepsHeldWork(t *testing.T) {
	e := newEnv(t)
	opt := e.options(8)
	opt.ReadTimeout = 600 * time.Millisecond
	opt.WriteTimeout = 600 * time.Millisecond
	rdb, m, ev := e.client(routes[0], opt, maint.WithRelaxedTimeout(-1))
	require.NoError(t, rdb.Ping(context.Background()).Err())
	l := startLoad(rdb, 16)
	waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, StopAccepting: true,
		DNSHost: host, DNSLag: window + 1500*time.Millisecond})
	e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
	waitFor(t, "load on the new node", 10*time.Second, func() bool { return e.new.Stats().Served > 200 })
	l.stop()
	t.Logf("ok=%d failed=%d; maint %+v", l.ok.Load(), l.failed.Load(), m.Stats())
	assert.Zero(t, l.failed.Load(), "failed: %v; events:\n%s", l.errs, ev)
	assert.NotZero(t, m.Stats().Held)
	held, ok := ev.first(maint.EventHeld)
	require.True(t, ok, "no held event; events:\n%s", ev)
	assert.Greater(t, held.Duration, opt.ReadTimeout, "the longest hold outlasted the read timeout, and nothing failed")
}

// Short timeouts are relaxed too, and the error names the relaxation only
// when one was applied: node-redis's criterion, a timeout during maintenance
// within ±20% of the relaxed timeout and a maintenance error; after it, back
// to the normal timeout and a plain error. A 50 ms ReadTimeout, on both
// install routes.
func TestShortTimeoutIsRelaxed(t *testing.T) {
	const (
		readTimeout = 50 * time.Millisecond
		relaxed     = time.Second
		tail        = 200 * time.Millisecond
	)
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			opt := e.options(1)
			opt.ReadTimeout, opt.WriteTimeout = readTimeout, readTimeout
			rdb, _, ev := e.client(r, opt, maint.WithRelaxedTimeout(relaxed), maint.WithRelaxedTail(tail))
			ctx := context.Background()
			// A starved machine may time a PING out at 50 ms: the PINGs only
			// carry the notifications, their errors are not the point.
			waitFor(t, "a first command", 10*time.Second, func() bool { return rdb.Ping(ctx).Err() == nil })
			e.old.Migrating(0, shards)
			waitFor(t, "the relaxation", 10*time.Second, func() bool {
				_ = rdb.Ping(ctx).Err()
				_, ok := ev.first(maint.EventRelax)
				return ok
			})
			e.old.SetCommandLatency("ECHO", 3*time.Second)
			start := time.Now()
			err := rdb.Echo(ctx, "x").Err()
			took := time.Since(start)
			t.Logf("during maintenance: %v after %v", err, took)
			require.True(t, isTimeout(err), "during maintenance: %v", err)
			var te *maint.TimeoutError
			assert.True(t, errors.As(err, &te), "a maintenance error: %v", err)
			assert.Contains(t, err.Error(), "relaxed to at least 1s")
			assert.GreaterOrEqual(t, took, relaxed*8/10, "not relaxed: timed out after %v", took)
			assert.Less(t, took, 3*relaxed, "timed out after %v", took)

			e.old.SetCommandLatency("ECHO", 0)
			e.old.Migrated(shards)
			var end maint.Event
			waitFor(t, "relax-end", 10*time.Second, func() bool {
				_ = rdb.Ping(ctx).Err()
				var ok bool
				end, ok = ev.first(maint.EventRelaxEnd)
				return ok
			})
			waitFor(t, "relaxation off", 10*time.Second, func() bool { _, ok := ev.first(maint.EventRelaxOff); return ok })
			require.Greater(t, time.Since(end.At), tail)
			e.old.SetCommandLatency("ECHO", 3*time.Second)
			start = time.Now()
			err = rdb.Echo(ctx, "x").Err()
			took = time.Since(start)
			t.Logf("after maintenance: %v after %v", err, took)
			require.True(t, isTimeout(err), "after maintenance: %v", err)
			assert.False(t, errors.As(err, &te), "a plain error after maintenance: %v", err)
			assert.GreaterOrEqual(t, took, readTimeout*8/10)
			assert.Less(t, took, relaxed/2, "still relaxed after the tail: timed out after %v", took)
		})
	}
}
