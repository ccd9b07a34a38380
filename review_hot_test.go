package maint

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// loopConn answers every write with +OK, from memory.
type loopConn struct {
	fakeConn
	pending int
}

func (l *loopConn) Write(p []byte) (int, error) { l.pending++; return len(p), nil }
func (l *loopConn) Read(p []byte) (int, error) {
	if l.pending == 0 {
		return 0, nil
	}
	l.pending--
	return copy(p, "+OK\r\n"), nil
}

// Review: while nothing happens, the hot path (the process hook, a command's
// deadlines, its write and its reply) allocates nothing.
func TestHotPathAllocatesNothing(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	raw := &loopConn{fakeConn: fakeConn{remote: "127.0.0.2:6379"}}
	c := m.wrap(m.target("redis.test:6379"), raw, raw.remote)
	cmd := []byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
	buf := make([]byte, 64)
	hook := m.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	st := redis.NewStatusCmd(ctx, "ping")
	allocs := testing.AllocsPerRun(1000, func() {
		_ = hook(ctx, st)
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(cmd)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = c.Read(buf)
	})
	assert.Zero(t, allocs)
	assert.EqualValues(t, 0, c.owed())
}
