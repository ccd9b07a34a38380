package maint_test

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/mainttest"
)

// The Configure route remembers that an endpoint does not support the
// handshake: one round trip and one log line in all, not one per connection.
func TestUnsupportedHandshakeIsRememberedPerEndpoint(t *testing.T) {
	maint.ForgetUnsupportedSaid() // the Warn is once per endpoint for the process's life
	emu, err := mainttest.New(mainttest.Config{Unsupported: true})
	require.NoError(t, err)
	defer emu.Close()
	ep, err := emu.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)

	var mu sync.Mutex
	var lines []string
	m := maint.New(maint.WithLogf(func(format string, args ...any) {
		mu.Lock()
		lines = append(lines, format)
		mu.Unlock()
	}))
	defer m.Close()
	rdb := m.NewClient(&redis.Options{Addr: ep.Addr(), PoolSize: 8, MinIdleConns: 8})
	defer rdb.Close()
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		require.NoError(t, rdb.Ping(ctx).Err())
	}
	waitFor(t, "the idle connections", 10*time.Second, func() bool { return ep.Stats().Opened >= 8 })

	attempts := 0
	for _, e := range emu.Events() {
		if e.Kind == mainttest.KindUnsupported {
			attempts++
		}
	}
	mu.Lock()
	logged := 0
	for _, l := range lines {
		if strings.Contains(l, "does not support") {
			logged++
		}
	}
	mu.Unlock()
	t.Logf("connections %d, handshake attempts %d, log lines %d", ep.Stats().Opened, attempts, logged)
	// Connections dialled concurrently before the first answer may each try
	// once; the point is that the count does not grow with the pool.
	assert.LessOrEqual(t, attempts, 2)
	assert.Equal(t, 1, logged)
	assert.EqualValues(t, 1, m.Stats().Unsupported)
	assert.Zero(t, ep.Stats().OptedIn)
}

// The Configure route opts every connection in with an endpoint type, and
// keeps an OnConnect the application had.
func TestConfigureOptsInAndChainsOnConnect(t *testing.T) {
	e := newEnv(t)
	m := maint.New(maint.WithLogf(t.Logf))
	defer m.Close()
	called := 0
	opt := &redis.Options{Addr: e.old.Addr(), PoolSize: 2, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
		called++
		return nil
	}}
	rdb := m.NewClient(opt)
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	assert.Equal(t, 1, called)
	assert.Equal(t, 1, e.old.Stats().OptedIn)
	var typ string
	for _, ev := range e.emu.Events() {
		if ev.Kind == mainttest.KindOptIn {
			typ = ev.Detail
		}
	}
	assert.Contains(t, typ, "internal-ip", "a loopback address is internal, and there is no TLS")
}

func TestHandshakeModes(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{Unsupported: true})
	require.NoError(t, err)
	defer emu.Close()
	ep, err := emu.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)
	ctx := context.Background()

	t.Run("required fails the connection", func(t *testing.T) {
		m := maint.New(maint.WithLogf(t.Logf), maint.WithHandshake(maint.HandshakeRequired))
		defer m.Close()
		rdb := m.NewClient(&redis.Options{Addr: ep.Addr(), MaxRetries: -1, DialerRetries: 1})
		defer rdb.Close()
		err := rdb.Ping(ctx).Err()
		// go-redis unwraps one level of OnConnect's error: the server's own
		// refusal is what the command reports.
		require.Error(t, err)
		assert.Contains(t, err.Error(), "MAINT_NOTIFICATIONS")
		// The opt-in went on the wire, as in Auto: the refusal is
		// remembered, and the next connections fail without asking again.
		assert.EqualValues(t, 1, m.Stats().Unsupported)
		before := ep.Stats().Handshakes
		err = rdb.Ping(ctx).Err()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "MAINT_NOTIFICATIONS")
		assert.Equal(t, before, ep.Stats().Handshakes, "not asked again within the cooldown")
	})
	t.Run("off sends nothing", func(t *testing.T) {
		before := len(emu.Events())
		m := maint.New(maint.WithLogf(t.Logf), maint.WithHandshake(maint.HandshakeOff))
		defer m.Close()
		rdb := m.NewClient(&redis.Options{Addr: ep.Addr()})
		defer rdb.Close()
		require.NoError(t, rdb.Ping(ctx).Err())
		for _, e := range emu.Events()[before:] {
			assert.NotEqual(t, mainttest.KindUnsupported, e.Kind)
		}
	})
}

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

// The opt-in goes on the wire behind HELLO and its refusal never
// reaches the application: not its hooks, not its Limiter, not its error
// counts; one log line, one refusal remembered.
func TestHandshakeRefusalNeverReachesTheApplication(t *testing.T) {
	maint.ForgetUnsupportedSaid() // the Warn is once per endpoint for the process's life
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

// A refusal is not forever. An old proxy refuses, an upgraded one
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

// A refusal that does not mean "no support" (LOADING, no answer, a
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

// A cold burst of 64 simultaneous first connections to an endpoint that
// refuses the opt-in sends exactly one handshake, and an application hook
// added after maint, counting errors from next, counts none; nor does its
// Limiter. Repeated, since the race it guards against was intermittent.
func TestColdBurstOneHandshake(t *testing.T) {
	for run := 0; run < 5; run++ {
		e := newEnv(t)
		e.old.SetUnsupported(true)
		logs := &logLines{}
		maint.ForgetUnsupportedSaid() // the Warn is once per endpoint for the process's life
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

// A server that closes a new connection during its handshake (at a
// window's end, the instant before a replay could say the node is moving)
// has been sent none of the application's commands on it: the command that
// needed the connection runs on another and does not fail, with go-redis's
// retries off. Once the application's command is written, an EOF is
// go-redis's to handle as without maint (it may have run).
func TestServerCloseInTheHandshakeFailsNoCommand(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			e.old.SetHandshake(mainttest.Handshake{Answer: mainttest.AnswerClose, Times: 1})
			rdb, m, _ := e.client(r, e.options(2))
			require.NoError(t, rdb.Set(context.Background(), "k", "v", 0).Err(), "the first command, after a handshake cut by the server")
			assert.Equal(t, 2, e.old.Stats().Handshakes, "the cut handshake, then the one of the connection that served")
			assert.NotZero(t, m.Stats().NotWrittenReruns, "the command ran again on another connection")
		})
	}
}

// lateOptInServer answers HELLO at once and the opt-in behind it after
// delay, with the MOVING of an open window replayed behind the +OK
// (time=1, successor to), then records what else it is sent, answering
// nothing: a node whose window ends under whatever is written to it now.
type lateOptInServer struct {
	ln    net.Listener
	after atomic.Int64 // bytes written to it after the handshake
}

func newLateOptInServer(t *testing.T, delay time.Duration, to string) *lateOptInServer {
	s := &lateOptInServer{}
	s.ln = serveLoopback(t, func(c net.Conn) { s.serve(c, delay, to) })
	return s
}

// serveLoopback serves each connection to a new listener on 127.0.0.2 with
// handle, on a goroutine of its own, until the test ends.
func serveLoopback(t *testing.T, handle func(net.Conn)) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln
}

func (s *lateOptInServer) serve(c net.Conn, delay time.Duration, to string) {
	defer c.Close()
	var in []byte
	buf := make([]byte, 4096)
	for !strings.Contains(strings.ToLower(string(in)), "maint_notifications") || !strings.HasSuffix(string(in), "\r\n") {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		in = append(in, buf[:n]...)
	}
	if _, err := c.Write([]byte("%1\r\n$5\r\nproto\r\n:3\r\n")); err != nil {
		return
	}
	time.Sleep(delay)
	if _, err := c.Write(resp.AppendMoving([]byte("+OK\r\n"), 1, 1, to, false)); err != nil {
		return
	}
	for {
		n, err := c.Read(buf)
		s.after.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// On the options route the read of HELLO's reply returns only with the
// opt-in's reply behind it, even when the server sends that reply (and the
// MOVING it replays) later than HELLO's, up to go-redis's read deadline
// (3 s here; the delay is longer than any fixed wait a machine's scheduler
// could make a test's short one outlast): the application's first command,
// go-redis's next write once HELLO is answered (DisableIdentity: no CLIENT
// SETINFO between), is not written to a node whose window is ending; it
// runs on the named successor.
func TestHelloReplyWaitsForTheOptInReply(t *testing.T) {
	e := newEnv(t)
	old := newLateOptInServer(t, 300*time.Millisecond, e.new.Addr())
	opt := e.options(1)
	opt.Addr, opt.Dialer, opt.DisableIdentity = old.ln.Addr().String(), nil, true
	rdb, _, ev := e.client(routes[1], opt)
	require.NoError(t, rdb.Set(context.Background(), "k", "v", 0).Err(), "events:\n%s", ev)
	assert.Zero(t, old.after.Load(), "bytes written to the old node after its handshake")
	got, err := e.emu.Miniredis().Get("k")
	require.NoError(t, err)
	assert.Equal(t, "v", got, "the command ran on the successor")
}

// miniServer answers HELLO with a RESP3 map and every other command with
// +OK, except that it runs an INCR (counting it) and closes the connection
// before answering it. It returns its address.
func miniServer(t *testing.T, incrs *atomic.Int64) string {
	return serveLoopback(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			args, err := readCommand(br)
			if err != nil || len(args) == 0 {
				return
			}
			switch strings.ToLower(args[0]) {
			case "hello":
				_, _ = c.Write([]byte("%1\r\n$5\r\nproto\r\n:3\r\n"))
			case "incr":
				incrs.Add(1)
				return
			default:
				_, _ = c.Write([]byte("+OK\r\n"))
			}
		}
	}).Addr().String()
}

// A write that starts with a command of the handshake's kind (CLIENT
// SETNAME) and goes on with the application's (INCR) is the application's:
// the server's close after running the INCR is not a handshake cut, and
// the pipeline does not run again (it ran once, with retries off).
func TestHandshakeCommandsAheadOfTheApplicationsRunOnce(t *testing.T) {
	var incrs atomic.Int64
	addr := miniServer(t, &incrs)
	m := maint.New()
	defer m.Close()
	rdb := m.NewClient(&redis.Options{Addr: addr, Protocol: 3, MaxRetries: -1, PoolSize: 1, DisableIdentity: true})
	defer rdb.Close()
	ctx := context.Background()
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "CLIENT", "SETNAME", "app")
		p.Incr(ctx, "k")
		return nil
	})
	require.Error(t, err, "the server closed the connection under the pipeline")
	assert.EqualValues(t, 1, incrs.Load(), "the INCR ran once")
	assert.Zero(t, m.Stats().NotWrittenReruns)
}

// A server that closes every new connection in its handshake (maxclients,
// a proxy refusing) costs a command at most twice go-redis's own dials:
// maint runs a command whose connection was cut in its handshake again
// once, and never the handshake's own commands.
func TestServerClosingEveryHandshakeCostsFewDials(t *testing.T) {
	var accepts atomic.Int64
	ln := serveLoopback(t, func(c net.Conn) {
		accepts.Add(1)
		_, _ = c.Read(make([]byte, 4096))
		_, _ = c.Write([]byte("-ERR max number of clients reached\r\n"))
		_ = c.Close()
	})
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			accepts.Store(0)
			m := maint.New()
			defer m.Close()
			rdb := r.install(m, &redis.Options{Addr: ln.Addr().String(), Protocol: 3, PoolSize: 1,
				MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond})
			defer rdb.Close()
			require.Error(t, rdb.Set(context.Background(), "k", 1, 0).Err())
			assert.LessOrEqual(t, accepts.Load(), int64(8), "dials for one command (go-redis alone, MaxRetries 3: 4)")
		})
	}
}

// limiterCount is a Limiter that counts admissions and failures.
type limiterCount struct{ allowed, failed atomic.Int64 }

func (l *limiterCount) Allow() error { l.allowed.Add(1); return nil }
func (l *limiterCount) ReportResult(err error) {
	if err != nil && err != redis.Nil {
		l.failed.Add(1)
	}
}

// Under HandshakeRequired a refused opt-in fails the connection, and the
// command that dialled it fails with maint's refusal: a circuit breaker in
// the Limiter counts it, once per refused connection, on v9.23.0 (where
// every command of the handshake pays its own admission too: HELLO, and a
// PING requireOptIn sends, succeed) and on v9.24.0 (where the dialling
// command pays the only one). Checked on v9.23.0 and v9.24.0. TestGoRedisOnConnectSharesHooks pins each release's accounting.
func TestHandshakeRequiredRefusalReachesTheLimiterOnce(t *testing.T) {
	e := newEnv(t)
	e.old.SetUnsupported(true)
	m := maint.New(maint.WithLogf(func(string, ...any) {}), maint.WithHandshake(maint.HandshakeRequired))
	defer m.Close()
	lim := &limiterCount{}
	opt := e.options(1)
	opt.Limiter = lim
	opt.MaxRetries = -1
	opt.DisableIdentity = true // miniredis refuses CLIENT SETINFO: count maint's refusal alone
	m.Configure(opt)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	rdb.AddHook(m)
	const n = 3
	for i := range n {
		err := rdb.Set(context.Background(), "k", i, 0).Err()
		require.Error(t, err, "command %d", i)
		assert.Contains(t, err.Error(), "refused the maintenance notifications handshake")
	}
	t.Logf("go-redis %s: Limiter %d Allow, %d failures for %d refused connections", redis.Version(), lim.allowed.Load(), lim.failed.Load(), n)
	assert.EqualValues(t, n, lim.failed.Load(), "one failure per refused connection")
	assert.EqualValues(t, n, e.old.Stats().Opened, "one connection per command")
}

// An endpoint that refuses the opt-in for lack of support (OSS Redis,
// Valkey) is said at Warn once for the process's life, whichever Maint or
// client meets it, and at Debug after that; each refusal is still counted.
// Another endpoint is said once too.
func TestUnsupportedIsSaidAtWarnOncePerEndpoint(t *testing.T) {
	maint.ForgetUnsupportedSaid()
	e := newEnv(t)
	e.old.SetUnsupported(true)
	e.new.SetUnsupported(true)
	logs := &records{level: slog.LevelDebug}
	log := slog.New(logs)
	ctx := context.Background()
	refusals := uint64(0)
	meet := func(addr string) {
		m := maint.New(maint.WithLogger(log)) // a Maint of its own: it asks the endpoint again
		opt := e.options(2)
		opt.Addr = addr
		rdb := m.NewClient(opt)
		require.NoError(t, rdb.Ping(ctx).Err())
		require.NoError(t, rdb.Close())
		refusals += m.Stats().Unsupported
		require.NoError(t, m.Close())
	}
	for range 5 {
		meet(e.old.Addr())
	}
	const msg = "maint: endpoint does not support maintenance notifications"
	levels := func() map[slog.Level]int {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		out := map[slog.Level]int{}
		for _, r := range logs.recs {
			if r.Message == msg {
				out[r.Level]++
			}
		}
		return out
	}
	assert.EqualValues(t, 5, refusals, "every Maint's refusal counted")
	assert.Equal(t, map[slog.Level]int{slog.LevelWarn: 1, slog.LevelDebug: 4}, levels(), "once at Warn, then at Debug")
	meet(e.new.Addr())
	assert.Equal(t, map[slog.Level]int{slog.LevelWarn: 2, slog.LevelDebug: 4}, levels(), "another endpoint said once at Warn")
}
