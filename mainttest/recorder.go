package mainttest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Recorder wraps a dial function and records every connection a client
// makes through it, from the client's side: where it landed, when, what the
// client wrote and when the client closed it. It is the evidence the
// endpoints cannot give: which connections a client discarded itself, and
// when the last one to a node went. It is safe for concurrent use.
type Recorder struct {
	next   func(ctx context.Context, network, addr string) (net.Conn, error)
	failed atomic.Int64

	mu    sync.Mutex // guards conns
	conns []*RecordedConn
}

// RecordedConn is one connection a Recorder saw.
type RecordedConn struct {
	net.Conn
	// Remote is the address the connection reached.
	Remote string
	// Dialed is when the dial returned.
	Dialed  time.Time
	written atomic.Int64
	closed  atomic.Int64 // unix nanoseconds; 0 while open
}

// NewRecorder returns a Recorder dialling through next (for example
// Emulator.Dialer()).
func NewRecorder(next func(ctx context.Context, network, addr string) (net.Conn, error)) *Recorder {
	return &Recorder{next: next}
}

// Dial dials through the next dial function and records the connection: use
// it as redis.Options.Dialer.
func (r *Recorder) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := r.next(ctx, network, addr)
	if err != nil {
		r.failed.Add(1)
		return nil, err
	}
	rc := &RecordedConn{Conn: c, Remote: c.RemoteAddr().String(), Dialed: time.Now()}
	r.mu.Lock()
	r.conns = append(r.conns, rc)
	r.mu.Unlock()
	if _, ok := c.(syscall.Conn); ok {
		return recordedSocket{rc}, nil
	}
	return rc, nil
}

// Failed returns how many dials failed.
func (r *Recorder) Failed() int64 { return r.failed.Load() }

// Conns returns the connections recorded so far, in dial order.
func (r *Recorder) Conns() []*RecordedConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*RecordedConn(nil), r.conns...)
}

// OpenTo counts the connections to addr that the client has not closed.
func (r *Recorder) OpenTo(addr string) int {
	n := 0
	for _, c := range r.Conns() {
		if c.Remote == addr && !c.IsClosed() {
			n++
		}
	}
	return n
}

// NetConn returns the connection the RecordedConn records.
func (c *RecordedConn) NetConn() net.Conn { return c.Conn }

// Write counts the bytes the client writes.
func (c *RecordedConn) Write(p []byte) (int, error) {
	c.written.Add(int64(len(p)))
	return c.Conn.Write(p)
}

// Close records when the client closed the connection.
func (c *RecordedConn) Close() error {
	c.closed.CompareAndSwap(0, time.Now().UnixNano())
	return c.Conn.Close()
}

// Written returns how many bytes the client wrote: 0 means the connection
// never carried a command, not even go-redis's handshake.
func (c *RecordedConn) Written() int64 { return c.written.Load() }

// IsClosed reports whether the client closed the connection.
func (c *RecordedConn) IsClosed() bool { return c.closed.Load() != 0 }

// Closed returns when the client closed the connection; the zero time while
// it is open.
func (c *RecordedConn) Closed() time.Time {
	if ns := c.closed.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// recordedSocket is a RecordedConn over a connection with a socket: it
// hands the socket on (SyscallConn), so that the client's health checks
// (go-redis's, maint's) look at it under the recorder as they would
// without it.
type recordedSocket struct{ *RecordedConn }

// SyscallConn returns the socket's RawConn.
func (c recordedSocket) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}
