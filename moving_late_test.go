package maint_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// A client idle when the MOVING comes reads it only when it next reads a
// connection: its pool's connections hold the push, unread, for as long as
// the client sends nothing. The window was counted by the server from when
// it sent the push. A client that resumes part way through the window and
// counts the window from its own read believes the old node serves for
// that much longer than it does: its last call falls after the server's
// close, and the commands in flight then are cut. maint counts the window
// from when the push arrived, which the socket knows (on Linux,
// TCP_INFO's time since data last arrived, read when a MOVING is). Here
// the client is idle for 1.8 s of a 3 s window, then runs INCR workers
// through the window's end with MaxRetries -1: none fails, every INCR runs
// once, and the old node closes none of the client's connections.
func TestMovingReadLateByAnIdleClientCountsFromItsArrival(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			const window = 3 * time.Second
			idle := 1800 * time.Millisecond
			e.old.SetCommandLatency("incr", 20*time.Millisecond)
			ev := &eventLog{}
			m := maint.New(maint.WithLogf(t.Logf), maint.WithOnEvent(ev.add))
			rdb := r.install(m, e.options(4))
			defer func() { _ = rdb.Close(); _ = m.Close() }()
			ctx := context.Background()
			// Four connections open and opted in, then idle in the pool.
			var wg sync.WaitGroup
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func() { defer wg.Done(); require.NoError(t, rdb.Incr(ctx, "warm").Err()) }()
			}
			wg.Wait()

			start := time.Now()
			e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, DNSHost: host, DNSLag: window + 50*time.Millisecond})
			time.Sleep(time.Until(start.Add(idle)))
			_, early := ev.first(maint.EventNotification)
			require.False(t, early, "the idle client read the MOVING before it resumed: the test tests nothing")

			l := startIncr(rdb, 4, "late")
			time.Sleep(time.Until(start.Add(window + 700*time.Millisecond)))
			l.stop()
			l.check(t, e.emu.Miniredis(), "late")
			h, ok := ev.first(maint.EventHandoff)
			require.True(t, ok)
			assert.Less(t, h.Duration, window-idle+500*time.Millisecond, "the handoff's window, counted from the read")
			assert.Contains(t, h.Detail, "before it was read", "the handoff says it was counted from before its read")
			assert.Zero(t, e.old.Stats().ClosedAtWindowEnd, "the old node closed the client's connections at the window's end\n%s", ev)
		})
	}
}
