package maint

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hello3 is go-redis's first write on a RESP3 connection.
const hello3 = "*2\r\n$5\r\nhello\r\n$1\r\n3\r\n"

// scriptDial returns a dial function whose connections land on remote and
// whose servers send the scripts in turn (the last one repeats).
func scriptDial(remote string, scripts ...string) dialFunc {
	return func(_ context.Context, _, _ string) (net.Conn, error) {
		s := scripts[0]
		if len(scripts) > 1 {
			scripts = scripts[1:]
		}
		return &fakeConn{r: bytes.NewReader([]byte(s)), remote: remote}, nil
	}
}

// Once the endpoint has accepted an opt-in, a new connection must not
// wait for the answer to a leader's opt-in that was never sent. go-redis dials
// connections it does not use at once (MinIdleConns, a dial whose requester
// got another connection first) and initialises them lazily: such a leader
// stays idle, and every later dial to the endpoint waited a full second.
func TestHandshakeKnownAnswerDoesNotWaitForAnIdleLeader(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	const remote = "127.0.0.2:6379"
	reply := "%1\r\n+server\r\n+redis\r\n+OK\r\n" // HELLO's reply, then the opt-in's
	dial := m.dialWith(scriptDial(remote, reply), dialOpts{inject: true})
	ctx := context.Background()

	leader, err := dial(ctx, "tcp", "redis.test:6379") // dialled, never initialised
	require.NoError(t, err)
	defer leader.Close()

	second, err := dial(ctx, "tcp", "redis.test:6379") // waits for the leader (at most a second)
	require.NoError(t, err)
	defer second.Close()
	_, err = second.Write([]byte(hello3))
	require.NoError(t, err)
	out, err := io.ReadAll(second)
	require.NoError(t, err)
	require.Equal(t, "%1\r\n+server\r\n+redis\r\n", string(out), "the opt-in's reply is maint's")
	require.True(t, second.(*conn).optedIn.Load(), "the endpoint accepted the opt-in")

	start := time.Now()
	third, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	defer third.Close()
	assert.Less(t, time.Since(start), handshakeWait/2,
		"the endpoint's answer is known: a new connection opts in without waiting for the idle leader")
}

// Should go-redis ever write HELLO together with other commands, the reply
// dropped is still maint's own: the one after all of the write's replies.
func TestInjectedReplyFollowsEveryReplyOfTheFirstWrite(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	script := "%1\r\n+proto\r\n:3\r\n" + "+PONG\r\n" + "+OK\r\n" + "$1\r\nv\r\n"
	c, raw := wrapDL(t, m, "127.0.0.2:6379", []byte(script))
	c.prepareHandshake(context.Background(), false)
	_, err := c.Write([]byte("*2\r\n$5\r\nhello\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	assert.Contains(t, raw.w.String(), "MAINT_NOTIFICATIONS", "the opt-in was written behind the first write")
	_, err = c.Write([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"))
	require.NoError(t, err)
	out := readAll(t, c)
	assert.Equal(t, "%1\r\n+proto\r\n:3\r\n+PONG\r\n$1\r\nv\r\n", string(out), "HELLO's and PING's replies reach go-redis; the +OK was maint's")
	assert.True(t, c.optedIn.Load())
}
