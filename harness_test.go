package maint_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// host is the name the clients are configured with; the emulator's DNS
// resolves it.
const host = "redis.test"

// env is one emulated Redis Enterprise database with two nodes on the same
// port and different loopback IPs, the realistic rebind of an endpoint move.
type env struct {
	t        *testing.T
	emu      *mainttest.Emulator
	old, new *mainttest.Endpoint
	addr     string // host:port the clients dial
	dials    *mainttest.Recorder
}

func newEnv(t *testing.T) *env { return newEnvOn(t, "") }

// newEnvOn is newEnv with the emulator relaying to backend ("" for the
// embedded miniredis, or a real Redis address).
func newEnvOn(t *testing.T, backend string) *env { return newEnvLogging(t, backend, t.Logf) }

// newEnvLogging is newEnvOn with the emulator logging to logf.
func newEnvLogging(t *testing.T, backend string, logf func(string, ...any)) *env {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{Logf: logf, Backend: backend})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	var old, nw *mainttest.Endpoint
	for i := 0; i < 20 && nw == nil; i++ {
		old, err = emu.AddEndpoint("127.0.0.2:0")
		require.NoError(t, err)
		nw, err = emu.AddEndpoint("127.0.0.3:" + old.Port())
	}
	require.NoError(t, err)
	emu.DNS().Set(host, old.IP())
	e := &env{t: t, emu: emu, old: old, new: nw, addr: net.JoinHostPort(host, old.Port())}
	e.dials = mainttest.NewRecorder(emu.Dialer())
	return e
}

// options are the client options of every scenario: MaxRetries -1, so that no
// retry hides a failure, and the emulator's DNS through a logging dialer.
func (e *env) options(pool int) *redis.Options {
	return &redis.Options{
		Addr:         e.addr,
		Protocol:     3,
		PoolSize:     pool,
		MaxRetries:   -1,
		Dialer:       e.dials.Dial,
		ReadTimeout:  3 * time.Second,
		WriteTimeout: 3 * time.Second,
	}
}

// route is one way of installing maint.
type route struct {
	name    string
	install func(m *maint.Maint, opt *redis.Options) *redis.Client
}

var routes = []route{
	{"AddHook", func(m *maint.Maint, opt *redis.Options) *redis.Client {
		rdb := redis.NewClient(opt)
		rdb.AddHook(m)
		return rdb
	}},
	{"Options", func(m *maint.Maint, opt *redis.Options) *redis.Client {
		return m.NewClient(opt)
	}},
	{"ConfigureOnly", func(m *maint.Maint, opt *redis.Options) *redis.Client {
		m.Configure(opt)
		return redis.NewClient(opt)
	}},
}

// client builds a client with maint installed by r and closes both at the end.
func (e *env) client(r route, opt *redis.Options, opts ...maint.Option) (*redis.Client, *maint.Maint, *eventLog) {
	ev := &eventLog{}
	opts = append([]maint.Option{maint.WithOnEvent(ev.add), maint.WithLogf(e.t.Logf)}, opts...)
	m := maint.New(opts...)
	rdb := r.install(m, opt)
	e.t.Cleanup(func() {
		_ = rdb.Close()
		_ = m.Close()
	})
	return rdb, m, ev
}

// eventLog collects the Maint's events.
type eventLog struct {
	mu  sync.Mutex
	evs []maint.Event
}

func (l *eventLog) add(e maint.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventLog) first(k maint.EventKind) (maint.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		if e.Kind == k {
			return e, true
		}
	}
	return maint.Event{}, false
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, e := range l.evs {
		b.WriteString(e.At.Format("15:04:05.000 "))
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// load runs workers goroutines of SET/GET as fast as they go until stopped.
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

func startLoad(rdb *redis.Client, workers int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			key := "k" + string(rune('a'+w%26))
			for i := 0; ctx.Err() == nil; i++ {
				var err error
				if i%2 == 0 {
					err = rdb.Set(ctx, key, i, 0).Err()
				} else {
					err = rdb.Get(ctx, key).Err()
				}
				if ctx.Err() != nil {
					return
				}
				if err != nil && !errors.Is(err, redis.Nil) {
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.errs) < 10 {
						l.errs = append(l.errs, err.Error())
					}
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		}(w)
	}
	return l
}

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// waitFor polls cond until it holds or the generous deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitEvent waits for an emulator event of kind on ep.
func (e *env) waitEvent(ep *mainttest.Endpoint, kind string, d time.Duration) mainttest.Event {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := e.emu.WaitEvent(ctx, mainttest.IsKind(ep, kind))
	require.NoError(e.t, err, "waiting for %s on %s", kind, ep.Addr())
	return ev
}

// pingUntilRetired sends PINGs (which read a waiting MOVING) until the Maint
// has retired a node, and returns the retire event.
func pingUntilRetired(t *testing.T, rdb *redis.Client, ev *eventLog) maint.Event {
	t.Helper()
	var retired maint.Event
	waitFor(t, "the retire", 5*time.Second, func() bool {
		require.NoError(t, rdb.Ping(context.Background()).Err())
		var ok bool
		retired, ok = ev.first(maint.EventRetire)
		return ok
	})
	return retired
}
