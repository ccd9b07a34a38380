package maint

import (
	"fmt"
	"time"
)

// relax starts (or keeps) relaxation of n's timeouts for the MIGRATING or
// FAILING_OVER with id seq. It lasts until a completion plus the tail, and no
// longer than the relax cap.
func (m *Maint) relax(n *node, seq int64) {
	if m.s.relaxed < 0 {
		return
	}
	for {
		cur := n.relaxSeq.Load()
		if seq <= cur {
			return // another connection's copy, or an older event
		}
		if n.relaxSeq.CompareAndSwap(cur, seq) {
			break
		}
	}
	until := time.Now().Add(m.s.relaxCap)
	n.relaxUntil.Store(until.UnixNano())
	n.epoch.Add(1)
	for _, c := range n.snapshot() {
		c.refloor()
	}
	m.c.relaxations.Add(1)
	m.emit(Event{Kind: EventRelax, Node: n.key, Seq: seq,
		Detail: fmt.Sprintf("floor %v, cap %v", m.s.relaxed, m.s.relaxCap)})
}

// relaxEnd ends n's relaxation after the tail, for the completion with id
// seq. A completion older than the relaxation it would end, or arriving when
// nothing is relaxed, is a replay (servers replay the latest completion to
// every newly opted-in connection, for hours): it changes nothing.
func (m *Maint) relaxEnd(n *node, seq int64) {
	if seq <= n.relaxSeq.Load() {
		return
	}
	u := n.relaxUntil.Load()
	if u == 0 || time.Now().UnixNano() >= u {
		return
	}
	for {
		cur := n.doneSeq.Load()
		if seq <= cur {
			return // another connection's copy
		}
		if n.doneSeq.CompareAndSwap(cur, seq) {
			break
		}
	}
	end := time.Now().Add(m.s.tail).UnixNano()
	if end < u {
		n.relaxUntil.CompareAndSwap(u, end)
	}
	m.emit(Event{Kind: EventRelaxEnd, Node: n.key, Seq: seq, Detail: fmt.Sprintf("tail %v", m.s.tail)})
}

// floor returns the deadline t raised, where maintenance requires it, to at
// least now plus the relaxed timeout. A zero t (no deadline) stays zero:
// relaxation never shortens a longer or infinite timeout. While nothing is
// relaxed it costs two atomic loads.
func (c *conn) floor(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	relax := c.draining() // a drain is not cut short by a timeout meant for a healthy server
	if u := c.n.relaxUntil.Load(); u != 0 {
		if time.Now().UnixNano() < u {
			relax = true
		} else {
			c.n.relaxUntil.CompareAndSwap(u, 0)
		}
	}
	if !relax || c.m.s.relaxed < 0 || c.m.stopped.Load() {
		return t
	}
	now := time.Now()
	if t.Sub(now) < minRelaxable {
		// go-redis's own probes (push drains, client-side caching) use 1ms and
		// 50ms deadlines on purpose: raised, they would wait seconds on an
		// idle connection.
		return t
	}
	if min := now.Add(c.m.s.relaxed); t.Before(min) {
		return min
	}
	return t
}

// minRelaxable is the shortest deadline relaxation raises.
const minRelaxable = 75 * time.Millisecond

// relaxing reports whether n's timeouts are relaxed now.
func (n *node) relaxing() bool {
	u := n.relaxUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}
