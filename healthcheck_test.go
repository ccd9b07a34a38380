package maint

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// The health check as go-redis v9.23 runs it (internal/pool/conn_check.go),
// reproduced so that the wrapper can be tested against it without a pool.
var errUnexpectedRead2 = errors.New("unexpected read from socket")

func grConnCheck(conn net.Conn) error {
	_ = conn.SetDeadline(time.Time{})
	sysConn, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	return grCheckSyscallConn(sysConn)
}

func grCheckSyscallConn(sysConn syscall.Conn) error {
	rawConn, err := sysConn.SyscallConn()
	if err != nil {
		return err
	}
	var sysErr error
	if err := rawConn.Read(func(fd uintptr) bool {
		var buf [1]byte
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n == 0 && err == nil:
			sysErr = io.EOF
		case n > 0:
			sysErr = errUnexpectedRead2
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			sysErr = nil
		default:
			sysErr = err
		}
		return true
	}); err != nil {
		return err
	}
	return sysErr
}

func grCheckForData(conn net.Conn) (bool, error) {
	_ = conn.SetReadDeadline(time.Time{})
	sysConn, ok := conn.(syscall.Conn)
	if !ok {
		return false, nil
	}
	switch err := grCheckSyscallConn(sysConn); err {
	case nil:
		return false, nil
	case errUnexpectedRead2:
		return true, nil
	default:
		return false, err
	}
}

func tcpPair(t *testing.T) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() { s, _ := ln.Accept(); ch <- s }()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-ch
	t.Cleanup(func() { client.Close(); server.Close() })
	return
}

// Go-redis's checkForData (its client-side-caching drainer,
// MaybeHasData) must still see an invalidation waiting on an idle
// connection; the health check takes only maintenance notifications off the
// socket.
func TestHealthCheckLeavesOtherPushesForGoRedis(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	cl, sv := tcpPair(t)
	c := m.wrap(m.target("redis.test:6379"), cl, cl.RemoteAddr().String())
	_, err := sv.Write([]byte(">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nfoo\r\n"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)

	has, err := grCheckForData(c)
	require.NoError(t, err)
	require.True(t, has, "go-redis must see the invalidation")
	has, err = grCheckForData(c)
	require.NoError(t, err)
	require.True(t, has, "and still see it on a second look")
}

// The health check takes a waiting notification off the socket, acts on it,
// and then lets go-redis see what follows it exactly.
func TestHealthCheckTakesNotificationsOnly(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	cl, sv := tcpPair(t)
	c := m.wrap(m.target("redis.test:6379"), cl, cl.RemoteAddr().String())
	_, err := sv.Write(resp.AppendMigrated(nil, 9, `["1"]`))
	require.NoError(t, err)
	waitFor(t, func() bool { has, _ := grCheckForData(cl); return has })
	require.NoError(t, grConnCheck(c), "only a notification was waiting: healthy")
	require.EqualValues(t, 1, m.Stats().Notifications, "and it was read")

	_, err = sv.Write(append(resp.AppendMigrating(nil, 10, 0, `["1"]`), "+STALE\r\n"...))
	require.NoError(t, err)
	waitFor(t, func() bool { has, _ := grCheckForData(cl); return has })
	require.ErrorIs(t, grConnCheck(c), errUnexpectedRead2, "a reply after the notification is go-redis's to judge")
	require.EqualValues(t, 2, m.Stats().Notifications)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// A stale reply that arrived in two segments must fail the
// pool's health check, as it does without maint, instead of being read as
// the next command's reply.
func TestHealthCheckFailsOnAPartialStaleReply(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	cl, sv := tcpPair(t)
	c := m.wrap(m.target("redis.test:6379"), cl, cl.RemoteAddr().String())
	_, _ = sv.Write([]byte("$5\r\nst"))
	time.Sleep(50 * time.Millisecond)
	err := grConnCheck(c)
	require.ErrorIs(t, err, errUnexpectedRead2, "go-redis then peeks '$' and discards the connection")
}

// blockingConn returns its script, then blocks until its read deadline.
type blockingConn struct {
	fakeConn
	dl   chan time.Time
	once sync.Once
}

func (b *blockingConn) SetReadDeadline(t time.Time) error { b.dl <- t; return nil }
func (b *blockingConn) Read(p []byte) (int, error) {
	n, err := b.fakeConn.Read(p)
	if n > 0 || err == nil {
		return n, err
	}
	d := <-b.dl
	if d.IsZero() {
		d = <-b.dl
	}
	time.Sleep(time.Until(d))
	return 0, &net.OpError{Op: "read", Err: osTimeout{}}
}

// The pool's health check peeks with no deadline: a read it triggers on an
// idle connection whose only pending bytes are a notification must not block.
func TestHealthCheckReadDoesNotBlockOnANotification(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	raw := &blockingConn{fakeConn: fakeConn{r: bytes.NewReader(resp.AppendMoving(nil, 1, 5, "10.0.0.2:1", false)), remote: "127.0.0.2:6379"}, dl: make(chan time.Time, 4)}
	c := m.wrap(m.target("redis.test:6379"), raw, raw.remote)
	_, _ = c.SyscallConn() // the health check
	done := make(chan error, 1)
	go func() {
		var b [16]byte
		_, err := c.Read(b[:])
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err, "nothing but the notification: the check sees an error and discards the connection")
	case <-time.After(5 * time.Second):
		t.Fatal("the health check's read blocked")
	}
	assert.EqualValues(t, 1, m.Stats().Handoffs, "the MOVING was acted on")
}
