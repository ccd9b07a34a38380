package maint

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// HandoffReport tells the story of one handoff once it has ended: when the
// MOVING was read, when a replacement could be had, when the old node was
// last used, what waited, what was closed and what failed. It is carried
// by the EventHandoffReport event (Event.Report), emitted once per handoff,
// and logged at Info.
type HandoffReport struct {
	Node      string // the node handed off
	Seq       int64  // the MOVING's sequence id
	Successor string // the address the MOVING named; "" for a null endpoint
	// Window is the MOVING's window as maint counts it: capped, and counted
	// from when the push arrived on Linux, from its read elsewhere (a replay
	// of an open window: from the opt-in's write, and a second shorter); the
	// EventHandoff's Detail says how far back.
	Window time.Duration

	// MovingAt is when the MOVING was read.
	MovingAt time.Time
	// ReplacementAt is when a replacement could first be had: at once for
	// a MOVING naming its successor, else when DNS (a probe or a new
	// connection) named another node, or when time told (a fixed address
	// at the window's last call). Zero if never.
	ReplacementAt time.Time
	// OldLastUsedAt is when the last of the old node's connections closed,
	// after which nothing of the client used the old node. Zero when none
	// closed during the handoff, or some were left open for the server.
	OldLastUsedAt time.Time
	// EndedAt is when the handoff ended.
	EndedAt time.Time

	// Held counts the commands that waited for a replacement, LongestHold
	// is the longest such wait, as counted when the handoff ended.
	Held        int
	LongestHold time.Duration
	// Retired counts the connections the handoff took out of circulation,
	// or fenced for a hold (Stats.Retired counts only those refused to the
	// pool).
	Retired int
	// ClosedAtCap counts the old connections closed at the drain cap (idle
	// ones and subscribers), BlockingAtCap the ones left open there with a
	// blocking command in flight (the server's close at the window's end
	// ends it, unless its reply comes first).
	ClosedAtCap, BlockingAtCap int
	// LeftForServer counts the old connections still open when the handoff
	// ended, because a reply was owed (a blocking command's included):
	// closing them would cut the command. The server closes them.
	LeftForServer int
	// Doomed counts new connections discarded for landing on the old node.
	Doomed int
	// Failed counts the commands maint failed: held commands whose context
	// ended while they waited. A healthy handoff fails none.
	Failed int
	// Superseded is set when the handoff ended early: a later MOVING took
	// over the node, or the Maint was closed.
	Superseded bool
	// Duration runs from MovingAt to OldLastUsedAt, or to EndedAt when
	// that is zero.
	Duration time.Duration
}

// attrs are the report's log attributes, with stable keys.
func (r *HandoffReport) attrs() []slog.Attr {
	as := []slog.Attr{
		slog.Duration("window", r.Window),
		slog.String("successor", r.Successor),
		slog.Time("moving_at", r.MovingAt),
	}
	if !r.ReplacementAt.IsZero() {
		as = append(as, slog.Time("replacement_at", r.ReplacementAt))
	}
	if !r.OldLastUsedAt.IsZero() {
		as = append(as, slog.Time("old_last_used_at", r.OldLastUsedAt))
	}
	return append(as,
		slog.Int("held", r.Held),
		slog.Duration("longest_hold", r.LongestHold),
		slog.Int("retired", r.Retired),
		slog.Int("closed_at_cap", r.ClosedAtCap),
		slog.Int("blocking_at_cap", r.BlockingAtCap),
		slog.Int("left_for_server", r.LeftForServer),
		slog.Int("doomed", r.Doomed),
		slog.Int("failed", r.Failed),
		slog.Bool("superseded", r.Superseded),
		slog.Duration("duration", r.Duration),
	)
}

// tally is what a run counts for its report. The driver alone touches the
// plain fields (apply runs on it, or before it starts, or instead of it);
// the atomic ones are touched by dials and probes too.
type tally struct {
	replacedAt                 atomic.Int64 // unix nanoseconds; 0: none yet
	doomed                     atomic.Int64
	retired                    atomic.Int64 // by the retirement, and by adopt after it
	closedAtCap, blockingAtCap int
}

// replaced notes that a replacement could be had at t, the first time.
func (y *tally) replaced(t time.Time) { y.replacedAt.CompareAndSwap(0, t.UnixNano()) }

// holdTally is what a hold counts of the commands that waited on it.
type holdTally struct {
	held, failed, waiting atomic.Int64
	longest               atomic.Int64 // nanoseconds
}

// start counts a command that begins to wait on the hold.
func (y *holdTally) start() {
	y.held.Add(1)
	y.waiting.Add(1)
}

// note counts the end of a command's wait of d on the hold.
func (y *holdTally) note(d time.Duration, failed bool) {
	y.waiting.Add(-1)
	if failed {
		y.failed.Add(1)
	}
	for {
		cur := y.longest.Load()
		if int64(d) <= cur || y.longest.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// emitReport emits the held commands' summary, if any waited, and the
// report of r, which ends now, after the Finish action.
func (r *run) emitReport() {
	rep := r.report(time.Now())
	if rep.Held > 0 {
		r.m.emit(Event{Kind: EventHeld, Node: r.n.key, Seq: r.seq, Count: rep.Held, Duration: rep.LongestHold,
			Detail: fmt.Sprintf("failed=%d", rep.Failed)})
	}
	r.m.emit(Event{Kind: EventHandoffReport, Node: r.n.key, Seq: r.seq, Count: rep.Retired, Duration: rep.Duration, Report: rep})
}

// report builds the report of r, which ends now, after the Finish action.
func (r *run) report(end time.Time) *HandoffReport {
	p := r.h.Params()
	rep := &HandoffReport{
		Node: r.n.key, Seq: r.seq, Successor: p.Successor, Window: p.Window,
		MovingAt: p.Start, EndedAt: end,
		Retired: int(r.tally.retired.Load()), ClosedAtCap: r.tally.closedAtCap, BlockingAtCap: r.tally.blockingAtCap,
		Doomed:     int(r.tally.doomed.Load()),
		Superseded: r.superseded() || r.m.ctx.Err() != nil,
	}
	if ns := r.tally.replacedAt.Load(); ns != 0 {
		rep.ReplacementAt = time.Unix(0, ns)
	}
	if h := r.hold.Load(); h != nil {
		// The hold was released a moment ago: let its waiters wake, so that
		// their waits are counted.
		for i := 0; i < 500 && h.tally.waiting.Load() > 0; i++ {
			time.Sleep(time.Millisecond)
		}
		rep.Held = int(h.tally.held.Load())
		rep.Failed = int(h.tally.failed.Load())
		rep.LongestHold = time.Duration(h.tally.longest.Load())
	}
	for _, c := range r.n.snapshot() {
		if c.draining() {
			rep.LeftForServer++
		}
	}
	if ns := r.n.lastDrained.Load(); rep.LeftForServer == 0 && ns >= p.Start.UnixNano() {
		rep.OldLastUsedAt = time.Unix(0, ns)
	}
	if rep.OldLastUsedAt.IsZero() {
		rep.Duration = end.Sub(p.Start)
	} else {
		rep.Duration = rep.OldLastUsedAt.Sub(p.Start)
	}
	return rep
}
