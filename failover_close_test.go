package maint

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closeFlagConn is a fakeConn whose Close may run on a timer.
type closeFlagConn struct {
	*fakeConn
	shut atomic.Bool
}

func (c *closeFlagConn) Close() error { c.shut.Store(true); return nil }

// wrapFlag wraps a fake connection whose server sends script.
func wrapFlag(t *testing.T, m *Maint, script []byte) (*conn, *closeFlagConn) {
	t.Helper()
	raw := &closeFlagConn{fakeConn: &fakeConn{r: bytes.NewReader(script), remote: "127.0.0.2:6379"}}
	return m.wrap(m.target(failoverTarget), raw, raw.remote), raw
}

func closedRaw(raw *closeFlagConn) bool { return raw.shut.Load() }

// A failover connection that go-redis closes while a reply is owed closes
// once the reply is read; one that owes nothing, or whose read failed,
// closes at once; one whose reply never comes closes at failoverCloseCap.
func TestFailoverConnDefersCloseWhileOwed(t *testing.T) {
	m := New()
	defer m.Close()
	ping := []byte("*1\r\n$4\r\nPING\r\n")

	c, raw := wrapFlag(t, m, []byte("+PONG\r\n"))
	f := &failoverConn{conn: c}
	_, err := f.Write(ping)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.False(t, closedRaw(raw), "closed under the command")
	buf := make([]byte, 64)
	n, err := f.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", string(buf[:n]), "the reply reaches go-redis")
	assert.True(t, closedRaw(raw), "closed once the reply was read")

	c, raw = wrapFlag(t, m, nil)
	f = &failoverConn{conn: c}
	require.NoError(t, f.Close())
	assert.True(t, closedRaw(raw), "idle: closed at once")

	c, raw = wrapFlag(t, m, nil) // the reply never comes: the read fails
	f = &failoverConn{conn: c}
	_, err = f.Write(ping)
	require.NoError(t, err)
	_, err = f.Read(buf)
	require.Error(t, err)
	require.NoError(t, f.Close())
	assert.True(t, closedRaw(raw), "a read failed (go-redis gave up on it): closed at once")

	defer func(d time.Duration) { failoverCloseCap = d }(failoverCloseCap)
	failoverCloseCap = 50 * time.Millisecond
	c, raw = wrapFlag(t, m, nil)
	f = &failoverConn{conn: c}
	_, err = f.Write(ping)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.False(t, closedRaw(raw))
	deadline := time.Now().Add(5 * time.Second)
	for !closedRaw(raw) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.True(t, closedRaw(raw), "closed at the cap though the reply never came")
}
