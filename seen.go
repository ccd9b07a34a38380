package maint

import "time"

// seenMovings remembers the MOVINGs a Maint acted on, by sequence id.
// Sequence ids are per database and every connection of a node receives
// its own copy of a MOVING, some of them late (an idle connection reads its
// copy with its next command). A copy changes nothing, whichever node
// delivers it and whether or not a handoff is still running there: it only
// joins the connection that read it to the handoff, or retires it when that
// handoff is over (the connection reached a node that was moving).
//
// The memory is bounded twice: an entry is forgotten a while after its
// window ended (seenAfterWindow), and at most maxSeen are kept, the oldest
// dropped first. A server whose ids restart is handled by the same rule: an
// id is compared only with the ids still remembered, never with a
// high-water mark, so a restarted sequence is acted on as soon as the old
// entries have expired, and at once for every id it has not reused.
//
// Ids are per database, and one Maint may serve clients of several
// databases (M14): an entry is a copy only for a MOVING read by a connection
// of the same target (the address a client dials: one database) or of the
// same node (one database's endpoint). The same id from another database is a
// MOVING of its own.
type seenMovings struct {
	m map[int64][]seenMoving
	n int // entries, over every id
}

type seenMoving struct {
	node    string // the node whose MOVING it was
	target  string // the address dialled by the connection that read it
	forget  mono   // when the entry may go
	created mono
}

// seenAfterWindow is how long a MOVING is remembered after its window ends:
// a copy that comes later than that has no connection left to concern.
const seenAfterWindow = 2 * time.Minute

// maxSeen bounds the entries kept.
const maxSeen = 1024

// lookup returns the entry for seq read through target or on node.
func (s *seenMovings) lookup(seq int64, target, node string) (seenMoving, bool) {
	for _, e := range s.m[seq] {
		if e.target == target || e.node == node {
			return e, true
		}
	}
	return seenMoving{}, false
}

// add remembers seq, for a MOVING of node read through target, whose window
// ends in window.
func (s *seenMovings) add(seq int64, node, target string, window time.Duration, now mono) {
	if s.m == nil {
		s.m = make(map[int64][]seenMoving)
	}
	s.prune(now)
	if s.n >= maxSeen {
		var oldest int64
		at, first := 0, true
		for k, es := range s.m {
			for i, e := range es {
				if first || e.created < s.m[oldest][at].created {
					oldest, at, first = k, i, false
				}
			}
		}
		s.drop(oldest, at)
	}
	s.m[seq] = append(s.m[seq], seenMoving{node: node, target: target, forget: now + int64(window+seenAfterWindow), created: now})
	s.n++
}

// drop forgets the i-th entry of seq.
func (s *seenMovings) drop(seq int64, i int) {
	es := s.m[seq]
	es = append(es[:i:i], es[i+1:]...)
	if len(es) == 0 {
		delete(s.m, seq)
	} else {
		s.m[seq] = es
	}
	s.n--
}

// prune forgets the entries whose time has come.
func (s *seenMovings) prune(now mono) {
	for k, es := range s.m {
		for i := len(es) - 1; i >= 0; i-- {
			if es[i].forget <= now {
				s.drop(k, i)
				es = s.m[k]
			}
		}
	}
}

// len is the number of entries, for tests of bounded memory.
func (s *seenMovings) len() int { return s.n }
