package maint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maintkit/maint/classify"
	"github.com/maintkit/maint/handoff"
	"github.com/maintkit/maint/internal/resp"
)

// The life of a MOVING, from the push to the last close, top to bottom.
//
// A node announces MOVING <seq> <time> <endpoint>: within <time> seconds it
// stops serving, and the endpoint named (or, for a null endpoint, whatever
// the configured address leads to next) takes over. Every connection of the
// node reads its own copy, some of them late. This file is what maint does
// with it, in order:
//
//  1. A MOVING arrives (onMoving, on the goroutine reading the connection):
//     the first copy starts a handoff (a run) for the node; a copy joins its
//     connection to it (movingCopy); an older MOVING loses to a later one. A
//     named successor pins the target (new dials go there), and the
//     target's connections are relaxed (relax.go) until the handoff ends.
//  2. The driver (run.loop, one goroutine per handoff) steps the pure state
//     machine of package handoff and carries out its actions in the order
//     it returns them (run.apply): Retire the node's connections, Hold new
//     commands when no replacement can be had by the last call, Release
//     them when one is seen, CloseRemaining at the drain cap, Finish.
//  3. Commands wait on the holds meanwhile (waitHolds, from the process
//     hooks), bounded by their context and the hold budget.
//  4. Retiring changes the connections' states through the wire layer's
//     methods (conn.retire, conn.closeIfClosable, conn.floorAnew in
//     dialer.go and deadline.go): a retired connection is refused to the
//     pool, a fenced one serves the commands already past the hold; at the
//     cap only connections that owe nothing are closed, so no command is
//     cut or run twice.
//  5. Every new connection is judged against every handoff (judge, from the
//     dial path): one that landed on a retiring node is doomed (its dial
//     waits for a change, waitChange, and tries again), one that landed
//     elsewhere is a replacement (sawReplacement), and DNS probes look for
//     one when the MOVING named none (probe).
//  6. After the window, settle keeps the successor pin while the configured
//     address still leads to the retired node; then the handoff ends
//     (endRun), its report is emitted (report.go), and the node is forgotten
//     with its last connection (registry.go).

// handoffs are a Maint's MOVINGs: the handoffs in progress, the holds they
// put in force, and the MOVINGs acted on.
type handoffs struct {
	gen atomic.Uint64 // generations of MOVINGs: a later one supersedes
	// holds is non-nil while commands must wait for a replacement: one hold
	// per node whose window is ending with no replacement to be had. It is
	// replaced, never changed in place (copy on write, under mu). The process
	// hooks load it once per command: the whole cost of the hook when no
	// maintenance is going on.
	holds atomic.Pointer[[]*hold]
	// runs are the handoffs in progress, one per retiring node, copied on
	// write under mu: every new connection is judged against all of them.
	runs atomic.Pointer[[]*run]

	// mu serialises the writers of holds and runs, and guards seen and
	// every run's changed. Lock order: handoffs.mu, then node.mu.
	mu sync.Mutex
	// seen remembers the MOVINGs acted on, by sequence id (ids are per
	// database), so that a copy or a late copy changes nothing. Bounded
	// (see seen.go).
	seen seenMovings
}

// holding reports whether some hold is in force: one atomic load, the
// whole cost of the process hooks while no maintenance is going on.
func (ho *handoffs) holding() bool { return ho.holds.Load() != nil }

// running returns the handoffs in progress (nil for none), without a copy.
func (ho *handoffs) running() []*run {
	if rs := ho.runs.Load(); rs != nil {
		return *rs
	}
	return nil
}

// releaseAll ends every hold (Close): held commands go on.
func (ho *handoffs) releaseAll() {
	if hs := ho.holds.Swap(nil); hs != nil {
		for _, h := range *hs {
			h.release()
		}
	}
}

// run drives one handoff: it owns the goroutine that carries out the
// handoff's actions on time, probes DNS during a null-endpoint window, and
// answers the dial path's questions about new connections.
type run struct {
	m   *Maint
	n   *node   // the retiring node
	t   *target // whose dials the handoff judges
	h   *handoff.Handoff
	gen uint64
	// relaxBound bounds the target's relaxation for this MOVING (relaxMoving)
	// if the handoff never finishes (handoff.EndBound).
	relaxBound time.Time
	seq        int64

	kick     chan struct{} // a dial saw a replacement
	replaced atomic.Bool   // set with the kick: the driver calls Replacement
	stop     chan struct{} // closed when superseded
	changed  chan struct{} // closed and replaced at every phase change: wakes doomed dials (guarded by handoffs.mu)
	hold     atomic.Pointer[hold]
	// pending is the hold a handoff that awaits its last call puts in
	// force, set before the driver starts and read by it alone: in force
	// from the last call by the clock (hold.from), whether or not the
	// driver has woken by then, so that a driver the scheduler runs late
	// never lets commands reach the node after its last call.
	pending *hold
	// probed receives the answer of a DNS probe, which runs beside the
	// driver so that a slow or black-holed one never delays its timing.
	probed chan bool
	tally  tally // for the report (report.go)
}

// pin routes new connections of a target to a successor until a deadline. A
// pin belongs to the generation of the MOVING that set it: a late decision of
// an older handoff never clears a newer pin.
type pin struct {
	addr   string
	until  time.Time // the window's end plus the time the pin may outlive it
	window time.Time // the window's end
	gen    uint64
	// landed is where the last dial through the pin landed: the
	// successor's address as the client's dial path resolves it, which a
	// probe of the configured address is compared with (settle).
	landed atomic.Pointer[string]
	// dialedAfter: a dial went through the pin after the window since the
	// last probe (settle): only then is the pin worth probing.
	dialedAfter atomic.Bool
	// fromLocal: the node that named it is reached at a local address, so
	// a local successor is allowed (see successor.go).
	fromLocal bool
}

// pinAfterWindow bounds how long a successor pin outlives its window while
// the configured address still leads to the retired node. Once the window
// is over the retired node may refuse connections; until DNS names another
// node, the successor is where the data is.
const pinAfterWindow = time.Minute

// route returns where a new connection for t goes now, and the pin that
// sent it there, if any.
func (t *target) route(now time.Time) (addr string, p *pin) {
	if p := t.pin.Load(); p != nil {
		if now.Before(p.until) {
			return p.addr, p
		}
		t.pin.CompareAndSwap(p, nil)
	}
	return t.addr, nil
}

// unpin drops the pin if the generation gen still owns it.
func (t *target) unpin(gen uint64) {
	if p := t.pin.Load(); p != nil && p.gen == gen {
		t.pin.CompareAndSwap(p, nil)
	}
}

// 1. A MOVING arrives.

// onMoving acts on a MOVING read on connection c: the first copy starts a
// handoff for c's node, a later copy or an older MOVING joins or is
// ignored. It runs on the goroutine reading c and does not block: the
// handoff's timed actions run on its driver (run.loop).
func (m *Maint) onMoving(c *conn, nt resp.Notification) {
	n, t := c.n, c.t
	if nt.Time < 0 {
		m.badInput(c, nt.Seq, fmt.Sprintf("MOVING with a negative window (%ds); ignored", nt.Time))
		return
	}
	window := time.Duration(nt.Time) * time.Second
	var before time.Duration // the window is counted from this long before now
	if window > 0 && c.replayed() {
		// Right behind the opt-in's reply: the server's replay of an open
		// window, whose time left is whole seconds on the wire, rounded,
		// reckoned when the server read the opt-in. The window may end up
		// to a second sooner than that, and that was no sooner than the
		// opt-in was written: it is taken to end a second before the time
		// says, counted from the opt-in's write, not from this read, which
		// a client descheduled meanwhile makes late.
		before = c.sinceOptIn()
		window = max(window-time.Second-before, 0)
	} else if window > 0 {
		// The server counts the window from when it sent the MOVING; a
		// client idle meanwhile reads it only now, as late as it was idle.
		// It is counted from when it arrived (at most, when the socket last
		// received data), so that the last call still comes before the
		// server's close.
		before = c.arrivedAgo()
		window = max(window-before, 0)
	}
	if window > m.s.maxWindow || nt.Time > int64(m.s.maxWindow/time.Second) {
		m.badInput(c, nt.Seq, fmt.Sprintf("MOVING window of %ds capped to %v", nt.Time, m.s.maxWindow))
		window = m.s.maxWindow
	}
	c.told.Store(true) // refusesFirstUse
	successor := m.successor(c, nt)

	now := monoNow()
	m.ho.mu.Lock()
	if e, ok := m.ho.seen.lookup(nt.Seq, t.addr, n.key); ok {
		m.ho.mu.Unlock()
		m.movingCopy(c, nt, e)
		return
	}
	n.mu.Lock()
	cur := n.run.Load()
	if cur != nil && nt.Seq < cur.seq {
		// A MOVING older than the one this node is handing off: a later
		// MOVING wins. The connection belongs with the others of its node.
		n.mu.Unlock()
		m.ho.mu.Unlock()
		m.c.replayed.Add(1)
		m.emit(Event{Kind: EventReplayed, Node: n.key, Seq: nt.Seq, Name: nt.Kind.String(), Detail: "older than the MOVING in progress"})
		cur.adopt(c)
		return
	}
	m.ho.seen.add(nt.Seq, n.key, t.addr, window, now)
	why := ""
	if before >= time.Millisecond {
		why = fmt.Sprintf("counted from %v before it was read", before.Round(time.Millisecond))
	}
	m.startRunLocked(n, t, nt.Seq, successor, window, why, true)
}

// startRunLocked starts the handoff of node n (dialled as target t) for the
// MOVING seq, superseding the one in progress, if any: its driver, its
// relaxation, its first actions. The handoffs' and n's locks are held, and
// released here. why, if set, is said in its event: why a handoff
// replaces one of the same MOVING (successorRefused), or how long before
// its read the window is counted from; counted is false for a handoff that
// replaces one of the same MOVING (one handoff is counted per MOVING).
func (m *Maint) startRunLocked(n *node, t *target, seq int64, successor string, window time.Duration, why string, counted bool) {
	gen := m.ho.gen.Add(1)
	start := time.Now()
	ident := !m.s.fixed && classify.IdentifiesNodes(t.addr, successor != "")
	h, first := handoff.New(handoff.Params{
		Gen: gen, Seq: seq, Node: n.key, Successor: successor,
		Start: start, Window: window,
		RelaxedTimeout: m.s.relaxed, HoldBudget: m.s.holdBudget,
		Identifying: ident,
	})
	r := &run{m: m, n: n, t: t, h: h, gen: gen, seq: seq,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), changed: make(chan struct{}),
		probed:     make(chan bool, 1),
		relaxBound: h.EndBound()}
	prev := n.run.Swap(r)
	swapIn(&m.ho.runs, prev, r)
	// A pin to this node (an earlier MOVING named it) is kept: the node
	// still serves until its own last call, and the configured address may
	// lead nowhere meanwhile (DNS naming a node that has moved away). A dial
	// through it that lands here once the node is retired drops it (dialVia).
	if successor != "" {
		t.pin.Store(&pin{addr: successor, until: h.Deadline().Add(pinAfterWindow), window: h.Deadline(), gen: gen,
			fromLocal: isLocalAddr(n.key)})
	}
	n.mu.Unlock()
	m.ho.mu.Unlock()

	if prev != nil {
		prev.supersede()
	}
	m.relaxMoving(t, r.relaxBound)
	// A command already waiting for its reply on the moving node is
	// relaxed too (T4, as T1 relaxes one at a MIGRATING).
	n.refloorAll()
	detail := fmt.Sprintf("identifying=%v", ident)
	if why != "" {
		detail += "; " + why
	}
	if counted {
		m.c.handoffs.Add(1) // one per MOVING
	}
	m.emit(Event{Kind: EventHandoff, Node: n.key, Seq: seq, Duration: window, Successor: successor, Detail: detail})
	r.apply(first)
	if h.Phase() == handoff.Awaiting && m.hooked.Load() {
		r.pending = r.newHold(h.LastCall())
		m.addHold(r.pending)
	}
	if !m.goBackground(r.loop) {
		r.apply(h.Finish())
	}
}

// successorRefused goes on with the handoff that pinned via as a handoff
// with a null endpoint, for what is left of its window, once a dial
// through the pin refused the successor (its certificate is not for the
// name the client verifies; a name that landed where it must not): the old
// node serves until its last call, as for a MOVING that named no
// successor, rather than every dial meeting a retired node until the
// window's end. The caller is the dial that dropped the pin, so it runs
// once per pin.
func (m *Maint) successorRefused(t *target, via *pin, detail string) {
	var r *run
	if runs := m.ho.runs.Load(); runs != nil {
		for _, x := range *runs {
			if x.gen == via.gen && x.t == t {
				r = x
			}
		}
	}
	if r == nil {
		m.refuseSuccessor(t.addr, 0, via.addr, detail)
		return // the handoff is over
	}
	m.refuseSuccessor(r.n.key, r.seq, via.addr, detail)
	n := r.n
	m.ho.mu.Lock()
	n.mu.Lock()
	if n.run.Load() != r || r.superseded() || r.h.Phase() == handoff.Done {
		n.mu.Unlock()
		m.ho.mu.Unlock()
		return
	}
	m.startRunLocked(n, t, r.seq, "", max(0, time.Until(r.h.Deadline())), "successor "+via.addr+" refused: a null endpoint from now on", false)
}

// movingCopy handles a copy of a MOVING already acted on (same sequence id),
// read on connection c. It joins c to that handoff if it is still running
// on c's node; if that handoff is over, c reached a node that is moving,
// after its connections were retired, and is retired at once. A copy
// delivered by another node changes nothing.
func (m *Maint) movingCopy(c *conn, nt resp.Notification, e seenMoving) {
	m.c.replayed.Add(1)
	m.emit(Event{Kind: EventReplayed, Node: c.n.key, Seq: nt.Seq, Name: nt.Kind.String()})
	if r := c.n.run.Load(); r != nil && r.seq == nt.Seq {
		r.adopt(c)
		return
	}
	if e.node == c.n.key && !c.subscriber() {
		if m.retireConn(c, true) {
			m.emit(Event{Kind: EventRetire, Node: c.n.key, Seq: nt.Seq, Count: 1,
				Detail: "joined a node after its handoff ended"})
		}
	}
}

// 2. The driver: the handoff's actions, on time and in order.

// loop carries out the handoff's timed actions until it is done.
func (r *run) loop() {
	p := r.h.Params()
	probing := p.Successor == "" && p.Identifying
	every := handoff.ProbeInterval(p.Window)
	awaited := 0 // probes made while awaiting
	nextProbe := r.awaitProbeAt(awaited)
	holding := false
	probeInFlight := false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wake := r.h.NextWake()
		ph := r.h.Phase()
		if ph == handoff.Done {
			return
		}
		if probing && !probeInFlight && !nextProbe.IsZero() && (ph == handoff.Awaiting || ph == handoff.Holding) && (wake.IsZero() || nextProbe.Before(wake)) {
			wake = nextProbe
		}
		d := time.Until(wake)
		if d < 0 {
			d = 0
		}
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-r.kick:
			stopTimer(timer)
		case ok := <-r.probed:
			probeInFlight = false
			if ok {
				r.replaced.Store(true)
			}
			stopTimer(timer)
		case <-r.stop:
			r.apply(r.h.Finish())
			return
		case <-r.m.ctx.Done():
			r.apply(r.h.Finish())
			return
		}
		now := time.Now()
		act := r.advance(now)
		if act.Has(handoff.Finish) && p.Successor != "" {
			r.apply(act)
			r.settle(every)
			return
		}
		ph = r.h.Phase()
		if ph == handoff.Holding && !holding {
			// Commands wait from now on: probe at once, then every interval.
			holding, nextProbe = true, now
		}
		if probing && !probeInFlight && (ph == handoff.Awaiting || ph == handoff.Holding) && !nextProbe.IsZero() && !now.Before(nextProbe) {
			if ph == handoff.Awaiting {
				awaited++
				nextProbe = r.awaitProbeAt(awaited)
			} else {
				nextProbe = now.Add(every)
			}
			probeInFlight = r.m.goBackground(func() { r.probed <- r.probe() })
		}
		r.apply(act)
	}
}

// advance steps the handoff to now, with the news a dial brought, if any.
// Only the driver steps the handoff, so actions are applied in the order the
// handoff returns them.
func (r *run) advance(now time.Time) handoff.Action {
	act := r.h.Tick(now)
	if r.replaced.Load() {
		act |= r.h.Replacement(now)
	}
	return act
}

// apply carries out actions in order.
func (r *run) apply(act handoff.Action) {
	if act == 0 {
		return
	}
	m := r.m
	if act.Has(handoff.Retire) {
		// Without a replacement (the hold) the old connections are fenced:
		// still usable by the commands already past the hold, until the cap.
		// Without the process hooks nothing holds commands before they take a
		// connection, so the old connections are refused at once and commands
		// wait in the dial path instead.
		n := m.retire(r.n, m.refuses(act.Has(handoff.Hold)))
		r.tally.retired.Add(int64(n))
		unpinned := r.dropPinHere()
		if !act.Has(handoff.Hold) {
			r.tally.replaced(time.Now()) // retired without a hold: a replacement can be had
			r.dropPending()
		}
		_, capAt := r.h.Retired()
		detail := fmt.Sprintf("drain cap in %v", time.Until(capAt).Round(time.Millisecond))
		if unpinned {
			detail += "; the successor pin to it dropped"
		}
		m.emit(Event{Kind: EventRetire, Node: r.n.key, Seq: r.seq, Count: n, Detail: detail})
	}
	if act.Has(handoff.Hold) {
		h := r.pending // in force since the last call already
		if h == nil {
			h = r.newHold(time.Time{})
			m.addHold(h)
		}
		r.pending = nil
		r.hold.Store(h)
		m.emit(Event{Kind: EventHold, Node: r.n.key, Seq: r.seq})
	}
	if h := r.hold.Load(); act.Has(handoff.Release) && h != nil {
		if !act.Has(handoff.Finish) {
			m.retire(r.n, true) // a replacement can be had: refuse what is left
			r.tally.replaced(time.Now())
		}
		m.releaseHold(h)
		m.emit(Event{Kind: EventRelease, Node: r.n.key, Seq: r.seq})
	}
	if act.Has(handoff.CloseRemaining) {
		closed, owed, blocking := m.closeRetired(r.n, false)
		r.tally.closedAtCap += closed
		r.tally.blockingAtCap += blocking
		m.emit(Event{Kind: EventDrainCap, Node: r.n.key, Seq: r.seq, Count: closed,
			Detail: fmt.Sprintf("idle closed; left open, a reply owed %d (a blocking command %d)", owed, blocking)})
	}
	if act.Has(handoff.Finish) {
		if retired, _ := r.h.Retired(); retired && !r.superseded() {
			// A hold that ran out of budget leaves the old connections
			// fenced: the handoff is over, they are refused from now on (a
			// fenced connection would be handed out, with its deadlines
			// floored, for the rest of its life).
			for _, c := range r.n.snapshot() {
				if c.fenced() {
					m.retireConn(c, true)
				}
			}
			// Connections left open at the cap for a reply that has come
			// since: idle now, closed before the server closes them.
			m.closeRetired(r.n, true)
		}
		if h := r.hold.Load(); h != nil {
			m.releaseHold(h)
		}
		r.dropPending()
		if r.h.Params().Successor == "" || !r.windowOver() {
			r.t.unpin(r.gen) // superseded, or closing: nothing to keep
		}
		m.endRun(r)
		m.endMovingRelax(r.t, r.relaxBound)
		m.emit(Event{Kind: EventHandoffDone, Node: r.n.key, Seq: r.seq})
		r.emitReport()
	}
	// Wake dials waiting out a doomed landing: the phase may have changed.
	m.ho.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	m.ho.mu.Unlock()
}

// newHold is a hold of the run's node in force from from (zero: at once)
// until the window's end plus the hold budget.
func (r *run) newHold(from time.Time) *hold {
	return &hold{node: r.n.key, released: make(chan struct{}), from: from,
		until: r.h.Deadline().Add(r.m.s.holdBudget)}
}

// dropPending ends the hold that was to come in force at the last call,
// when the handoff ends or retires without one (a replacement was seen, or
// it was superseded). Commands that waited on it meanwhile (the clock passed
// the last call before the driver woke) go on, and are counted in the
// report as held.
func (r *run) dropPending() {
	h := r.pending
	if h == nil {
		return
	}
	r.pending = nil
	r.m.releaseHold(h)
	if h.tally.held.Load() > 0 && r.hold.Load() == nil {
		r.hold.Store(h)
	}
}

// 3. Holds: what commands do while no connection can serve them.

// hold is one node's period during which commands wait.
type hold struct {
	node     string
	released chan struct{}
	once     sync.Once
	from     time.Time // when it comes in force; zero: at once
	until    time.Time // the hold budget's end, a bound for waiters
	tally    holdTally // the commands that waited on it (report.go)
}

// inForce reports whether h makes a command wait at now: not released,
// its last call come (from), its budget not spent (until).
func (h *hold) inForce(now time.Time) bool {
	select {
	case <-h.released:
		return false
	default:
	}
	return !now.Before(h.from) && now.Before(h.until)
}

// release ends the hold for its waiters, once.
func (h *hold) release() { h.once.Do(func() { close(h.released) }) }

// addHold puts h in force.
func (m *Maint) addHold(h *hold) {
	m.ho.mu.Lock()
	defer m.ho.mu.Unlock()
	swapIn(&m.ho.holds, nil, h)
}

// releaseHold ends h, and h only: another node's hold stays in force.
func (m *Maint) releaseHold(h *hold) {
	m.ho.mu.Lock()
	swapIn(&m.ho.holds, h, nil)
	m.ho.mu.Unlock()
	h.release()
}

// waitHolds makes a command wait until no hold is in force, each hold
// bounded by its own budget, all by ctx.
func (m *Maint) waitHolds(ctx context.Context) error {
	counted := false
	for {
		hs := m.ho.holds.Load()
		if hs == nil {
			return nil
		}
		var h *hold
		now := time.Now()
		for _, x := range *hs {
			if x.inForce(now) {
				h = x
				break
			}
		}
		if h == nil {
			return nil // every hold's budget is spent: let the command try
		}
		if !counted {
			counted = true
			m.c.held.Add(1)
		}
		if err := m.waitHold(ctx, h); err != nil {
			return err
		}
		if m.ctx.Err() != nil {
			return nil
		}
	}
}

// waitHold waits for one hold, bounded by its budget and ctx.
func (m *Maint) waitHold(ctx context.Context, h *hold) error {
	d := time.Until(h.until)
	if d <= 0 {
		return nil
	}
	start := time.Now()
	h.tally.start()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.released:
		m.heldDone(h, start, "released")
		return nil
	case <-t.C:
		m.heldDone(h, start, "budget")
		return nil // the budget is spent: let the command try
	case <-m.ctx.Done():
		m.heldDone(h, start, "closed")
		return nil // closed: step aside
	case <-ctx.Done():
		m.c.heldTimeouts.Add(1)
		m.heldDone(h, start, "timeout")
		return fmt.Errorf("%w on %s: %w", ErrHeld, h.node, ctx.Err())
	}
}

// heldDone counts a command that stopped waiting on h, for the handoff's
// report: atomics only, nothing per command beyond.
func (m *Maint) heldDone(h *hold, start time.Time, why string) {
	h.tally.note(time.Since(start), why == "timeout")
}

// 4. Retiring the node's connections, and closing them at the cap.

// refuses reports whether retiring a node now refuses its connections to the
// pool at once rather than fencing them: fencing is only for a hold, and
// only when the process hooks can hold commands before they take one.
func (m *Maint) refuses(holding bool) bool { return !holding || !m.hooked.Load() }

// retire takes every connection now open to n out of circulation (refuse)
// or fences it (see the connection states). A retired subscriber is closed at
// once: it has nothing in flight, and go-redis reconnects and resubscribes it
// on the replacement. The others drain: the pool's health check refuses them,
// and commands already written finish.
func (m *Maint) retire(n *node, refuse bool) int {
	count := 0
	for _, c := range n.snapshot() {
		if m.retireConn(c, refuse) {
			count++
		}
	}
	return count
}

// retireConn retires (refuse) or fences one connection and reports whether
// its state changed. Its deadlines are floored anew (the node's epoch first,
// so that a deadline setter racing with it redoes its work), and a retired
// subscriber is closed at once.
func (m *Maint) retireConn(c *conn, refuse bool) bool {
	if !c.retire(refuse) {
		return false
	}
	c.floorAnew()
	if refuse {
		m.c.retired.Add(1)
		if c.subscriber() {
			c.closeWith(ErrRetired)
		}
	}
	return true
}

// closeRetired closes the draining connections still open to n that may be
// closed without cutting a command (see conn.closable): the idle ones and the
// subscribers. That is what the drain cap is for in a pool: the old node's
// idle sockets are let go before the server closes them, while a command in
// flight, blocking or not, is never cut by maint (in a multiplexer, where one
// blocked command holds everyone's work, the cap would have had to cut it; in
// a pool it holds nobody's). A connection that owes a reply is left open: its
// reply comes (the pool then refuses it) or the server closes it. It returns
// how many it closed, how many it left because a reply was owed, and how many
// of those wait on a blocking command.
func (m *Maint) closeRetired(n *node, final bool) (closed, owed, blocking int) {
	for _, c := range n.snapshot() {
		cl, o, b := c.closeIfClosable(ErrDrainCap, !final)
		switch {
		case o:
			owed++
			if b {
				blocking++
			}
		case cl:
			closed++
		}
	}
	if final {
		return closed, owed, blocking // the connections left at the cap, idle since
	}
	m.c.closedAtCap.Add(uint64(closed))
	m.c.busyAtCap.Add(uint64(blocking))
	m.c.owedAtCap.Add(uint64(owed))
	return closed, owed, blocking
}

// 5. New connections meanwhile: judged, and looked for by probes.

// judge passes judgement on a new connection of target t that reached
// remote, against every handoff in progress: it returns the handoff whose
// retiring node it landed on (doomed), or else the handoffs of t for which
// it is a replacement.
func (m *Maint) judge(t *target, remote string) (doomedBy *run, replaced []*run) {
	for _, r := range m.ho.running() {
		switch r.judge(remote) {
		case classify.Doomed:
			return r, nil
		case classify.Replacement:
			if r.t == t {
				replaced = append(replaced, r)
			}
		}
	}
	return nil, replaced
}

// refusedByRetired returns the handoff in progress whose retired node
// refused a dial of target t (err names the address it dialled), or nil.
func (m *Maint) refusedByRetired(t *target, err error) *run {
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "dial" || oe.Addr == nil {
		return nil
	}
	r, _ := m.judge(t, oe.Addr.String())
	return r
}

// judge classifies a new connection of the handoff's target.
func (r *run) judge(remote string) classify.Verdict {
	p := r.h.Params()
	v := classify.Judge(classify.Input{Remote: remote, Retiring: r.n.key, Identifying: p.Identifying, Released: r.h.Released()})
	if v == classify.Doomed {
		if retired, _ := r.h.Retired(); !retired {
			// Before the node is retired, it still serves: the connection joins
			// the others and will be retired with them.
			return classify.Unknown
		}
		if r.h.Phase() == handoff.Done {
			return classify.Unknown
		}
	}
	return v
}

// sawReplacement tells the driver that a dial landed on another node. The
// driver alone steps the handoff and carries out its actions, so they are
// carried out in the order the handoff returned them.
func (r *run) sawReplacement(remote string) {
	if ph := r.h.Phase(); ph == handoff.Awaiting || ph == handoff.Holding {
		if r.replaced.CompareAndSwap(false, true) {
			r.tally.replaced(time.Now())
			r.m.emit(Event{Kind: EventReplacement, Node: r.n.key, Seq: r.seq, Successor: remote, Detail: "dial landed on " + remote})
		}
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// adopt retires or fences a connection that joined the node after the
// handoff retired it (its dial was judged before the handoff began, or it
// read a copy of the MOVING only now), as the others were.
func (r *run) adopt(c *conn) {
	if !r.h.Params().Identifying && r.h.Released() {
		return // behind a fixed address, what connects after the release is the replacement
	}
	retired, _ := r.h.Retired()
	if !retired || r.h.Phase() == handoff.Done {
		return
	}
	if r.m.retireConn(c, r.m.refuses(r.h.Phase() == handoff.Holding)) {
		// Counted as the retirement's own are: a connection that read its
		// copy while the retirement walked the node may be this one's.
		r.tally.retired.Add(1)
		r.m.emit(Event{Kind: EventRetire, Node: r.n.key, Seq: r.seq, Count: 1,
			Detail: "joined the node after its retirement"})
	}
}

// waitChange is where a dial that landed on the retiring node waits before
// trying again: until the handoff changes phase or a probe interval passes,
// bounded by ctx.
func (r *run) waitChange(ctx context.Context) error {
	r.m.ho.mu.Lock()
	ch := r.changed
	r.m.ho.mu.Unlock()
	t := time.NewTimer(handoff.ProbeInterval(r.h.Params().Window))
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return nil
	case <-r.m.ctx.Done():
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("maint: waiting for a replacement of %s: %w", r.n.key, ctx.Err())
	}
}

// awaitProbes are when a null-endpoint handoff probes the configured address
// while the old node still serves, as fractions of the time from the MOVING
// to the last call: four probes, so that each such MOVING costs at most four
// probe connections to the retiring node before the last call, whatever the
// window's length, and a DNS move is seen within a quarter of that time (the
// old node serves meanwhile; the application's own dials see it too). Once
// commands are held, at the last call, a probe runs every probe interval
// until a replacement is seen.
var awaitProbes = [...]float64{1. / 4, 1. / 2, 3. / 4, 7. / 8}

// awaitProbeAt is when the k-th probe while awaiting is due (from 0); the
// zero time once they have all been made.
func (r *run) awaitProbeAt(k int) time.Time {
	if k >= len(awaitProbes) {
		return time.Time{}
	}
	start := r.h.Params().Start
	return start.Add(time.Duration(awaitProbes[k] * float64(r.h.LastCall().Sub(start))))
}

// probe dials the configured address the way the client's own dial path
// would (so a custom Dialer's resolution is honoured) and reports whether it
// landed on a replacement: somewhere other than every node being retired
// (not only this handoff's: in a chained move, DNS may still name the node
// the previous MOVING retired). No command is sent. A connection that landed
// on a replacement is kept as a spare for the pool's next dial (spare.go);
// any other is closed.
func (r *run) probe() bool {
	raw, remote, o := r.m.probeDial(r.t)
	if raw == nil {
		return false
	}
	doomedBy, replaced := r.m.judge(r.t, remote)
	if doomedBy == nil {
		for _, x := range replaced {
			if x == r {
				r.m.offerSpare(r.t, raw, remote, o)
				r.tally.replaced(time.Now())
				r.m.emit(Event{Kind: EventReplacement, Node: r.n.key, Seq: r.seq, Successor: remote, Detail: "DNS now names " + remote})
				return true
			}
		}
	}
	_ = raw.Close()
	return false
}

// 6. After the window, and the end.

// windowOver reports whether the handoff's window has ended.
func (r *run) windowOver() bool { return !time.Now().Before(r.h.Deadline()) }

// settle keeps a successor pin after the window while the configured
// address still leads to the retired node: while the pool still dials
// through the pin, it probes the address through the client's dial path and
// drops the pin as soon as a probe lands on the successor (compared by the
// address a dial through the pin reached, so a successor named by host name
// is recognised), when a later MOVING takes
// over, or at the pin's own bound. The probes back off (one interval, then
// twice as long each time): at most settleProbes for the pin's minute, one
// when DNS has moved by the window's end. A probe that lands on the
// successor is kept as a spare for the next dial (spare.go).
func (r *run) settle(every time.Duration) {
	p := r.t.pin.Load()
	if p == nil || p.gen != r.gen {
		return
	}
	wait, probes := every, 0
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-r.stop:
			return
		case <-r.m.ctx.Done():
			return
		}
		if cur := r.t.pin.Load(); cur == nil || cur.gen != r.gen {
			return // a later MOVING took over, or the pin expired
		}
		over := !time.Now().Before(p.until)
		if !over && probes < settleProbes && p.dialedAfter.Swap(false) {
			// Only a pin the pool still dials through is worth a probe: one
			// no dial uses after the window costs nothing until its bound,
			// and a probe would be a connection beyond one per connection in
			// use (node-redis's criterion).
			probes++
			over = r.probeSuccessor(p)
		}
		if over {
			// The configured address leads to the successor itself now: DNS
			// has caught up (landing merely somewhere other than the retired
			// node could be an older retired node), or the pin's bound.
			r.t.unpin(r.gen)
			r.m.emit(Event{Kind: EventHandoffDone, Node: r.n.key, Seq: r.seq, Detail: "successor pin dropped"})
			return
		}
		wait *= 2
		if left := time.Until(p.until); probes >= settleProbes || wait > left {
			wait = max(left, 0)
		}
		timer.Reset(wait)
	}
}

// settleProbes bounds the probes settle makes for one pin: at 1, 3, 7, 15
// and 31 probe intervals after the window; then the pin ends at its bound.
const settleProbes = 5

// probeSuccessor probes the configured address and reports whether it led
// to the successor of pin p; that connection is kept as a spare.
func (r *run) probeSuccessor(p *pin) bool {
	raw, remote, o := r.m.probeDial(r.t)
	if raw == nil {
		return false
	}
	if !sameSuccessor(p, remote) {
		_ = raw.Close()
		return false
	}
	r.m.offerSpare(r.t, raw, remote, o)
	return true
}

// sameSuccessor reports whether remote is the successor of pin p: its
// address as named, or as a dial through the pin reached it.
func sameSuccessor(p *pin, remote string) bool {
	if classify.SameAddr(remote, p.addr) {
		return true
	}
	l := p.landed.Load()
	return l != nil && classify.SameAddr(remote, *l)
}

// dropPinHere drops an earlier handoff's successor pin that leads to this
// handoff's node, now that it is retired: kept, it would route every new
// connection to a node the server is about to close (and once the handoff
// ends, at its late close, no judge calls such a landing doomed). Until the
// retirement the pin is kept (see startRunLocked). The configured address
// takes over, as it does when a landing through the pin is doomed
// (dialVia). It reports whether it dropped one.
func (r *run) dropPinHere() bool {
	p := r.t.pin.Load()
	if p == nil || p.gen == r.gen || !sameSuccessor(p, r.n.key) {
		return false
	}
	return r.t.pin.CompareAndSwap(p, nil)
}

// superseded reports whether a later MOVING replaced this handoff.
func (r *run) superseded() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// supersede ends a handoff that a later MOVING replaced.
func (r *run) supersede() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
}

// endRun removes r from the handoffs in progress, if it is still there.
func (m *Maint) endRun(r *run) {
	m.ho.mu.Lock()
	swapIn(&m.ho.runs, r, nil)
	r.n.run.CompareAndSwap(r, nil)
	m.ho.mu.Unlock()
	m.reg.forgetIdle(r.n)
}

// stopTimer stops t and drains a tick it already sent, so that it can be
// Reset.
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}
