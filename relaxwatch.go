package maint

import "time"

// relaxWatch is what a node last reported of its relaxation
// (EventRelaxOn, EventRelaxOff), and the timer that reports its end:
// relaxation ends with the passage of time, which nothing else watches.
// Guarded by the node's mu.
type relaxWatch struct {
	on    bool
	timer *time.Timer
}

// syncRelaxLocked compares n's relaxation at now with what was last
// reported, returns the event to emit (0 for none), and arms the timer for
// the relaxation's end. n.mu is held.
func (m *Maint) syncRelaxLocked(n *node, now mono) EventKind {
	until := n.relaxUntil.Load()
	on := until != 0 && now < until && !m.stopped.Load()
	var k EventKind
	if on != n.rw.on {
		n.rw.on = on
		k = EventRelaxOff
		if on {
			k = EventRelaxOn
		}
	}
	switch {
	case on && n.rw.timer == nil:
		n.rw.timer = time.AfterFunc(time.Duration(until-now), func() { m.checkRelaxOwned(n) })
	case on:
		n.rw.timer.Reset(time.Duration(until - now))
	case n.rw.timer != nil:
		n.rw.timer.Stop()
	}
	return k
}

// checkRelax reports the end of n's relaxation, if it has ended.
func (m *Maint) checkRelax(n *node) {
	now := monoNow()
	n.mu.Lock()
	n.updateRelaxLocked(now)
	k := m.syncRelaxLocked(n, now)
	n.mu.Unlock()
	if k != 0 {
		m.emit(Event{Kind: k, Node: n.key})
	}
}

// checkRelaxOwned is checkRelax on the timer's goroutine, counted in m's
// wait group so that Close returns only once a report in flight has been
// delivered: no event reaches an observer after Close. Once Close has
// begun, the timer's report is Close's own (endRelaxReports).
func (m *Maint) checkRelaxOwned(n *node) {
	if !m.enter() {
		return
	}
	defer m.wg.Done()
	m.checkRelax(n)
}

// endRelaxReports reports the end of every node's relaxation when the
// Maint closes (it steps aside: nothing is relaxed any more) and stops the
// timers.
func (m *Maint) endRelaxReports() {
	for _, n := range m.reg.nodeList() {
		m.checkRelax(n) // stopped: reports off where it was on
	}
}
