package maint

import (
	"testing"
	"time"

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

	// Hold the Maint's lock so that the close stops between its decision and
	// the socket's close (closeWith takes m.mu on the way).
	m.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.closeRetired(c.n, false)
	}()
	require.Eventually(t, func() bool { return c.state.Load() == stateClosed }, 5*time.Second, time.Millisecond,
		"the close decided")
	_, werr := c.Write([]byte("*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n"))
	m.mu.Unlock()
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
