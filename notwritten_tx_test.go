package maint_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// failFirstMulti is a connection whose first write of a MULTI fails
// before any byte leaves, as maint's connections report a write on a
// connection closed before the command was written (errNotWritten).
type failFirstMulti struct {
	net.Conn
	failed *atomic.Bool
}

func (c failFirstMulti) Write(p []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(p), []byte("multi")) && c.failed.CompareAndSwap(false, true) {
		return 0, fmt.Errorf("%w (%w)", maint.ErrNotWritten, &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed})
	}
	return c.Conn.Write(p)
}

// A transaction whose first write was kept off the wire runs once and
// succeeds: go-redis stamps the failed attempt's error on MULTI and EXEC
// too, and a later attempt (its own retry with MaxRetries >= 0, or maint's
// rerun) clears only the queued commands', so go-redis returned the stale
// not-written error for a transaction that ran; maint ran it again, up to
// 8 times, and then let the error reach the application (the cause of the
// one errNotWritten `maintdemo --scenario failover --check` saw with
// MaxRetries 3).
func TestTransactionNotWrittenRunsOnce(t *testing.T) {
	for _, retries := range []int{-1, 0, 3} {
		t.Run(fmt.Sprintf("MaxRetries%d", retries), func(t *testing.T) {
			mr := miniredis.RunT(t)
			var failed atomic.Bool
			d := net.Dialer{}
			rdb := redis.NewClient(&redis.Options{
				Addr: mr.Addr(), Protocol: 3, MaxRetries: retries, PoolSize: 1,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := d.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return failFirstMulti{Conn: c, failed: &failed}, nil
				},
			})
			defer rdb.Close()
			m := maint.New(maint.WithLogf(t.Logf))
			defer m.Close()
			rdb.AddHook(m)
			ctx := context.Background()
			cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, "n")
				return nil
			})
			require.True(t, failed.Load(), "the first MULTI was kept off the wire")
			require.NoError(t, err)
			require.Len(t, cmds, 1)
			require.NoError(t, cmds[0].Err())
			n, err := rdb.Get(ctx, "n").Int()
			require.NoError(t, err)
			require.Equal(t, 1, n, "the transaction ran once")
		})
	}
}
