package maint_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// records is a slog.Handler that keeps every record at or above its level.
type records struct {
	level slog.Level
	mu    sync.Mutex
	recs  []slog.Record
}

func (h *records) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// byMessage counts the records by message.
func (h *records) byMessage() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int)
	for _, r := range h.recs {
		out[r.Message]++
	}
	return out
}

// attrs returns the attributes of the records with message msg.
func (h *records) attrs(msg string) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		as := make(map[string]slog.Value)
		r.Attrs(func(a slog.Attr) bool {
			as[a.Key] = a.Value
			return true
		})
		out = append(out, as)
	}
	return out
}

// One MOVING naming its successor under load: one report, its fields
// telling the story; a few Info records, none per command or connection.
func TestHandoffReportNamedSuccessor(t *testing.T) {
	e := newEnv(t)
	logs := &records{level: slog.LevelInfo}
	reports := make(chan *maint.HandoffReport, 4)
	rdb, m, ev := e.client(routes[0], e.options(16), maint.WithLogger(slog.New(logs)))
	defer m.Observe(func(ev maint.Event) {
		if ev.Kind == maint.EventHandoffReport {
			reports <- ev.Report
		}
	})()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	l := startLoad(rdb, 32)
	waitFor(t, "load on the old node", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
	window := 2 * time.Second
	before := time.Now()
	seq := e.old.Moving(mainttest.Moving{Window: window, To: e.new, StopAccepting: true})
	var rep *maint.HandoffReport
	select {
	case rep = <-reports:
	case <-time.After(window + 20*time.Second):
		t.Fatalf("no report; events:\n%s", ev)
	}
	l.stop()
	t.Logf("report %+v", *rep)

	assert.Equal(t, e.old.Addr(), rep.Node)
	assert.Equal(t, seq, rep.Seq)
	assert.Equal(t, e.new.Addr(), rep.Successor)
	// The window is counted from when the push arrived (arrival_linux.go):
	// no later than the report says it was read, no sooner than it was sent,
	// less the kernel's rounding of that time to its clock tick (at most 10
	// ms, HZ=100).
	assert.LessOrEqual(t, rep.Window, window)
	assert.GreaterOrEqual(t, rep.Window, window-rep.MovingAt.Sub(before)-10*time.Millisecond,
		"counted from before the MOVING was sent (read at %v, sent after %v)", rep.MovingAt, before)
	assert.True(t, !rep.MovingAt.Before(before.Truncate(time.Millisecond)), "MOVING read at %v, sent at %v", rep.MovingAt, before)
	assert.False(t, rep.ReplacementAt.Before(rep.MovingAt), "named successor: replacement at once")
	assert.Less(t, rep.ReplacementAt.Sub(rep.MovingAt), time.Second)
	assert.False(t, rep.OldLastUsedAt.IsZero(), "every old connection closed")
	assert.True(t, rep.OldLastUsedAt.After(rep.MovingAt))
	assert.True(t, rep.OldLastUsedAt.Before(rep.MovingAt.Add(window)), "old node used past its window")
	assert.False(t, rep.EndedAt.Before(rep.OldLastUsedAt))
	assert.Equal(t, rep.OldLastUsedAt.Sub(rep.MovingAt), rep.Duration)
	assert.Positive(t, rep.Retired, "the pool's connections retired")
	assert.Zero(t, rep.LeftForServer)
	assert.Zero(t, rep.Failed, "maint failed commands")
	assert.Zero(t, rep.Held, "a named successor holds nothing")
	assert.False(t, rep.Superseded)
	assert.Zero(t, l.failed.Load(), "failed commands: %v", l.errs)

	// One report per handoff: give a straggler time to show up.
	time.Sleep(100 * time.Millisecond)
	assert.Len(t, reports, 0, "more than one report")
	counts := logs.byMessage()
	t.Logf("Info-or-above records: %v (commands run: %d)", counts, l.ok.Load())
	assert.Equal(t, 1, counts["maint: handoff started"])
	assert.Equal(t, 1, counts["maint: handoff report"])
	total := 0
	for _, n := range counts {
		total += n
	}
	assert.LessOrEqual(t, total, 6, "a few Info lines per handoff, none per command or connection")
	as := logs.attrs("maint: handoff report")
	require.Len(t, as, 1)
	for _, k := range []string{"kind", "node", "seq", "window", "successor", "moving_at", "replacement_at",
		"old_last_used_at", "held", "longest_hold", "retired", "closed_at_cap", "left_for_server", "failed", "duration"} {
		assert.Contains(t, as[0], k)
	}
	assert.Equal(t, e.old.Addr(), as[0]["node"].String())
	assert.Equal(t, seq, as[0]["seq"].Int64())
}

// A null-endpoint MOVING whose DNS change comes after the window's end:
// commands are held; the report counts them and the longest hold, and the
// replacement comes when DNS moved. Held commands log only at Debug.
func TestHandoffReportHeld(t *testing.T) {
	e := newEnv(t)
	logs := &records{level: slog.LevelInfo}
	reports := make(chan *maint.HandoffReport, 4)
	helds := make(chan maint.Event, 4)
	rdb, m, ev := e.client(routes[0], e.options(16), maint.WithLogger(slog.New(logs)))
	defer m.Observe(func(ev maint.Event) {
		switch ev.Kind {
		case maint.EventHandoffReport:
			reports <- ev.Report
		case maint.EventHeld:
			helds <- ev
		}
	})()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	l := startLoad(rdb, 32)
	waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
	window := 2 * time.Second
	lag := window + 500*time.Millisecond
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, StopAccepting: true,
		DNSHost: host, DNSLag: lag})
	var rep *maint.HandoffReport
	select {
	case rep = <-reports:
	case <-time.After(window + 30*time.Second):
		t.Fatalf("no report; events:\n%s", ev)
	}
	l.stop()
	t.Logf("report %+v", *rep)
	assert.Empty(t, rep.Successor)
	assert.Positive(t, rep.Held, "commands waited for DNS")
	assert.Positive(t, rep.LongestHold)
	assert.Less(t, rep.LongestHold, lag+5*time.Second)
	assert.True(t, rep.ReplacementAt.After(rep.MovingAt.Add(window/2)), "replacement when DNS moved, not at the MOVING")
	assert.Zero(t, rep.Failed)
	assert.Zero(t, l.failed.Load(), "failed commands: %v", l.errs)
	assert.GreaterOrEqual(t, rep.Duration, window/2)
	require.Len(t, helds, 1, "one held summary per handoff, none per command")
	held := <-helds
	assert.Equal(t, rep.Held, held.Count)
	assert.Equal(t, rep.LongestHold, held.Duration)
	assert.Equal(t, "failed=0", held.Detail)
	counts := logs.byMessage()
	t.Logf("Info-or-above records: %v; held %d", counts, m.Stats().Held)
	assert.Zero(t, counts["maint: commands were held"], "the held summary above Debug: the report tells it")
	assert.Equal(t, 1, counts["maint: handoff report"])
}
