package handoff

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

type step struct {
	ms          int
	replacement bool // Replacement instead of Tick
	want        Action
	phase       Phase
}

func run(t *testing.T, p Params, first Action, steps []step) {
	t.Helper()
	h, a := New(p)
	if a != first {
		t.Fatalf("New: actions %v, want %v", a, first)
	}
	for _, s := range steps {
		var got Action
		if s.replacement {
			got = h.Replacement(at(s.ms))
		} else {
			got = h.Tick(at(s.ms))
		}
		if got != s.want {
			t.Fatalf("at +%dms (replacement=%v): actions %v, want %v", s.ms, s.replacement, got, s.want)
		}
		if ph := h.Phase(); ph != s.phase {
			t.Fatalf("at +%dms: phase %v, want %v", s.ms, ph, s.phase)
		}
	}
}

func TestNamedSuccessor(t *testing.T) {
	// 3s window, relaxed 10s: cap = max(1s, min(5s, 1.5s)) = 1.5s.
	p := Params{Successor: "10.0.0.2:1", Start: t0, Window: 3 * time.Second, RelaxedTimeout: 10 * time.Second, Identifying: true}
	run(t, p, Retire, []step{
		{ms: 1000, want: 0, phase: Draining},
		{ms: 1500, want: CloseRemaining, phase: Draining},
		{ms: 2999, want: 0, phase: Draining},
		// The window's end plus the late close (3s/3, at least 1s): the
		// server may close the old node's connections until then, so a
		// landing there would be cut under its first command.
		{ms: 3999, want: 0, phase: Draining},
		{ms: 4000, want: Finish, phase: Done},
		{ms: 9000, want: 0, phase: Done},
	})
}

func TestNullEndpointDNSMovesInWindow(t *testing.T) {
	p := Params{Start: t0, Window: 3 * time.Second, RelaxedTimeout: 10 * time.Second, HoldBudget: 5 * time.Second, Identifying: true}
	run(t, p, 0, []step{
		{ms: 500, want: 0, phase: Awaiting},
		// DNS moves at 40%: retire; cap = max(1s, min(5s, 0.9s)) = 1s.
		{ms: 1200, replacement: true, want: Retire, phase: Draining},
		{ms: 1300, replacement: true, want: 0, phase: Draining},
		{ms: 2200, want: CloseRemaining, phase: Draining},
		{ms: 3000, want: 0, phase: Draining},
		{ms: 3375, want: 0, phase: Draining},
		{ms: 4000, want: Finish, phase: Done},
	})
}

func TestNullEndpointDNSLateHoldsThenReleases(t *testing.T) {
	// Last call at 3s - 750ms = 2.25s; cap clamped to 750ms - 75ms.
	p := Params{Start: t0, Window: 3 * time.Second, RelaxedTimeout: 10 * time.Second, HoldBudget: 5 * time.Second, Identifying: true}
	run(t, p, 0, []step{
		{ms: 2249, want: 0, phase: Awaiting},
		{ms: 2250, want: Retire | Hold, phase: Holding},
		{ms: 2925, want: CloseRemaining, phase: Holding},
		{ms: 3500, replacement: true, want: Release, phase: Draining},
		{ms: 4000, want: Finish, phase: Done},
	})
}

// Behind a fixed address no landing can be judged by its address: a
// draining handoff lets go at the close grace, not the late close.
func TestFixedAddressDrainEndsAtTheCloseGrace(t *testing.T) {
	p := Params{Successor: "10.0.0.2:1", Start: t0, Window: 3 * time.Second, RelaxedTimeout: 10 * time.Second}
	run(t, p, Retire, []step{
		{ms: 1500, want: CloseRemaining, phase: Draining},
		{ms: 3374, want: 0, phase: Draining},
		{ms: 3375, want: Finish, phase: Done},
	})
}

// A zero-second window: the old connections close at once, and landings on
// the old node are judged doomed for the late close's floor, a second,
// since the server's close comes after the MOVING, not with it.
func TestZeroWindowDrainsUntilTheLateClose(t *testing.T) {
	p := Params{Start: t0, RelaxedTimeout: 10 * time.Second, HoldBudget: 5 * time.Second, Identifying: true}
	h, _ := New(p)
	if got := h.Replacement(at(10)); got != Retire|CloseRemaining {
		t.Fatalf("replacement: %v, want retire+close-remaining", got)
	}
	if got, want := h.NextWake(), at(1000); !got.Equal(want) {
		t.Fatalf("next wake %v, want the late close %v", got, want)
	}
	if got := h.Tick(at(999)); got != 0 || h.Phase() != Draining {
		t.Fatalf("before the late close: %v in %v, want none in draining", got, h.Phase())
	}
	if got := h.Tick(at(1000)); got != Finish {
		t.Fatalf("at the late close: %v, want finish", got)
	}
}

func TestLateCloseBounds(t *testing.T) {
	for _, c := range []struct{ window, want time.Duration }{
		{0, time.Second}, {3 * time.Second, time.Second}, {6 * time.Second, 2 * time.Second},
		{15 * time.Second, 5 * time.Second}, {time.Minute, 5 * time.Second},
	} {
		if got := LateClose(c.window); got != c.want {
			t.Errorf("LateClose(%v) = %v, want %v", c.window, got, c.want)
		}
	}
}

func TestNullEndpointHoldBudgetSpent(t *testing.T) {
	p := Params{Start: t0, Window: 2 * time.Second, RelaxedTimeout: 10 * time.Second, HoldBudget: time.Second, Identifying: true}
	run(t, p, 0, []step{
		{ms: 1500, want: Retire | Hold, phase: Holding},
		{ms: 2000, want: CloseRemaining, phase: Holding},
		{ms: 2999, want: 0, phase: Holding},
		{ms: 3000, want: Release | Finish, phase: Done},
		{ms: 3001, replacement: true, want: 0, phase: Done},
	})
}

// A fixed address (addresses do not identify nodes) shows no replacement:
// from the last call new work is held until the window is over and its
// close grace has passed, when the old node is gone and what connects is
// the replacement. A new connection before then most likely reaches the old
// node, which may say so by replaying the MOVING in its handshake.
func TestFixedAddressHoldsUntilTheWindowAndItsGraceAreOver(t *testing.T) {
	p := Params{Start: t0, Window: 4 * time.Second, RelaxedTimeout: 10 * time.Second, HoldBudget: 5 * time.Second}
	h, _ := New(p)
	if h.Released() {
		t.Fatal("released before the last call")
	}
	if got := h.Tick(at(3000)); got != Retire|Hold {
		t.Fatalf("last call: %v, want retire+hold", got)
	}
	if h.Released() {
		t.Fatal("released at the last call: a new connection would most likely reach the old node")
	}
	if got := h.Tick(at(3900)); got != CloseRemaining {
		t.Fatalf("cap: %v", got)
	}
	if got := h.Tick(at(4000)); got != 0 {
		t.Fatalf("window end: %v, want none before the close grace", got)
	}
	if got, want := h.NextWake(), at(4500); !got.Equal(want) {
		t.Fatalf("next wake %v, want the window's end plus the close grace %v, not the hold budget", got, want)
	}
	if got := h.Tick(at(4500)); got != Release|Finish {
		t.Fatalf("window end plus the close grace: %v, want release+finish", got)
	}
	if !h.Released() {
		t.Fatal("not released once the window and its grace are over")
	}
}

func TestCloseGrace(t *testing.T) {
	for _, c := range []struct{ window, want time.Duration }{
		{0, 100 * time.Millisecond},
		{2 * time.Second, 250 * time.Millisecond},
		{15 * time.Second, time.Second},
	} {
		if got := CloseGrace(c.window); got != c.want {
			t.Errorf("CloseGrace(%v) = %v, want %v", c.window, got, c.want)
		}
	}
}

func TestFinishReleasesHeldWork(t *testing.T) {
	p := Params{Start: t0, Window: time.Second, HoldBudget: time.Second, Identifying: true}
	h, _ := New(p)
	h.Tick(at(800))
	if got := h.Finish(); got != Release|Finish {
		t.Fatalf("Finish while holding: %v", got)
	}
	if got := h.Finish(); got != 0 {
		t.Fatalf("second Finish: %v", got)
	}
}

func TestNextWake(t *testing.T) {
	p := Params{Start: t0, Window: 3 * time.Second, RelaxedTimeout: 10 * time.Second, HoldBudget: time.Second, Identifying: true}
	h, _ := New(p)
	if w := h.NextWake(); !w.Equal(at(2250)) {
		t.Fatalf("awaiting wakes at last call, got %v", w.Sub(t0))
	}
	h.Tick(at(2250))
	if w := h.NextWake(); !w.Equal(at(2750)) {
		t.Fatalf("holding wakes at the cap first, got %v", w.Sub(t0))
	}
	h.Tick(at(2750))
	if w := h.NextWake(); !w.Equal(at(4000)) {
		t.Fatalf("then at the budget's end, got %v", w.Sub(t0))
	}
	h.Tick(at(4000))
	if w := h.NextWake(); !w.IsZero() {
		t.Fatalf("done: %v", w)
	}
}

func TestDrainCap(t *testing.T) {
	s := time.Second
	cases := []struct{ relaxed, remaining, want time.Duration }{
		{10 * s, 15 * s, 5 * s},                  // half the relaxed timeout
		{10 * s, 3 * s, 1500 * time.Millisecond}, // half of what is left
		{10 * s, s, s},                           // floor
		{0, 15 * s, s},                           // relaxation off: floor
		{-1, 15 * s, s},
		{60 * s, 15 * s, 7500 * time.Millisecond},
	}
	for _, c := range cases {
		if got := DrainCap(c.relaxed, c.remaining); got != c.want {
			t.Errorf("DrainCap(%v, %v) = %v, want %v", c.relaxed, c.remaining, got, c.want)
		}
	}
}

func TestCapFor(t *testing.T) {
	s := time.Second
	cases := []struct{ relaxed, remaining, want time.Duration }{
		{10 * s, 15 * s, 5 * s},
		{10 * s, s, 750 * time.Millisecond}, // floor clamped before the window's end
		{10 * s, 750 * time.Millisecond, 500 * time.Millisecond},
		{10 * s, 400 * time.Millisecond, 200 * time.Millisecond}, // half of a short remainder kept
		{10 * s, 0, 0},
		{10 * s, -s, 0},
		{-1, 2 * s, s},
	}
	for _, c := range cases {
		if got := CapFor(c.relaxed, c.remaining); got != c.want {
			t.Errorf("CapFor(%v, %v) = %v, want %v", c.relaxed, c.remaining, got, c.want)
		}
	}
}

func TestLeadAndProbe(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct{ w, lead, probe time.Duration }{
		{500 * ms, 250 * ms, 100 * ms},
		{3 * time.Second, 750 * ms, 300 * ms},
		{15 * time.Second, 2 * time.Second, time.Second},
	} {
		if got := LastCallLead(c.w); got != c.lead {
			t.Errorf("LastCallLead(%v) = %v, want %v", c.w, got, c.lead)
		}
		if got := ProbeInterval(c.w); got != c.probe {
			t.Errorf("ProbeInterval(%v) = %v, want %v", c.w, got, c.probe)
		}
	}
}

func TestStrings(t *testing.T) {
	if (Retire|Finish).String() != "retire+finish" || Action(0).String() != "none" {
		t.Fatal("Action.String")
	}
	if Holding.String() != "holding" || Phase(99).String() != "phase(99)" {
		t.Fatal("Phase.String")
	}
}

// EndBound covers the longest hold and the late close alike.
func TestEndBoundCoversHoldAndDrain(t *testing.T) {
	for _, hb := range []time.Duration{0, time.Second, 10 * time.Second} {
		p := Params{Start: t0, Window: 15 * time.Second, HoldBudget: hb, Identifying: true}
		h, _ := New(p)
		if b := h.EndBound(); b.Before(h.DrainEnd()) || b.Before(h.holdEnd()) {
			t.Errorf("hold budget %v: end bound %v before the drain's end %v or the hold's %v", hb, b, h.DrainEnd(), h.holdEnd())
		}
	}
}
