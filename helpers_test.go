package maint_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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

// ---------------------------------------------------------------------------
// The recording connection.

// Kinds of recorded calls on a connection.
const (
	opSyscallConn = "SyscallConn"
	opRawRead     = "RawConn.Read"
	opRawControl  = "RawConn.Control"
	opRawWrite    = "RawConn.Write"
	opSetDeadline = "SetDeadline"
	opSetRead     = "SetReadDeadline"
	opSetWrite    = "SetWriteDeadline"
	opRead        = "Read"
	opWrite       = "Write"
	opClose       = "Close"
)

// wireOp is one call go-redis made on a recorded connection.
type wireOp struct {
	conn int       // the connection, numbered from 1 in dial order
	kind string    // one of the op constants
	at   time.Time // when the call began
	dl   time.Time // the deadline passed to a setter
	data []byte    // Write: the bytes written; Read: the bytes returned
	err  error     // what the call returned
}

// String formats the call compactly: deadlines relative to the call, writes
// as the commands they hold.
func (o wireOp) String() string {
	s := "c" + strconv.Itoa(o.conn) + " " + o.kind
	switch o.kind {
	case opSetDeadline, opSetRead, opSetWrite:
		if o.dl.IsZero() {
			s += "(zero)"
		} else {
			s += "(+" + o.dl.Sub(o.at).Round(time.Millisecond).String() + ")"
		}
	case opWrite:
		s += fmt.Sprintf("%q", wireCommands(o.data))
	case opRead:
		s += fmt.Sprintf("(%d)", len(o.data))
	}
	if o.err != nil {
		s += " err=" + o.err.Error()
	}
	return s
}

// wire records every call go-redis makes on the connections it dials
// through dialer, in one log ordered by the moment each call began.
type wire struct {
	plain bool // dial connections that do not implement syscall.Conn

	mu    sync.Mutex
	ops   []wireOp
	conns []*wireConn
}

// dialer wraps next: each connection it returns is recorded.
func (w *wire) dialer(next func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := &wireConn{Conn: raw, w: w}
		w.mu.Lock()
		w.conns = append(w.conns, c)
		c.id = len(w.conns)
		w.mu.Unlock()
		if w.plain {
			return c, nil
		}
		return &wireSysConn{c}, nil
	}
}

func (w *wire) record(op wireOp) {
	w.mu.Lock()
	w.ops = append(w.ops, op)
	w.mu.Unlock()
}

// mark returns the position of the next call in the log.
func (w *wire) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ops)
}

// since returns the calls from position from on, on connection conn (any
// when conn is 0).
func (w *wire) since(from, conn int) []wireOp {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []wireOp
	for _, o := range w.ops[from:] {
		if conn == 0 || o.conn == conn {
			out = append(out, o)
		}
	}
	return out
}

// conn returns connection i (from 1).
func (w *wire) conn(i int) *wireConn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conns[i-1]
}

// dialed returns how many connections were dialled.
func (w *wire) dialed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.conns)
}

// wireConn is a recorded connection without SyscallConn.
type wireConn struct {
	net.Conn
	w  *wire
	id int

	// Faults: SyscallConn and RawConn.Read fail once, Read fails from now
	// on, as on a closed connection.
	failSyscall  atomic.Pointer[error]
	failRawRead  atomic.Pointer[error]
	failRead     atomic.Pointer[error]
	failReadOnce atomic.Pointer[error] // the next Read only

	// Concurrency: calls in progress, and what was seen overlapping.
	reading     atomic.Int32 // Read and RawConn.Read
	writing     atomic.Int32
	readOverlap atomic.Int64 // a Read or RawConn.Read began while another was in progress
	rwOverlap   atomic.Int64 // a Read began during a Write or the reverse
}

// wireSysConn is a recorded connection with SyscallConn.
type wireSysConn struct{ *wireConn }

func (c *wireConn) rec(op wireOp) {
	op.conn = c.id
	c.w.record(op)
}

// take returns and clears a one-shot fault.
func take(p *atomic.Pointer[error]) error {
	if e := p.Swap(nil); e != nil {
		return *e
	}
	return nil
}

func (c *wireConn) enterRead() {
	if c.reading.Add(1) > 1 {
		c.readOverlap.Add(1)
	}
	if c.writing.Load() > 0 {
		c.rwOverlap.Add(1)
	}
}

func (c *wireConn) leaveRead() { c.reading.Add(-1) }

func (c *wireConn) Read(p []byte) (int, error) {
	op := wireOp{kind: opRead, at: time.Now()}
	c.enterRead()
	defer c.leaveRead()
	if e := c.failRead.Load(); e != nil {
		op.err = *e
		c.rec(op)
		return 0, *e
	}
	if err := take(&c.failReadOnce); err != nil {
		op.err = err
		c.rec(op)
		return 0, err
	}
	n, err := c.Conn.Read(p)
	op.data, op.err = append([]byte(nil), p[:min(n, 64)]...), err
	c.rec(op)
	return n, err
}

func (c *wireConn) Write(p []byte) (int, error) {
	op := wireOp{kind: opWrite, at: time.Now(), data: append([]byte(nil), p[:min(len(p), 64<<10)]...)}
	c.writing.Add(1)
	if c.reading.Load() > 0 {
		c.rwOverlap.Add(1)
	}
	n, err := c.Conn.Write(p)
	c.writing.Add(-1)
	op.err = err
	c.rec(op)
	return n, err
}

func (c *wireConn) Close() error {
	c.rec(wireOp{kind: opClose, at: time.Now()})
	return c.Conn.Close()
}

func (c *wireConn) SetDeadline(t time.Time) error {
	c.rec(wireOp{kind: opSetDeadline, at: time.Now(), dl: t})
	return c.Conn.SetDeadline(t)
}

func (c *wireConn) SetReadDeadline(t time.Time) error {
	c.rec(wireOp{kind: opSetRead, at: time.Now(), dl: t})
	return c.Conn.SetReadDeadline(t)
}

func (c *wireConn) SetWriteDeadline(t time.Time) error {
	c.rec(wireOp{kind: opSetWrite, at: time.Now(), dl: t})
	return c.Conn.SetWriteDeadline(t)
}

// SyscallConn records the call and returns a recording RawConn.
func (c *wireSysConn) SyscallConn() (syscall.RawConn, error) {
	op := wireOp{kind: opSyscallConn, at: time.Now()}
	if err := take(&c.failSyscall); err != nil {
		op.err = err
		c.rec(op)
		return nil, err
	}
	rc, err := c.Conn.(syscall.Conn).SyscallConn()
	op.err = err
	c.rec(op)
	if err != nil {
		return nil, err
	}
	return &wireRawConn{c: c.wireConn, rc: rc}, nil
}

// wireRawConn records the calls on a RawConn.
type wireRawConn struct {
	c  *wireConn
	rc syscall.RawConn
}

func (r *wireRawConn) Read(f func(fd uintptr) bool) error {
	op := wireOp{kind: opRawRead, at: time.Now()}
	r.c.enterRead()
	defer r.c.leaveRead()
	if err := take(&r.c.failRawRead); err != nil {
		op.err = err
		r.c.rec(op)
		return err
	}
	op.err = r.rc.Read(f)
	r.c.rec(op)
	return op.err
}

func (r *wireRawConn) Control(f func(fd uintptr)) error {
	op := wireOp{kind: opRawControl, at: time.Now()}
	op.err = r.rc.Control(f)
	r.c.rec(op)
	return op.err
}

func (r *wireRawConn) Write(f func(fd uintptr) bool) error {
	op := wireOp{kind: opRawWrite, at: time.Now()}
	op.err = r.rc.Write(f)
	r.c.rec(op)
	return op.err
}

// peerClosed reports whether the server's side of c is closed, as the
// health check's peek would see it (without consuming anything).
func (c *wireConn) peerClosed() bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil
		return true
	})
	return closed
}

// pending reports whether bytes are waiting unread on c's socket.
func (c *wireConn) pending() bool {
	rc, err := c.Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, _ := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = n > 0
		return true
	})
	return waiting
}

// wireCommands splits written bytes into the commands they hold (RESP
// arrays of bulk strings), each as its words; bytes that are not commands
// are returned as one word.
func wireCommands(b []byte) [][]string {
	var out [][]string
	for len(b) > 0 {
		cmd, rest, ok := wireCommand(b)
		if !ok {
			return append(out, []string{string(b)})
		}
		out = append(out, cmd)
		b = rest
	}
	return out
}

func wireCommand(b []byte) ([]string, []byte, bool) {
	line := func() (string, bool) {
		i := strings.Index(string(b), "\r\n")
		if i < 0 {
			return "", false
		}
		l := string(b[:i])
		b = b[i+2:]
		return l, true
	}
	h, ok := line()
	if !ok || len(h) < 2 || h[0] != '*' {
		return nil, nil, false
	}
	n, err := strconv.Atoi(h[1:])
	if err != nil || n < 0 {
		return nil, nil, false
	}
	words := make([]string, 0, n)
	for i := 0; i < n; i++ {
		h, ok := line()
		if !ok || len(h) < 2 || h[0] != '$' {
			return nil, nil, false
		}
		l, err := strconv.Atoi(h[1:])
		if err != nil || l < 0 || len(b) < l+2 {
			return nil, nil, false
		}
		words = append(words, string(b[:l]))
		b = b[l+2:]
	}
	return words, b, true
}

// written returns the commands written in ops, one entry per Write call.
func written(ops []wireOp) [][][]string {
	var out [][][]string
	for _, o := range ops {
		if o.kind == opWrite {
			out = append(out, wireCommands(o.data))
		}
	}
	return out
}

func kinds(ops []wireOp) []string {
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = o.kind
	}
	return out
}

func dump(ops []wireOp) string {
	var b strings.Builder
	for _, o := range ops {
		b.WriteString("\n\t")
		b.WriteString(o.String())
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// The environment.

// contract is one emulated node and the recorder the clients dial through.
type contract struct {
	t   *testing.T
	emu *mainttest.Emulator
	ep  *mainttest.Endpoint
	w   *wire
}

func newContract(t *testing.T) *contract {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	ep, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	return &contract{t: t, emu: emu, ep: ep, w: &wire{}}
}

// builtinOff is the MaintNotificationsConfig maint.Configure sets.
func builtinOff() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// options are the client options of a contract test: one connection, no
// retries (so that no retry hides a failure), go-redis's built-in handler
// off as maint.Configure sets it, and the recording dialer.
func (c *contract) options() *redis.Options {
	return &redis.Options{
		Addr:                     c.ep.Addr(),
		Protocol:                 3,
		PoolSize:                 1,
		MaxRetries:               -1,
		ReadTimeout:              3 * time.Second,
		WriteTimeout:             2 * time.Second,
		Dialer:                   c.w.dialer(c.emu.Dialer()),
		MaintNotificationsConfig: builtinOff(),
	}
}

func (c *contract) client(opt *redis.Options) *redis.Client {
	c.t.Helper()
	rdb := redis.NewClient(opt)
	c.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func (c *contract) ping(rdb *redis.Client, what string) {
	c.t.Helper()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		c.t.Fatalf("%s: PING: %v", what, err)
	}
}

// waitUntil polls cond every few milliseconds until it holds or 10 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// count returns how many ops of kind are in ops.
func count(ops []wireOp, kind string) int {
	n := 0
	for _, o := range ops {
		if o.kind == kind {
			n++
		}
	}
	return n
}

// index returns the position of the first op of kind in ops, or -1.
func index(ops []wireOp, kind string) int {
	for i, o := range ops {
		if o.kind == kind {
			return i
		}
	}
	return -1
}

var errInjected = errors.New("injected by the contract test")

// hookLog records what the process hooks see.
type hookLog struct {
	mu   sync.Mutex
	cmds []string
}

func (h *hookLog) add(s string) {
	h.mu.Lock()
	h.cmds = append(h.cmds, s)
	h.mu.Unlock()
}

func (h *hookLog) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.cmds...)
}

func (h *hookLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hookLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(strings.ToLower(cmd.Name()))
		return next(ctx, cmd)
	}
}

func (h *hookLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = strings.ToLower(c.Name())
		}
		h.add("pipeline[" + strings.Join(names, " ") + "]")
		return next(ctx, cmds)
	}
}

// A blocking command in flight on a retiring node is left to the server's own
// close: the drain cap never cuts it. These are the peers' criteria (Lettuce:
// a BLPOP in flight when the MOVING arrives still returns the value another
// client pushes), on both install routes, with retries disabled.

// blockingRoutes are the install routes the blocking scenarios run on.
var blockingRoutes = []route{routes[0], routes[1]}

func eachRoute(t *testing.T, f func(t *testing.T, options bool)) {
	t.Run("options", func(t *testing.T) { f(t, true) })
	t.Run("Instrument", func(t *testing.T) { f(t, false) })
}

// funcHook is a redis.Hook made of optional functions.
type funcHook struct {
	process  func(next redis.ProcessHook) redis.ProcessHook
	pipeline func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook
}

func (h funcHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h funcHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if h.process != nil {
		return h.process(next)
	}
	return next
}
func (h funcHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if h.pipeline != nil {
		return h.pipeline(next)
	}
	return next
}

// subDialLog records the pub/sub connections a client made (those that wrote
// SSUBSCRIBE), by address, so a test can break one under go-redis.
type subDialLog struct {
	next  func(ctx context.Context, network, addr string) (net.Conn, error)
	mu    sync.Mutex
	conns []net.Conn
	addrs []string
}

// subDialConn marks itself in its subDialLog at its first SSUBSCRIBE.
type subDialConn struct {
	net.Conn
	d    *subDialLog
	addr string
	once sync.Once
}

func (c *subDialConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("ssubscribe")) {
		c.once.Do(func() {
			c.d.mu.Lock()
			c.d.conns = append(c.d.conns, c.Conn)
			c.d.addrs = append(c.d.addrs, c.addr)
			c.d.mu.Unlock()
		})
	}
	return c.Conn.Write(p)
}

func (d *subDialLog) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.next(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &subDialConn{Conn: c, d: d, addr: addr}, nil
}

// last returns the latest pub/sub connection and its address, and how many
// there were.
func (d *subDialLog) last() (net.Conn, string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.conns)
	if n == 0 {
		return nil, "", 0
	}
	return d.conns[n-1], d.addrs[n-1], n
}

// ownerBy returns the address the ClusterClient's slot map gives channel.
func ownerBy(t *testing.T, cc *redis.ClusterClient, channel string) string {
	t.Helper()
	c, err := cc.MasterForKey(context.Background(), channel)
	require.NoError(t, err)
	return c.Options().Addr
}

func retriesName(n int) string {
	if n < 0 {
		return "MaxRetries-1"
	}
	return "MaxRetriesDefault"
}

// clusterEnv is a 3-node emulated cluster and a ClusterClient with maint
// installed by Instrument, and a recorder inside maint on every node client
// that counts the redirects of commands sent after maint read the first
// SMIGRATED.
type clusterEnv struct {
	t     *testing.T
	emu   *mainttest.Emulator
	cl    *mainttest.Cluster
	nodes []*mainttest.Endpoint
	cc    *redis.ClusterClient
	g     *maint.Group
	ev    *eventLog
	logs  logLines // the Maints' log lines, in order

	smigratedAt   atomic.Int64 // UnixNano when maint read the first SMIGRATED
	lateRedirects atomic.Int64 // MOVED/ASK replies to commands sent after it
	lateMu        sync.Mutex
	late          []string
}

// newClusterEnv installs maint with Instrument on an existing
// ClusterClient, or (options) through the options route before the first
// dial of every node client (Group.NewClusterClient); tune, if any, changes
// the ClusterClient's options first.
func newClusterEnv(t *testing.T, maxRetries int, options bool, tune ...func(*redis.ClusterOptions)) *clusterEnv {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	ce := &clusterEnv{t: t, emu: emu, cl: cl, nodes: cl.Nodes(), ev: &eventLog{}}
	opt := &redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		Dialer:       emu.Dialer(),
		Protocol:     3,
		PoolSize:     16,
		MaxRetries:   maxRetries,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
	}
	for _, f := range tune {
		f(opt)
	}
	mopts := []maint.Option{maint.WithLogf(func(f string, a ...any) {
		t.Logf(f, a...)
		ce.logs.logf(f, a...)
	}), maint.WithOnEvent(func(e maint.Event) {
		ce.ev.add(e)
		if e.Kind == maint.EventNotification && strings.HasPrefix(e.Detail, "SMIGRATED") {
			ce.smigratedAt.CompareAndSwap(0, e.At.UnixNano())
		}
	})}
	if options {
		ce.g = maint.NewGroup(mopts...)
		ce.cc = ce.g.NewClusterClient(opt)
	} else {
		ce.cc = redis.NewClusterClient(opt)
		ce.g, err = maint.Instrument(ce.cc, mopts...)
		require.NoError(t, err)
	}
	t.Cleanup(func() { _ = ce.g.Close() })
	t.Cleanup(func() { _ = ce.cc.Close() })
	ce.cc.OnNewNode(func(c *redis.Client) { c.AddHook(lateRecorder{ce}) })
	require.NoError(t, ce.cc.Ping(context.Background()).Err())
	return ce
}

// lateRecorder is a hook inside maint's on a node client: it sees what maint
// lets through to the node.
type lateRecorder struct{ ce *clusterEnv }

func (h lateRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h lateRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(sentAt(ctx), cmd, err)
		return err
	}
}
func (h lateRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := sentAt(ctx)
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.note(start, c, c.Err())
		}
		return err
	}
}

// sentAtKey carries when the load handed a command to the ClusterClient:
// the recorder sits inside maint's hooks, so its own clock would start after
// maint had already chosen the command's route.
type sentAtKey struct{}

// stamp returns a context saying the command is sent now.
func stamp() context.Context {
	return context.WithValue(context.Background(), sentAtKey{}, time.Now().UnixNano())
}

// sentAt is when the load sent the command of ctx (now, for a command sent
// by something else).
func sentAt(ctx context.Context) int64 {
	if at, ok := ctx.Value(sentAtKey{}).(int64); ok {
		return at
	}
	return time.Now().UnixNano()
}

func (h lateRecorder) note(start int64, cmd redis.Cmder, err error) {
	at := h.ce.smigratedAt.Load()
	if err == nil || at == 0 || start < at {
		return
	}
	if s := err.Error(); strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ") {
		h.ce.lateRedirects.Add(1)
		h.ce.lateMu.Lock()
		if len(h.ce.late) < 10 {
			h.ce.late = append(h.ce.late, fmt.Sprintf("%v: %s", cmd.Args(), s))
		}
		h.ce.lateMu.Unlock()
	}
}

// clusterLoad runs workers doing verified INCRs (single, in pipelines, and
// in MULTI/EXEC on a hash tag), SETs and GETs across every slot range, and
// counts what each key was acknowledged.
type clusterLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	acked      map[string]int64
	errs       map[string]int
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

func startClusterLoad(cc *redis.ClusterClient, workers int) *clusterLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &clusterLoad{acked: map[string]int64{}, errs: map[string]int{}, cancel: cancel}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.worker(ctx, cc, w)
		}()
	}
	return l
}

func (l *clusterLoad) fail(err error) {
	l.failed.Add(1)
	l.mu.Lock()
	l.errs[err.Error()]++
	l.mu.Unlock()
}

// ack records an acknowledged INCR of key and checks its reply.
func (l *clusterLoad) ack(key string, reply int64) {
	l.ok.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[key]++
	if got := l.acked[key]; got != reply {
		l.errs[fmt.Sprintf("%s: reply %d for acknowledged INCR number %d", key, reply, got)]++
		l.acked[key] = reply
	}
}

func (l *clusterLoad) worker(ctx context.Context, cc *redis.ClusterClient, w int) {
	for i := 0; ctx.Err() == nil; i++ {
		// Each command's own context, not ctx: the stop must not fail one.
		// It says when the command was sent (sentAt).
		bg := stamp()
		j := i % 16
		switch i % 5 {
		case 0, 1:
			key := "c" + strconv.Itoa(w) + "." + strconv.Itoa(j)
			n, err := cc.Incr(bg, key).Result()
			if err != nil {
				l.fail(err)
				continue
			}
			l.ack(key, n)
		case 2:
			key := "s" + strconv.Itoa(w) + "." + strconv.Itoa(j)
			if err := cc.Set(bg, key, i, 0).Err(); err != nil {
				l.fail(err)
				continue
			}
			if err := cc.Get(stamp(), key).Err(); err != nil {
				l.fail(err)
				continue
			}
			l.ok.Add(2)
		case 3:
			keys := make([]string, 4)
			cmds, err := cc.Pipelined(bg, func(p redis.Pipeliner) error {
				for x := range keys {
					keys[x] = "p" + strconv.Itoa(w) + "." + strconv.Itoa((j+x)%16)
					p.Incr(bg, keys[x])
				}
				return nil
			})
			for x, c := range cmds {
				if c.Err() != nil {
					l.fail(c.Err())
					continue
				}
				l.ack(keys[x], c.(*redis.IntCmd).Val())
			}
			if err != nil && len(cmds) == 0 {
				l.fail(err)
			}
		case 4:
			tag := "{t" + strconv.Itoa(w) + "." + strconv.Itoa(j) + "}"
			cmds, err := cc.TxPipelined(bg, func(p redis.Pipeliner) error {
				p.Incr(bg, tag+"a")
				p.Incr(bg, tag+"b")
				return nil
			})
			if err != nil {
				l.fail(err)
				continue
			}
			l.ack(tag+"a", cmds[0].(*redis.IntCmd).Val())
			l.ack(tag+"b", cmds[1].(*redis.IntCmd).Val())
		}
	}
}

func (l *clusterLoad) stop() { l.cancel(); l.wg.Wait() }

// check compares every key's final value in the backend with the INCRs
// acknowledged: more is a write run twice, less a lost one.
func (l *clusterLoad) check(t *testing.T, emu *mainttest.Emulator) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	twice := 0
	for key, n := range l.acked {
		v, err := emu.Miniredis().Get(key)
		final := int64(0)
		if err == nil {
			final, _ = strconv.ParseInt(v, 10, 64)
		}
		if final != n {
			twice++
			t.Errorf("%s: %d INCRs acknowledged, final value %d", key, n, final)
		}
	}
	t.Logf("commands ok %d, failed %d; keys checked %d; errors %v", l.ok.Load(), l.failed.Load(), len(l.acked), l.errs)
	assert.Zero(t, l.failed.Load(), "failed commands: %v", l.errs)
	assert.Zero(t, twice, "keys whose final value is not what was acknowledged")
	for e := range l.errs {
		assert.NotContains(t, e, "reply", "an INCR reply skipped a value: %s", e)
	}
}

// redirects sums the MOVED and ASK the nodes served.
func (ce *clusterEnv) redirects() int64 {
	var n int64
	for _, ep := range ce.nodes {
		st := ep.Stats().Cluster
		n += st.Moved + st.Ask
	}
	return n
}

func (ce *clusterEnv) slotMaps() int64 {
	var n int64
	for _, ep := range ce.nodes {
		n += ep.Stats().Cluster.SlotMaps
	}
	return n
}

func (ce *clusterEnv) waitEvent(ep *mainttest.Endpoint, kind string) mainttest.Event {
	ce.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := ce.emu.WaitEvent(ctx, mainttest.IsKind(ep, kind))
	require.NoError(ce.t, err, "waiting for %s on %s", kind, ep.Addr())
	return ev
}

// settle waits until maint has handled n SMIGRATEDs and their reloads.
func (ce *clusterEnv) settle(n uint64, mapsBefore int64) {
	ce.t.Helper()
	waitFor(ce.t, "maint to handle the SMIGRATEDs and their reloads", 20*time.Second, func() bool {
		st := ce.g.Maints()[0].ClusterStats()
		return st.SMigrated+st.Stale+st.Unapplied >= n && (st.Served > 0 || ce.slotMaps() > mapsBefore)
	})
}

// all returns the events of kind k.
func (l *eventLog) all(k maint.EventKind) []maint.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []maint.Event
	for _, e := range l.evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// clientCloses counts the connections the client closed on ep (go-redis's
// reaper, its pool's checks, or maint), from the emulator's log.
func clientCloses(e *env, ep *mainttest.Endpoint) int {
	n := 0
	for _, ev := range e.emu.Events() {
		if ev.Endpoint == ep.Addr() && ev.Kind == mainttest.KindClose && strings.HasPrefix(ev.Detail, "client") {
			n++
		}
	}
	return n
}
