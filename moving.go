package maint

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maintkit/maint/classify"
	"github.com/maintkit/maint/handoff"
	"github.com/maintkit/maint/internal/resp"
)

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
	// if the handoff never finishes: the window, its close grace and the
	// hold budget.
	relaxBound time.Time
	seq        int64

	kick     chan struct{} // a dial saw a replacement
	replaced atomic.Bool   // set with the kick: the driver calls Replacement
	stop     chan struct{} // closed when superseded
	changed  chan struct{} // closed and replaced at every phase change: wakes doomed dials (guarded by handoffs.mu)
	hold     atomic.Pointer[hold]
	// probed receives the answer of a DNS probe, which runs beside the
	// driver so that a slow or black-holed one never delays its timing.
	probed chan bool
	tally  tally // for the report (report.go)
}

// onNotification handles one stripped maintenance push. It runs on the
// goroutine reading the connection and must not block.
func (c *conn) onNotification(frame []byte) {
	m := c.m
	nt, err := resp.ParsePush(frame)
	if err != nil {
		m.c.malformed.Add(1)
		m.emit(Event{Kind: EventMalformed, Node: c.n.key, Detail: "ignoring malformed notification: " + err.Error()})
		return
	}
	if m.ctx.Err() != nil {
		return
	}
	m.c.notifications.Add(1)
	ev := Event{Kind: EventNotification, Node: c.n.key, Seq: nt.Seq, Name: nt.Kind.String(), Detail: describe(nt)}
	if cs := m.s.cluster; cs != nil && nt.Kind == resp.KindSMigrated {
		// The slot map to serve first, then the event: once an observer
		// learns that maint read the SMIGRATED, go-redis's reload is asked
		// and answered from maint's map (guarantee C2).
		cs.onSMigrated(m, c, nt)
		m.emit(ev)
		m.relaxEnd(c.n, nt)
		cs.relaxReplicas(m, nt, true)
		return
	}
	m.emit(ev)
	switch nt.Kind {
	case resp.KindMoving:
		m.onMoving(c, nt)
	case resp.KindMigrating, resp.KindFailingOver:
		m.relax(c.n, nt)
	case resp.KindSMigrating:
		m.relax(c.n, nt)
		if cs := m.s.cluster; cs != nil {
			cs.relaxReplicas(m, nt, false) // reads reach the replicas too
		}
	case resp.KindMigrated, resp.KindFailedOver:
		m.relaxEnd(c.n, nt)
		if nt.Kind == resp.KindFailedOver && m.s.failedOver != nil {
			m.s.failedOver(c, nt.Seq)
		}
	case resp.KindSMigrated: // outside a cluster (a cluster's is above)
		m.relaxEnd(c.n, nt)
	}
}

func describe(nt resp.Notification) string {
	s := nt.Kind.String()
	if nt.HasTime {
		s += fmt.Sprintf(" time=%d", nt.Time)
	}
	if nt.Kind == resp.KindMoving {
		if nt.Null {
			s += " endpoint=null"
		} else {
			s += " endpoint=" + nt.Endpoint
		}
	}
	return s
}

func (m *Maint) onMoving(c *conn, nt resp.Notification) {
	n, t := c.n, c.t
	if nt.Time < 0 {
		m.badInput(c, nt.Seq, fmt.Sprintf("MOVING with a negative window (%ds); ignored", nt.Time))
		return
	}
	window := time.Duration(nt.Time) * time.Second
	if window > m.s.maxWindow || nt.Time > int64(m.s.maxWindow/time.Second) {
		m.badInput(c, nt.Seq, fmt.Sprintf("MOVING window of %ds capped to %v", nt.Time, m.s.maxWindow))
		window = m.s.maxWindow
	}
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
	gen := m.ho.gen.Add(1)

	start := time.Now()
	ident := !m.s.fixed && classify.IdentifiesNodes(t.addr, successor != "")
	h, first := handoff.New(handoff.Params{
		Gen: gen, Seq: nt.Seq, Node: n.key, Successor: successor,
		Start: start, Window: window,
		RelaxedTimeout: m.s.relaxed, HoldBudget: m.s.holdBudget,
		Identifying: ident,
	})
	r := &run{m: m, n: n, t: t, h: h, gen: gen, seq: nt.Seq,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), changed: make(chan struct{}),
		probed:     make(chan bool, 1),
		relaxBound: h.Deadline().Add(handoff.CloseGrace(window) + m.s.holdBudget)}
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
	m.c.handoffs.Add(1)
	m.emit(Event{Kind: EventHandoff, Node: n.key, Seq: nt.Seq, Duration: window, Successor: successor,
		Detail: fmt.Sprintf("identifying=%v", ident)})
	r.apply(first)
	if !m.goBackground(r.loop) {
		r.apply(h.Finish())
	}
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
	if e.node == c.n.key && !c.sub.Load() {
		if m.retireConn(c, true) {
			m.emit(Event{Kind: EventRetire, Node: c.n.key, Seq: nt.Seq, Count: 1,
				Detail: "joined a node after its handoff ended"})
		}
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

// badInput counts, logs and reports a notification that is malformed or
// absurd.
func (m *Maint) badInput(c *conn, seq int64, what string) {
	m.c.malformed.Add(1)
	m.emit(Event{Kind: EventMalformed, Node: c.n.key, Seq: seq, Detail: what})
}

// pinAfterWindow bounds how long a successor pin outlives its window while
// the configured address still leads to the retired node. Once the window
// is over the retired node may refuse connections; until DNS names another
// node, the successor is where the data is.
const pinAfterWindow = time.Minute

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
	raw, remote, o := r.probeDial()
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

// probe dials the configured address the way the client's own dial path
// would (so a custom Dialer's resolution is honoured) and reports whether it
// landed on a replacement: somewhere other than every node being retired
// (not only this handoff's: in a chained move, DNS may still name the node
// the previous MOVING retired). No command is sent. A connection that landed
// on a replacement is kept as a spare for the pool's next dial (spare.go);
// any other is closed.
func (r *run) probe() bool {
	raw, remote, o := r.probeDial()
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

// probeDial dials the configured address below every Maint layer and returns
// the connection, where it landed and what an inner layer knew of it; a nil
// connection if the dial failed.
func (r *run) probeDial() (net.Conn, string, dialOpts) {
	nextp := r.t.next.Load()
	if nextp == nil {
		return nil, "", dialOpts{}
	}
	r.m.c.probes.Add(1)
	ctx, cancel := context.WithTimeout(r.m.ctx, time.Second)
	defer cancel()
	dc := &dialCtx{m: r.m}
	ctx = context.WithValue(ctx, dialKey{}, dc)
	raw, err := (*nextp)(ctx, "tcp", r.t.addr)
	if err != nil {
		return nil, "", dialOpts{}
	}
	remote := remoteString(raw)
	if remote == "" {
		_ = raw.Close()
		return nil, "", dialOpts{}
	}
	return raw, remote, dc.o
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
	r.m.retireConn(c, r.m.refuses(r.h.Phase() == handoff.Holding))
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
		r.tally.retired += n
		if !act.Has(handoff.Hold) {
			r.tally.replaced(time.Now()) // retired without a hold: a replacement can be had
		}
		_, capAt := r.h.Retired()
		m.emit(Event{Kind: EventRetire, Node: r.n.key, Seq: r.seq, Count: n,
			Detail: fmt.Sprintf("drain cap in %v", time.Until(capAt).Round(time.Millisecond))})
	}
	if act.Has(handoff.Hold) {
		h := &hold{node: r.n.key, released: make(chan struct{}), until: r.h.Deadline().Add(m.s.holdBudget)}
		r.hold.Store(h)
		m.addHold(h)
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
				if c.state.Load() == stateFenced {
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
