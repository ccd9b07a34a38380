package main

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/maintkit/maint"
)

// wireTimeouts counts the reads and writes that timed out on a client's
// connections, apart by whether maint had relaxed the node's timeouts at
// the time (between its EventRelaxOn and EventRelaxOff for the node). A
// timeout on a node maint had not relaxed is one no relaxation was asked
// to prevent: before any maintenance, only a machine too busy to answer
// within ReadTimeout makes one, and go-redis (not maint) fails the command
// or, with retries, runs it again. For a control every timeout counts as
// not relaxed.
type wireTimeouts struct {
	next func(ctx context.Context, network, addr string) (net.Conn, error)

	mu      sync.Mutex
	relaxed map[string]bool // node address → relaxed now

	unrelaxed, whileRelaxed atomic.Int64
}

func newWireTimeouts(next func(ctx context.Context, network, addr string) (net.Conn, error)) *wireTimeouts {
	return &wireTimeouts{next: next, relaxed: map[string]bool{}}
}

// event follows maint's relaxation of each node (a maint.WithOnEvent
// callback).
func (w *wireTimeouts) event(e maint.Event) {
	switch e.Kind {
	case maint.EventRelaxOn:
		w.mu.Lock()
		w.relaxed[e.Node] = true
		w.mu.Unlock()
	case maint.EventRelaxOff:
		w.mu.Lock()
		delete(w.relaxed, e.Node)
		w.mu.Unlock()
	}
}

// note counts a timeout on a connection to node.
func (w *wireTimeouts) note(node string) {
	w.mu.Lock()
	relaxed := w.relaxed[node]
	w.mu.Unlock()
	if relaxed {
		w.whileRelaxed.Add(1)
	} else {
		w.unrelaxed.Add(1)
	}
}

// dial is the client's Dialer: the connection keeps its syscall.Conn, so
// that go-redis's and maint's idle checks see the socket as they would.
func (w *wireTimeouts) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := w.next(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if sc, ok := c.(syscall.Conn); ok {
		return &timeoutSysConn{timeoutConn: timeoutConn{Conn: c, w: w, node: addr}, sc: sc}, nil
	}
	return &timeoutConn{Conn: c, w: w, node: addr}, nil
}

// timeoutConn counts the timeouts of a command's deadline: one set at
// least commandDeadline ahead. go-redis's probes of a connection (a push
// drain, a peek) set deadlines of a few milliseconds and meet them as a
// matter of course; they are not counted.
type timeoutConn struct {
	net.Conn
	w                   *wireTimeouts
	node                string
	longRead, longWrite atomic.Bool
}

// commandDeadline is the shortest deadline counted: shorter than any
// ReadTimeout the demo runs with, longer than go-redis's probes'.
const commandDeadline = 100 * time.Millisecond

func long(t time.Time) bool { return !t.IsZero() && time.Until(t) >= commandDeadline }

func (c *timeoutConn) SetDeadline(t time.Time) error {
	c.longRead.Store(long(t))
	c.longWrite.Store(long(t))
	return c.Conn.SetDeadline(t)
}

func (c *timeoutConn) SetReadDeadline(t time.Time) error {
	c.longRead.Store(long(t))
	return c.Conn.SetReadDeadline(t)
}

func (c *timeoutConn) SetWriteDeadline(t time.Time) error {
	c.longWrite.Store(long(t))
	return c.Conn.SetWriteDeadline(t)
}

func (c *timeoutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.longRead.Load() {
		c.w.note(c.node)
	}
	return n, err
}

func (c *timeoutConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.longWrite.Load() {
		c.w.note(c.node)
	}
	return n, err
}

type timeoutSysConn struct {
	timeoutConn
	sc syscall.Conn
}

func (c *timeoutSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
