package mainttest

import (
	"context"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecorder(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	rec := NewRecorder(e.Dialer())
	rdb := redis.NewClient(&redis.Options{Addr: ep.Addr(), Dialer: rec.Dial, PoolSize: 1})
	require.NoError(t, rdb.Ping(context.Background()).Err())
	require.Equal(t, 1, rec.OpenTo(ep.Addr()))
	c := rec.Conns()[0]
	assert.Equal(t, ep.Addr(), c.Remote)
	assert.NotZero(t, c.Written())
	assert.False(t, c.IsClosed())
	require.NoError(t, rdb.Close())
	assert.True(t, c.IsClosed())
	assert.False(t, c.Closed().Before(c.Dialed))
	assert.Zero(t, rec.OpenTo(ep.Addr()))

	_, err := rec.Dial(context.Background(), "tcp", "127.0.0.1:1")
	assert.Error(t, err)
	assert.EqualValues(t, 1, rec.Failed())
}

// A recorded connection hands on its socket, and only when it has one:
// go-redis's health check peeks a socket it can reach, and treats a
// connection with no SyscallConn as one it cannot check.
func TestRecorderHandsOnTheSocket(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	rec := NewRecorder(e.Dialer())
	c, err := rec.Dial(context.Background(), "tcp", ep.Addr())
	require.NoError(t, err)
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	require.True(t, ok, "%T hides its socket", c)
	rc, err := sc.SyscallConn()
	require.NoError(t, err)
	var fd uintptr
	require.NoError(t, rc.Control(func(f uintptr) { fd = f }))
	assert.NotZero(t, fd)

	server, client := net.Pipe()
	defer server.Close()
	piped := NewRecorder(func(context.Context, string, string) (net.Conn, error) { return client, nil })
	pc, err := piped.Dial(context.Background(), "tcp", "pipe")
	require.NoError(t, err)
	_, ok = pc.(syscall.Conn)
	assert.False(t, ok, "a connection with no socket offers one")
	assert.Equal(t, 1, len(piped.Conns()))
}
