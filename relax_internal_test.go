package maint

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// Relaxation per operation. MIGRATING 10, FAILING_OVER 11,
// MIGRATED 12: the node stays relaxed until FAILED_OVER 13 plus the tail.
func TestRelaxationPerOperation(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTail(50*time.Millisecond))
	defer m.Close()
	c, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	n := c.n
	m.relax(n, notif(resp.KindMigrating, 10, `["1"]`))
	m.relax(n, notif(resp.KindFailingOver, 11, `["1"]`))
	m.relaxEnd(n, notif(resp.KindMigrated, 12, `["1"]`))
	time.Sleep(120 * time.Millisecond) // past the tail of the MIGRATED
	assert.True(t, n.relaxing(), "the failover is still open")

	m.relaxEnd(n, notif(resp.KindMigrated, 9, `["1"]`)) // a replay: older than anything open
	m.relaxEnd(n, notif(resp.KindMigrated, 14, `["1"]`))
	assert.True(t, n.relaxing(), "a MIGRATED with no migration open ends nothing")

	m.relaxEnd(n, notif(resp.KindFailedOver, 13, `["1"]`))
	assert.True(t, n.relaxing(), "relaxed for the tail")
	require.Eventually(t, func() bool { return !n.relaxing() }, 5*time.Second, 5*time.Millisecond,
		"relaxation ends after the tail of the last completion")

	m.relax(n, notif(resp.KindMigrating, 10, `["1"]`))
	assert.False(t, n.relaxing(), "a late copy of a migration that completed starts nothing")
}

// Two migrations of different shards: each completion ends its own.
func TestRelaxationCompletionEndsItsOwnShards(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTail(time.Millisecond))
	defer m.Close()
	c, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	n := c.n
	m.relax(n, notif(resp.KindMigrating, 1, `["1"]`))
	m.relax(n, notif(resp.KindMigrating, 2, `["2"]`))
	m.relaxEnd(n, notif(resp.KindMigrated, 3, `["2"]`))
	n.mu.Lock()
	require.Len(t, n.ops, 1)
	assert.EqualValues(t, 1, n.ops[0].seq, "MIGRATED of shard 2 ended the migration of shard 2")
	n.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	assert.True(t, n.relaxing())
}

// A relaxation's end is reported by a timer. Close must not return while
// that report is still being delivered: an observer (a test's logger, a
// metrics gauge) would be called after the Maint that feeds it was closed.
func TestCloseWaitsForARelaxEndReportInFlight(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var delivered atomic.Bool
	var once sync.Once
	m := New(WithRelaxedTail(10*time.Millisecond), WithOnEvent(func(e Event) {
		if e.Kind != EventRelaxOff {
			return
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return
		}
		close(entered)
		<-release
		delivered.Store(true)
	}))
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	c, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	n := c.n
	m.relax(n, notif(resp.KindMigrating, 1, `["1"]`))
	m.relaxEnd(n, notif(resp.KindMigrated, 2, `["1"]`))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the relaxation's end was never reported")
	}

	closed := make(chan struct{})
	go func() {
		_ = m.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while the relax-end report was still being delivered")
	case <-time.After(100 * time.Millisecond):
	}
	releaseOnce.Do(func() { close(release) })
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the report was delivered")
	}
	require.True(t, delivered.Load())
}
