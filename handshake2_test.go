package maint_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// errorCounter is an application's hook and Limiter that count what go-redis
// reports as errors: maint's handshake must not show up in either.
type errorCounter struct {
	hookErrs, cmdErrs, limiterErrs atomic.Int64
	names                          sync.Map
}

func (h *errorCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *errorCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.names.Store(strings.ToLower(cmd.Name()), true)
		err := next(ctx, cmd)
		if err != nil {
			h.hookErrs.Add(1)
			h.names.Store("error: "+err.Error(), true)
		}
		if cmd.Err() != nil {
			h.cmdErrs.Add(1)
		}
		return err
	}
}
func (h *errorCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			h.hookErrs.Add(1)
			h.names.Store("pipeline error: "+err.Error(), true)
		}
		return err
	}
}
func (h *errorCounter) Allow() error { return nil }
func (h *errorCounter) ReportResult(err error) {
	if err != nil && err != redis.Nil {
		h.limiterErrs.Add(1)
	}
}

// logLines collects formatted log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(f string, a ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(f, a...))
	l.mu.Unlock()
}

func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// Item 2: the opt-in goes on the wire behind HELLO and its refusal never
// reaches the application: not its hooks, not its Limiter, not its error
// counts; one log line, one refusal remembered.
func TestHandshakeRefusalNeverReachesTheApplication(t *testing.T) {
	e := newEnv(t)
	e.old.SetUnsupported(true)
	logs := &logLines{}
	m := maint.New(maint.WithLogf(logs.logf))
	defer m.Close()
	app := &errorCounter{}
	opt := e.options(8)
	opt.Limiter = app
	// The embedded miniredis refuses go-redis's own CLIENT SETINFO, which
	// the application would see too: leave it out, to count maint's alone.
	opt.DisableIdentity = true
	m.Configure(opt)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	rdb.AddHook(app) // the application's hook, added before maint's
	rdb.AddHook(m)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				assert.NoError(t, rdb.Set(context.Background(), "k", i, 0).Err())
			}
		}()
	}
	wg.Wait()
	st := e.old.Stats()
	t.Logf("connections %d, handshakes read by the server %d; maint %+v", st.Opened, st.Handshakes, m.Stats())
	app.names.Range(func(k, _ any) bool { t.Log("the application saw: ", k); return true })
	assert.Zero(t, app.hookErrs.Load(), "errors seen by the application's hook")
	assert.Zero(t, app.cmdErrs.Load(), "commands with an error")
	assert.Zero(t, app.limiterErrs.Load(), "errors reported to the Limiter")
	_, sawHandshake := app.names.Load("client")
	assert.False(t, sawHandshake, "the application's hook never sees maint's handshake")
	assert.EqualValues(t, 1, m.Stats().Unsupported)
	assert.Equal(t, 1, logs.count("does not support"), "one log line, not one per connection")
	assert.Equal(t, 1, st.Handshakes, "one handshake for the whole burst of first connections")
}

// Item 2: a refusal is not forever. An old proxy refuses, an upgraded one
// accepts: after the cooldown, the next new connection asks again and the
// client is under maint.
func TestHandshakeRefusalExpires(t *testing.T) {
	e := newEnv(t)
	e.old.SetUnsupported(true)
	m := maint.New(maint.WithLogf(t.Logf), maint.WithHandshakeRetry(300*time.Millisecond))
	defer m.Close()
	opt := e.options(1)
	opt.ConnMaxLifetime = 200 * time.Millisecond // new connections now and then
	rdb := m.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	require.EqualValues(t, 1, m.Stats().Unsupported)
	e.old.SetUnsupported(false) // the rolling upgrade reaches this endpoint
	waitFor(t, "a connection opted in", 10*time.Second, func() bool {
		require.NoError(t, rdb.Ping(ctx).Err())
		return e.old.Stats().OptedIn > 0
	})
	// And maint acts on what it now receives.
	e.old.Moving(mainttest.Moving{Window: 2 * time.Second, To: e.new})
	waitFor(t, "the move", 10*time.Second, func() bool {
		require.NoError(t, rdb.Ping(ctx).Err())
		return m.Stats().Handoffs > 0
	})
}

// Item 2: a refusal that does not mean "no support" (LOADING, no answer, a
// closed socket) is not remembered: the next connection asks again.
func TestTransientRefusalIsNotRemembered(t *testing.T) {
	for _, h := range []mainttest.Handshake{
		{Answer: mainttest.AnswerError, Error: "LOADING Redis is loading the dataset in memory", Times: 1},
		{Answer: mainttest.AnswerClose, Times: 1},
	} {
		t.Run(h.Answer.String(), func(t *testing.T) {
			e := newEnv(t)
			e.old.SetHandshake(h)
			m := maint.New(maint.WithLogf(t.Logf))
			defer m.Close()
			opt := e.options(1)
			opt.MaxRetries = 2                           // a connection closed at its handshake is redialled
			opt.ConnMaxLifetime = 100 * time.Millisecond // and new connections come now and then
			rdb := m.NewClient(opt)
			defer rdb.Close()
			ctx := context.Background()
			_ = rdb.Ping(ctx).Err() // the first connection meets the transient answer
			waitFor(t, "an opt-in", 10*time.Second, func() bool {
				if err := rdb.Ping(ctx).Err(); err != nil {
					return false
				}
				return e.old.Stats().OptedIn > 0
			})
			assert.Zero(t, m.Stats().Unsupported, "nothing remembered")
		})
	}
}
