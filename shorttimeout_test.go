package maint_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// Short timeouts are relaxed too, and the error names the relaxation only
// when one was applied: node-redis's criterion, a timeout during maintenance
// within ±20% of the relaxed timeout and a maintenance error; after it, back
// to the normal timeout and a plain error. A 50 ms ReadTimeout, on both
// install routes.
func TestShortTimeoutIsRelaxed(t *testing.T) {
	const (
		readTimeout = 50 * time.Millisecond
		relaxed     = time.Second
		tail        = 200 * time.Millisecond
	)
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			opt := e.options(1)
			opt.ReadTimeout, opt.WriteTimeout = readTimeout, readTimeout
			rdb, _, ev := e.client(r, opt, maint.WithRelaxedTimeout(relaxed), maint.WithRelaxedTail(tail))
			ctx := context.Background()
			// A starved machine may time a PING out at 50 ms: the PINGs only
			// carry the notifications, their errors are not the point.
			waitFor(t, "a first command", 10*time.Second, func() bool { return rdb.Ping(ctx).Err() == nil })
			e.old.Migrating(0, shards)
			waitFor(t, "the relaxation", 10*time.Second, func() bool {
				_ = rdb.Ping(ctx).Err()
				_, ok := ev.first(maint.EventRelax)
				return ok
			})
			e.old.SetCommandLatency("ECHO", 3*time.Second)
			start := time.Now()
			err := rdb.Echo(ctx, "x").Err()
			took := time.Since(start)
			t.Logf("during maintenance: %v after %v", err, took)
			require.True(t, isTimeout(err), "during maintenance: %v", err)
			var te *maint.TimeoutError
			assert.True(t, errors.As(err, &te), "a maintenance error: %v", err)
			assert.Contains(t, err.Error(), "relaxed to at least 1s")
			assert.GreaterOrEqual(t, took, relaxed*8/10, "not relaxed: timed out after %v", took)
			assert.Less(t, took, 3*relaxed, "timed out after %v", took)

			e.old.SetCommandLatency("ECHO", 0)
			e.old.Migrated(shards)
			var end maint.Event
			waitFor(t, "relax-end", 10*time.Second, func() bool {
				_ = rdb.Ping(ctx).Err()
				var ok bool
				end, ok = ev.first(maint.EventRelaxEnd)
				return ok
			})
			waitFor(t, "relaxation off", 10*time.Second, func() bool { _, ok := ev.first(maint.EventRelaxOff); return ok })
			require.Greater(t, time.Since(end.At), tail)
			e.old.SetCommandLatency("ECHO", 3*time.Second)
			start = time.Now()
			err = rdb.Echo(ctx, "x").Err()
			took = time.Since(start)
			t.Logf("after maintenance: %v after %v", err, took)
			require.True(t, isTimeout(err), "after maintenance: %v", err)
			assert.False(t, errors.As(err, &te), "a plain error after maintenance: %v", err)
			assert.GreaterOrEqual(t, took, readTimeout*8/10)
			assert.Less(t, took, relaxed/2, "still relaxed after the tail: timed out after %v", took)
		})
	}
}
