package maint_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// With ContextTimeoutEnabled, go-redis sets a command's socket deadline to
// its caller's context deadline when that is nearer than the timeout.
// Relaxation raises short timeouts, not a caller's context: during a
// MIGRATING a command whose reply is slower than its 300 ms context ends at
// its context's deadline (not at the reply, 4 s later, nor at the relaxed
// 10 s), with a timeout error (on v9.24 one that matches
// context.DeadlineExceeded, see ctxDeadlineErr), and neither maint nor
// go-redis (default retries) runs it again.
func TestContextDeadlineEndsARelaxedCommand(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			opt := e.options(4)
			opt.MaxRetries = 3
			opt.ContextTimeoutEnabled = true
			rdb, m, ev := e.client(r, opt)
			ctx := context.Background()
			require.NoError(t, rdb.Ping(ctx).Err())
			e.old.Migrating(0, `["1"]`)
			waitFor(t, "relaxation", 10*time.Second, func() bool {
				require.NoError(t, rdb.Ping(ctx).Err())
				_, ok := ev.first(maint.EventRelax)
				return ok
			})
			e.old.SetLatencyAfterExecution(true) // INCR runs at once, its reply is late
			e.old.SetCommandLatency("incr", 4*time.Second)
			before := m.Stats()
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := rdb.Incr(cctx, "ctx:k").Err()
			took := time.Since(start)
			t.Logf("err %v after %v", err, took)
			require.Error(t, err)
			assert.Less(t, took, 2*time.Second, "ended by its context (300 ms), not by the reply (4 s) or the relaxed timeout (10 s)")
			var ne net.Error
			assert.True(t, errors.As(err, &ne) && ne.Timeout(), "a timeout: %v", err)
			assert.True(t, ctxDeadlineErr(err), "the context's deadline: %v", err)
			v, gerr := rdb.Get(ctx, "ctx:k").Result()
			require.NoError(t, gerr)
			assert.Equal(t, "1", v, "INCR ran once: neither maint nor go-redis ran it again")
			after := m.Stats()
			assert.Equal(t, before.NotWrittenReruns, after.NotWrittenReruns)
			assert.Equal(t, before.PoolRetries, after.PoolRetries)
		})
	}
}
