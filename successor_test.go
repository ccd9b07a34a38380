package maint_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/mainttest"
)

// Old -> new with a named successor; after the window DNS still
// names old (which still accepts), so the pin keeps new connections on new.
// Then new itself gets a null-endpoint MOVING while DNS names old: the pin to
// a node being retired is stale and must not send every dial back to it.
func TestNullMovingOnTheSuccessorWhileItIsPinned(t *testing.T) {
	e := newEnv(t)
	rdb, _, ev := e.client(routes[0], e.options(8))
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	e.old.Moving(mainttest.Moving{Window: time.Second, To: e.new})
	pingUntilRetired(t, rdb, ev)
	e.waitEvent(e.old, mainttest.KindWindowEndClose, 10*time.Second)
	require.NoError(t, rdb.Ping(ctx).Err())

	l := startLoad(rdb, 16)
	defer l.stop()
	e.new.Moving(mainttest.Moving{Window: 3 * time.Second, To: e.old, Null: true, StopAccepting: true})
	e.waitEvent(e.new, mainttest.KindWindowEndClose, 15*time.Second)
	before := e.old.Stats().Served
	waitFor(t, "load on old again", 10*time.Second, func() bool { return e.old.Stats().Served > before+200 })
	l.stop()
	t.Logf("ok=%d failed=%d", l.ok.Load(), l.failed.Load())
	assert.Zero(t, l.failed.Load(), "failed: %v; events:\n%s", l.errs, ev)
	assert.Zero(t, e.new.Stats().ClosedAtWindowEnd)
}

// A successor pin kept past its window is dropped as soon as the successor
// stops answering: the configured address is tried instead.
func TestUnansweringSuccessorPinIsDroppedAfterTheWindow(t *testing.T) {
	e := newEnv(t)
	rdb, _, ev := e.client(routes[0], e.options(4))
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	e.old.Moving(mainttest.Moving{Window: time.Second, To: e.new})
	pingUntilRetired(t, rdb, ev)
	e.waitEvent(e.old, mainttest.KindWindowEndClose, 10*time.Second)
	// DNS still names old, which accepts again; the successor goes away.
	e.new.RefuseNew(true)
	e.new.CloseAll()
	for i := 0; i < 50; i++ {
		require.NoError(t, rdb.Ping(ctx).Err(), "events:\n%s", ev)
	}
}
