package maint

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review: closing a retired connection at the drain cap is decided on what it
// owes at that instant. A command written between that decision and the
// socket's close (a caller that took a fenced connection from the pool, or
// holds a retired one with Conn()) reaches the server, its reply is cut, and
// go-redis retries it: a write run twice (M11). The close must either see the
// command or keep it off the wire.
func TestDrainCapCloseNeverCutsACommandWrittenMeanwhile(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, raw := wrapScript(t, m, nil)
	require.True(t, m.retireConn(c, true))

	// Hold the handshake table's lock so that the close stops between its
	// decision and the socket's close (closeWith takes it on the way).
	m.hs.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.closeRetired(c.n, false)
	}()
	require.Eventually(t, func() bool { return c.state.Load() == stateClosed }, 5*time.Second, time.Millisecond,
		"the close decided")
	_, werr := c.Write([]byte("*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n"))
	m.hs.mu.Unlock()
	<-done

	raw.mu.Lock()
	sent := raw.w.Len() > 0
	raw.mu.Unlock()
	if sent {
		assert.NoError(t, werr)
		assert.False(t, raw.closed, "the INCR reached the server and maint closed the connection under its reply: go-redis runs it again")
	} else {
		assert.Error(t, werr, "a command kept off the wire fails, and go-redis may retry it safely")
	}
}

// TestDrainCapCloseOfATakenConnectionIsRunAgain: go-redis took an idle
// retired connection from the pool just before the drain cap closed it
// (its health check passed, the command not yet written). The write
// deadline go-redis sets first and the write both fail as errNotWritten,
// nothing reaches the server, and the process hook runs the command again
// rather than fail it (with MaxRetries -1 go-redis would not).
func TestDrainCapCloseOfATakenConnectionIsRunAgain(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		sc, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer sc.Close()
		b, _ := io.ReadAll(sc) // until the client's close
		got <- len(b)
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := m.wrap(m.target("redis.test:6379"), raw, raw.RemoteAddr().String())
	require.True(t, m.retireConn(c, true))
	closed, _, _ := m.closeRetired(c.n, false)
	require.Equal(t, 1, closed, "an idle retired connection is closed at the cap")

	derr := c.SetWriteDeadline(time.Now().Add(time.Second))
	require.Error(t, derr)
	assert.ErrorIs(t, derr, errNotWritten, "the write deadline of a connection closed idle")
	_, werr := c.Write([]byte("*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n"))
	assert.ErrorIs(t, werr, errNotWritten, "the write on a connection closed idle")
	assert.Zero(t, <-got, "nothing reached the server")

	calls := 0
	hook := m.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		calls++
		if calls == 1 {
			return werr
		}
		return nil
	})
	require.NoError(t, hook(context.Background(), redis.NewIntCmd(context.Background(), "incr", "k")))
	assert.Equal(t, 2, calls, "run again once, on another connection")
}
