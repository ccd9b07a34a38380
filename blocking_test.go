package maint_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// blpopInFlight starts BLPOP q 0 on rdb and waits until the old node holds
// it; the returned channel yields its result.
func blpopInFlight(t *testing.T, e *env, rdb *redis.Client, q string) <-chan *redis.StringSliceCmd {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	before := e.old.Stats().Pending
	res := make(chan *redis.StringSliceCmd, 1)
	go func() { res <- rdb.BLPop(ctx, 0, q) }()
	waitFor(t, "the BLPOP in flight", 5*time.Second, func() bool { return e.old.Stats().Pending > before })
	return res
}

// TestBlockingCommandOutlivesTheDrainCap: the MOVING names the successor, the
// drain cap passes with the BLPOP still blocked, and a push through the new
// endpoint (the same database) unblocks it on the old connection.
func TestBlockingCommandOutlivesTheDrainCap(t *testing.T) {
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			rdb, m, ev := e.client(r, e.options(2))
			res := blpopInFlight(t, e, rdb, "q")
			e.old.Moving(mainttest.Moving{Window: 4 * time.Second, To: e.new})
			pingUntilRetired(t, rdb, ev) // the other connection reads the MOVING
			waitFor(t, "the drain cap", 10*time.Second, func() bool { _, ok := ev.first(maint.EventDrainCap); return ok })

			pusher := redis.NewClient(&redis.Options{Addr: e.new.Addr()})
			defer pusher.Close()
			require.NoError(t, pusher.RPush(context.Background(), "q", "v").Err())
			select {
			case cmd := <-res:
				require.NoError(t, cmd.Err(), "events:\n%s", ev)
				assert.Equal(t, []string{"q", "v"}, cmd.Val())
			case <-time.After(10 * time.Second):
				t.Fatalf("the BLPOP never returned; events:\n%s", ev)
			}
			st := m.Stats()
			assert.EqualValues(t, 1, st.BusyAtCap, "left open at the cap with a blocking command in flight")
			assert.EqualValues(t, 1, st.OwedAtCap)
		})
	}
}

// TestBlockingCommandEndsAtTheServersClose: nothing is pushed; the BLPOP
// stays blocked until the server closes the old connection at the window's
// end, and what the application sees then is what go-redis alone returns
// after that close: with retries disabled, the close's own error (no maint
// error), never before the window's end.
func TestBlockingCommandEndsAtTheServersClose(t *testing.T) {
	const window = 3 * time.Second
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			rdb, _, ev := e.client(r, e.options(2))
			res := blpopInFlight(t, e, rdb, "never")
			start := time.Now()
			e.old.Moving(mainttest.Moving{Window: window, To: e.new})
			pingUntilRetired(t, rdb, ev)
			var cmd *redis.StringSliceCmd
			select {
			case cmd = <-res:
			case <-time.After(window + 10*time.Second):
				t.Fatalf("the BLPOP never returned; events:\n%s", ev)
			}
			after := time.Since(start)
			err := cmd.Err()
			require.Error(t, err)
			assert.False(t, errors.Is(err, maint.ErrDrainCap), "cut by maint: %v", err)
			assert.False(t, strings.HasPrefix(err.Error(), "maint:"), "a maint error: %v", err)
			assert.GreaterOrEqual(t, after, window, "ended before the server's close: %v", err)
			t.Logf("BLPOP ended after %v: %v", after, err)
		})
	}
}

// TestBlockingCommandPastTheWindowIsRetriedByDefault: with go-redis's default
// retries, a BLPOP that the server's close ends is run again by go-redis on a
// new connection, the successor's, and returns the value pushed there.
func TestBlockingCommandPastTheWindowIsRetriedByDefault(t *testing.T) {
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			opt := e.options(2)
			opt.MaxRetries = 0 // go-redis's default: 3
			rdb, _, ev := e.client(r, opt)
			res := blpopInFlight(t, e, rdb, "later")
			e.old.Moving(mainttest.Moving{Window: 2 * time.Second, To: e.new})
			pingUntilRetired(t, rdb, ev)
			e.waitEvent(e.old, mainttest.KindWindowEndClose, 10*time.Second)
			waitFor(t, "the retried BLPOP on the successor", 5*time.Second, func() bool { return e.new.Stats().Pending >= 1 })
			pusher := redis.NewClient(&redis.Options{Addr: e.new.Addr()})
			defer pusher.Close()
			require.NoError(t, pusher.RPush(context.Background(), "later", "v").Err())
			select {
			case cmd := <-res:
				require.NoError(t, cmd.Err(), "events:\n%s", ev)
				assert.Equal(t, []string{"later", "v"}, cmd.Val())
			case <-time.After(10 * time.Second):
				t.Fatal("the retried BLPOP never returned")
			}
		})
	}
}

// A blocking command that fits in the drain cap completes;
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
