package maint

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// Relaxation is per node and per operation. A node may have several
// operations open at once (MIGRATING 10, FAILING_OVER 11, then MIGRATED 12
// ends only the migration): it stays relaxed while any is open, until the
// tail after the last completion, and never past any open operation's cap.
//
// A completion names no start, only its own sequence id: it ends the open
// operation of its kind (MIGRATED ends a MIGRATING, FAILED_OVER a
// FAILING_OVER, SMIGRATED an SMIGRATING) with the same shards, else the
// oldest of its kind, and only one that began before it (a lower id).
// Anything else is a replay (servers replay the latest completion to every
// new connection, for hours) and changes nothing.

// op is one open MIGRATING, FAILING_OVER or SMIGRATING on a node.
type op struct {
	kind   resp.Kind
	seq    int64
	shards string
	capAt  mono // relaxation for this operation ends here if no completion comes
	opened mono // when maint read its start
}

// maxOps bounds the operations remembered open on a node; past it the
// oldest is dropped (it still ends at its cap, through relaxUntil).
const maxOps = 16

// maxEnded bounds the sequence ids remembered as ended on a node, so that a
// late copy of a start that has already completed is not taken for a new one.
const maxEnded = 16

// startOf returns the kind of operation a completion ends.
func startOf(k resp.Kind) resp.Kind {
	switch k {
	case resp.KindMigrated:
		return resp.KindMigrating
	case resp.KindFailedOver:
		return resp.KindFailingOver
	case resp.KindSMigrated:
		return resp.KindSMigrating
	}
	return 0
}

// relax opens an operation on n (a MIGRATING, FAILING_OVER or SMIGRATING)
// and relaxes n's timeouts until it completes, capped.
func (m *Maint) relax(n *node, nt resp.Notification) {
	if brokenRelax || m.s.relaxed < 0 {
		return
	}
	now := monoNow()
	n.mu.Lock()
	for _, o := range n.ops {
		if o.seq == nt.Seq {
			n.mu.Unlock()
			return // another connection's copy
		}
	}
	for _, s := range n.ended {
		if s == nt.Seq {
			n.mu.Unlock()
			return // a late copy of an operation that has completed
		}
	}
	if len(n.ops) == maxOps {
		n.ops = append(n.ops[:0], n.ops[1:]...)
	}
	n.ops = append(n.ops, op{kind: nt.Kind, seq: nt.Seq, shards: opShards(nt), capAt: now + int64(m.s.relaxCap), opened: now})
	n.updateRelaxLocked(now)
	on := m.syncRelaxLocked(n, now)
	open := len(n.ops)
	until := n.relaxUntil.Load()
	n.mu.Unlock()
	m.noteRelaxed(until)
	if on != 0 {
		m.emit(Event{Kind: on, Node: n.key, Seq: nt.Seq, Name: nt.Kind.String()})
	}

	n.refloorAll()
	m.c.relaxations.Add(1)
	m.emit(Event{Kind: EventRelax, Node: n.key, Seq: nt.Seq, Count: open,
		Detail: fmt.Sprintf("%v floor %v, cap %v", nt.Kind, m.s.relaxed, m.s.relaxCap)})
}

// opShards is what matches a start to its completion: the shards, or for
// SMIGRATING and SMIGRATED the slots in one canonical form (an SMIGRATED's
// moves together).
func opShards(nt resp.Notification) string {
	if nt.Kind == resp.KindSMigrating || nt.Kind == resp.KindSMigrated {
		return smigratingSlots(nt)
	}
	return nt.Shards
}

// relaxEnd handles a completion on n: it ends the operation it completes,
// and once none is open, relaxation ends after the tail.
func (m *Maint) relaxEnd(n *node, nt resp.Notification) {
	start := startOf(nt.Kind)
	shards := opShards(nt)
	now := monoNow()
	n.mu.Lock()
	at := -1
	for i, o := range n.ops {
		if o.kind != start || o.seq >= nt.Seq || o.capAt <= now {
			continue
		}
		if o.shards == shards {
			at = i
			break
		}
		if at < 0 {
			at = i // the oldest of its kind, unless one matches its shards
		}
	}
	if at < 0 {
		n.mu.Unlock()
		return // a replay, a copy, or the completion of an operation past its cap
	}
	ended := n.ops[at].seq
	// The tail lasts no longer than maint saw the operation open: a start
	// and its completion read together (an idle connection reads both only
	// when it is next used, after the operation is over) leave no command
	// that was sent while it was open, and no tail over the next ones.
	tail := m.s.tail
	if seen := time.Duration(now - n.ops[at].opened); seen < tail {
		tail = max(seen, 0)
	}
	n.ops = append(n.ops[:at], n.ops[at+1:]...)
	if len(n.ended) == maxEnded {
		n.ended = append(n.ended[:0], n.ended[1:]...)
	}
	n.ended = append(n.ended, ended)
	if t := now + int64(tail); t > n.tailUntil {
		n.tailUntil = t
	}
	n.updateRelaxLocked(now)
	on := m.syncRelaxLocked(n, now)
	open := len(n.ops)
	n.mu.Unlock()
	if on != 0 {
		m.emit(Event{Kind: on, Node: n.key, Seq: nt.Seq, Name: nt.Kind.String()})
	}
	m.emit(Event{Kind: EventRelaxEnd, Node: n.key, Seq: nt.Seq, Count: open,
		Detail: fmt.Sprintf("%v ends seq %d; tail %v; %d still open", nt.Kind, ended, tail, open)})
}

// updateRelaxLocked sets relaxUntil from the open operations (each until its
// cap) and the tail of the last completion, forgetting operations past their
// cap.
func (n *node) updateRelaxLocked(now mono) {
	until := n.tailUntil
	k := 0
	for _, o := range n.ops {
		if o.capAt <= now {
			continue
		}
		n.ops[k] = o
		k++
		if o.capAt > until {
			until = o.capAt
		}
	}
	n.ops = n.ops[:k]
	if until <= now {
		until = 0
	}
	n.relaxUntil.Store(until)
}

// relaxSpan is the latest end (mono) of any relaxation in a Maint, never
// lowered early: while it lasts, a command that timed out waiting for a
// pool connection is given another turn (see Maint.poolRetry).
type relaxSpan struct{ until atomic.Int64 }

// raise raises the end to until.
func (s *relaxSpan) raise(until mono) {
	for {
		cur := s.until.Load()
		if until <= cur || s.until.CompareAndSwap(cur, until) {
			return
		}
	}
}

// lasts reports whether the span lasts now.
func (s *relaxSpan) lasts() bool {
	u := s.until.Load()
	return u != 0 && monoNow() < u
}

// noteRelaxed raises the Maint-wide end of relaxation (see relaxSpan) to
// until.
func (m *Maint) noteRelaxed(until mono) { m.relaxSpan.raise(until) }

// anyRelaxed reports whether some node of m may be relaxed now.
func (m *Maint) anyRelaxed() bool { return m.relaxSpan.lasts() }

// relaxingAt reports whether n's timeouts are relaxed at now.
func (n *node) relaxingAt(now mono) bool {
	u := n.relaxUntil.Load()
	return u != 0 && now < u
}

// relaxing reports whether n's timeouts are relaxed now.
func (n *node) relaxing() bool { return n.relaxingAt(monoNow()) }

// relaxMoving relaxes every connection of t, to the retiring node and to its
// successor (named or not yet known), from a MOVING until its handoff ends
// (endMovingRelax), as node-redis and go-redis's own handler do: a command
// sent while the endpoint moves gets RelaxedTimeout, wherever it lands.
// until bounds it if the handoff never reports its end.
func (m *Maint) relaxMoving(t *target, until time.Time) {
	if m.s.relaxed < 0 {
		return
	}
	u := toMono(until)
	for {
		cur := t.relaxUntil.Load()
		if u <= cur || t.relaxUntil.CompareAndSwap(cur, u) {
			break
		}
	}
	m.noteRelaxed(u)
}

// endMovingRelax ends t's relaxation for a MOVING whose handoff is over,
// unless a later MOVING has raised it since (a run's bound is its own).
func (m *Maint) endMovingRelax(t *target, until time.Time) {
	t.relaxUntil.CompareAndSwap(toMono(until), 0)
}
