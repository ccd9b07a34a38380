package maint

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spareConn is a probe's connection in the spare tests.
type spareConn struct {
	net.Conn // nil: only what the tests call
	remote   string
	closed   atomic.Bool
}

func (c *spareConn) Close() error                     { c.closed.Store(true); return nil }
func (c *spareConn) RemoteAddr() net.Addr             { a, _ := net.ResolveTCPAddr("tcp", c.remote); return a }
func (c *spareConn) SetDeadline(time.Time) error      { return nil }
func (c *spareConn) SetReadDeadline(time.Time) error  { return nil }
func (c *spareConn) SetWriteDeadline(time.Time) error { return nil }

// A probe's connection that landed on a replacement is what the next dial
// of its target returns, without dialling.
func TestSpareIsTakenByTheNextDial(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	const addr = "redis.test:6379"
	raw := &spareConn{remote: "127.0.0.3:6379"}
	m.offerSpare(m.target(addr), raw, raw.remote, dialOpts{})
	var dials atomic.Int64
	dial := m.dialVia(func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return &spareConn{remote: "127.0.0.3:6379"}, nil
	})
	c, err := dial(context.Background(), "tcp", addr)
	require.NoError(t, err)
	assert.Same(t, net.Conn(raw), c.(*conn).raw, "the spare, wrapped")
	assert.Zero(t, dials.Load(), "no dial")
	_, err = dial(context.Background(), "tcp", addr)
	require.NoError(t, err)
	assert.EqualValues(t, 1, dials.Load(), "one spare, taken once")
	st := m.Stats()
	assert.EqualValues(t, 1, st.ProbesReused)
	assert.Zero(t, st.ProbesUnused)
	assert.False(t, raw.closed.Load())
}

// A spare no dial takes is closed after spareTTL; Close closes one still
// waiting; a newer spare replaces (and closes) an older one.
func TestSpareHasAnEnd(t *testing.T) {
	m := New(WithLogf(t.Logf))
	const addr = "redis.test:6379"
	tg := m.target(addr)
	first := &spareConn{remote: "127.0.0.3:6379"}
	m.offerSpare(tg, first, first.remote, dialOpts{})
	second := &spareConn{remote: "127.0.0.3:6379"}
	m.offerSpare(tg, second, second.remote, dialOpts{})
	assert.True(t, first.closed.Load(), "replaced by a newer spare")
	deadline := time.Now().Add(spareTTL + 5*time.Second)
	for !second.closed.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.True(t, second.closed.Load(), "closed after spareTTL, untaken")
	assert.EqualValues(t, 2, m.Stats().ProbesUnused)

	third := &spareConn{remote: "127.0.0.3:6379"}
	m.offerSpare(tg, third, third.remote, dialOpts{})
	require.NoError(t, m.Close())
	assert.True(t, third.closed.Load(), "Close closes a waiting spare")
	late := &spareConn{remote: "127.0.0.3:6379"}
	m.offerSpare(tg, late, late.remote, dialOpts{})
	assert.True(t, late.closed.Load(), "after Close a probe's connection is closed at once")
}
