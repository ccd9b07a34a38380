package maint

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

func TestStripsNotificationsAndCountsReplies(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	script := append([]byte("+OK\r\n"), resp.AppendMigrating(nil, 3, 0, `["1"]`)...)
	script = append(script, "$3\r\nbar\r\n"...)
	c, _ := wrapScript(t, m, script)
	_, err := c.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	assert.EqualValues(t, 3, c.owed(), "three commands in flight")
	out := readAll(t, c)
	assert.Equal(t, "+OK\r\n$3\r\nbar\r\n", string(out), "the MIGRATING is removed, nothing else")
	assert.EqualValues(t, 2, c.replies.Load(), "two replies read; the notification is not one")
	assert.EqualValues(t, 1, c.owed(), "the PING's reply is still owed")
	assert.True(t, c.n.relaxing())
	assert.EqualValues(t, 1, m.Stats().Notifications)
}

func TestSyscallConnRefusesRetired(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, _ := wrapScript(t, m, nil)
	rc, err := c.SyscallConn()
	require.NoError(t, err, "an active connection is usable")
	require.NotNil(t, rc)
	require.True(t, c.retire(false))
	_, err = c.SyscallConn()
	require.NoError(t, err, "a fenced connection is still usable by work already past the hold")
	require.True(t, c.retire(true))
	_, err = c.SyscallConn()
	require.ErrorIs(t, err, ErrRetired)
	require.True(t, c.closeWith(ErrDrainCap))
	_, err = c.SyscallConn()
	require.ErrorIs(t, err, ErrRetired)
}

func TestSubscriberIsRecognisedByItsPushes(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, _ := wrapScript(t, m, []byte(">3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"))
	assert.False(t, c.sub.Load())
	out := readAll(t, c)
	assert.Contains(t, string(out), "subscribe", "a subscription push passes through")
	assert.True(t, c.sub.Load())
	assert.Zero(t, c.replies.Load(), "a push is not a reply")
}

// MONITOR makes a connection a subscriber: retired, it is closed at
// once (it owes nothing; go-redis reconnects it).
func TestMonitorIsASubscriber(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
	_, err := c.Write([]byte("*1\r\n$7\r\nmonitor\r\n"))
	require.NoError(t, err)
	assert.True(t, c.sub.Load())
	require.True(t, m.retireConn(c, true))
	assert.True(t, raw.closed, "closed at once")
	assert.False(t, isMonitor([]byte("*1\r\n$7\r\nMONITOX\r\n")))
	assert.True(t, isMonitor([]byte("*1\r\n$7\r\nMONITOR\r\n")))
}

// The health check's peek leaves the next read's deadline exactly
// as go-redis set it.
func TestPeekLeavesNoTrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		dl   time.Time
	}{
		{"deadline set", time.Now().Add(3 * time.Second)},
		{"ReadTimeout -2: none ever set", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(WithLogf(t.Logf))
			defer m.Close()
			c, raw := wrapDL(t, m, "127.0.0.2:6379", []byte("+OK\r\n"))
			if !tc.dl.IsZero() {
				require.NoError(t, c.SetReadDeadline(tc.dl))
			}
			_, _ = c.SyscallConn() // the pool's health check
			var b [8]byte
			_, err := c.Read(b[:]) // go-redis's peek of what the check found
			require.NoError(t, err)
			got, _ := raw.lastRead()
			assert.True(t, got.Equal(tc.dl), "the socket's read deadline after the peek: %v, want %v", got, tc.dl)
		})
	}
}

// A new connection is judged against every node being retired. In
// an A→B named move followed by a null move of B, a dial landing on A is
// doomed, not a replacement for B.
func TestDialJudgedAgainstEveryRetiringNode(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	const A, B, C = "127.0.0.2:6379", "127.0.0.3:6379", "127.0.0.4:6379"
	d := &fakeDialer{remotes: []string{A}}
	dial := m.dialVia(d.dial)
	ctx := context.Background()
	ca, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	ca.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, B, false))
	d.mu.Lock()
	d.remotes = []string{B}
	d.mu.Unlock()
	cb, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	require.Equal(t, B, cb.(*conn).remote)
	cb.(*conn).onNotification(resp.AppendMoving(nil, 2, 30, "", true))
	rb := cb.(*conn).n.run.Load()
	require.NotNil(t, rb)

	// Stale DNS lands on A first, then on C.
	d.mu.Lock()
	d.remotes = []string{A, C}
	d.mu.Unlock()
	cc, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	assert.Equal(t, C, cc.(*conn).remote)
	assert.EqualValues(t, 1, m.Stats().Doomed, "the landing on A was doomed")
	assert.True(t, rb.replaced.Load(), "the landing on C is a replacement for B's handoff")
}

// A connection's state is most of what maint keeps per connection (the
// memory table of docs/performance.md): it stays within the allocator's 640-byte size
// class, with no closure of its own but the health check's peek. The
// buffers of a push held back or stripped, and the window the health check
// peeks when bytes wait, are allocated only when one is needed.
func TestConnStateFitsItsSizeClass(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(conn{}), uintptr(640), "conn's size: the next size class is 704 bytes")
	assert.LessOrEqual(t, unsafe.Sizeof(resp.Stripper{}), uintptr(272), "Stripper's size")
	m := New(WithLogf(t.Logf))
	defer m.Close()
	raw := &fakeConn{r: strings.NewReader(""), remote: "127.0.0.2:6379"}
	tg := m.target("redis.test:6379")
	open := m.wrap(tg, raw, raw.remote) // the node's own state exists, and stays
	defer open.Close()
	allocs := testing.AllocsPerRun(100, func() { _ = m.wrap(tg, raw, raw.remote).Close() })
	assert.Equal(t, 2.0, allocs, "a connection's state and its peek callback, nothing else")
}
