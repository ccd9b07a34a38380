package maint

import (
	"net"
	"sync/atomic"
	"time"
)

// A probe (moving.go) dials the configured address the way the client's dial
// path does. When it lands on a replacement, its connection is exactly what
// the pool is about to dial for: the handoff retires the old connections on
// that news, and the pool replaces each on its next use. So the probe's
// connection is kept as the target's spare, and the next dial of the target
// takes it instead of dialling (go-redis's dial seam: the dialer may return
// any connection it likes); it is judged and wrapped as every dial is. A
// spare not taken within spareTTL is closed: it is the one connection a
// handoff may open that no command uses.

// spareTTL bounds how long a probe's connection waits for a dial to take it.
const spareTTL = 2 * time.Second

// spare is a probe's connection waiting to be taken by a dial.
type spare struct {
	raw    net.Conn
	remote string
	o      dialOpts // what an inner layer (Configure's dialer) knew of it
	timer  *time.Timer
	taken  atomic.Bool
}

// claim reports whether this call took s (for a dial, or to close it).
func (s *spare) claim() bool { return s.taken.CompareAndSwap(false, true) }

// offerSpare keeps a probe's connection for the next dial of t; a spare
// already waiting is closed. After Close the connection is closed at once.
func (m *Maint) offerSpare(t *target, raw net.Conn, remote string, o dialOpts) {
	if m.stopped.Load() {
		_ = raw.Close()
		return
	}
	s := &spare{raw: raw, remote: remote, o: o}
	s.timer = time.AfterFunc(spareTTL, func() {
		if t.spare.CompareAndSwap(s, nil) && s.claim() {
			_ = s.raw.Close()
			m.c.sparesUnused.Add(1)
		}
	})
	if old := t.spare.Swap(s); old != nil && old.claim() {
		old.timer.Stop()
		_ = old.raw.Close()
		m.c.sparesUnused.Add(1)
	}
	if m.stopped.Load() {
		m.dropSpare(t) // Close ran meanwhile
	}
}

// takeSpare returns the spare connection of t, if one waits.
func (t *target) takeSpare() *spare {
	if t.spare.Load() == nil {
		return nil
	}
	s := t.spare.Swap(nil)
	if s == nil || !s.claim() {
		return nil
	}
	s.timer.Stop()
	return s
}

// dropSpare closes the spare of t, if one waits.
func (m *Maint) dropSpare(t *target) {
	if s := t.takeSpare(); s != nil {
		_ = s.raw.Close()
		m.c.sparesUnused.Add(1)
	}
}

// dropSpares closes every target's spare (Close).
func (m *Maint) dropSpares() {
	for _, t := range m.reg.targetList() {
		m.dropSpare(t)
	}
}
