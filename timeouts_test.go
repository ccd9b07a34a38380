package maint_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

const shards = `["1"]`

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// directClient is a one-connection client of ep with maint installed.
func (e *env) directClient(ep *mainttest.Endpoint, m *maint.Maint, readTimeout time.Duration) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: ep.Addr(), Protocol: 3, PoolSize: 1, MaxRetries: -1,
		ReadTimeout: readTimeout, WriteTimeout: readTimeout})
	rdb.AddHook(m)
	e.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func newMaint(t *testing.T, ev *eventLog, opts ...maint.Option) *maint.Maint {
	opts = append([]maint.Option{maint.WithLogf(t.Logf), maint.WithOnEvent(ev.add)}, opts...)
	m := maint.New(opts...)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// Issue 5, proof 1: relaxation covers a slow server during MIGRATING; after
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

// Issue 5, proofs 2 and 3: relaxation is a floor. An infinite block stays
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

// Issue 5, proof 4: relaxation on node A leaves node B's timeouts alone, even
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

// Issue 5, proof 5: the server replays the latest MIGRATED to every newly
// opted-in connection; the replay relaxes nothing.
func TestReplayedCompletionDoesNotRelax(t *testing.T) {
	e := newEnv(t)
	e.old.Migrating(0, shards)
	e.old.Migrated(shards)
	ev := &eventLog{}
	m := newMaint(t, ev, maint.WithRelaxedTimeout(3*time.Second))
	rdb := e.directClient(e.old, m, 500*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	e.waitEvent(e.old, mainttest.KindReplay, 5*time.Second)
	waitFor(t, "the replay to be read", 5*time.Second, func() bool {
		require.NoError(t, rdb.Ping(ctx).Err())
		return m.Stats().Notifications > 0
	})
	e.old.SetCommandLatency("ECHO", 1500*time.Millisecond)
	err := rdb.Echo(ctx, "x").Err()
	assert.True(t, isTimeout(err), "a replayed completion must not relax: %v", err)
	assert.Zero(t, m.Stats().Relaxations)
}

// Issue 5, proof 6: a blocking command that fits in the drain cap completes;
// one that does not is not cut at the cap (maint leaves it to the server's
// close at the window's end), and the next command runs on the replacement.
func TestBlockingCommandsAndTheDrainCap(t *testing.T) {
	e := newEnv(t)
	ev := &eventLog{}
	// Window 6s, relaxed 10s: cap = min(5s, 3s) = 3s.
	m := newMaint(t, ev)
	short := e.directClient(e.old, m, 3*time.Second)
	long := e.directClient(e.old, m, 3*time.Second)
	ctx := context.Background()
	require.NoError(t, short.Ping(ctx).Err())
	require.NoError(t, long.Ping(ctx).Err())

	shortRes := make(chan error, 1)
	longRes := make(chan error, 1)
	go func() { shortRes <- short.BLPop(ctx, time.Second, "nothing").Err() }()
	go func() { longRes <- long.BLPop(ctx, 0, "nothing").Err() }()
	waitFor(t, "both BLPOPs in flight", 5*time.Second, func() bool { return e.old.Stats().Pending >= 2 })
	start := time.Now()
	e.old.Moving(mainttest.Moving{Window: 6 * time.Second, To: e.new})
	// The blocked connections read the MOVING only with their reply; a third
	// client on the node reads it now, and the handoff is node-wide.
	third := e.directClient(e.old, m, 3*time.Second)
	require.NoError(t, third.Ping(ctx).Err())

	require.ErrorIs(t, <-shortRes, redis.Nil, "the 1s BLPOP fits in the cap and completes")
	err := <-longRes
	failedAfter := time.Since(start)
	require.Error(t, err)
	require.NotErrorIs(t, err, maint.ErrDrainCap, "events:\n%s", ev)
	t.Logf("BLPOP 0 failed after %v: %v", failedAfter, err)
	assert.GreaterOrEqual(t, failedAfter, 6*time.Second, "failed before the server's close at the window's end")

	before := e.new.Stats().Served
	require.NoError(t, long.Ping(ctx).Err())
	assert.Greater(t, e.new.Stats().Served, before, "the next command runs on the replacement")
}

// Issue 5, proof 7: short timeouts, relaxation off, steady load, a MOVING
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
