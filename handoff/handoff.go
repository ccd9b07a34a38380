// Package handoff is the state machine of one handoff: what a client does with
// its connections to one node between a MOVING notification and the moment
// the node's work is served elsewhere.
//
// A Handoff is driven by two inputs, the passage of time (Tick) and the news
// that a replacement can be had (Replacement), and answers each with the
// Actions its driver must carry out. It owns no goroutine, no timer and no
// socket, and reads no clock: every method takes "now", so tests step it
// through any timeline exactly.
package handoff

import (
	"fmt"
	"sync"
	"time"
)

// Phase is where a handoff stands.
//
//	            replacement seen
//	Awaiting ───────────────────────▶ Draining ──window over + grace──▶ Done
//	   │ last call                        ▲      (+ late close where addresses
//	   │                                  │       identify nodes)
//	   │                                  │ replacement seen
//	   ▼                                  │ (addresses identify nodes)
//	Holding ──────────────────────────────┘
//	   │ hold budget spent (addresses identify nodes), or
//	   │ window over + grace (a fixed address: time tells)
//	   └──────────────────────────────────────────────────────▶ Done
//
// A handoff with a named successor starts in Draining.
type Phase uint32

const (
	// Awaiting: a null-endpoint MOVING; work is served on the old node while
	// the client waits for DNS to name another.
	Awaiting Phase = iota + 1
	// Holding: the window is about to end and no replacement can be had; new
	// commands wait, the old connections drain and close before the server
	// closes them.
	Holding
	// Draining: a replacement can be had; the old connections are out of
	// circulation and close at the drain cap.
	Draining
	// Done: nothing is left to do; the successor pin, if any, is dropped.
	Done
)

// String returns the phase's name.
func (p Phase) String() string {
	switch p {
	case Awaiting:
		return "awaiting"
	case Holding:
		return "holding"
	case Draining:
		return "draining"
	case Done:
		return "done"
	default:
		return fmt.Sprintf("phase(%d)", uint32(p))
	}
}

// Action is a set of things the driver must do, in the order of the constants.
type Action uint8

const (
	// Retire takes every connection to the node out of circulation; commands
	// already written finish.
	Retire Action = 1 << iota
	// Hold makes new commands wait for a replacement.
	Hold
	// Release lets held commands go.
	Release
	// CloseRemaining closes whatever old connection is still open: the drain
	// cap has passed.
	CloseRemaining
	// Finish ends the handoff.
	Finish
)

// Has reports whether a contains b.
func (a Action) Has(b Action) bool { return a&b != 0 }

// String lists the actions.
func (a Action) String() string {
	if a == 0 {
		return "none"
	}
	s := ""
	for _, x := range []struct {
		a Action
		n string
	}{{Retire, "retire"}, {Hold, "hold"}, {Release, "release"}, {CloseRemaining, "close-remaining"}, {Finish, "finish"}} {
		if a.Has(x.a) {
			if s != "" {
				s += "+"
			}
			s += x.n
		}
	}
	return s
}

// Params are the facts fixed when a handoff begins.
type Params struct {
	Gen       uint64        // generation: a later MOVING supersedes an earlier one
	Seq       int64         // the notification's sequence id
	Node      string        // address of the node being retired
	Successor string        // named successor "host:port", or "" for a null endpoint
	Start     time.Time     // when the MOVING was read
	Window    time.Duration // the announced window, already clamped
	// RelaxedTimeout feeds the drain cap; a negative value means relaxation is
	// off, and the drain keeps its one-second floor.
	RelaxedTimeout time.Duration
	// HoldBudget bounds how long past the window's end commands are held
	// waiting for DNS to move.
	HoldBudget time.Duration
	// Identifying reports whether addresses identify nodes (see package
	// classify). When they do not, no dial can show a replacement: the
	// handoff holds new work from the last call until the window is over
	// and its close grace has passed (a new connection before then most
	// likely reaches the old node, which may say so by replaying the
	// MOVING), then lets go of the old node and trusts whatever connects.
	Identifying bool
}

// Handoff is one handoff's state. It is safe for concurrent use.
type Handoff struct {
	p Params

	mu       sync.Mutex // guards the following
	phase    Phase
	retireAt time.Time // zero until the old connections are retired
	capAt    time.Time // when the drain cap passes; zero until retired
	capped   bool      // CloseRemaining was returned
	holdAt   time.Time // when the hold began; zero if it never did
}

// New starts a handoff and returns the actions for its first instant: with a
// named successor, the node is retired at once.
func New(p Params) (*Handoff, Action) {
	h := &Handoff{p: p, phase: Awaiting}
	if p.Successor == "" {
		return h, 0
	}
	h.phase = Draining
	h.retireLocked(p.Start)
	return h, Retire
}

// Params returns the facts the handoff began with.
func (h *Handoff) Params() Params { return h.p }

// Deadline is the end of the announced window.
func (h *Handoff) Deadline() time.Time { return h.p.Start.Add(h.p.Window) }

// LastCall is the latest moment at which the old node may still take new
// work: its connections must be drained and closed before the server closes
// them at the window's end.
func (h *Handoff) LastCall() time.Time {
	return h.Deadline().Add(-LastCallLead(h.p.Window))
}

// Phase returns the current phase.
func (h *Handoff) Phase() Phase {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.phase
}

// Retired reports whether the old connections are out of circulation, and
// when the drain cap passes.
func (h *Handoff) Retired() (retired bool, capAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.retireAt.IsZero(), h.capAt
}

// Released reports whether the handoff has let go of the old node and what
// connects now is trusted (time tells, for fixed addresses).
func (h *Handoff) Released() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.phase == Draining || h.phase == Done
}

// Replacement records that a replacement can be had (DNS names another node)
// and returns what to do.
func (h *Handoff) Replacement(now time.Time) Action {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.phase {
	case Awaiting:
		h.phase = Draining
		h.retireLocked(now)
		return Retire | h.tickLocked(now)
	case Holding:
		h.phase = Draining
		return Release | h.tickLocked(now)
	default:
		return 0
	}
}

// Tick advances the handoff to now and returns what to do.
func (h *Handoff) Tick(now time.Time) Action {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tickLocked(now)
}

// Finish ends the handoff early (superseded, or the client is closing). It
// returns Release if commands were held.
func (h *Handoff) Finish() Action {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phase == Done {
		return 0
	}
	a := Finish
	if h.phase == Holding {
		a |= Release
	}
	h.phase = Done
	return a
}

func (h *Handoff) tickLocked(now time.Time) Action {
	var a Action
	switch h.phase {
	case Awaiting:
		if now.Before(h.LastCall()) {
			return 0
		}
		h.retireLocked(now)
		h.phase = Holding
		h.holdAt = now
		a = Retire | Hold
	case Holding:
		if !now.Before(h.holdEnd()) {
			h.phase = Done
			a |= Release | Finish
		}
	case Done:
		return 0
	}
	if !h.capped && !h.capAt.IsZero() && !now.Before(h.capAt) {
		h.capped = true
		a |= CloseRemaining
	}
	if h.phase == Draining && h.capped && !now.Before(h.DrainEnd()) {
		h.phase = Done
		a |= Finish
	}
	return a
}

// NextWake is the next instant at which Tick has something to do; the zero
// time once the handoff is done.
func (h *Handoff) NextWake() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var next time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	switch h.phase {
	case Awaiting:
		earliest(h.LastCall())
	case Holding:
		earliest(h.holdEnd())
	case Draining:
		if h.capped {
			earliest(h.DrainEnd())
		}
	case Done:
		return time.Time{}
	}
	if !h.capped {
		earliest(h.capAt)
	}
	return next
}

// holdEnd is when a hold ends if no replacement is seen first: the hold
// budget past the window's end, or, where addresses do not identify nodes
// (nothing can be seen), the window's end and its close grace.
func (h *Handoff) holdEnd() time.Time {
	if !h.p.Identifying {
		return h.Deadline().Add(CloseGrace(h.p.Window))
	}
	return h.Deadline().Add(h.p.HoldBudget)
}

// DrainEnd is when the handoff is done once draining, its old connections closed:
// the window's end and its close grace, or, where addresses identify nodes,
// the window's end and its late close, until which a new connection that
// lands on the old node (DNS naming it beside another, a pin or a spare
// that leads there) is judged doomed. Behind a fixed address nothing can be
// judged by address, and the handoff lets go at the close grace.
func (h *Handoff) DrainEnd() time.Time {
	g := CloseGrace(h.p.Window)
	if h.p.Identifying {
		g = max(g, LateClose(h.p.Window))
	}
	return h.Deadline().Add(g)
}

// EndBound is the latest the handoff ends by its own timeline: the
// window, its close grace and the hold budget (a hold's longest), and no
// sooner than the drain's end (its late close, which a small hold budget
// does not cover).
func (h *Handoff) EndBound() time.Time {
	b := h.Deadline().Add(CloseGrace(h.p.Window) + h.p.HoldBudget)
	if end := h.DrainEnd(); b.Before(end) {
		return end
	}
	return b
}

// retireLocked records the retirement and fixes the drain cap from what is
// left of the window.
func (h *Handoff) retireLocked(now time.Time) {
	if !h.retireAt.IsZero() {
		return
	}
	h.retireAt = now
	h.capAt = now.Add(CapFor(h.p.RelaxedTimeout, h.Deadline().Sub(now)))
}

// DrainCap is the seed design's bound on a drain: half the relaxed timeout, no
// more than half of what is left of the window, and never under one second
// (so that relaxation off, a relaxed timeout of zero or less, does not force
// the close with commands still in flight).
func DrainCap(relaxed, remaining time.Duration) time.Duration {
	c := relaxed / 2
	if relaxed <= 0 {
		c = 0
	}
	if half := remaining / 2; c > half {
		c = half
	}
	if c < time.Second {
		c = time.Second
	}
	return c
}

// CapFor is DrainCap clamped so that the drain ends before the server's close:
// a margin of half of what is left (at most 250ms) is kept before the
// window's end, for the driver's timer to fire late and the closes to be made
// on a busy machine (a tenth, 50ms of a 2s window's last call, was overrun
// under load). The cap closes only idle connections (a command in flight is
// never cut), so an earlier cap costs no command. With nothing left of the
// window the cap is zero and the old connections close at once.
func CapFor(relaxed, remaining time.Duration) time.Duration {
	if remaining <= 0 {
		return 0
	}
	c := DrainCap(relaxed, remaining)
	margin := remaining / 2
	if margin > 250*time.Millisecond {
		margin = 250 * time.Millisecond
	}
	if limit := remaining - margin; c > limit {
		c = limit
	}
	return c
}

// LastCallLead is how long before the window's end the old node stops taking
// new work when no replacement has appeared: a quarter of the window, between
// 250ms and 2s. It must cover a round trip for the commands already written and
// the close of the idle connections; any longer moves work off a node that
// still serves it.
func LastCallLead(window time.Duration) time.Duration {
	return clamp(window/4, 250*time.Millisecond, 2*time.Second)
}

// CloseGrace is how long after the window's end a draining handoff lasts:
// the server closes the old node's connections at the window's end or later
// (measured on Redis Enterprise: 0.7 to 4.1s after a 15s window), so a
// connection that lands there just before that close would be cut under its
// first command. Until the grace has passed, such a landing is doomed. An
// eighth of the window, between 100ms and 1s.
func CloseGrace(window time.Duration) time.Duration {
	return clamp(window/8, 100*time.Millisecond, time.Second)
}

// LateClose is how long after the window's end the server may still close
// the old node's connections: Redis Enterprise was measured closing them up
// to 4.1s after a 15s window's end, and the emulator closes a zero-second
// window's 340 to 550ms after the MOVING. A connection that lands on the old
// node before that close would carry its first command into it (a reply
// cut, and a retry that runs the command twice), so where addresses
// identify nodes the handoff judges such landings doomed until then; a
// replacement can be had meanwhile, so a doomed landing costs a redial. A
// third of the window, between 1s and 5s.
func LateClose(window time.Duration) time.Duration {
	return clamp(window/3, time.Second, 5*time.Second)
}

// clamp returns d within [lo, hi].
func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// ProbeInterval is how often DNS is asked, during a null-endpoint window,
// whether it still names the retiring node: a tenth of the window, between
// 100ms and 1s (the seed design's one-second probe, scaled for short windows).
func ProbeInterval(window time.Duration) time.Duration {
	return clamp(window/10, 100*time.Millisecond, time.Second)
}
