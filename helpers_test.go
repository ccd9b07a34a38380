package maint_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
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
func newEnvOn(t *testing.T, backend string) *env {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf, Backend: backend})
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

// fakeSentinel is a minimal Sentinel (a Discovery Service) on loopback: it
// names a master and records every command it reads.
type fakeSentinel struct {
	ln     net.Listener
	mu     sync.Mutex
	master string
	cmds   []string
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newFakeSentinel(t *testing.T, master string) *fakeSentinel {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &fakeSentinel{ln: ln, master: master, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *fakeSentinel) addr() string { return s.ln.Addr().String() }

func (s *fakeSentinel) setMaster(addr string) {
	s.mu.Lock()
	s.master = addr
	s.mu.Unlock()
}

func (s *fakeSentinel) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cmds...)
}

func (s *fakeSentinel) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *fakeSentinel) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.handle(c)
		}()
	}
}

func (s *fakeSentinel) handle(c net.Conn) {
	rd := bufio.NewReader(c)
	for {
		args, err := readCommand(rd)
		if err != nil {
			return
		}
		if len(args) == 0 {
			continue
		}
		name := strings.ToLower(args[0])
		s.mu.Lock()
		s.cmds = append(s.cmds, strings.ToLower(strings.Join(args, " ")))
		master := s.master
		s.mu.Unlock()
		var out string
		switch {
		case name == "hello":
			out = "-ERR unknown command 'HELLO'\r\n"
		case name == "ping":
			out = "+PONG\r\n"
		case name == "sentinel" && len(args) > 1 && strings.EqualFold(args[1], "get-master-addr-by-name"):
			host, port, _ := net.SplitHostPort(master)
			out = fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(host), host, len(port), port)
		case name == "sentinel":
			out = "*0\r\n"
		case name == "subscribe":
			for i, ch := range args[1:] {
				out += fmt.Sprintf("*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:%d\r\n", len(ch), ch, i+1)
			}
		default:
			out = "+OK\r\n"
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, n)
	for i := 0; i < n; i++ {
		h, err := rd.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, err := strconv.Atoi(strings.TrimRight(h, "\r\n")[1:])
		if err != nil {
			return nil, err
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		args = append(args, string(b[:l]))
	}
	return args, nil
}

// replayServer is a minimal RESP3 server that, like Redis Enterprise,
// replays a retained MIGRATED some milliseconds after answering the opt-in,
// asynchronously, so that it lands on a connection idle in the pool.
type replayServer struct {
	addr     string
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func newReplayServer(t *testing.T, delay time.Duration) *replayServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &replayServer{addr: ln.Addr().String()}
	var conns sync.Map
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(k, _ any) bool { _ = k.(net.Conn).Close(); return true })
		s.wg.Wait()
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			conns.Store(c, nil)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c, delay)
			}()
		}
	}()
	return s
}

func (s *replayServer) serve(c net.Conn, delay time.Duration) {
	defer c.Close()
	var mu sync.Mutex
	write := func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = c.Write(b)
	}
	r := bufio.NewReader(c)
	for {
		frame, err := resp.ReadCommand(r, nil)
		if err != nil {
			return
		}
		name, args, err := resp.CommandName(frame)
		if err != nil {
			return
		}
		switch name {
		case "HELLO":
			write([]byte("%1\r\n$5\r\nproto\r\n:3\r\n"))
		case "PING":
			write([]byte("+PONG\r\n"))
		case "CLIENT":
			write([]byte("+OK\r\n"))
			if len(args) > 0 && strings.EqualFold(string(args[0]), "MAINT_NOTIFICATIONS") {
				time.AfterFunc(delay, func() { write(resp.AppendMigrated(nil, 7, `["1"]`)) })
			}
		default:
			write([]byte("+OK\r\n"))
		}
	}
}

const shards = `["1"]`

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// directClient is a one-connection client of ep with maint installed.
func (e *env) directClient(ep *mainttest.Endpoint, m *maint.Maint, readTimeout time.Duration) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: ep.Addr(), Protocol: 3, PoolSize: 1, MaxRetries: -1,
		ReadTimeout: readTimeout, WriteTimeout: readTimeout})
	rdb.AddHook(m)
	e.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func newMaint(t *testing.T, ev *eventLog, opts ...maint.Option) *maint.Maint {
	opts = append([]maint.Option{maint.WithLogf(t.Logf), maint.WithOnEvent(ev.add)}, opts...)
	m := maint.New(opts...)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// incrLoad runs workers that INCR keys of their own and count what was
// acknowledged, so that a write run twice shows in the final values.
type incrLoad struct {
	acked  []atomic.Int64
	failed []atomic.Int64
	errs   sync.Map
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startIncr(rdb *redis.Client, workers int, prefix string) *incrLoad {
	return startIncrOp(workers, prefix, 1, func(key string) (int64, error) {
		return rdb.Incr(context.Background(), key).Result()
	})
}

// startIncrOp is startIncr with op as the load's unit: it applies step
// INCRs to key and returns the value after the last.
func startIncrOp(workers int, prefix string, step int64, op func(key string) (int64, error)) *incrLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &incrLoad{acked: make([]atomic.Int64, workers), failed: make([]atomic.Int64, workers), cancel: cancel}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			key := prefix + strconv.Itoa(w)
			for ctx.Err() == nil {
				// Each command has its own context, not the load's: a
				// command cut short by the test's stop would count as failed.
				n, err := op(key)
				if err != nil {
					l.failed[w].Add(1)
					l.errs.Store(err.Error(), true)
					continue
				}
				if got := l.acked[w].Add(step); got != n {
					l.errs.Store(fmt.Sprintf("%s: reply %d for acknowledged INCR number %d", key, n, got), true)
					l.acked[w].Store(n)
				}
			}
		}(w)
	}
	return l
}

func (l *incrLoad) stop() { l.cancel(); l.wg.Wait() }

// check compares every key's final value with the INCRs acknowledged.
func (l *incrLoad) check(t *testing.T, mr interface{ Get(string) (string, error) }, prefix string) {
	t.Helper()
	var acked, failed int64
	for w := range l.acked {
		v, err := mr.Get(prefix + strconv.Itoa(w))
		final := int64(0)
		if err == nil {
			final, _ = strconv.ParseInt(v, 10, 64)
		}
		a, f := l.acked[w].Load(), l.failed[w].Load()
		acked += a
		failed += f
		assert.Equal(t, a, final, "key %d: %d acknowledged, %d failed, final value %d (more: a write ran twice; less: lost)", w, a, f, final)
	}
	var errs []string
	l.errs.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
	t.Logf("INCRs acknowledged %d, failed %d; errors %v", acked, failed, errs)
	assert.Zero(t, failed, "failed commands: %v", errs)
	assert.Empty(t, errs, "errors and INCR replies that skipped a value (a write run twice)")
}

// openLoad starts commands on a fixed schedule, whatever is in flight (as
// users' traffic does), bounded only by maxInFlight.
type openLoad struct {
	ok, failed, notStarted atomic.Int64
	mu                     sync.Mutex
	errs                   map[string]int
	stopc                  chan struct{}
	wg                     sync.WaitGroup
}

func startOpenLoad(rdb *redis.Client, rate, maxInFlight int) *openLoad {
	l := &openLoad{errs: map[string]int{}, stopc: make(chan struct{})}
	sem := make(chan struct{}, maxInFlight)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		every := time.Second / time.Duration(rate)
		next := time.Now()
		for i := 0; ; i++ {
			select {
			case <-l.stopc:
				return
			case <-time.After(time.Until(next)):
			}
			next = next.Add(every)
			select {
			case sem <- struct{}{}:
			default:
				l.notStarted.Add(1)
				continue
			}
			l.wg.Add(1)
			go func(i int) {
				defer l.wg.Done()
				defer func() { <-sem }()
				err := rdb.Set(context.Background(), "open:"+string(rune('a'+i%26)), i, 0).Err()
				if err != nil && !errors.Is(err, redis.Nil) {
					l.failed.Add(1)
					l.mu.Lock()
					l.errs[err.Error()]++
					l.mu.Unlock()
					return
				}
				l.ok.Add(1)
			}(i)
		}
	}()
	return l
}

func (l *openLoad) stop() { close(l.stopc); l.wg.Wait() }

// useConns initialises n connections of cli at once (go-redis initialises
// idle connections, MinIdleConns ones among them, at their first use).
func useConns(t *testing.T, cli *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	var cs []*redis.Conn
	for i := 0; i < n; i++ {
		cn := cli.Conn()
		require.NoError(t, cn.Ping(ctx).Err())
		cs = append(cs, cn)
	}
	for _, cn := range cs {
		_ = cn.Close()
	}
}

// ringShards returns the shard clients of a Ring that are up.
func ringShards(rng *redis.Ring) []*redis.Client {
	var mu sync.Mutex
	var cs []*redis.Client
	_ = rng.ForEachShard(context.Background(), func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		cs = append(cs, c)
		mu.Unlock()
		return nil
	})
	return cs
}

// allOptedIn waits until every connection an endpoint accepted has opted in:
// the options route watched (and opted in) each of them from its first byte.
func allOptedIn(t *testing.T, ep *mainttest.Endpoint, atLeast int) {
	t.Helper()
	waitFor(t, "every connection of "+ep.Addr()+" opted in", 10*time.Second, func() bool {
		st := ep.Stats()
		return st.Opened >= atLeast && st.OptedIn == st.Opened
	})
}

// shards adds n more endpoints to e's emulator.
func (e *env) shards(n int) []*mainttest.Endpoint {
	var eps []*mainttest.Endpoint
	for i := 0; i < n; i++ {
		ep, err := e.emu.AddEndpoint("127.0.0.4:0")
		require.NoError(e.t, err)
		eps = append(eps, ep)
	}
	return eps
}

func ringOptions(addrs map[string]string) *redis.RingOptions {
	return &redis.RingOptions{
		Addrs:              addrs,
		Protocol:           3,
		MinIdleConns:       2,
		PoolSize:           2,
		HeartbeatFrequency: 50 * time.Millisecond,
		DialTimeout:        500 * time.Millisecond,
		ReadTimeout:        500 * time.Millisecond,
		MaxRetries:         -1,
	}
}

// newDiscovery starts an emulated Discovery Service naming e's old node.
func (e *env) newDiscovery() *mainttest.Sentinel {
	e.t.Helper()
	ds, err := e.emu.AddSentinel("127.0.0.9:0", "db", e.old)
	require.NoError(e.t, err)
	return ds
}

// dsOptions are a FailoverClient's options against an emulated Discovery
// Service.
func dsOptions(ds *mainttest.Sentinel, retries int) *redis.FailoverOptions {
	return &redis.FailoverOptions{
		MasterName: "db", SentinelAddrs: []string{ds.Addr()},
		Protocol: 3, PoolSize: 8, MinIdleConns: 2, MaxRetries: retries,
		ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
	}
}

// firstWith is the first event of kind k with detail d.
func (l *eventLog) firstWith(k maint.EventKind, d string) (maint.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		if e.Kind == k && e.Detail == d {
			return e, true
		}
	}
	return maint.Event{}, false
}
