package maint_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/push"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// The release seam (release.go): maint asks go-redis to let a connection go
// at its next clean turn by putting a push of its own into the read stream,
// before a reply; a handler registered on the client marks the pool
// connection it came on. Checked on go-redis v9.23.0 and v9.24.0.

// testReleaseFrame is a push of a name of the test's own.
const testReleasePush = "test-release"

var testReleaseFrame = []byte(fmt.Sprintf(">1\r\n$%d\r\n%s\r\n", len(testReleasePush), testReleasePush))

// pushingConn puts testReleaseFrame in place of its next read once armed.
type pushingConn struct {
	net.Conn
	armed  atomic.Bool
	closed atomic.Bool
}

func (c *pushingConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func (c *pushingConn) Read(p []byte) (int, error) {
	if len(p) >= len(testReleaseFrame) && c.armed.CompareAndSwap(true, false) {
		return copy(p, testReleaseFrame), nil
	}
	return c.Conn.Read(p)
}

// pushingDialer dials through next and keeps every connection.
type pushingDialer struct {
	next  func(ctx context.Context, network, addr string) (net.Conn, error)
	mu    sync.Mutex
	conns []*pushingConn
}

func (d *pushingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := d.next(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	pc := &pushingConn{Conn: nc}
	d.mu.Lock()
	d.conns = append(d.conns, pc)
	d.mu.Unlock()
	return pc, nil
}

func (d *pushingDialer) dials() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

func (d *pushingDialer) armAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.armed.Store(true)
	}
}

func (d *pushingDialer) last() *pushingConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[len(d.conns)-1]
}

// markingHandler marks the pool connection a push came on, as maint's
// release handler does, and records the net.Conn it wraps.
type markingHandler struct {
	mu   sync.Mutex
	seen []net.Conn
	errs []error
}

func (h *markingHandler) HandlePushNotification(_ context.Context, hctx push.NotificationHandlerContext, _ []interface{}) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	pc, ok := hctx.Conn.(interface {
		GetNetConn() net.Conn
		MarkCloseOnPut(reason string)
		MarkForHandoff(newEndpoint string, seqID int64) error
	})
	if !ok {
		h.errs = append(h.errs, fmt.Errorf("the handler's Conn is a %T, without GetNetConn, MarkCloseOnPut and MarkForHandoff", hctx.Conn))
		return nil
	}
	h.seen = append(h.seen, pc.GetNetConn())
	pc.MarkCloseOnPut("test: released")
	if err := pc.MarkForHandoff("", 0); err != nil {
		h.errs = append(h.errs, err)
	}
	return nil
}

func (h *markingHandler) calls() ([]net.Conn, []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]net.Conn(nil), h.seen...), append([]error(nil), h.errs...)
}

// TestContractReleasePushMarksThePoolConn: a push of a registered name
// read before a command's reply reaches the client's handler with the pool
// connection it came on (its GetNetConn is the dialer's net.Conn), the
// reply is the command's, and the connection marked to close on put is
// removed at its put: the next command dials. A push of a name nobody
// registered (a redis.Conn's own processor, a client maint does not know)
// is dropped, the reply is still the command's, and the connection stays.
func TestContractReleasePushMarksThePoolConn(t *testing.T) {
	ctx := context.Background()
	c := newContract(t)
	d := &pushingDialer{next: c.emu.Dialer()}
	opt := c.options()
	opt.Dialer = d.dial
	rdb := c.client(opt)
	h := &markingHandler{}
	require.NoError(t, rdb.RegisterPushNotificationHandler(testReleasePush, h, false))
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, 1, d.dials())

	d.last().armed.Store(true)
	v, err := rdb.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v, "the reply after the push is the command's")
	seen, errs := h.calls()
	assert.Empty(t, errs)
	require.Len(t, seen, 1, "the handler ran once")
	assert.Same(t, d.last(), seen[0], "GetNetConn is the dialer's connection")
	require.NoError(t, rdb.Ping(ctx).Err())
	assert.Equal(t, 2, d.dials(), "marked to close on put, the connection was removed at its put")

	// No handler for the name: dropped, the connection kept.
	other := c.client(opt)
	require.NoError(t, other.Ping(ctx).Err())
	n := d.dials()
	d.last().armed.Store(true)
	v, err = other.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
	require.NoError(t, other.Ping(ctx).Err())
	assert.Equal(t, n, d.dials(), "a push nobody handles changes nothing")
	assert.False(t, d.last().armed.Load(), "the push was read")
}

// TestContractFullDuplexEndsAMarkedSession: a full-duplex autopipeliner
// whose held connection is marked for handoff (by a push read before a
// reply, as above) ends its session cleanly at its next turn, long before
// FullDuplexMaxHold: its reader drains every reply owed, the connection is
// closed, removed at its put, and the next session serves. No command fails or runs
// twice (retries off: a replay would show as a count above the replies).
func TestContractFullDuplexEndsAMarkedSession(t *testing.T) {
	ctx := context.Background()
	c := newContract(t)
	d := &pushingDialer{next: c.emu.Dialer()}
	opt := c.options()
	opt.Dialer = d.dial
	opt.PoolSize = 4
	opt.ReadTimeout, opt.WriteTimeout = 10*time.Second, 10*time.Second
	rdb := c.client(opt)
	h := &markingHandler{}
	require.NoError(t, rdb.RegisterPushNotificationHandler(testReleasePush, h, false))
	ap, err := rdb.AutoPipelineWithOptions(&redis.AutoPipelineOptions{
		FullDuplex: true, FullDuplexMaxHold: time.Minute, FullDuplexIdleTimeout: time.Minute,
	})
	require.NoError(t, err)
	defer func() { _ = ap.Close() }()

	l := startIncrOp(16, "fdc:", 1, func(key string) (int64, error) { return ap.Incr(ctx, key).Result() })
	defer l.stop()
	acked := func() (n int64) {
		for w := range l.acked {
			n += l.acked[w].Load()
		}
		return n
	}
	waitUntil(t, "load", func() bool { return acked() > 2000 })
	// Every connection armed: the session's (whichever pool it came
	// from) reads the push; an idle spare reads nothing.
	d.armAll()
	start := time.Now()
	waitUntil(t, "the push read by the session", func() bool { seen, _ := h.calls(); return len(seen) > 0 })
	seen, _ := h.calls()
	marked, _ := seen[0].(*pushingConn)
	require.NotNil(t, marked)
	waitUntil(t, "the marked session's end", func() bool { return marked.closed.Load() })
	took := time.Since(start)
	base := acked()
	waitUntil(t, "load on the next session", func() bool { return acked() > base+2000 })
	l.stop()

	_, errs := h.calls()
	assert.Empty(t, errs)
	assert.Less(t, took, 30*time.Second, "ended by the mark, not by FullDuplexMaxHold (1 min)")
	l.check(t, c.emu.Miniredis(), "fdc:") // nothing failed, every INCR ran once
}
