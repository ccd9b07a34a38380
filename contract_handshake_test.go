package maint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint/mainttest"
)

// ---------------------------------------------------------------------------
// e. What a new connection writes first.

// TestGoRedisWritesHelloFirst pins the start of every connection
// (redis.go initConn): HELLO alone in the first Write, its reply read
// before anything else is written; then the optional SELECT / CLIENT
// SETNAME pipeline in one Write, go-redis's own CLIENT MAINT_NOTIFICATIONS
// (built-in handler on), and CLIENT SETINFO twice in one Write. HELLO is
// sent on Protocol 2 too ("hello 2"). maint injects its opt-in right after
// HELLO's reply.
func TestGoRedisWritesHelloFirst(t *testing.T) {
	hello3 := []string{"hello", "3"}
	setinfo := [][]string{{"client", "setinfo", "LIB-NAME", "go-redis(,"}, {"client", "setinfo", "LIB-VER", redis.Version()}}
	cases := []struct {
		name string
		opt  func(*redis.Options)
		want [][][]string // per Write: the commands (a "*" word matches any suffix of a word in setinfo)
	}{
		{"builtin_off", func(*redis.Options) {}, [][][]string{{hello3}, setinfo, {{"ping"}}}},
		{"builtin_auto_default_options", func(o *redis.Options) { o.MaintNotificationsConfig = nil }, [][][]string{
			{hello3}, {{"client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip"}}, setinfo, {{"ping"}}}},
		{"password_db_clientname", func(o *redis.Options) { o.Password, o.DB, o.ClientName = "pw", 2, "app" }, [][][]string{
			{{"hello", "3", "auth", "default", "pw", "setname", "app"}}, {{"select", "2"}, {"client", "setname", "app"}}, setinfo, {{"ping"}}}},
		{"protocol_2", func(o *redis.Options) { o.Protocol = 2 }, [][][]string{{{"hello", "2"}}, setinfo, {{"ping"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newContract(t)
			if tc.name == "password_db_clientname" {
				c.emu.Miniredis().RequireAuth("pw")
			}
			opt := c.options()
			tc.opt(opt)
			rdb := c.client(opt)
			c.ping(rdb, tc.name)
			ops := c.w.since(0, 1)
			got := written(ops)
			t.Logf("%s: writes of a new connection: %q", tc.name, got)
			if !sameWrites(got, tc.want) {
				t.Fatalf("go-redis (%s) no longer starts a connection with the writes %q; it wrote %q: maint's opt-in, injected after HELLO's reply, assumes this sequence", tc.name, tc.want, got)
			}
			// Before HELLO: go-redis's pending-push peek (the connection was
			// never returned to a pool, so it is not skipped; RESP3 only),
			// then the write deadline.
			if opt.Protocol == 2 {
				if k := kinds(ops); len(k) < 2 || k[0] != opSetWrite || k[1] != opWrite || count(ops, opSyscallConn) != 0 {
					t.Fatalf("on RESP2 the first calls on a new connection are no longer SetWriteDeadline, Write(HELLO), and no push peek:%s", dump(ops))
				}
				return
			}
			if k := kinds(ops); len(k) < 5 || k[0] != opSetRead || !ops[0].dl.IsZero() || k[1] != opSyscallConn ||
				k[2] != opRawRead || k[3] != opSetWrite || k[4] != opWrite {
				t.Fatalf("the first calls on a new connection are no longer SetReadDeadline(zero), SyscallConn, RawConn.Read, SetWriteDeadline, Write(HELLO): maint's check flag and its opt-in after HELLO assume them:%s", dump(ops[:min(8, len(ops))]))
			}
			if tc.name == "builtin_off" && string(ops[4].data) != "*2\r\n$5\r\nhello\r\n$1\r\n3\r\n" {
				t.Fatalf("HELLO 3 is no longer written as *2\\r\\n$5\\r\\nhello\\r\\n$1\\r\\n3\\r\\n: %q", ops[4].data)
			}
			// Each Write is answered before the next: nothing is pipelined
			// across the steps of initConn.
			for i, o := range ops {
				if o.kind != opWrite || i == index(ops, opWrite) {
					continue
				}
				prev := ops[:i]
				lastW := len(prev) - 1
				for prev[lastW].kind != opWrite {
					lastW--
				}
				if count(prev[lastW:], opRead) == 0 {
					t.Fatalf("go-redis wrote %q before reading the reply to the previous write: initConn now pipelines its steps:%s", wireCommands(o.data), dump(ops))
				}
			}
		})
	}
}

// sameWrites compares writes; a want word ending in "," or "(" matches any
// word it prefixes (the library name carries the Go version).
func sameWrites(got, want [][][]string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			return false
		}
		for j := range got[i] {
			if len(got[i][j]) != len(want[i][j]) {
				return false
			}
			for k, w := range want[i][j] {
				g := got[i][j][k]
				if strings.HasSuffix(w, ",") || strings.HasSuffix(w, "(") {
					if !strings.HasPrefix(g, w) {
						return false
					}
				} else if !strings.EqualFold(g, w) {
					return false
				}
			}
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// f. OnConnect shares the client's hooks and Limiter.

// limiterLog is a redis.Limiter that records the results reported.
type limiterLog struct {
	mu      sync.Mutex
	allowed int
	results []error
}

func (l *limiterLog) Allow() error {
	l.mu.Lock()
	l.allowed++
	l.mu.Unlock()
	return nil
}

func (l *limiterLog) ReportResult(err error) {
	l.mu.Lock()
	l.results = append(l.results, err)
	l.mu.Unlock()
}

// TestGoRedisOnConnectSharesHooks, checked on v9.23.0 and v9.24.0: the
// *redis.Conn given to OnConnect carries the client's hooks, including
// those added with AddHook after NewClient: HELLO, the init pipelines and
// every command OnConnect sends pass through the application's ProcessHook
// (and through maint's). That is why maint's handshake does not go through
// OnConnect: an application hook would see, time and count it.
//
// What the Limiter sees of it changed in v9.24.0. Up to v9.23, every
// command of the handshake (HELLO, the init pipeline) and every command
// OnConnect sends pays its own Allow and reports its own result (a refused
// opt-in there is a failure for a circuit breaker). From v9.24.0
// the handshake and OnConnect are exempt: the command that dials pays one
// Allow and reports one result, its own. On both, an error OnConnect
// returns fails the dialling command, and that failure is what the Limiter
// is told: what HandshakeRequired relies on for a refusal to count once
// (TestHandshakeRequiredRefusalReachesTheLimiterOnce). A release that
// moves either fails here first.
func TestGoRedisOnConnectSharesHooks(t *testing.T) {
	exempt := goRedisAtLeast(9, 24)
	t.Logf("go-redis %s: OnConnect exempt from the Limiter: %v", redis.Version(), exempt)
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("OnConnectFails=%v", fail), func(t *testing.T) {
			c := newContract(t)
			c.ep.SetHandshake(mainttest.Handshake{Answer: mainttest.AnswerError, Error: "LOADING Redis is loading the dataset in memory"})
			opt := c.options()
			lim := &limiterLog{}
			opt.Limiter = lim
			opt.MaxRetries = -1
			var onConnectErr atomic.Pointer[error]
			opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
				err := cn.Do(ctx, "CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip").Err()
				onConnectErr.Store(&err)
				if fail {
					return err
				}
				return nil
			}
			rdb := redis.NewClient(opt)
			defer rdb.Close()
			app := &hookLog{}
			rdb.AddHook(app) // after NewClient, as an application installing maint does
			pingErr := rdb.Ping(context.Background()).Err()
			seen := app.seen()
			t.Logf("application hooks saw, in order: %q; PING: %v", seen, pingErr)
			hello, onConnect := -1, -1
			for i, s := range seen {
				switch {
				case s == "hello" && hello < 0:
					hello = i
				case s == "client" && hello >= 0:
					onConnect = i
				}
			}
			if hello < 0 {
				t.Fatalf("the application's ProcessHook no longer sees initConn's HELLO (saw %q)", seen)
			}
			if onConnect < 0 {
				t.Fatalf("the command OnConnect sent no longer passes through the application's ProcessHook (saw %q): maint's handshake could go back to OnConnect", seen)
			}
			errp := onConnectErr.Load()
			if errp == nil || *errp == nil || !strings.HasPrefix((*errp).Error(), "LOADING") {
				t.Fatalf("OnConnect's command: %v, want the endpoint's LOADING", errp)
			}
			if fail != (pingErr != nil) {
				t.Fatalf("OnConnect returned an error: %v; the dialling command's error: %v", fail, pingErr)
			}
			lim.mu.Lock()
			defer lim.mu.Unlock()
			t.Logf("Limiter: %d Allow, results %v", lim.allowed, lim.results)
			sawLoading := 0
			for _, r := range lim.results {
				if r != nil && strings.Contains(r.Error(), "LOADING") {
					sawLoading++
				}
			}
			switch {
			case exempt && (lim.allowed != 1 || len(lim.results) != 1):
				t.Fatalf("go-redis %s: the Limiter saw %d Allow and results %v; want one of each, the dialling command's: the handshake is no longer exempt", redis.Version(), lim.allowed, lim.results)
			case exempt && fail && sawLoading != 1:
				t.Fatalf("go-redis %s: the dialling command's failure (%v) is no longer reported to the Limiter (results %v): a refusal under HandshakeRequired would not count", redis.Version(), pingErr, lim.results)
			case exempt && !fail && sawLoading != 0:
				t.Fatalf("go-redis %s: the Limiter receives the result of a command sent in OnConnect again (results %v)", redis.Version(), lim.results)
			case !exempt && (lim.allowed < 3 || len(lim.results) != lim.allowed):
				t.Fatalf("go-redis %s: the Limiter saw %d Allow and results %v; want one of each per handshake command (HELLO, the init pipeline), OnConnect's command and the dialling command", redis.Version(), lim.allowed, lim.results)
			case !exempt && sawLoading != 1+btoi(fail):
				t.Fatalf("go-redis %s: the Limiter no longer receives the result of a command sent in OnConnect, or the dialling command's failure (results %v)", redis.Version(), lim.results)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// failFirstRead is a connection the server closed before its first read:
// every read and write fails with err.
type failFirstRead struct {
	net.Conn
	err error
}

func (c *failFirstRead) Read([]byte) (int, error) {
	_ = c.Conn.Close()
	return 0, c.err
}

func (c *failFirstRead) Write(p []byte) (int, error) {
	if _, err := c.Conn.Write(p); err != nil {
		return 0, c.err
	}
	return len(p), nil
}

// TestGoRedisReturnsTheHandshakesErrorToTheCommand pins what maint's rerun
// of a command whose connection the server closed during its handshake
// relies on (dialer.go unusedErr): an error of a connection's handshake
// (its HELLO reply's read) fails the command that needed the connection
// with that error's chain intact, in the error returned and in what the
// process hooks see, and the command is not written. go-redis unwraps the
// error once (redis.go _getConn): maint's mark is the outer of two errors
// joined by %w, which errors.Unwrap leaves whole.
func TestGoRedisReturnsTheHandshakesErrorToTheCommand(t *testing.T) {
	c := newContract(t)
	mark := errors.New("marked")
	opt := c.options()
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := c.emu.Dialer()(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &failFirstRead{Conn: raw, err: fmt.Errorf("%w (%w)", mark, io.EOF)}, nil
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	var hooked error
	rdb.AddHook(hookFunc(func(next redis.ProcessHook) redis.ProcessHook {
		return func(ctx context.Context, cmd redis.Cmder) error {
			err := next(ctx, cmd)
			if cmd.Name() == "set" {
				hooked = err
			}
			return err
		}
	}))
	err := rdb.Set(context.Background(), "k", "v", 0).Err()
	if !errors.Is(err, mark) || !errors.Is(hooked, mark) {
		t.Fatalf("the command's error %v (its hooks saw %v) no longer carries the handshake error's chain: a command maint would run again fails", err, hooked)
	}
	if got, _ := c.emu.Miniredis().Get("k"); got != "" {
		t.Fatalf("the command was written: k=%q", got)
	}
}

// hookFunc is a redis.Hook of one ProcessHook.
type hookFunc func(next redis.ProcessHook) redis.ProcessHook

func (h hookFunc) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return h(next) }

func (h hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
