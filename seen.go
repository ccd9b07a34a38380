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
type seenMovings struct {
	m map[int64]seenMoving
}

type seenMoving struct {
	node    string // the node whose MOVING it was
	forget  mono   // when the entry may go
	created mono
}

// seenAfterWindow is how long a MOVING is remembered after its window ends:
// a copy that comes later than that has no connection left to concern.
const seenAfterWindow = 2 * time.Minute

// maxSeen bounds the entries kept.
const maxSeen = 1024

// lookup returns the entry for seq.
func (s *seenMovings) lookup(seq int64) (seenMoving, bool) {
	e, ok := s.m[seq]
	return e, ok
}

// add remembers seq, for a MOVING of node whose window ends in window.
func (s *seenMovings) add(seq int64, node string, window time.Duration, now mono) {
	if s.m == nil {
		s.m = make(map[int64]seenMoving)
	}
	s.prune(now)
	if len(s.m) >= maxSeen {
		var oldest int64
		first := true
		for k, e := range s.m {
			if first || e.created < s.m[oldest].created {
				oldest, first = k, false
			}
		}
		delete(s.m, oldest)
	}
	s.m[seq] = seenMoving{node: node, forget: now + int64(window+seenAfterWindow), created: now}
}

// prune forgets the entries whose time has come.
func (s *seenMovings) prune(now mono) {
	for k, e := range s.m {
		if e.forget <= now {
			delete(s.m, k)
		}
	}
}

// len is the number of entries, for tests of bounded memory.
func (s *seenMovings) len() int { return len(s.m) }
