package maint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/maintkit/maint/classify"
	"github.com/maintkit/maint/internal/resp"
)

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dialVia returns the dial path through the Maint: route (a successor pin),
// dial, check the successor's TLS identity, judge the new connection while a
// handoff is on, and wrap it.
func (m *Maint) dialVia(next dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if m.ctx.Err() != nil {
			return next(ctx, network, addr)
		}
		t := m.target(addr)
		t.next.Store(&next)
		for {
			dialAddr, pinned := t.route(time.Now())
			raw, err := next(ctx, network, dialAddr)
			if err != nil {
				if pinned {
					return nil, fmt.Errorf("maint: dial successor %s of %s: %w", dialAddr, addr, err)
				}
				return nil, err
			}
			if c, ok := raw.(*conn); ok {
				return c, nil // already ours: Configure's dialer under AddHook's
			}
			if pinned {
				if err := verifySuccessor(ctx, raw, addr); err != nil {
					_ = raw.Close()
					return nil, fmt.Errorf("%w: %s for %s: %w", ErrSuccessorRejected, dialAddr, addr, err)
				}
			}
			remote := remoteString(raw)
			if remote != "" {
				t.lastRemote.Store(&remote)
			}
			if r := t.run.Load(); r != nil {
				switch r.judge(remote) {
				case classify.Doomed:
					_ = raw.Close()
					m.c.doomed.Add(1)
					m.emit(Event{Kind: EventDoomed, Node: r.n.key, Seq: r.seq, Detail: "landed on " + remote})
					if err := r.waitChange(ctx); err != nil {
						return nil, err
					}
					continue
				case classify.Replacement:
					r.sawReplacement(remote)
				}
			}
			return m.wrap(t, raw, remote), nil
		}
	}
}

// verifySuccessor makes a TLS connection to a successor prove the original
// server name: a MOVING sends the client's credentials elsewhere, and only a
// certificate valid for the name the application configured may receive them.
func verifySuccessor(ctx context.Context, raw net.Conn, original string) error {
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
	host, _, err := net.SplitHostPort(original)
	if err != nil {
		host = original
	}
	if len(st.PeerCertificates) == 0 {
		return errors.New("no peer certificate")
	}
	return st.PeerCertificates[0].VerifyHostname(host)
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
	m      *Maint
	t      *target
	n      *node
	id     uint64
	remote string

	state atomic.Uint32
	owed  atomic.Int64 // commands written minus replies read
	sub   atomic.Bool  // subscribed: replies are pushes, nothing is owed
	// checking is set by SyscallConn, the pool's health check, and cleared by
	// the next deadline or write: while set, a read must not block, because
	// the check peeks with no deadline and a stripped notification would
	// otherwise leave it waiting for bytes that never come.
	checking atomic.Bool
	// The deadlines go-redis asked for (unix nanoseconds, 0 for none), kept so
	// that relaxation starting mid-read can extend a deadline already set.
	readDL, writeDL atomic.Int64

	rd resp.Stripper
	wr resp.CmdScanner

	closeOnce sync.Once
	closeErr  atomic.Pointer[error] // why the Maint closed it
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
	c := &conn{raw: raw, m: m, t: t, id: m.nextID.Add(1), remote: remote}
	c.rd.Strip = isMaintenance
	c.rd.OnStripped = c.onNotification
	c.rd.OnReply = c.onReply
	c.rd.OnMalformed = c.onMalformedReply
	c.wr.OnCommand = c.onCommand
	c.wr.OnMalformed = c.onMalformedCommand
	m.register(c, key)
	return c
}

func isMaintenance(name []byte) bool {
	_, ok := resp.KindOf(name)
	return ok
}

func (c *conn) onReply() { c.owed.Add(-1) }

func (c *conn) onCommand(cmd *resp.Cmd) {
	switch cmd.Kind {
	case resp.CmdSubscribe, resp.CmdMonitor:
		c.sub.Store(true)
	case resp.CmdUnsubscribe:
		// Replies to unsubscribes are pushes too; the connection may leave
		// subscriber mode, but go-redis keeps pub/sub connections apart.
	default:
		if !c.sub.Load() {
			c.owed.Add(1)
		}
	}
}

func (c *conn) onMalformedReply(err error) {
	c.m.c.malformed.Add(1)
	c.m.logf("maint: %s: reply stream cannot be framed, passing it through: %v", c.remote, err)
	c.m.emit(Event{Kind: EventMalformed, Node: c.n.key, Detail: err.Error()})
}

func (c *conn) onMalformedCommand(err error) {
	c.m.logf("maint: %s: command stream cannot be framed: %v", c.remote, err)
}

// Read returns the server's bytes minus maintenance notifications.
func (c *conn) Read(p []byte) (int, error) {
	if c.checking.Load() {
		// Inside the pool's health check: only what is there already.
		_ = c.raw.SetReadDeadline(time.Now().Add(2 * time.Millisecond))
		n, err := c.rd.Read(c.raw, p)
		_ = c.raw.SetReadDeadline(time.Time{})
		return n, c.readErr(err)
	}
	n, err := c.rd.Read(c.raw, p)
	return n, c.readErr(err)
}

func (c *conn) readErr(err error) error {
	if err == nil {
		return nil
	}
	if why := c.closeErr.Load(); why != nil {
		return fmt.Errorf("%w (%w)", *why, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() && (c.draining() || c.n.relaxing()) {
		return &TimeoutError{Node: c.n.key, Relaxed: c.m.s.relaxed, Err: err}
	}
	return err
}

// Write counts the commands in p and writes it.
func (c *conn) Write(p []byte) (int, error) {
	c.checking.Store(false)
	c.wr.Scan(p)
	n, err := c.raw.Write(p)
	return n, c.readErr(err)
}

// Close closes the connection and forgets it.
func (c *conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.state.Store(stateClosed)
		c.m.unregister(c)
		err = c.raw.Close()
	})
	return err
}

// closeWith closes the connection on the Maint's initiative, so that a read
// or write failing under it reports why. It reports whether this call closed it.
func (c *conn) closeWith(why error) bool {
	c.closeErr.CompareAndSwap(nil, &why)
	closed := false
	c.closeOnce.Do(func() {
		closed = true
		c.state.Store(stateClosed)
		c.m.unregister(c)
		_ = c.raw.Close()
	})
	return closed
}

// retire takes the connection out of circulation (refuse) or fences it; it
// reports whether this call changed its state.
func (c *conn) retire(refuse bool) bool {
	if !refuse {
		return c.state.CompareAndSwap(stateActive, stateFenced)
	}
	return c.state.CompareAndSwap(stateActive, stateRetired) || c.state.CompareAndSwap(stateFenced, stateRetired)
}

// draining reports whether the connection is fenced or retired.
func (c *conn) draining() bool {
	s := c.state.Load()
	return s == stateFenced || s == stateRetired
}

// LocalAddr returns the local address.
func (c *conn) LocalAddr() net.Addr { return c.raw.LocalAddr() }

// RemoteAddr returns the remote address.
func (c *conn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

// SetDeadline sets both deadlines, relaxed where maintenance requires it.
func (c *conn) SetDeadline(t time.Time) error {
	c.checking.Store(false)
	ns := unixNano(t)
	c.readDL.Store(ns)
	c.writeDL.Store(ns)
	return c.raw.SetDeadline(c.floor(t))
}

// SetReadDeadline sets the read deadline, relaxed where maintenance requires it.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.checking.Store(false)
	c.readDL.Store(unixNano(t))
	return c.raw.SetReadDeadline(c.floor(t))
}

// SetWriteDeadline sets the write deadline, relaxed where maintenance requires it.
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.checking.Store(false)
	c.writeDL.Store(unixNano(t))
	return c.raw.SetWriteDeadline(c.floor(t))
}

// refloor re-applies the floor to the deadlines already set: relaxation that
// starts while a command waits for its reply covers that command too.
func (c *conn) refloor() {
	if ns := c.readDL.Load(); ns != 0 {
		_ = c.raw.SetReadDeadline(c.floor(time.Unix(0, ns)))
	}
	if ns := c.writeDL.Load(); ns != 0 {
		_ = c.raw.SetWriteDeadline(c.floor(time.Unix(0, ns)))
	}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// SyscallConn serves go-redis's idle health check. A retired or closed
// connection answers with an error, which makes the pool close it and dial a
// replacement without failing a command. Over TLS, where the socket cannot be
// peeked, it answers "healthy and idle", so TLS clients get the retirement
// check too.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if s := c.state.Load(); s != stateActive && s != stateFenced {
		return nil, ErrRetired
	}
	c.checking.Store(true)
	if sc, ok := c.raw.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return idleRawConn{}, nil
}

// idleRawConn is the RawConn of a connection whose socket is not reachable
// (TLS): it reports nothing to read.
type idleRawConn struct{}

func (idleRawConn) Control(func(fd uintptr)) error { return nil }
func (idleRawConn) Read(func(fd uintptr) bool) error {
	return nil
}
func (idleRawConn) Write(func(fd uintptr) bool) error { return nil }
