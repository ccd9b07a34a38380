package maint_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// A cold burst of 64 simultaneous first connections to an endpoint that
// refuses the opt-in sends exactly one handshake, and an application hook
// added after maint, counting errors from next, counts none; nor does its
// Limiter. Repeated, since the race it guards against was intermittent.
func TestColdBurstOneHandshake(t *testing.T) {
	for run := 0; run < 5; run++ {
		e := newEnv(t)
		e.old.SetUnsupported(true)
		logs := &logLines{}
		g := maint.NewGroup(maint.WithLogf(logs.logf))
		app := &errorCounter{}
		opt := e.options(64)
		switch run {
		case 1:
			opt.MinIdleConns = 4 // connections dialled and left idle before the burst
		case 2:
			opt.PoolSize = 16 // dialled connections handed from one command to another
		case 3:
			opt.MinIdleConns, opt.PoolSize = 4, 16
		case 4:
			// A slow server: the answer comes after handshakeWait (1s),
			// and every reply after 1.5s.
			e.old.SetLatency(1500 * time.Millisecond)
		}
		opt.Limiter = app
		opt.DisableIdentity = true // miniredis refuses CLIENT SETINFO: count maint's alone
		rdb := g.NewClient(opt)
		rdb.AddHook(app) // after maint's
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Commands return their connections at once: a connection
				// dialled for one may be handed to another, or left idle.
				for j := 0; j < 20 && (run != 4 || j < 1); j++ {
					assert.NoError(t, rdb.Ping(context.Background()).Err())
				}
			}()
		}
		close(start)
		wg.Wait()
		st := e.old.Stats()
		require.NoError(t, rdb.Close())
		require.NoError(t, g.Close())
		t.Logf("run %d: connections %d, handshakes %d", run, st.Opened, st.Handshakes)
		require.GreaterOrEqual(t, st.Opened, 16, "a burst of first connections")
		assert.Equal(t, 1, st.Handshakes, "exactly one handshake for the burst")
		assert.Zero(t, app.hookErrs.Load(), "errors seen by a hook after maint's")
		assert.Zero(t, app.cmdErrs.Load())
		assert.Zero(t, app.limiterErrs.Load(), "errors reported to the Limiter")
		assert.Equal(t, 1, logs.count("does not support"), "one log line")
	}
}

// HandshakeRequired sends the opt-in on the wire too: the application's
// hook, added after maint's, never sees it as a command; against an
// endpoint that accepts, it counts no error, with or without go-redis's
// CLIENT SETINFO behind HELLO. Against one that refuses, the application's
// commands fail with maint's error, and the hook still never sees the
// handshake itself.
func TestRequiredHandshakeNeverReachesHooks(t *testing.T) {
	for _, identity := range []bool{true, false} {
		for _, refuse := range []bool{false, true} {
			e := newEnv(t)
			e.old.SetUnsupported(refuse)
			g := maint.NewGroup(maint.WithLogf(t.Logf), maint.WithHandshake(maint.HandshakeRequired))
			app := &errorCounter{}
			opt := e.options(8)
			opt.DisableIdentity = !identity // miniredis refuses CLIENT SETINFO: with it, go-redis ignores that error
			rdb := g.NewClient(opt)
			rdb.AddHook(app)
			var wg sync.WaitGroup
			var failed atomic.Int64
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; j < 10; j++ {
						if err := rdb.Set(context.Background(), "k", j, 0).Err(); err != nil {
							failed.Add(1)
							assert.Contains(t, err.Error(), "maint:")
						}
					}
				}()
			}
			wg.Wait()
			_, sawHandshake := app.names.Load("client")
			assert.False(t, sawHandshake, "the hook never sees maint's handshake (identity %v, refuse %v)", identity, refuse)
			app.names.Range(func(k, _ any) bool {
				if !refuse {
					assert.NotContains(t, strings.ToLower(k.(string)), "maint_notifications", "the hook saw %q", k)
				}
				return true
			})
			if refuse {
				assert.EqualValues(t, 80, failed.Load(), "required: every command fails against an endpoint that refuses")
				assert.Equal(t, 1, e.old.Stats().Handshakes, "asked once")
			} else {
				assert.Zero(t, failed.Load())
				if !identity { // miniredis refuses go-redis's own CLIENT SETINFO, which the hook sees
					assert.Zero(t, app.hookErrs.Load(), "errors seen by a hook after maint's")
				}
				waitFor(t, "every connection opted in", 5*time.Second, func() bool {
					st := e.old.Stats()
					return st.OptedIn == st.Opened
				})
			}
			require.NoError(t, rdb.Close())
			require.NoError(t, g.Close())
		}
	}
}
