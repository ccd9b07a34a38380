package maint

import (
	"math"
	"sync/atomic"
	"time"
)

// The deadlines of a connection have one owner: the type below. go-redis
// asks for a deadline (asked); maint puts a floor under it while the node is
// relaxed or the connection drains (applied). Both are kept on a monotonic
// clock, so a step of the wall clock neither ends relaxation early nor
// stretches it.

// monoBase is the origin of maint's monotonic clock: durations since it are
// read from the monotonic clock, whatever the wall clock does.
var monoBase = time.Now()

// mono is a point on the monotonic clock: nanoseconds since monoBase. The
// zero mono means "none" (no deadline, no relaxation).
type mono = int64

// monoNow is now on the monotonic clock; it is never zero.
func monoNow() mono { return int64(time.Since(monoBase)) | 1 }

// monoBaseSec and monoBaseNsec are monoBase on the wall clock.
var monoBaseSec, monoBaseNsec = monoBase.Unix(), int64(monoBase.Nanosecond())

// toMono converts a deadline; the zero time (no deadline) is 0. A time
// before monoBase becomes 1, a deadline long passed. It is t.Sub(monoBase)
// (saturated as Sub saturates), without Sub's general arithmetic for the
// deadlines go-redis sets, which carry no monotonic reading: their
// difference from monoBase is on the wall clock, as Sub takes it then.
//
// Those deadlines are go-redis's time.Unix(0, now).Add(timeout), in the
// Local location. t.Local() strips a monotonic reading (as Round(0) does,
// see the time package) and sets the Local location; a t it leaves equal
// is one of those, and takes the fast path: about 50 instructions, where
// the general rules' Round(0) and arithmetic took about 75. Any other time (a context's deadline, which
// carries a monotonic reading, another location, the zero time, a time
// before monoBase or centuries ahead) takes toMonoSlow, which gives the
// same result for the times of the fast path.
func toMono(t time.Time) mono {
	if t.Local() == t {
		if s := t.Unix() - monoBaseSec; uint64(s) < maxMonoSec {
			if d := s*int64(time.Second) + int64(t.Nanosecond()) - monoBaseNsec; d > 0 {
				return d
			}
		}
	}
	return toMonoSlow(t)
}

// askedOf is toMono for the deadline setters, inlined into them: the zero
// time (no deadline), which go-redis's health check sets on every Get, is
// 0 without a call.
func askedOf(t time.Time) mono {
	if t.IsZero() {
		return 0
	}
	return toMono(t)
}

// maxMonoSec bounds the seconds after monoBase of toMono's fast path, far
// from where toMonoSlow saturates.
const maxMonoSec = 1 << 32

// toMonoSlow is toMono by the general rules.
func toMonoSlow(t time.Time) mono {
	if t.IsZero() {
		return 0
	}
	var d int64
	if w := t.Round(0); w != t {
		d = int64(t.Sub(monoBase)) // a monotonic reading: Sub uses it
	} else {
		s := t.Unix() - monoBaseSec
		switch {
		case s >= math.MaxInt64/int64(time.Second)-1:
			return math.MaxInt64
		case s < -1:
			return 1
		}
		d = s*int64(time.Second) + int64(t.Nanosecond()) - monoBaseNsec
	}
	if d <= 0 {
		return 1
	}
	return d
}

// fromMono converts back; the result carries a monotonic reading.
func fromMono(m mono) time.Time {
	if m == 0 {
		return time.Time{}
	}
	return monoBase.Add(time.Duration(m))
}

// deadline is one direction (read or write) of a connection's deadline.
type deadline struct {
	asked atomic.Int64 // mono: what go-redis asked for, 0 for none
	// applied is what the socket has (mono, 0 for none), or asAsked: what
	// was asked, as setDeadline's fast path records it, with no store per
	// command while it stays so.
	applied atomic.Int64
}

// asAsked in deadline.applied: the socket has what was asked.
const asAsked mono = -1

// socket returns what the socket has: mono, 0 for none.
func (d *deadline) socket() mono {
	if v := d.applied.Load(); v != asAsked {
		return v
	}
	return d.asked.Load()
}

// markAsAsked records that the socket has what was asked.
func (d *deadline) markAsAsked() {
	if d.applied.Load() != asAsked {
		d.applied.Store(asAsked)
	}
}

// floor returns the deadline asked raised, where maintenance requires it,
// to at least now plus the relaxed timeout (now 0: read the clock when
// needed). No deadline stays none: relaxation never shortens a longer or
// infinite timeout. However short, a deadline is raised if it is a write's or
// a reply's: a read deadline is a reply's when the connection owes a reply
// (go-redis sets it after writing the command, contract_deadline_test.go).
// A read deadline set while no reply is owed is one of go-redis's own probes
// (its push drains under 1 ms and 50 ms hard deadlines, its socket peeks),
// which look for bytes already there and must not wait: it is left as asked,
// whatever its length. While nothing is relaxed it costs two atomic loads and
// no clock read.
func (c *conn) floor(asked, now mono, read bool) mono {
	if asked == 0 {
		return 0
	}
	draining := c.draining()
	u, tu := c.n.relaxUntil.Load(), c.t.relaxUntil.Load()
	if !draining && u == 0 && tu == 0 {
		return asked
	}
	if now == 0 {
		now = monoNow()
	}
	relax := draining || now < u || now < tu
	if u != 0 && now >= u {
		c.n.relaxUntil.CompareAndSwap(u, 0) // over: back to the cheap path
	}
	if tu != 0 && now >= tu {
		c.t.relaxUntil.CompareAndSwap(tu, 0)
	}
	if !relax || c.m.s.relaxed < 0 || c.m.stopped.Load() {
		return asked
	}
	if read && c.owed() == 0 {
		return asked // a probe: no reply is owed
	}
	if min := now + int64(c.m.s.relaxed); asked < min {
		return min
	}
	return asked
}

// raised reports whether the deadline on the socket is later than the one
// go-redis asked for: a timeout under it is a relaxed one.
func (d *deadline) raised() bool {
	asked := d.asked.Load()
	return asked != 0 && d.applied.Load() > asked
}

// quiet reports whether nothing floors this connection's deadlines now: its
// node and its target are not relaxed and it is active (not draining). While
// no maintenance is going on it is true on every deadline set.
func (c *conn) quiet() bool {
	return c.n.relaxUntil.Load() == 0 && c.t.relaxUntil.Load() == 0 && c.state.Load() == stateActive
}

// The three setters record what go-redis asked for and apply it floored.
// The node's epoch is read before and after: if relaxation started or the
// connection was retired meanwhile (see refloor), the floor is applied
// again. While the connection is quiet (every command, as long as no
// maintenance is going on) the floor is what was asked, and t goes to the
// socket as go-redis gave it: one store of what was asked per direction, a
// few loads, no conversion back. Each setter is written out for its
// directions, so that the quiet path has no branch on them.

// SetDeadline sets both deadlines, relaxed where maintenance requires it.
func (c *conn) SetDeadline(t time.Time) error {
	if c.checking.Load() {
		c.checking.Store(false)
	}
	asked := askedOf(t)
	c.rdl.asked.Store(asked)
	c.wdl.asked.Store(asked)
	e := c.n.epoch.Load()
	if c.quiet() {
		c.rdl.markAsAsked()
		c.wdl.markAsAsked()
		err := c.raw.SetDeadline(t)
		if c.n.epoch.Load() == e {
			if err != nil {
				return c.notWritten(err)
			}
			return nil
		}
	}
	return c.setFloored(asked, true, true, e)
}

// SetReadDeadline sets the read deadline, relaxed where maintenance requires it.
func (c *conn) SetReadDeadline(t time.Time) error {
	if c.checking.Load() {
		c.checking.Store(false)
	}
	asked := askedOf(t)
	c.rdl.asked.Store(asked)
	e := c.n.epoch.Load()
	if c.quiet() {
		c.rdl.markAsAsked()
		err := c.raw.SetReadDeadline(t)
		if c.n.epoch.Load() == e {
			return err
		}
	}
	return c.setFloored(asked, true, false, e)
}

// SetWriteDeadline sets the write deadline, relaxed where maintenance requires it.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.checking.Load() {
		c.checking.Store(false)
	}
	asked := askedOf(t)
	c.wdl.asked.Store(asked)
	e := c.n.epoch.Load()
	if c.quiet() {
		c.wdl.markAsAsked()
		err := c.raw.SetWriteDeadline(t)
		if c.n.epoch.Load() == e {
			if err != nil {
				return c.notWritten(err)
			}
			return nil
		}
	}
	return c.setFloored(asked, false, true, e)
}

// setFloored applies asked, floored, in the given directions, once more if
// the node's epoch is no longer e when it is done. A write-side error is
// one of notWritten's.
func (c *conn) setFloored(asked mono, read, write bool, e uint64) error {
	err := c.apply(asked, read, write)
	if c.n.epoch.Load() != e {
		err = c.apply(asked, read, write)
	}
	if err != nil && write {
		return c.notWritten(err)
	}
	return err
}

func (c *conn) apply(asked mono, read, write bool) error {
	if read && write {
		r, w := c.floor(asked, 0, true), c.floor(asked, 0, false)
		c.rdl.applied.Store(r)
		c.wdl.applied.Store(w)
		if r == w {
			return c.raw.SetDeadline(fromMono(r))
		}
		if err := c.raw.SetReadDeadline(fromMono(r)); err != nil {
			return err
		}
		return c.raw.SetWriteDeadline(fromMono(w))
	}
	v := c.floor(asked, 0, read)
	switch {
	case read:
		c.rdl.applied.Store(v)
		return c.raw.SetReadDeadline(fromMono(v))
	default:
		c.wdl.applied.Store(v)
		return c.raw.SetWriteDeadline(fromMono(v))
	}
}

// refloor re-applies the floor to the deadlines already set: relaxation that
// starts while a command waits for its reply covers that command too. It
// only ever lengthens a wait: a deadline that has passed is never applied
// again (a read that already failed must not be re-armed, and an idle
// connection's stale probe deadline must not fail the next read), and a
// floor lower than what the socket has is left alone (a MOVING never
// shortens a relaxed wait), and a deadline already raised is not raised
// again (a MOVING during a MIGRATING does not stretch it either: the reply
// is due RelaxedTimeout after relaxation first covered it). The node's
// epoch was bumped first, so a setter racing with this call redoes its own
// work.
func (c *conn) refloor() {
	now := monoNow()
	c.refloorOne(&c.rdl, now, true, c.raw.SetReadDeadline)
	c.refloorOne(&c.wdl, now, false, c.raw.SetWriteDeadline)
}

// floorAnew re-applies the floor to c's deadlines after its state changed
// (it was retired or fenced): the node's epoch first, so that a deadline
// setter racing with it redoes its work (see setDeadline).
func (c *conn) floorAnew() {
	c.n.epoch.Add(1)
	c.refloor()
}

func (c *conn) refloorOne(d *deadline, now mono, read bool, set func(time.Time) error) {
	asked := d.asked.Load()
	if asked == 0 {
		return
	}
	v := c.floor(asked, now, read)
	if v <= now {
		return
	}
	raw := d.applied.Load()
	cur := raw
	if raw == asAsked {
		cur = asked
	}
	if cur == 0 || cur > asked || v <= cur || !d.applied.CompareAndSwap(raw, v) {
		// No deadline, one already raised (a wait relaxed once is not
		// stretched again by the next notification: its reply is due
		// RelaxedTimeout after maintenance first covered it), or no longer.
		return
	}
	_ = set(fromMono(v))
	if d.asked.Load() != asked {
		// go-redis set a new deadline meanwhile: its setter saw the new
		// epoch and applies its own floor; make sure the socket has it.
		if a := d.asked.Load(); a != 0 {
			w := c.floor(a, 0, read)
			d.applied.Store(w)
			_ = set(fromMono(w))
		}
	}
}

// restoreRead puts back on the socket the read deadline it had before the
// health check's short one: a peek leaves no trace.
func (c *conn) restoreRead() { _ = c.raw.SetReadDeadline(fromMono(c.rdl.socket())) }
