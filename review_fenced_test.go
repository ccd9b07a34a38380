package maint

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// Review: a handoff whose hold budget runs out (DNS never moved) ends with
// the old connections fenced. One that owed a reply at the cap and at the end
// stayed fenced for good: the pool kept handing out a connection to a node
// past its window, and every deadline of it stayed floored to the relaxed
// timeout (an application's 1s timeout became 10s) for the connection's life.
func TestConnectionFencedAtAnExpiredHoldDoesNotStayFenced(t *testing.T) {
	m := New(WithLogf(t.Logf), WithHoldBudget(50*time.Millisecond))
	defer m.Close()
	m.hooked.Store(true) // commands can be held: the old connections are fenced
	c, _ := wrapScript(t, m, nil)
	_, err := c.Write([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")) // its reply never comes
	require.NoError(t, err)
	c.onNotification(resp.AppendMoving(nil, 1, 1, "", true))
	r := c.n.run.Load()
	require.NotNil(t, r)
	require.Eventually(t, func() bool { return c.n.run.Load() == nil }, 10*time.Second, 5*time.Millisecond,
		"the handoff ends when the hold budget is spent")
	assert.NotEqual(t, stateFenced, c.state.Load(), "left fenced after the handoff ended")
	_, err = c.SyscallConn()
	assert.ErrorIs(t, err, ErrRetired, "the pool does not hand it out again once its reply came")
}
