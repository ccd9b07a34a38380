package maint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/maintkit/maint/handoff"
	"github.com/maintkit/maint/internal/resp"
)

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dialKey marks a context whose dial already goes through a Maint's dial
// path: Configure's dialer under AddHook's DialHook, or a DNS probe. The
// inner layer then steps aside, so that every dial is routed, judged and
// wrapped once, for the configured address.
type dialKey struct{}

// dialCtx is the value under dialKey: the Maint whose dial path is under
// way, and what an inner layer of the same Maint (Configure's dialer)
// knows of the client's connections, handed out to the outer one.
type dialCtx struct {
	m *Maint
	o dialOpts
}

// innerDial reports whether ctx's dial is already under way through m's
// dial path, and hands m's layer the options o.
func (m *Maint) innerDial(ctx context.Context, o dialOpts) bool {
	dc, ok := ctx.Value(dialKey{}).(*dialCtx)
	if !ok || dc.m != m {
		return false
	}
	dc.o.tls = dc.o.tls || o.tls
	dc.o.inject = dc.o.inject || o.inject
	if dc.o.tlsName == "" {
		dc.o.tlsName = o.tlsName
	}
	return true
}

// dialVia returns the dial path through the Maint: route (a successor pin),
// dial, check the successor's TLS identity, judge the new connection against
// every handoff in progress, and wrap it.
func (m *Maint) dialVia(next dialFunc) dialFunc { return m.dialWith(next, dialOpts{}) }

// dialOpts are what the options route knows of the client's connections.
type dialOpts struct {
	tls    bool // the client uses TLS
	inject bool // opt each connection in on the wire (handshake.go)
	// tlsName is the client's TLSConfig.ServerName: the name go-redis's
	// connections verify, when set (else the host of the address).
	tlsName string
}

// dialWith is dialVia with what the options route knows.
func (m *Maint) dialWith(next dialFunc, o dialOpts) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if m.stopped.Load() || m.innerDial(ctx, o) {
			return next(ctx, network, addr)
		}
		t := m.target(addr)
		t.next.Store(&next)
		if cs := m.s.cluster; cs != nil {
			cs.noteDial(m, addr)
		}

		dc := &dialCtx{m: m, o: o}
		ctx = context.WithValue(ctx, dialKey{}, dc)
		quick := 0 // immediate retries after a doomed landing while a replacement can be had
		for {
			dialAddr, via := t.route(time.Now())
			pinned := via != nil
			var raw net.Conn
			var err error
			if sp := t.takeSpare(); sp != nil {
				// A probe's connection that landed on a replacement
				// (spare.go): what a dial of the configured address gives.
				raw, pinned, via = sp.raw, false, nil
				dc.o.tls = dc.o.tls || sp.o.tls
				dc.o.inject = dc.o.inject || sp.o.inject
				m.c.sparesTaken.Add(1)
			} else {
				raw, err = next(ctx, network, dialAddr)
			}
			opts := dc.o // with what an inner layer knows
			if opts.tls && !t.tlsOn.Load() {
				t.tlsOn.Store(true)
			}
			if err != nil {
				if pinned && !time.Now().Before(via.window) && t.pin.CompareAndSwap(via, nil) {
					continue // past its window, a successor that does not answer is not worth keeping
				}
				var verr *tls.CertificateVerificationError
				if pinned && errors.As(err, &verr) {
					// The dialer's own TLS handshake refused the successor's
					// certificate (TLSConfig.ServerName set, or
					// defaultDialer): the same refusal as verifySuccessor's.
					return nil, m.rejectSuccessor(t, via, dialAddr, addr, err)
				}
				var oerr *net.OpError
				if pinned && errors.As(err, &oerr) && oerr.Op == "dial" && ctx.Err() == nil {
					// The successor does not accept connections (refused,
					// unreachable): refused as a successor is, so the handoff
					// goes on as a null endpoint's, and this dial goes to the
					// configured address, whose node serves until the last
					// call. Returned to the pool instead, every dial through
					// the pin failed and PoolSize of them tripped its dial
					// breaker: about a million commands failed in a 2 s window.
					_ = m.rejectSuccessor(t, via, dialAddr, addr, err)
					continue
				}
				if pinned {
					return nil, fmt.Errorf("maint: dial successor %s of %s: %w", dialAddr, addr, err)
				}
				if r := m.refusedByRetired(t, err); r != nil {
					// The configured address still leads to the node being
					// retired (DNS lags the move), which no longer accepts:
					// a doomed dial like a landing there. Returned to the
					// pool, PoolSize such errors trip its dial breaker and
					// every command fails fast, held ones once released,
					// until its next probe dial a second later.
					m.c.doomed.Add(1)
					r.tally.doomed.Add(1)
					m.emit(Event{Kind: EventDoomed, Node: r.n.key, Seq: r.seq, Detail: "refused by " + r.n.key})
					if err := r.afterDoomed(ctx, &quick); err != nil {
						return nil, err
					}
					continue
				}
				return nil, err
			}
			if c, ok := raw.(*conn); ok {
				return c, nil // another Maint's: one client, two Maints
			}
			remote := remoteString(raw)
			if t.tlsOn.Load() && !tlsInspectable(raw) {
				t.opaque.Store(true)
			}
			if !pinned {
				t.learnTLSName(raw)
			}
			if pinned {
				err := m.landing(via, remote)
				if err == nil {
					err = verifySuccessor(ctx, raw, t.tlsName(opts))
				}
				if err != nil {
					_ = raw.Close()
					return nil, m.rejectSuccessor(t, via, dialAddr, addr, err)
				}
			}
			if pinned {
				via.landed.Store(&remote)
				if !time.Now().Before(via.window) {
					via.dialedAfter.Store(true)
				}
			}
			if remote != "" {
				t.lastRemote.Store(&remote)
			}
			r, replaced := m.judge(t, remote)
			if r != nil {
				_ = raw.Close()
				m.c.doomed.Add(1)
				r.tally.doomed.Add(1)
				m.emit(Event{Kind: EventDoomed, Node: r.n.key, Seq: r.seq, Detail: "landed on " + remote})
				if pinned && t.pin.CompareAndSwap(via, nil) {
					// The pin leads to a node being retired (it names it, or
					// that successor is now moving itself): it is stale, and
					// the configured address may do better.
					continue
				}
				if err := r.afterDoomed(ctx, &quick); err != nil {
					return nil, err
				}
				continue
			}
			for _, r := range replaced {
				r.sawReplacement(remote)
			}
			c := m.wrap(t, raw, remote)
			if opts.inject {
				c.prepareHandshake(ctx, opts.tls)
			}
			return c, nil
		}
	}
}

// rejectSuccessor drops the pin via, whose successor dialAddr a dial of
// addr refused for err, and goes on with the handoff as for a null endpoint
// (successorRefused), once per pin; it returns the dial's error.
func (m *Maint) rejectSuccessor(t *target, via *pin, dialAddr, addr string, err error) error {
	if t.pin.CompareAndSwap(via, nil) {
		m.warn("successor rejected", "successor", dialAddr, "node", addr, "detail", err.Error())
		m.successorRefused(t, via, err.Error())
	}
	return fmt.Errorf("%w: %s for %s: %w", ErrSuccessorRejected, dialAddr, addr, err)
}

// afterDoomed is what a dial does once the retiring node refused it or it
// landed there: while a replacement can be had (DNS names several nodes, or
// has just moved) it dials again at once, up to maxQuickRedials times
// (counted in quick); past them, or with no replacement yet, it waits for
// the handoff to change or a probe interval.
func (r *run) afterDoomed(ctx context.Context, quick *int) error {
	if r.h.Phase() == handoff.Draining && *quick < maxQuickRedials {
		*quick++
		return nil
	}
	return r.waitChange(ctx)
}

// maxQuickRedials bounds the immediate redials after doomed landings while
// a replacement can be had; past it a dial waits a probe interval between
// tries.
const maxQuickRedials = 3

// tlsInspectable reports whether c shows its TLS state.
func tlsInspectable(c net.Conn) bool {
	_, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	return ok
}

// tlsName is the name the target's connections verify, which a successor
// must prove: what go-redis verifies, TLSConfig.ServerName when set (known
// on the options route, else learned from the target's own connections),
// else the host of the configured address.
func (t *target) tlsName(o dialOpts) string {
	if o.tlsName != "" {
		return o.tlsName
	}
	if p := t.learnedName.Load(); p != nil {
		return *p
	}
	host, _, err := net.SplitHostPort(t.addr)
	if err != nil {
		return t.addr
	}
	return host
}

// learnTLSName records the server name a TLS connection of the target (not
// a successor's) sent and verified: crypto/tls sends TLSConfig.ServerName,
// or the host dialled when it is empty (never an IP address).
func (t *target) learnTLSName(raw net.Conn) {
	tc, ok := raw.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return
	}
	st := tc.ConnectionState()
	if !st.HandshakeComplete || st.ServerName == "" {
		return
	}
	if p := t.learnedName.Load(); p == nil || *p != st.ServerName {
		name := st.ServerName
		t.learnedName.Store(&name)
	}
}

// verifySuccessor makes a TLS connection to a successor prove the original
// server name (name: see target.tlsName): a MOVING sends the client's
// credentials elsewhere, and only a certificate valid for the name the
// client verifies may receive them.
func verifySuccessor(ctx context.Context, raw net.Conn, name string) error {
	tc, ok := raw.(interface {
		ConnectionState() tls.ConnectionState
		HandshakeContext(context.Context) error
	})
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	if !st.HandshakeComplete {
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		st = tc.ConnectionState()
	}
	if len(st.PeerCertificates) == 0 {
		return errors.New("no peer certificate")
	}
	return st.PeerCertificates[0].VerifyHostname(name)
}

// Connection states.
//
//	active ──retire──▶ retired ──drain cap──▶ closed
//	   │                  ▲
//	   └──fence──▶ fenced ┘ (a replacement appears)
//
// A fenced connection belongs to a node whose window is ending with no
// replacement to be had: new commands are held before they reach the pool,
// and the few already past the hold may still use it until the drain cap. A
// retired connection is refused to the pool at once.
const (
	stateActive uint32 = iota
	stateFenced
	stateRetired
	stateClosed
	// stateClosing: the drain cap is deciding whether a fenced or retired
	// connection may be closed (see closeIfClosable); it goes back to its
	// state or on to closed.
	stateClosing
)

// conn wraps every connection of the client. Reading, it removes maintenance
// notifications from the stream (so go-redis's built-in handler never sees
// them), acts on them, and counts replies; writing, it counts commands, so it
// knows what the server still owes. Its SyscallConn is how go-redis's pool
// asks whether a connection may be reused: a retired one answers no.
//
// go-redis reads a connection from one goroutine at a time, and never while
// it runs the health check; writes may run concurrently with the health
// check under full-duplex autopipelining. Counters are atomic.
type conn struct {
	raw    net.Conn
	rawRd  io.Reader // raw, converted once: a conversion per Read looks its itab up
	m      *Maint
	t      *target
	n      *node
	remote string

	state atomic.Uint32
	told  atomic.Bool // it read a MOVING of its node itself (onMoving)
	// What the server owes (see owed): commands written, counted as they
	// are written (before the bytes leave, so the count is never behind),
	// and complete replies read. wr is the writer's counter; lastBlocking
	// tells whether the last command written blocks server-side; lost, that
	// the written stream could not be counted (what is owed is unknown).
	wr           resp.Written
	written      atomic.Uint64
	replies      atomic.Uint64
	lastBlocking atomic.Bool
	lost         atomic.Bool
	sub          atomic.Bool // a subscriber: its replies are pushes, it has nothing in flight
	// checking is set by SyscallConn, the pool's health check, and cleared by
	// the next deadline or write: while set, a read must not block, because
	// the check peeks with no deadline and a stripped notification would
	// otherwise leave it waiting for bytes that never come.
	checking atomic.Bool
	// shard is what the connection is subscribed to with SSUBSCRIBE, on a
	// cluster node client; nil until one is written (clusterpubsub.go).
	shard atomic.Pointer[shardConn]
	// The deadlines: what go-redis asked for and what the socket has (see
	// deadline.go), so that relaxation starting mid-read can extend a
	// deadline already set, and a peek can restore one.
	rdl, wdl deadline

	rd resp.Stripper

	// The health check (see SyscallConn). rawRC is the socket's RawConn,
	// fetched once; check is the RawConn handed to go-redis; peekFn and
	// peekState are the non-allocating callback and its result. win is the
	// window peeked when bytes are waiting (allocated the first time).
	rawRC     syscall.RawConn
	check     checkRawConn
	peekFn    func(fd uintptr) bool
	peekState uint8
	peekBuf   [1]byte
	// lazy: the socket is plain TCP, and its deadlines are armed lazily
	// (deadline.go, lazySlack); set once, at wrap.
	lazy bool
	// awaitOptIn: the opt-in was written behind HELLO and its reply not
	// read yet (readOptInReply). Written and read by go-redis's goroutine of
	// the connection's handshake, then by its reader only.
	awaitOptIn bool
	win        *window

	// inject is the opt-in to write behind go-redis's first command (see
	// handshake.go); written by the writer only, before and at that write.
	inject  []byte
	optedIn atomic.Bool // the server answered the opt-in with +OK
	// carried: the connection has carried a command of the application
	// (anything but its handshake's); optInAt is the number of replies the
	// Stripper had counted when the opt-in's reply was read, plus one (0:
	// not opted in yet). See handshake.go, noteHandshakeWrite and replayed.
	carried   atomic.Bool
	optInAt   atomic.Uint64
	optInTime atomic.Int64 // mono: when the opt-in was written or its reply read
	optInSent atomic.Int64 // mono: when the opt-in was written
	hsLead    *hsState     // the endpoint's opt-in others wait for is this one's (guarded by handshakes.mu)

	// rl: the drain cap left it open (its next write waits for what is
	// owed, then closes it: drainBeforeWrite), or asked go-redis to let it
	// go at its next clean turn (release.go).
	rl connRelease

	closeOnce  sync.Once
	closeErr   atomic.Pointer[error] // why the Maint closed it
	idleClosed atomic.Bool           // the Maint closed it owing nothing (notWritten)
	peerClosed atomic.Bool           // a read met the server's close (io.EOF): see closedConn
}

var (
	_ net.Conn     = (*conn)(nil)
	_ syscall.Conn = (*conn)(nil)
)

func (m *Maint) wrap(t *target, raw net.Conn, remote string) *conn {
	key := remote
	if key == "" {
		key = "?" + t.addr
	}
	c := &conn{raw: raw, rawRd: raw, m: m, t: t, remote: remote}
	if armsLazily(raw) {
		c.lazy = true
		c.rawRd = lazyReader{c}
	}
	c.rd.H = (*streamEvents)(c)
	c.check.c = c
	c.peekFn = c.peek
	m.register(c, key)
	return c
}

// armsLazily reports whether raw's deadlines may be armed lazily
// (deadline.go, lazySlack): a bare TCP socket, whose deadline errors are
// os.ErrDeadlineExceeded and whose reads and writes go on after one. A
// wrapper may buffer, or break on a timeout, as crypto/tls does on a
// write's: its deadlines go on as asked. The tests widen it to the
// recording wrapper they dial through (export_test.go).
var armsLazily = func(raw net.Conn) bool {
	_, ok := raw.(*net.TCPConn)
	return ok
}

// streamEvents is a connection as the Handler of its Stripper: a
// conversion, not a closure per event.
type streamEvents conn

// Strip reports whether a push is a maintenance notification (see strip).
func (e *streamEvents) Strip(name []byte) bool { return (*conn)(e).strip(name) }

// Stripped acts on a stripped notification.
func (e *streamEvents) Stripped(frame []byte) { (*conn)(e).onNotification(frame) }

// Oversize reports a notification too large to act on.
func (e *streamEvents) Oversize(name []byte, size int64) { (*conn)(e).onOversize(name, size) }

// Dropped receives the reply to maint's own opt-in (handshake.go).
func (e *streamEvents) Dropped(frame []byte) { (*conn)(e).onHandshakeReply(frame) }

// Malformed reports a reply stream that cannot be framed.
func (e *streamEvents) Malformed(err error) { (*conn)(e).onMalformedReply(err) }

// strip reports whether a push is a maintenance notification to remove
// from the stream: all seven names, until the Maint is closed. It is called
// once per push frame, never for replies nor for a pub/sub message (the
// Stripper passes those on unasked); a subscription's confirmation, which
// comes before any message, marks the connection as a subscriber on the way.
func (c *conn) strip(name []byte) bool {
	if _, ok := resp.KindOf(name); ok {
		return !c.m.stopped.Load()
	}
	if !c.sub.Load() && isSubscription(name) {
		c.sub.Store(true)
	}
	if len(name) == 12 && c.shard.Load() != nil && string(name) == "sunsubscribe" {
		c.onSunsubscribe() // sharded pub/sub follows its slot (clusterpubsub.go)
	}
	return false
}

// isSubscription reports whether a push name is a RESP3 subscription's
// confirmation, which makes its connection a subscriber's.
func isSubscription(name []byte) bool {
	switch string(name) {
	case "subscribe", "psubscribe", "ssubscribe":
		return true
	}
	return false
}

// countReplies publishes the replies the Stripper has counted, once per
// Read rather than once per reply: go-redis sees a reply only when Read
// returns, and a count read meanwhile (by the drain cap) errs on the side
// of owed.
func (c *conn) countReplies() {
	if r := c.rd.Replies(); r != c.replies.Load() {
		c.replies.Store(r)
	}
}

// onOversize counts and reports a maintenance push larger than maint
// buffers: it is removed from the stream like any other, but not acted on.
func (c *conn) onOversize(name []byte, size int64) {
	c.m.c.oversize.Add(1)
	c.m.emit(Event{Kind: EventMalformed, Node: c.n.key, Detail: fmt.Sprintf("oversize %s push: %d bytes, larger than maint reads: removed, not acted on", name, size)})
}

func (c *conn) onMalformedReply(err error) {
	c.m.c.malformed.Add(1)
	c.m.emit(Event{Kind: EventMalformed, Node: c.n.key, Detail: "reply stream cannot be framed, passing it through: " + err.Error()})
}

// Read returns the server's bytes minus maintenance notifications.
func (c *conn) Read(p []byte) (int, error) {
	if c.checking.Load() && c.checking.Swap(false) {
		// Inside the pool's health check: only what is there already.
		_ = c.raw.SetReadDeadline(time.Now().Add(2 * time.Millisecond))
		n, err := c.rd.Read(c.raw, p) // not rawRd: this deadline is meant to fire
		c.countReplies()
		c.restoreRead()
		return n, c.ioErr(err, nil)
	}
	if c.rl.has(rlAsk) {
		if n, ok := c.putRelease(p); ok { // release.go
			return n, nil
		}
	}
	n, err := c.rd.Read(c.rawRd, p)
	if c.awaitOptIn && err == nil && c.rd.NextIsDropped() {
		n, err = c.readOptInReply(p, n) // handshake.go
	}
	c.countReplies()
	if err != nil {
		return n, c.unusedErr(c.ioErr(err, &c.rdl))
	}
	return n, nil
}

// ioErr is the error of a read or write under deadline d (nil: the health
// check's own): why the Maint closed the connection, if it did, or a
// TimeoutError naming the relaxation when d was relaxed; otherwise err as
// it is.
func (c *conn) ioErr(err error, d *deadline) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		c.peerClosed.Store(true)
		c.onServerClose() // sharded pub/sub (clusterpubsub.go)
	}
	if why := c.closeErr.Load(); why != nil {
		return fmt.Errorf("%w (%w)", *why, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() && d != nil && d.raised() {
		return &TimeoutError{Node: c.n.key, Relaxed: c.m.s.relaxed, Err: err}
	}
	return err
}

// Write writes p, counting its commands first (resp.Written reads their
// headers and steps over payloads), so that what the server owes is never
// under-counted; behind go-redis's first command on the options route it
// writes maint's opt-in (handshake.go).
func (c *conn) Write(p []byte) (int, error) {
	if c.checking.Load() {
		c.checking.Store(false)
	}
	if c.m.s.cluster != nil { // sharded pub/sub follows its slot (clusterpubsub.go)
		if k := shardCommand(p); k != shardNone {
			c.noteShardWrite(k, p)
		}
	}
	k := c.wr.Feed(p)
	if k > 0 {
		// lastBlocking before written: whoever sees the new count sees
		// what the last command is.
		if b := c.wr.LastBlocking(); b != c.lastBlocking.Load() {
			c.lastBlocking.Store(b)
		}
		c.written.Add(uint64(k))
	} else if c.wr.Lost() && !c.lost.Load() {
		c.lost.Store(true)
	}
	// A new connection's first command of the application may be refused
	// (handshake.go, refusesFirstUse): counted first, like a close's.
	if !c.carried.Load() && c.noteHandshakeWrite(p) && c.refusesFirstUse(k) {
		return 0, c.notWritten(c.ioErr(net.ErrClosed, nil))
	}
	// Counted, then the state read: a close at the drain cap either sees the
	// command (and leaves the connection open) or is seen here, and the
	// command stays off the wire (see closeIfClosable).
	if s := c.state.Load(); s >= stateClosed && c.closedUnder() {
		return 0, c.refused(k)
	}
	if !c.m.mis.checked() {
		c.m.noteUnchecked(c)
	}
	if len(p) == 17 && isMonitor(p) {
		c.sub.Store(true)
	}
	if c.inject != nil {
		n, err := c.writeFirst(p, k)
		return n, c.unusedErr(c.ioErr(err, &c.wdl))
	}
	n, err := c.raw.Write(p)
	if err != nil && c.lazy {
		n, err = c.writeOn(p, n, err) // what writeRaw does, off the hot path
	}
	if err != nil {
		return n, c.unusedErr(c.ioErr(err, &c.wdl))
	}
	return n, nil
}

// owed is the number of replies the server still owes, or -1 when it is
// unknown (the written stream could not be counted).
func (c *conn) owed() int64 {
	if c.lost.Load() {
		return -1
	}
	w, r := int64(c.written.Load()), int64(c.replies.Load())
	if r >= w {
		return 0
	}
	return w - r
}

// settled returns the connection's state once no close decision (the drain
// cap's, or a failover connection's) is under way: that decision's outcome.
func (c *conn) settled() uint32 {
	s := c.state.Load()
	for s == stateClosing {
		runtime.Gosched()
		s = c.state.Load()
	}
	return s
}

// closedUnder waits out a drain-cap decision under way and reports whether
// the connection is closed.
func (c *conn) closedUnder() bool { return c.settled() == stateClosed }

// closeIfClosable closes a fenced or retired connection if maint may (see
// closable), and reports whether this call closed it, and whether it was
// left open for an owed reply and, if so, whether that reply is a blocking
// command's. The decision and a concurrent Write are ordered: the state is
// marked closing before what is owed is read, and Write counts a command
// before it reads the state, so either the decision sees the command or Write
// sees the close and keeps the command off the wire. Without that, a command
// written between the decision and the socket's close would have its reply
// cut and go-redis would run it again.
//
// With keepUnused, a connection told of the MOVING in its handshake that
// has carried no command of the application yet is left as it is: it is
// most likely in go-redis's hand, between its handshake and the command it
// was dialled for, and that command decides (refusesFirstUse moves it to
// another connection; a WATCH or a subscription runs where it is, which a
// close here would fail). Idle in the pool, it is refused at its next turn,
// or closed by the server at the window's end with nothing on it.
func (c *conn) closeIfClosable(why error, keepUnused bool) (closed, owed, blocking bool) {
	var s uint32
	for {
		s = c.state.Load()
		if s != stateFenced && s != stateRetired {
			return false, false, false
		}
		if c.state.CompareAndSwap(s, stateClosing) {
			break
		}
	}
	if keepUnused && c.told.Load() && !c.carried.Load() && !c.sub.Load() {
		c.state.CompareAndSwap(stateClosing, s)
		return false, false, false
	}
	// Owed read once: a Write counted since is refused, see refused. A
	// full-duplex connection owing nothing is kept for its release too.
	n := c.owed()
	if !c.closable(n) || n == 0 && c.keptForRelease() { // release.go
		b := c.lastBlocking.Load()
		c.rl.set(rlDrainAtWrite)
		c.askRelease()                          // release.go
		c.state.CompareAndSwap(stateClosing, s) // unless go-redis closed it meanwhile
		return false, true, b
	}
	if n == 0 {
		c.idleClosed.Store(true)
	}
	return c.closeWith(why), false, false
}

// drainWriteWait bounds how long drainBeforeWrite waits for the replies
// owed; drainWritePoll is how often it looks.
const (
	drainWriteWait = 5 * time.Second
	drainWritePoll = 200 * time.Microsecond
)

// drainBeforeWrite is what the write deadline's setter does first on a
// connection the drain cap left open because a reply was owed. go-redis
// sets the write deadline before it writes any byte of a command or a
// batch, so nothing of what comes next is on the wire yet.
//
// Where go-redis was asked to let the connection go (release.go), the
// write goes on: go-redis itself ends the connection at its next clean
// turn. That is the only safe end for a full-duplex autopipeliner's
// connection, written while replies are owed (up to FullDuplexMaxHold,
// 5 s, outside the pool's health check): a close at any of its writes may
// cut replies whose bytes its reader has but has not parsed, and it runs
// such commands again. A release whose push no handler took within
// releaseWait (a redis.Conn's: its own push processor) leaves the
// connection to the close below.
//
// Otherwise the setter waits until every owed reply is read, then closes
// the connection owing nothing, and its error says the write never
// happened (errNotWritten, net.ErrClosed): a held connection (redis.Conn,
// EphemeralConn) writes one command at a time, after it read the reply of
// the one before, and the process hooks run the command again on another
// connection, as at the cap. Bounded by the deadline asked for (at most
// drainWriteWait): past it, or with a stream maint cannot count, the
// write goes on as before.
func (c *conn) drainBeforeWrite(until time.Time) error {
	if f := c.rl.f.Load(); f&rlDrainAtWrite == 0 || f&rlMarked != 0 || c.lost.Load() {
		return nil
	}
	duplex := c.rl.has(rlDuplex) || c.owed() > 0 // full-duplex autopipelining (release.go)
	switch {
	case c.rl.has(rlAsk):
		return nil // the release goes into the read stream before this write's reply
	case c.rl.has(rlSent):
		if duplex || c.waitMarked() {
			return nil // go-redis reads it before the reply owed, or has
		}
	case duplex:
		c.warnUnreleased() // release.go
	}
	if limit := time.Now().Add(drainWriteWait); until.IsZero() || until.After(limit) {
		until = limit
	}
	for {
		closed, owed, _ := c.closeIfClosable(ErrDrainCap, false)
		if closed {
			if c.rl.has(rlSent) {
				c.m.c.releasesUnmarked.Add(1)
			}
			return c.notWritten(c.ioErr(net.ErrClosed, nil))
		}
		if !owed || c.m.stopped.Load() || time.Now().After(until) {
			return nil // closed or put back meanwhile, or out of time: as before
		}
		time.Sleep(drainWritePoll)
	}
}

// refused is the error of a Write kept off the wire because the connection
// closed as it was counted (k commands): errNotWritten when maint closed it
// (closeWith) and nothing else is owed, for then no byte of the command,
// and no command before it, reached the server, whatever the close decided.
// The close may have read what was owed after this Write counted its
// commands, and taken them for owed replies; the Write knows better. With
// other replies owed, an earlier part of the same batch may be on the wire,
// and the error says only why the connection closed.
func (c *conn) refused(k int) error {
	err := c.ioErr(net.ErrClosed, nil)
	if owed := c.owed(); c.closeErr.Load() != nil && owed >= 0 && owed <= int64(k) {
		return fmt.Errorf("%w (%w)", errNotWritten, err)
	}
	return c.notWritten(err)
}

// notWritten marks err, a write-side error (a write, or the write deadline
// go-redis sets before it), as errNotWritten when maint closed the
// connection owing nothing: no command was complete on the wire since (the
// close and Write are ordered, see closeIfClosable), so the command go-redis
// was about to write never reached the server, and the process hooks run it
// again (rerunNotWritten) rather than fail it. The connection is one that
// go-redis took from the pool just before the drain cap closed it.
func (c *conn) notWritten(err error) error {
	if err != nil && c.idleClosed.Load() {
		return fmt.Errorf("%w (%w)", errNotWritten, err)
	}
	return err
}

// unusedErr marks err, the error of a read or write of a connection that
// has carried no command of the application, as errNotWritten when it is
// the server's close (the handshake cut by the close at a window's end, in
// the instant before a replay could say the node is moving): the command
// that needed the connection was never written, and the process hooks run
// it again rather than fail it. Only where they can (the Maint is in the
// client's hooks); go-redis's own retries see the cause through the wrap.
func (c *conn) unusedErr(err error) error {
	if err == nil || c.carried.Load() || !c.m.hooked.Load() || !isServerClose(err) {
		return err
	}
	return fmt.Errorf("%w (%w)", errHandshakeCut, err)
}

// errHandshakeCut is errNotWritten for a connection the server closed in
// its handshake. The command is run again once at most (rerunNotWritten):
// a server that closes every new connection (maxclients, a refusing
// proxy) must not cost a burst of dials per command.
var errHandshakeCut = fmt.Errorf("%w: the server closed the connection in its handshake", errNotWritten)

// isServerClose reports whether err is the server's close of the
// connection (an end of stream, a reset, a broken pipe).
func isServerClose(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// refusesFirstUse closes a connection that a handoff retired (or fenced),
// or that read a MOVING of its node itself, before it carried any command
// of the application, at the write of the first one (k commands, counted
// already; one a rerun can move, see noteHandshakeWrite) past the
// handoff's last call, if nothing else is owed: the command stays off the
// wire and its error says so (errNotWritten), so the process hooks run it
// again on another connection, which the dial path routes as it routes
// every dial during a handoff. Such a connection learned in its handshake
// that its node is moving (the server replays the MOVING of an open window
// to every connection that opts in): past the last call its first command
// would be written to a node whose window may end under it. Before the
// last call the node serves it, as it serves the commands already on
// their way. One the handoff has not retired yet (its driver acts on the
// last call a moment later) but that read the MOVING is on the moving node
// all the same. With no handoff running on the node (a FAILED_OVER's
// retirement, a handoff over) nothing is refused.
func (c *conn) refusesFirstUse(k int) bool {
	if c.sub.Load() || !c.m.hooked.Load() {
		return false
	}
	// A drain-cap decision under way sees this command counted and leaves
	// the connection retired: judged on its outcome, not skipped.
	switch c.settled() {
	case stateRetired, stateFenced:
	case stateActive:
		if !c.told.Load() {
			return false
		}
	default:
		return false
	}
	r := c.n.run.Load()
	if r == nil || time.Now().Before(r.h.LastCall()) {
		return false
	}
	if owed := c.owed(); owed < 0 || owed > int64(k) {
		return false
	}
	c.idleClosed.Store(true)
	if !c.closeWith(ErrRetired) {
		return true // closed meanwhile (go-redis, or the drain cap): not written either way
	}
	c.m.c.doomed.Add(1)
	r.tally.doomed.Add(1)
	c.m.emit(Event{Kind: EventDoomed, Node: c.n.key, Seq: r.seq,
		Detail: "on the moving node past its last call before its first command: the command goes to another connection"})
	return true
}

// closable reports whether maint may close the connection, which owes owed
// replies (read once by the close decision): it owes nothing (idle), or it
// is a subscriber, which owes no reply. A connection that owes
// a reply is never closed by maint, whatever the command: an ordinary one's
// reply comes (closing would make go-redis run it twice), and a blocking one
// (BLPOP q 0, XREAD BLOCK, WAIT, a module's) stays blocked on a node that
// still serves its database until the server closes the connection at the
// window's end; a push meanwhile, through any endpoint of the database,
// unblocks it. After the server's close, go-redis does what it does without
// maint: it retries the command on a new connection, or returns the error.
// Which commands block does not matter here, so maint keeps no table of them
// for this decision.
func (c *conn) closable(owed int64) bool { return c.sub.Load() || owed == 0 }

// Close closes the connection and forgets it.
func (c *conn) Close() error {
	var err error
	c.closeOnce.Do(func() { err = c.shut() })
	return err
}

// shut closes the connection and forgets it: Close and closeWith, once.
func (c *conn) shut() error {
	s := c.state.Swap(stateClosed)
	out := s == stateFenced || s == stateRetired || s == stateClosing
	if out {
		c.n.lastDrained.Store(time.Now().UnixNano())
	}
	c.m.unregister(c)
	c.m.hs.leadGone(c)
	err := c.raw.Close()
	if out {
		c.m.closedConn(c) // outcomes.go
	}
	return err
}

// closeWith closes the connection on the Maint's initiative, so that a read
// or write failing under it reports why. It reports whether this call closed it.
func (c *conn) closeWith(why error) bool {
	c.closeErr.CompareAndSwap(nil, &why)
	closed := false
	c.closeOnce.Do(func() {
		closed = true
		_ = c.shut()
	})
	return closed
}

// retire takes the connection out of circulation (refuse) or fences it; it
// reports whether this call changed its state.
func (c *conn) retire(refuse bool) bool {
	for {
		switch s := c.settled(); {
		case s == stateActive && !refuse:
			if c.state.CompareAndSwap(s, stateFenced) {
				return true
			}
		case (s == stateActive || s == stateFenced) && refuse:
			if c.state.CompareAndSwap(s, stateRetired) {
				return true
			}
		default:
			return false
		}
	}
}

// draining reports whether the connection is fenced or retired.
func (c *conn) draining() bool {
	s := c.state.Load()
	return s == stateFenced || s == stateRetired || s == stateClosing
}

// fenced reports whether the connection is fenced: out of circulation once
// the hold ends, still handed to the commands already past it.
func (c *conn) fenced() bool { return c.state.Load() == stateFenced }

// subscriber reports whether the connection is a subscriber (pub/sub or
// MONITOR): it has nothing in flight, and go-redis reconnects it.
func (c *conn) subscriber() bool { return c.sub.Load() }

// LocalAddr returns the local address.
func (c *conn) LocalAddr() net.Addr { return c.raw.LocalAddr() }

// RemoteAddr returns the remote address.
func (c *conn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

// SyscallConn serves go-redis's idle health check. A retired or closed
// connection answers with an error, which makes the pool close it and dial a
// replacement without failing a command. A usable one answers with a RawConn
// whose Read first looks at the socket itself: a maintenance notification
// waiting on an idle connection (servers replay the latest completion to
// every new connection) is read and acted on there, so that go-redis's peek
// finds the socket empty and keeps the connection, instead of finding bytes
// that then vanish. Over TLS, where the socket cannot be peeked, it answers
// "healthy and idle", so TLS clients get the retirement check too.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if s := c.state.Load(); s != stateActive && s != stateFenced {
		return nil, ErrRetired
	}
	c.checking.Store(true)
	c.m.mis.noteCheck()
	if c.rawRC == nil {
		sc, ok := c.raw.(syscall.Conn)
		if !ok {
			return idleRawConn{}, nil
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return nil, err
		}
		c.rawRC = rc
	}
	return &c.check, nil
}

// Results of peek.
const (
	peekEmpty uint8 = iota + 1 // nothing to read
	peekData                   // bytes waiting
	peekOther                  // closed by the peer, or an error: go-redis judges
)

// checkRawConn is the RawConn go-redis's health check receives.
type checkRawConn struct{ c *conn }

// Control runs f on the socket.
func (r *checkRawConn) Control(f func(fd uintptr)) error { return r.c.rawRC.Control(f) }

// Write runs f on the socket.
func (r *checkRawConn) Write(f func(fd uintptr) bool) error { return r.c.rawRC.Write(f) }

// Read looks at the socket before go-redis's callback f does. With nothing
// to read it returns at once, without calling f: the check's verdict is then
// "healthy", as f would have found, at the cost of one peek, as before.
func (r *checkRawConn) Read(f func(fd uintptr) bool) error {
	c := r.c
	c.peekState = 0
	if err := c.rawRC.Read(c.peekFn); err != nil {
		if err = c.readRCOn(c.peekFn, err); err != nil { // readRC, off the hot path
			return err
		}
	}
	switch c.peekState {
	case peekEmpty:
		return nil
	case peekData:
		if err := c.takeNotifications(); err != nil {
			return err
		}
		if s := c.state.Load(); s != stateActive && s != stateFenced {
			return ErrRetired // what it read retired it
		}
	}
	return c.readRC(f)
}

// maxTaken bounds the window peeked for notifications waiting on an idle
// connection. A larger notification is left to the stream.
const maxTaken = 8 << 10

// takeNotifications takes off the socket the whole maintenance notifications
// at its head (and the reply to maint's own opt-in, when it is owed and
// stands there), and nothing else, and acts on them: go-redis's own look at
// the socket then sees exactly what remains (a reply that should not be
// there, an invalidation for its client-side cache, a partial frame) and
// judges it as it would without maint. It does nothing unless the reply
// stream stands at a frame boundary.
func (c *conn) takeNotifications() error {
	if !c.rd.AtBoundary() {
		return nil
	}
	if c.win == nil {
		c.win = newWindow()
	}
	w := c.win
	w.n = 0
	if err := c.readRC(w.peekFn); err != nil {
		return err
	}
	b := w.buf[:w.n]
	n := 0
	dropAt := -1 // offset of the owed opt-in reply, if it stands among them
	for n < len(b) {
		l := resp.FrameLen(b[n:])
		if l == 0 {
			break
		}
		if name, ok := resp.PushName(b[n : n+l]); ok {
			if !c.strip(name) {
				break
			}
		} else if after, owed := c.rd.DropPending(); dropAt < 0 && owed && after == 0 && b[n] != '>' && b[n] != '|' {
			dropAt = n
		} else {
			break
		}
		n += l
	}
	if n == 0 {
		return nil
	}
	w.want, w.got, w.err = n, 0, nil
	for w.got < w.want {
		if err := c.readRC(w.takeFn); err != nil {
			return err
		}
		if w.err != nil {
			return w.err
		}
	}
	for n := 0; n < w.want; {
		l := resp.FrameLen(w.buf[n:w.want])
		if n == dropAt {
			c.rd.TakeDropped(w.buf[n : n+l])
		} else {
			c.onNotification(w.buf[n : n+l])
		}
		n += l
	}
	return nil
}

// window is what the health check peeks when bytes wait on an idle
// connection (takeNotifications), out of line: most connections never need
// it. peekFn peeks as much of buf as the socket holds (n is how much);
// takeFn takes buf[got:want] off it, err its error.
type window struct {
	buf            []byte
	n, want, got   int
	err            error
	peekFn, takeFn func(fd uintptr) bool
}

// newWindow allocates a window of maxTaken bytes, its callbacks bound once.
func newWindow() *window {
	w := &window{buf: make([]byte, maxTaken)}
	w.peekFn, w.takeFn = w.peek, w.take
	return w
}

// idleRawConn is the RawConn of a connection whose socket is not reachable
// (TLS): it reports nothing to read.
type idleRawConn struct{}

func (idleRawConn) Control(func(fd uintptr)) error { return nil }
func (idleRawConn) Read(func(fd uintptr) bool) error {
	return nil
}
func (idleRawConn) Write(func(fd uintptr) bool) error { return nil }

// probeDial dials t's configured address below every Maint layer, for a
// probe of a handoff (moving.go), and returns the connection, where it
// landed and what an inner layer knew of it; a nil connection if the dial
// failed or t was never dialled.
func (m *Maint) probeDial(t *target) (net.Conn, string, dialOpts) {
	nextp := t.next.Load()
	if nextp == nil {
		return nil, "", dialOpts{}
	}
	m.c.probes.Add(1)
	ctx, cancel := context.WithTimeout(m.ctx, time.Second)
	defer cancel()
	dc := &dialCtx{m: m}
	ctx = context.WithValue(ctx, dialKey{}, dc)
	raw, err := (*nextp)(ctx, "tcp", t.addr)
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

// remoteString is the connection's remote address, or "" when unreadable.
func remoteString(c net.Conn) (s string) {
	defer func() {
		if recover() != nil {
			s = ""
		}
	}()
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}
