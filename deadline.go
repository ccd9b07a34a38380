package maint

import (
	"errors"
	"os"
	"sync/atomic"
	"time"
)

// The deadlines of a connection have one owner: the type below. go-redis
// asks for a deadline (asked); maint puts a floor under it while the node is
// relaxed or the connection drains (applied). Both are kept so that a step
// of the wall clock neither ends relaxation early nor stretches it: applied
// on a monotonic clock, and asked on it too, except a deadline with no
// monotonic reading (go-redis's own: time.Unix(0, now).Add(timeout)), which
// is kept as the wall-clock time it is and taken onto the monotonic clock
// only when it is read, against the clock then (see askedOf).

// monoBase is the origin of maint's monotonic clock: durations since it are
// read from the monotonic clock, whatever the wall clock does.
var monoBase = time.Now()

// mono is a point on the monotonic clock: nanoseconds since monoBase. The
// zero mono means "none" (no deadline, no relaxation).
type mono = int64

// monoNow is now on the monotonic clock; it is never zero.
func monoNow() mono { return int64(time.Since(monoBase)) | 1 }

// toMono converts a deadline, now: the zero time (no deadline) is 0, a
// time with a monotonic reading (a context's deadline) is t.Sub(monoBase),
// which uses that reading, and a wall-clock time is taken onto the
// monotonic clock against the clock now. A time before monoBase, or
// passed, becomes at least 1, a deadline long passed; one centuries ahead
// saturates.
func toMono(t time.Time) mono {
	if t.IsZero() {
		return 0
	}
	if t.Round(0) != t {
		return atLeast1(int64(t.Sub(monoBase))) // a monotonic reading: Sub uses it
	}
	return clockNow().of(wallOf(t))
}

// askedOf is what a deadline setter records of t: 0 for the zero time; a
// wall-clock time in Local (go-redis's deadlines, t.Local() == t: Local
// strips a monotonic reading, as Round(0) does, see the time package)
// within two centuries of the Unix epoch as it is (wallOf), with no clock
// read and no conversion; else toMono(t).
//
// A wall-clock time is not converted against monoBase's own wall reading:
// that would move it by every step of the wall clock since the process
// started (a deadline an hour later than go-redis asked for after the
// clock was set an hour ahead, or one long passed after it was set back).
// Converted when it is read, against the clock then (clock.of), only a step
// between go-redis's setting it and maint's reading it can move it, as such
// a step moves the socket's own (the runtime takes a wall-clock deadline as
// time.Until at the SetDeadline call).
func askedOf(t time.Time) mono {
	if t.IsZero() {
		return 0
	}
	if t.Local() == t {
		if s := t.Unix(); uint64(s-1) < maxWallSec {
			return -(s*int64(time.Second) + int64(t.Nanosecond()))
		}
	}
	return toMono(t)
}

// maxWallSec bounds the seconds after the Unix epoch of a wall-clock time
// askedOf keeps as it is: about 2242, well inside UnixNano's range.
const maxWallSec = 1 << 33

// wallOf is a wall-clock time t as askedOf keeps it: its UnixNano,
// negated (a mono is never negative). Only times that UnixNano describes
// are given to it.
func wallOf(t time.Time) mono {
	s := t.Unix()
	switch {
	case s >= maxWallSec:
		s = maxWallSec // centuries ahead: the same as none, for maint
	case s < 1:
		return -1 // before 1970: long passed
	}
	return -(s*int64(time.Second) + int64(t.Nanosecond()))
}

// clock is one reading of the clock: now on the monotonic clock and on the
// wall clock (UnixNano).
type clock struct{ mono, wall int64 }

// clockNow reads the clock (a variable for the tests, which step the wall
// clock with it).
var clockNow = func() clock {
	t := time.Now()
	return clock{int64(t.Sub(monoBase)) | 1, t.UnixNano()}
}

// of returns asked (as a deadline setter records it, see askedOf) on the
// monotonic clock: a mono as it is, a wall-clock time taken against k.
func (k clock) of(asked mono) mono {
	if asked >= 0 {
		return asked
	}
	return atLeast1(k.mono + (-asked - k.wall))
}

// atLeast1 is d, or 1 (a deadline long passed) if d is not after monoBase.
func atLeast1(d int64) mono {
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
	asked atomic.Int64 // what go-redis asked for (see askedOf): 0 for none
	// applied is what the socket has: a floor on the monotonic clock (a
	// mono, 0 for none); asAsked, what was asked, as a setter's quiet path
	// records it on a connection that takes every deadline as asked, with
	// no store per command while it stays so; or, on a connection that
	// arms its socket lazily (see lazySlack), the wall-clock time a quiet
	// setter last put on the socket (as askedOf keeps it, a negative
	// number below asAsked), which may be earlier than what was asked
	// since.
	applied atomic.Int64
	// base anchors a lazily armed wall-clock time in applied to the
	// monotonic clock: the monotonic minus the wall reading of the clock
	// when it went on the socket, which is when the runtime converted it.
	// A wall-clock time asked since is due, on the monotonic clock, at its
	// UnixNano plus base (lazyDue): a step of the wall clock after the
	// setter moves it no more than it moves the socket's own.
	base atomic.Int64
}

// asAsked in deadline.applied: the socket has what was asked.
const asAsked mono = -1

// socket returns what the socket has: the time go-redis asked for, as it
// gave it (a wall-clock time) or on the monotonic clock, a lazily armed
// wall-clock time, a floor, or the zero time.
func (d *deadline) socket() time.Time {
	v := d.applied.Load()
	switch {
	case v == asAsked:
		return timeOf(d.asked.Load())
	case v < asAsked:
		return fromMono(atLeast1(-v + d.base.Load())) // as the runtime converted it
	}
	return fromMono(v)
}

// lazyDue is when the deadline asked for (as a setter records it) is due on
// the monotonic clock, 0 for none, while the socket has a lazily armed
// wall-clock time: a wall-clock time asked for against that time's base,
// the conversion the runtime would have made, not against the clock now.
func (d *deadline) lazyDue(asked mono) mono {
	if asked >= 0 {
		return asked
	}
	return atLeast1(-asked + d.base.Load())
}

// lazySlack is how much earlier than go-redis asked a lazily armed socket
// deadline may fire. go-redis sets a read and a write deadline for every
// command (now plus its timeout), and the pool's health check clears both:
// three calls into the runtime's poller per command, each dearer than all
// of maint's own work for it. On a plain TCP connection maint puts a new
// deadline on the socket only when it must: when it is earlier than the
// one the socket has, or later by more than lazySlack. A socket deadline
// is therefore never later than the one go-redis asked for, and at most
// lazySlack earlier. When it fires before the one asked for, the read or
// write that it cut short is given the deadline asked for (floored, as
// ever) and goes on (rearm): go-redis sees its timeout when it asked for
// it, and never before. Over TLS a write cut by a deadline breaks the
// connection for good (crypto/tls), so there every deadline goes on the
// socket as asked.
const lazySlack = int64(100 * time.Millisecond)

// covers reports whether the socket's deadline, lazily armed, may stand for
// a (as a setter records it): it is no later than a and at most lazySlack
// earlier, or a is none and the socket has none or a wall-clock time (which
// at worst fires early).
func (d *deadline) covers(a mono) bool {
	s := d.applied.Load()
	if a == 0 {
		return s == 0 || s < asAsked
	}
	return a < asAsked && s < asAsked && s >= a && s-a <= lazySlack
}

// askedMono returns what go-redis asked for on the monotonic clock, 0 for
// none.
func (d *deadline) askedMono() mono {
	a := d.asked.Load()
	if a < 0 {
		return clockNow().of(a)
	}
	return a
}

// markAsAsked records that the socket has what was asked.
func (d *deadline) markAsAsked() {
	if d.applied.Load() != asAsked {
		d.applied.Store(asAsked)
	}
}

// armed records that a quiet setter of a lazily armed connection put a (as
// a setter records it) on the socket: a wall-clock time or none is kept as
// it is, for covers, a wall-clock time with its base; a time on the
// monotonic clock (a context's deadline) as asAsked, which covers nothing.
func (d *deadline) armed(a mono) {
	if a > 0 {
		a = asAsked
	} else if a < 0 {
		k := clockNow()
		d.base.Store(k.mono - k.wall) // before applied: whoever sees a sees its base
	}
	d.applied.Store(a)
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
	v := d.applied.Load()
	if v <= 0 {
		return false // as asked, or none
	}
	asked := d.askedMono()
	return asked != 0 && v > asked
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
// socket as go-redis gave it, with no conversion back: on a connection that
// arms its socket lazily (plain TCP) only when the socket's deadline does
// not cover it (see lazySlack), else every time, with one store of what was
// asked per direction. Each setter is written out for its directions, so
// that the quiet path has no branch on them.

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
		var err error
		switch {
		case !c.lazy:
			c.rdl.markAsAsked()
			c.wdl.markAsAsked()
			err = c.raw.SetDeadline(t)
		case !c.rdl.covers(asked) || !c.wdl.covers(asked):
			err = c.raw.SetDeadline(t)
			c.rdl.armed(asked)
			c.wdl.armed(asked)
		}
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
	c.noteReadDeadline() // release.go
	asked := askedOf(t)
	c.rdl.asked.Store(asked)
	e := c.n.epoch.Load()
	if c.quiet() {
		var err error
		switch {
		case !c.lazy:
			c.rdl.markAsAsked()
			err = c.raw.SetReadDeadline(t)
		case !c.rdl.covers(asked):
			err = c.raw.SetReadDeadline(t)
			c.rdl.armed(asked)
		}
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
	c.noteWriteDeadline() // release.go
	asked := askedOf(t)
	c.wdl.asked.Store(asked)
	e := c.n.epoch.Load()
	if c.quiet() {
		var err error
		switch {
		case !c.lazy:
			c.wdl.markAsAsked()
			err = c.raw.SetWriteDeadline(t)
		case !c.wdl.covers(asked):
			err = c.raw.SetWriteDeadline(t)
			c.wdl.armed(asked)
		}
		if c.n.epoch.Load() == e {
			if err != nil {
				return c.notWritten(err)
			}
			return nil
		}
	}
	if err := c.drainBeforeWrite(t); err != nil { // dialer.go
		return err
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

// apply puts asked (as a setter records it, see askedOf), floored, on the
// socket in the given directions.
func (c *conn) apply(asked mono, read, write bool) error {
	if read && write {
		r, rt := c.floored(asked, true)
		w, wt := c.floored(asked, false)
		c.rdl.applied.Store(r)
		c.wdl.applied.Store(w)
		if r == w {
			return c.raw.SetDeadline(rt)
		}
		if err := c.raw.SetReadDeadline(rt); err != nil {
			return err
		}
		return c.raw.SetWriteDeadline(wt)
	}
	v, t := c.floored(asked, read)
	switch {
	case read:
		c.rdl.applied.Store(v)
		return c.raw.SetReadDeadline(t)
	default:
		c.wdl.applied.Store(v)
		return c.raw.SetWriteDeadline(t)
	}
}

// floored returns what the socket gets for asked (as a setter records it)
// in one direction, and how deadline.applied records it: what was asked,
// as it was given (asAsked), when no floor raises it; else the floor, on
// the monotonic clock.
func (c *conn) floored(asked mono, read bool) (applied mono, t time.Time) {
	if callersOwn(asked) {
		return asAsked, timeOf(asked)
	}
	a := asked
	if a < 0 {
		a = clockNow().of(asked)
	}
	if v := c.floor(a, 0, read); v != a {
		return v, fromMono(v)
	}
	return asAsked, timeOf(asked)
}

// callersOwn reports whether asked (as a setter records it) is the
// deadline of the caller's context, which no floor raises: go-redis's own
// deadlines (now plus a timeout) are wall-clock times with no monotonic
// reading, while with ContextTimeoutEnabled it passes a nearer context
// deadline as the context has it, with the monotonic reading of
// context.WithTimeout. Relaxation lengthens timeouts meant for a healthy
// server, not the time a caller gave a command: raised, a command with a
// 300 ms context waited 4 s for a slow reply, and succeeded after its
// context had ended.
func callersOwn(asked mono) bool { return asked > 0 }

// timeOf is asked (as a setter records it) as a time: a wall-clock time as
// go-redis gave it, or on the monotonic clock.
func timeOf(asked mono) time.Time {
	if asked < 0 {
		return time.Unix(0, -asked)
	}
	return fromMono(asked)
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
	k := clockNow()
	c.refloorOne(&c.rdl, k, true, c.raw.SetReadDeadline)
	c.refloorOne(&c.wdl, k, false, c.raw.SetWriteDeadline)
}

// refloorAll re-applies the floor to the deadlines of every connection of
// n, after n's relaxation started or grew (a MIGRATING, a MOVING), so that
// a command already waiting for its reply is covered: the node's epoch
// first, so that a deadline setter racing with it redoes its work.
func (n *node) refloorAll() {
	n.epoch.Add(1)
	for _, c := range n.snapshot() {
		c.refloor()
	}
}

// floorAnew re-applies the floor to c's deadlines after its state changed
// (it was retired or fenced): the node's epoch first, so that a deadline
// setter racing with it redoes its work (see setDeadline).
func (c *conn) floorAnew() {
	c.n.epoch.Add(1)
	c.refloor()
}

func (c *conn) refloorOne(d *deadline, k clock, read bool, set func(time.Time) error) {
	recorded := d.asked.Load()
	if recorded == 0 || callersOwn(recorded) {
		return
	}
	now, asked := k.mono, k.of(recorded)
	v := c.floor(asked, now, read)
	if v <= now {
		return
	}
	raw := d.applied.Load()
	cur := raw
	switch {
	case raw == asAsked:
		cur = asked
	case raw < 0:
		cur = k.of(raw) // lazily armed: no later than asked
	}
	if cur == 0 || cur > asked || v <= cur || !d.applied.CompareAndSwap(raw, v) {
		// No deadline, one already raised (a wait relaxed once is not
		// stretched again by the next notification: its reply is due
		// RelaxedTimeout after maintenance first covered it), or no longer.
		return
	}
	_ = set(fromMono(v))
	if d.asked.Load() != recorded {
		// go-redis set a new deadline meanwhile: its setter saw the new
		// epoch and applies its own floor; make sure the socket has it.
		if a := d.asked.Load(); a != 0 {
			w, t := c.floored(a, read)
			d.applied.Store(w)
			_ = set(t)
		}
	}
}

// restoreRead puts back on the socket the read deadline it had before the
// health check's short one: a peek leaves no trace.
func (c *conn) restoreRead() { _ = c.raw.SetReadDeadline(c.rdl.socket()) }

// maxRearms bounds the times one read or write is given its deadline again
// (rearm): once is what a lazily armed deadline needs; a few more cover a
// relaxation or a retirement changing the deadline meanwhile.
const maxRearms = 4

// rearm reports whether err, met by a read (or a write) of a lazily armed
// connection, is its socket's deadline firing before the deadline now
// recorded for it is due; if so, it has put that deadline on the socket,
// and the read or write goes on. What is recorded decides, not what fired:
//   - a lazily armed time: what go-redis asked for since, as it asked it
//     (its setter put no floor under it; a relaxation that started since
//     refloors on its own), anchored as the runtime would have converted it
//     (lazyDue);
//   - a floor (relaxation, a drain): that floor, as it is, never floored
//     again from now, which would stretch a relaxed wait at every firing;
//   - none: none (the socket's was stale);
//   - what was asked, put on exactly: its firing is its timeout.
//
// A refloor may replace a lazily armed time between the socket's firing and
// this call: it is then the floor that is recorded, and the wait goes on
// until it. Only a deadline that is due is final: its timeout is the one
// go-redis asked for, relaxed where maintenance required it. Any other
// error is the caller's to return.
func (c *conn) rearm(err error, read bool, tries *int) bool {
	if !c.lazy || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	d, set := &c.wdl, c.raw.SetWriteDeadline
	if read {
		d, set = &c.rdl, c.raw.SetReadDeadline
	}
	for *tries < maxRearms {
		*tries++
		v := d.applied.Load()
		var due mono // on the monotonic clock, 0 for none
		switch {
		case v < asAsked:
			due = d.lazyDue(d.asked.Load())
		case v == asAsked:
			return false // the socket had what was asked, exactly: it is due
		default:
			due = v // a floor, or none
		}
		if due != 0 && due <= monoNow() {
			return false // due: the timeout go-redis asked for
		}
		now := v
		if v < asAsked {
			// Put what was asked on the socket, exactly: the next firing
			// is final.
			if !d.applied.CompareAndSwap(v, asAsked) {
				continue // a refloor or a setter recorded another: decide on it
			}
			now = asAsked
		}
		_ = set(fromMono(due))
		if d.applied.Load() != now {
			continue // recorded anew meanwhile: the socket must have that one
		}
		c.m.c.rearms.Add(1)
		return true
	}
	return false
}

// lazyReader is the socket as the Stripper reads it on a lazily armed
// connection: a read its deadline cut short goes on (rearm).
type lazyReader struct{ c *conn }

func (r lazyReader) Read(p []byte) (int, error) {
	tries := 0
	for {
		n, err := r.c.raw.Read(p)
		if n > 0 || err == nil || !r.c.rearm(err, true, &tries) {
			return n, err
		}
	}
}

// writeRaw writes p to the socket; on a lazily armed connection a write
// its deadline cut short goes on from where it stopped (rearm).
func (c *conn) writeRaw(p []byte) (int, error) {
	n, err := c.raw.Write(p)
	if err != nil && c.lazy {
		return c.writeOn(p, n, err)
	}
	return n, err
}

// writeOn goes on with a write that met err after n bytes of p, as long as
// err is an early firing of a lazily armed deadline (rearm).
func (c *conn) writeOn(p []byte, n int, err error) (int, error) {
	tries := 0
	for err != nil && c.rearm(err, false, &tries) {
		var k int
		k, err = c.raw.Write(p[n:])
		n += k
	}
	return n, err
}

// readRC runs f through the socket's RawConn, given the deadline asked for
// first if the socket's, lazily armed, has passed before it (rearm): the
// runtime refuses a RawConn read past the socket's deadline without
// calling f.
func (c *conn) readRC(f func(fd uintptr) bool) error {
	if err := c.rawRC.Read(f); err != nil {
		return c.readRCOn(f, err)
	}
	return nil
}

// readRCOn runs f again after err while err is an early firing of a lazily
// armed deadline (rearm).
func (c *conn) readRCOn(f func(fd uintptr) bool, err error) error {
	tries := 0
	for err != nil && c.rearm(err, true, &tries) {
		err = c.rawRC.Read(f)
	}
	return err
}
