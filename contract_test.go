package maint_test

// Contract tests: what maint assumes of go-redis v9.23, pinned against a
// real go-redis client.
//
// maint is a go-redis Hook and a net.Conn wrapper handed to go-redis by its
// dial path. It relies on how go-redis calls that net.Conn: when it asks
// SyscallConn (the pool's health check, maint's retirement check), which
// deadlines it sets, what it writes first on a new connection, what it
// retries. None of that is API; all of it can change in a minor release.
// Each test here drives a real go-redis client through a recording net.Conn
// against the emulator and fails with a message naming the assumption that
// broke and what in maint depends on it. docs/design.md ("What maint assumes
// of go-redis") lists them with their tests.

import (
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

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

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

// ---------------------------------------------------------------------------
// a. The health check on Get.

// TestGoRedisHealthCheckCallsSyscallConnOnGet pins the order of the pool's
// health check on Get of an idle connection (internal/pool: isHealthyConn,
// connCheck): SetDeadline(zero), then SyscallConn on the outer net.Conn,
// then one RawConn.Read (the MSG_PEEK), before the command's write. maint
// answers SyscallConn with an error for a retired connection, and reads
// what its peek finds inside RawConn.Read: it is its retirement check and
// the way it takes notifications off idle connections.
func TestGoRedisHealthCheckCallsSyscallConnOnGet(t *testing.T) {
	for _, builtin := range []bool{false, true} {
		t.Run(map[bool]string{false: "builtin_off", true: "builtin_auto"}[builtin], func(t *testing.T) {
			c := newContract(t)
			opt := c.options()
			if builtin {
				opt.MaintNotificationsConfig = nil // go-redis's default: auto
			}
			rdb := c.client(opt)
			c.ping(rdb, "first command")
			mark := c.w.mark()
			c.ping(rdb, "second command")
			ops := c.w.since(mark, 1)
			t.Logf("Get of the idle connection, then PING:%s", dump(ops))
			w := index(ops, opWrite)
			if w < 0 {
				t.Fatalf("the second PING did not reuse the pooled connection:%s", dump(c.w.since(mark, 0)))
			}
			check := ops[:w]
			if count(check, opSyscallConn) != 1 || count(check, opRawRead) != 1 {
				t.Fatalf("go-redis no longer calls SyscallConn and RawConn.Read once on the outer net.Conn on Get of an idle connection: maint's retirement check is off. Calls before the write:%s", dump(check))
			}
			if k := kinds(check); len(k) < 3 || k[0] != opSetDeadline || !check[0].dl.IsZero() || k[1] != opSyscallConn || k[2] != opRawRead {
				t.Fatalf("the health check is no longer SetDeadline(zero), SyscallConn, RawConn.Read in that order: maint's check flag (set by SyscallConn, cleared by every setter) no longer marks the check:%s", dump(check))
			}
			if n := count(check, opRead); n != 0 {
				t.Fatalf("with nothing waiting, the health check read %d times from the connection:%s", n, dump(check))
			}
			if count(ops, opRawControl)+count(ops, opRawWrite) != 0 {
				t.Fatalf("go-redis now calls RawConn.Control or RawConn.Write: maint's RawConn passes them through, check what for:%s", dump(ops))
			}
		})
	}
}

var errInjected = errors.New("injected by the contract test")

// TestGoRedisReplacesConnWhenSyscallConnFails: a connection whose
// SyscallConn (or RawConn.Read) returns an error is closed by the pool,
// which dials a new one, and the command succeeds with no retry. This is
// how maint retires a connection without failing a command.
func TestGoRedisReplacesConnWhenSyscallConnFails(t *testing.T) {
	for _, where := range []string{opSyscallConn, opRawRead} {
		t.Run(where, func(t *testing.T) {
			c := newContract(t)
			rdb := c.client(c.options()) // MaxRetries -1: a failure is not hidden
			c.ping(rdb, "first command")
			first := c.w.conn(1)
			if where == opSyscallConn {
				first.failSyscall.Store(&errInjected)
			} else {
				first.failRawRead.Store(&errInjected)
			}
			mark := c.w.mark()
			if err := rdb.Ping(context.Background()).Err(); err != nil {
				t.Fatalf("go-redis failed the command when %s returned an error on the pooled connection (%v), instead of closing it and dialling another: maint's retirement fails commands", where, err)
			}
			old := c.w.since(mark, 1)
			if count(old, opClose) != 1 || count(old, opWrite) != 0 {
				t.Fatalf("go-redis no longer closes, unused, a connection whose %s fails: maint's retired connections would carry commands:%s", where, dump(old))
			}
			if c.w.dialed() != 2 || count(c.w.since(mark, 2), opWrite) == 0 {
				t.Fatalf("go-redis did not dial a replacement for the connection whose %s failed (%d dials):%s", where, c.w.dialed(), dump(c.w.since(mark, 0)))
			}
		})
	}
}

// ---------------------------------------------------------------------------
// b. No syscall.Conn, no health check.

// TestGoRedisHealthCheckNeedsSyscallConn: go-redis type-asserts the outer
// net.Conn to syscall.Conn (it unwraps nothing, not even tls.Conn): a
// wrapper without SyscallConn gets no health check at all, and a dead idle
// connection is handed to a command. maint's wrapper must implement it.
func TestGoRedisHealthCheckNeedsSyscallConn(t *testing.T) {
	for _, plain := range []bool{true, false} {
		t.Run(map[bool]string{true: "without", false: "with"}[plain], func(t *testing.T) {
			c := newContract(t)
			c.w.plain = plain
			rdb := c.client(c.options())
			c.ping(rdb, "first command")
			c.ep.CloseAll() // the server closes the idle connection
			waitUntil(t, "the server's close to reach the client", c.w.conn(1).peerClosed)
			mark := c.w.mark()
			err := rdb.Ping(context.Background()).Err()
			ops := c.w.since(mark, 1)
			if plain {
				if count(ops, opSyscallConn) != 0 {
					t.Fatalf("go-redis found SyscallConn on a wrapper that has none:%s", dump(ops))
				}
				if err == nil || count(ops, opWrite) != 1 {
					t.Fatalf("without syscall.Conn, go-redis now checks idle connections some other way (PING: %v): maint may no longer need SyscallConn to retire connections:%s", err, dump(ops))
				}
				return
			}
			if err != nil || count(ops, opWrite) != 0 || c.w.dialed() != 2 {
				t.Fatalf("with syscall.Conn, the health check no longer discards a connection the server closed (PING: %v, %d dials):%s", err, c.w.dialed(), dump(ops))
			}
		})
	}
}

// TestMaintConnImplementsSyscallConn: the other side of the contract, the
// connection maint's dial path returns is a syscall.Conn.
func TestMaintConnImplementsSyscallConn(t *testing.T) {
	c := newContract(t)
	m := maint.New()
	defer m.Close()
	opt := &redis.Options{Addr: c.ep.Addr()}
	m.Configure(opt)
	nc, err := opt.Dialer(context.Background(), "tcp", c.ep.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, ok := nc.(syscall.Conn); !ok {
		t.Fatalf("maint's connection %T does not implement syscall.Conn: go-redis would never health-check it, and retired connections would carry commands", nc)
	}
	if _, ok := nc.(interface{ NetConn() net.Conn }); ok {
		t.Fatalf("maint's connection %T has NetConn: go-redis's push peek (maybeHasData) would unwrap it and bypass maint's RawConn", nc)
	}
}

// ---------------------------------------------------------------------------
// c. Deadlines.

// setterBefore returns the op right before the first op of kind next in
// ops, checking that it is a call of setter.
func setterBefore(t *testing.T, ops []wireOp, setter, next, assumption string) wireOp {
	t.Helper()
	i := index(ops, next)
	if i < 1 || ops[i-1].kind != setter {
		t.Fatalf("%s: %s is no longer called right before %s:%s", assumption, setter, next, dump(ops))
	}
	return ops[i-1]
}

// checkDeadline checks that a setter set its deadline timeout after the call.
func checkDeadline(t *testing.T, o wireOp, timeout time.Duration, assumption string) {
	t.Helper()
	if timeout == 0 {
		if !o.dl.IsZero() {
			t.Fatalf("%s: %s set %v, want zero time", assumption, o.kind, o.dl.Sub(o.at))
		}
		return
	}
	// go-redis reads the clock before the call: the distance is at most the
	// timeout, less by however long the machine took to make the call.
	d := o.dl.Sub(o.at)
	if o.dl.IsZero() || d > timeout || d < timeout/2 {
		t.Fatalf("%s: %s set +%v (zero=%v), want +%v (now + the timeout)", assumption, o.kind, d, o.dl.IsZero(), timeout)
	}
}

// TestGoRedisSetsDeadlinesFromTimeouts pins the deadlines maint relaxes in
// its setters: before writing a command go-redis sets a write deadline of
// now+WriteTimeout, before reading its reply a read deadline of
// now+ReadTimeout; -1 sets zero time; -2 calls no setter; a blocking
// command's read deadline is its own timeout + 10 s (0: zero time); with
// ContextTimeoutEnabled a closer context deadline wins.
func TestGoRedisSetsDeadlinesFromTimeouts(t *testing.T) {
	cases := []struct {
		name         string
		read, write  time.Duration // options
		wantR, wantW time.Duration // expected distance; 0: zero time; -1: no setter
	}{
		{"3s_2s", 3 * time.Second, 2 * time.Second, 3 * time.Second, 2 * time.Second},
		{"defaults", 0, 0, 5 * time.Second, 5 * time.Second},
		{"write_follows_read", 1500 * time.Millisecond, 0, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"minus1_block", -1, -1, 0, 0},
		{"minus2_no_setter", -2, -2, -1, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newContract(t)
			opt := c.options()
			opt.ReadTimeout, opt.WriteTimeout = tc.read, tc.write
			rdb := c.client(opt)
			c.ping(rdb, "first command")
			mark := c.w.mark()
			if err := rdb.Get(context.Background(), "k").Err(); err != redis.Nil {
				t.Fatal(err)
			}
			ops := c.w.since(mark, 1)
			t.Logf("ReadTimeout %v, WriteTimeout %v: GET on an idle connection:%s", tc.read, tc.write, dump(ops))
			w := index(ops, opWrite)
			cmd := ops[w-1:] // from the setter before the write on
			a := fmt.Sprintf("go-redis (ReadTimeout %v, WriteTimeout %v)", tc.read, tc.write)
			if tc.wantW < 0 {
				if n := count(cmd, opSetWrite) + count(cmd, opSetRead) + count(cmd, opSetDeadline); n != 0 {
					t.Fatalf("%s now sets deadlines around a command with -2 (it called no setter): maint relaxes only deadlines that are set:%s", a, dump(cmd))
				}
				return
			}
			checkDeadline(t, setterBefore(t, ops, opSetWrite, opWrite, a), tc.wantW, a+" sets the write deadline before writing a command")
			after := ops[w+1:]
			checkDeadline(t, setterBefore(t, after, opSetRead, opRead, a), tc.wantR, a+" sets the read deadline before reading the reply")
			if n := count(after, opSetRead); n != 1 {
				t.Fatalf("%s set the read deadline %d times for one reply: maint's refloor re-applies the last one only:%s", a, n, dump(after))
			}
		})
	}

	t.Run("blocking_command", func(t *testing.T) {
		c := newContract(t)
		rdb := c.client(c.options()) // ReadTimeout 3s
		c.ping(rdb, "first command")
		for _, tc := range []struct {
			timeout, want time.Duration
		}{{time.Second, 11 * time.Second}, {0, 0}} {
			if tc.timeout == 0 {
				go func() { // unblock BLPOP q 0 once it waits
					for deadline := time.Now().Add(10 * time.Second); c.ep.Stats().Pending == 0 && time.Now().Before(deadline); {
						time.Sleep(2 * time.Millisecond)
					}
					_, _ = c.emu.Miniredis().Lpush("q", "x")
				}()
			}
			mark := c.w.mark()
			err := rdb.BLPop(context.Background(), tc.timeout, "q").Err()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			ops := c.w.since(mark, 1)
			after := ops[index(ops, opWrite)+1:]
			a := fmt.Sprintf("go-redis sets the read deadline of BLPOP with timeout %v to its timeout + 10 s (0: none)", tc.timeout)
			checkDeadline(t, setterBefore(t, after, opSetRead, opRead, a), tc.want, a)
		}
	})

	t.Run("context_deadline", func(t *testing.T) {
		for _, enabled := range []bool{false, true} {
			c := newContract(t)
			opt := c.options()
			opt.ContextTimeoutEnabled = enabled
			rdb := c.client(opt)
			c.ping(rdb, "first command")
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			mark := c.w.mark()
			_ = rdb.Get(ctx, "k").Err()
			cancel()
			ops := c.w.since(mark, 1)
			after := ops[index(ops, opWrite)+1:]
			want := 3 * time.Second
			if enabled {
				want = time.Second
			}
			a := fmt.Sprintf("go-redis with ContextTimeoutEnabled=%v and a 1 s context sets the read deadline to +%v", enabled, want)
			checkDeadline(t, setterBefore(t, after, opSetRead, opRead, a), want, a)
		}
	})
}

// ---------------------------------------------------------------------------
// d. Reads are never concurrent.

// TestGoRedisNeverReadsConcurrently: with the default configuration, under
// commands, pipelines, transactions and pub/sub from many goroutines, no
// two reads of one connection (Read or the health check's RawConn.Read)
// ever overlap. maint's Stripper and its check flag are per connection and
// unsynchronised. Full-duplex autopipelining reads from one goroutine while
// another writes: reads still never overlap each other, but a write may
// overlap a read, which maint's Write must tolerate.
func TestGoRedisNeverReadsConcurrently(t *testing.T) {
	run := func(t *testing.T, fullDuplex bool) (readOverlaps, rwOverlaps int64) {
		c := newContract(t)
		opt := c.options()
		opt.PoolSize, opt.MaxRetries = 4, 3
		// Generous timeouts: one full-duplex run on a loaded machine took
		// 4.7 s and failed three commands (the error was not recorded then;
		// 3 s timeouts are the likely cause).
		opt.ReadTimeout, opt.WriteTimeout = 15*time.Second, 15*time.Second
		rdb := c.client(opt)
		ctx := context.Background()
		var ap *redis.AutoPipeliner
		if fullDuplex {
			var err error
			ap, err = rdb.AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true})
			if err != nil {
				t.Fatal(err)
			}
			defer ap.Close()
		}
		sub := rdb.Subscribe(ctx, "ch")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		msgs := sub.Channel()
		go func() {
			for range msgs { // read by go-redis's own goroutine
			}
		}()
		var wg sync.WaitGroup
		var failed atomic.Int64
		var firstErr atomic.Pointer[error]
		for g := 0; g < 12; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				key := "k" + strconv.Itoa(g%4)
				for i := 0; i < 150; i++ {
					var err error
					switch {
					case fullDuplex && g%2 == 0:
						err = ap.Set(ctx, key, i, 0).Err()
					case i%5 == 0:
						_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
							p.Incr(ctx, key)
							p.Get(ctx, key)
							return nil
						})
					case i%7 == 0:
						_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Incr(ctx, key)
							return nil
						})
					case i%11 == 0:
						err = rdb.Publish(ctx, "ch", "m").Err()
					default:
						err = rdb.Incr(ctx, key).Err()
					}
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					}
				}
			}(g)
		}
		wg.Wait()
		if failed.Load() != 0 {
			t.Fatalf("%d commands failed, the first with %v", failed.Load(), *firstErr.Load())
		}
		for i := 1; i <= c.w.dialed(); i++ {
			cn := c.w.conn(i)
			readOverlaps += cn.readOverlap.Load()
			rwOverlaps += cn.rwOverlap.Load()
		}
		t.Logf("%d connections; overlapping reads %d, a read overlapping a write %d", c.w.dialed(), readOverlaps, rwOverlaps)
		return readOverlaps, rwOverlaps
	}
	t.Run("default", func(t *testing.T) {
		if r, _ := run(t, false); r != 0 {
			t.Fatalf("go-redis read one connection from two goroutines at once (%d times): maint's Stripper and check flag are unsynchronised per connection", r)
		}
	})
	t.Run("full_duplex_autopipeline", func(t *testing.T) {
		if r, _ := run(t, true); r != 0 {
			t.Fatalf("full-duplex autopipelining read one connection from two goroutines at once (%d times): maint's Stripper is unsynchronised", r)
		}
	})
}

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

// TestGoRedisOnConnectSharesHooks: the *redis.Conn given to OnConnect
// carries the client's hooks, including those added with AddHook after
// NewClient: HELLO, the init pipelines and every command OnConnect sends
// pass through the application's ProcessHook (and through maint's), and
// their results reach the Limiter. That is why maint's handshake does not
// go through OnConnect: an application hook would see, time and count it,
// and a Limiter or circuit breaker would count its refusal as a failure.
func TestGoRedisOnConnectSharesHooks(t *testing.T) {
	c := newContract(t)
	c.ep.SetHandshake(mainttest.Handshake{Answer: mainttest.AnswerError, Error: "LOADING Redis is loading the dataset in memory"})
	opt := c.options()
	lim := &limiterLog{}
	opt.Limiter = lim
	var onConnectErr atomic.Pointer[error]
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		err := cn.Do(ctx, "CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip").Err()
		onConnectErr.Store(&err)
		return nil
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	app := &hookLog{}
	rdb.AddHook(app) // after NewClient, as an application installing maint does
	c.ping(rdb, "first command")
	seen := app.seen()
	t.Logf("application hooks saw, in order: %q", seen)
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
	lim.mu.Lock()
	defer lim.mu.Unlock()
	found := false
	for _, r := range lim.results {
		if r != nil && r.Error() == (*errp).Error() {
			found = true
		}
	}
	t.Logf("Limiter: %d Allow, results %v", lim.allowed, lim.results)
	if !found {
		t.Fatalf("the Limiter no longer receives the result of a command sent in OnConnect (results %v): a refused handshake there would no longer count as a failure", lim.results)
	}
}

// holdHook makes commands on key "held" wait in the ProcessHook until
// release is closed, as maint's hold does.
type holdHook struct {
	hookLog
	waiting chan struct{}
	release chan struct{}
}

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && args[1] == "held" {
			close(h.waiting)
			<-h.release
		}
		return next(ctx, cmd)
	}
}

// TestGoRedisProcessHookRunsBeforePoolTurn: a command waiting in a
// ProcessHook holds no connection and no pool turn, and no deadline runs
// for it: with a pool of one, another command goes through meanwhile.
// maint holds commands there during a handoff, bounded by their context.
func TestGoRedisProcessHookRunsBeforePoolTurn(t *testing.T) {
	c := newContract(t)
	rdb := c.client(c.options()) // PoolSize 1
	h := &holdHook{waiting: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(h)
	c.ping(rdb, "first command")
	done := make(chan error, 1)
	go func() { done <- rdb.Get(context.Background(), "held").Err() }()
	<-h.waiting
	mark := c.w.mark()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		close(h.release)
		t.Fatalf("a command waiting in a ProcessHook now holds the only pool connection (PING: %v): maint's hold would starve the pool", err)
	}
	for _, o := range c.w.since(mark, 0) {
		if o.kind == opWrite && strings.Contains(fmt.Sprint(wireCommands(o.data)), "held") {
			t.Fatalf("the held GET was written while its ProcessHook waited")
		}
	}
	close(h.release)
	if err := <-done; err != redis.Nil {
		t.Fatalf("held GET: %v", err)
	}
}

// ---------------------------------------------------------------------------
// g. Transport errors: removal and retries.

// TestGoRedisRemovesConnOnTransportError: a non-Redis error from Read
// removes the connection from the pool (it is closed and the next command
// dials). maint's closeWith relies on it to take a closed connection out.
func TestGoRedisRemovesConnOnTransportError(t *testing.T) {
	c := newContract(t)
	rdb := c.client(c.options()) // MaxRetries -1
	c.ping(rdb, "first command")
	c.w.conn(1).failRead.Store(&errInjected)
	mark := c.w.mark()
	if err := rdb.Ping(context.Background()).Err(); !errors.Is(err, errInjected) {
		t.Fatalf("PING with an injected read error: %v", err)
	}
	if ops := c.w.since(mark, 1); count(ops, opClose) != 1 {
		t.Fatalf("go-redis no longer closes a connection whose Read failed with a non-Redis error: maint's closed connections would go back to the pool:%s", dump(ops))
	}
	c.ping(rdb, "after the error")
	if c.w.dialed() != 2 {
		t.Fatalf("the next command did not dial a new connection (%d dials)", c.w.dialed())
	}
}

// TestGoRedisSwallowsOneReadErrorOnRESP3: on RESP3, go-redis first peeks
// for pending pushes before reading a reply, and that peek drops a Read
// error (bufio hands it over once): a Read error that the next Read does
// not repeat goes unseen, and the command succeeds on the same connection.
// On RESP2 there is no peek and the error fails the command. maint's Read
// errors must therefore be sticky (a closed socket's are) to reach go-redis.
func TestGoRedisSwallowsOneReadErrorOnRESP3(t *testing.T) {
	for _, protocol := range []int{3, 2} {
		t.Run("RESP"+strconv.Itoa(protocol), func(t *testing.T) {
			c := newContract(t)
			opt := c.options()
			opt.Protocol = protocol
			rdb := c.client(opt)
			c.ping(rdb, "first command")
			c.w.conn(1).failReadOnce.Store(&errInjected)
			mark := c.w.mark()
			err := rdb.Ping(context.Background()).Err()
			ops := c.w.since(mark, 1)
			if protocol == 3 && (err != nil || count(ops, opRead) != 2 || c.w.dialed() != 1) {
				t.Fatalf("RESP3: go-redis no longer ignores a Read error that the next Read does not repeat (PING: %v); maint may rely on one-shot Read errors now:%s", err, dump(ops))
			}
			if protocol == 2 && !errors.Is(err, errInjected) {
				t.Fatalf("RESP2: a Read error no longer fails the command (PING: %v):%s", err, dump(ops))
			}
		})
	}
}

// wrappedClosed is how maint's closeWith reports a connection it closed:
// its own error and the net error underneath.
var wrappedClosed = fmt.Errorf("%w (%w)", maint.ErrDrainCap, net.ErrClosed)

// TestGoRedisRetriesClosedConnErrors pins which read errors go-redis
// retries on a new connection when MaxRetries allows: io.EOF, net.ErrClosed,
// any error wrapping a net.Error (maint's closeWith error), and a read
// timeout of an ordinary command. It does not retry a plain error, nor
// anything with MaxRetries -1. A retried command is written twice: that is
// why closing a connection whose reply is owed runs a write twice.
func TestGoRedisRetriesClosedConnErrors(t *testing.T) {
	timeoutErr := error(&maint.TimeoutError{Node: "n", Err: osTimeoutErr{}})
	cases := []struct {
		name    string
		err     error
		retries int
		retried bool
	}{
		{"EOF", io.EOF, 3, true},
		{"ErrClosed", net.ErrClosed, 3, true},
		{"maint_closeWith", wrappedClosed, 3, true},
		{"timeout", timeoutErr, 3, true},
		{"plain_error", errInjected, 3, false},
		{"EOF_MaxRetries_-1", io.EOF, -1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newContract(t)
			opt := c.options()
			opt.MaxRetries, opt.MinRetryBackoff = tc.retries, -1
			rdb := c.client(opt)
			if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			c.w.conn(1).failRead.Store(&tc.err)
			mark := c.w.mark()
			err := rdb.Get(context.Background(), "k").Err()
			gets := 0
			for _, o := range c.w.since(mark, 0) {
				for _, cmd := range wireCommands(o.data) {
					if o.kind == opWrite && len(cmd) > 0 && cmd[0] == "get" {
						gets++
					}
				}
			}
			if tc.retried && (err != nil || gets != 2) {
				t.Fatalf("go-redis (MaxRetries %d) no longer retries a GET whose read failed with %v (GET: %v, written %d times): maint's closed connections would fail commands", tc.retries, tc.err, err, gets)
			}
			if !tc.retried && (err == nil || gets != 1) {
				t.Fatalf("go-redis (MaxRetries %d) now retries a GET whose read failed with %v (GET: %v, written %d times)", tc.retries, tc.err, err, gets)
			}
		})
	}
}

// osTimeoutErr is a read timeout as the OS reports it.
type osTimeoutErr struct{}

func (osTimeoutErr) Error() string   { return "i/o timeout" }
func (osTimeoutErr) Timeout() bool   { return true }
func (osTimeoutErr) Temporary() bool { return true }

// ---------------------------------------------------------------------------
// h. Every dial goes through the DialHook chain and Options.Dialer.

// dialLog is a hook that counts the dials passing through its DialHook.
type dialLog struct {
	hookLog
	n atomic.Int64
}

func (d *dialLog) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}

// TestGoRedisDialsThroughHookAndDialer: the main pool, the pipeline pool
// (v9.23 has one: Pipelined and TxPipelined dial it even with an idle
// main-pool connection), pub/sub and Conn() all dial through the DialHook
// chain and then Options.Dialer. maint sees every connection either way.
func TestGoRedisDialsThroughHookAndDialer(t *testing.T) {
	c := newContract(t)
	rdb := c.client(c.options())
	hook := &dialLog{}
	rdb.AddHook(hook)
	ctx := context.Background()
	step := func(what string, f func() error, newDials int) {
		t.Helper()
		before, hooked := c.w.dialed(), hook.n.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		dialed, viaHook := c.w.dialed()-before, int(hook.n.Load()-hooked)
		if dialed != newDials || viaHook != newDials {
			t.Fatalf("%s: %d dials through Options.Dialer, %d through the DialHook, want %d through both: maint would miss connections", what, dialed, viaHook, newDials)
		}
	}
	step("main pool", func() error { return rdb.Ping(ctx).Err() }, 1)
	step("main pool, idle connection", func() error { return rdb.Ping(ctx).Err() }, 0)
	step("pipeline pool", func() error {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); return nil })
		return err
	}, 1)
	step("pipeline pool, transaction", func() error {
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); return nil })
		return err
	}, 0)
	step("pub/sub", func() error {
		sub := rdb.Subscribe(ctx, "ch")
		defer sub.Close()
		_, err := sub.Receive(ctx)
		return err
	}, 1)
	step("Conn(), the pool's idle connection", func() error {
		cn := rdb.Conn()
		defer cn.Close()
		return cn.Ping(ctx).Err()
	}, 0)
}

// ---------------------------------------------------------------------------
// i. Pushes waiting on an idle connection.

// TestGoRedisReadsPushesBeforeCommand pins what maint sees when a push
// (here a MIGRATED the emulator sends) waits on an idle connection: the
// health check's RawConn.Read finds bytes, go-redis then reads them into its
// buffer with a plain Read (no deadline set since the check's
// SetDeadline(zero)) to see a push, and keeps the connection; the command
// is written, and the push is parsed from the buffer under the command's
// read deadline. When the connection was returned to the pool more than 5 s
// ago, go-redis also drains the buffered push before writing, under a
// 50 ms hard read deadline it clears afterwards, and peeks the socket again
// (SetReadDeadline(zero), SyscallConn, RawConn.Read) after the reply.
func TestGoRedisReadsPushesBeforeCommand(t *testing.T) {
	t.Run("idle_5.2s_nothing_waiting", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits 5 s")
		}
		t.Parallel()
		c := newContract(t)
		rdb := c.client(c.options())
		c.ping(rdb, "first command")
		time.Sleep(5200 * time.Millisecond) // go-redis's own clock: the 5 s since the last Put
		mark := c.w.mark()
		c.ping(rdb, "command after 5 s idle")
		ops := c.w.since(mark, 1)
		t.Logf("idle 5.2 s, nothing waiting, then PING:%s", dump(ops))
		want := []string{opSetDeadline, opSyscallConn, opRawRead, opSetRead, opSyscallConn, opRawRead, opSetWrite, opWrite, opSetRead, opRead, opSetRead, opSyscallConn, opRawRead}
		if fmt.Sprint(kinds(ops)) != fmt.Sprint(want) {
			t.Fatalf("after 5 s idle, go-redis no longer peeks the socket three times around a command (health check; push peek before the write: SetReadDeadline(zero), SyscallConn, RawConn.Read; the same after the reply): maint's RawConn.Read runs on each:%s", dump(ops))
		}
	})
	for _, idle := range []time.Duration{0, 5200 * time.Millisecond} {
		t.Run("idle_"+idle.String(), func(t *testing.T) {
			if idle > 0 {
				if testing.Short() {
					t.Skip("waits 5 s")
				}
				t.Parallel()
			}
			c := newContract(t)
			opt := c.options()
			opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
				return cn.Do(ctx, "CLIENT", "MAINT_NOTIFICATIONS", "ON").Err()
			}
			rdb := c.client(opt)
			c.ping(rdb, "first command")
			time.Sleep(idle) // go-redis's own clock: the 5 s since the last Put
			c.ep.Migrated(`["1"]`)
			cn := c.w.conn(1)
			waitUntil(t, "the push to wait on the idle connection", cn.pending)
			mark := c.w.mark()
			c.ping(rdb, "command after the push")
			ops := c.w.since(mark, 1)
			t.Logf("idle %v, a push waiting, then PING:%s", idle, dump(ops))
			w := index(ops, opWrite)
			if w < 0 || c.w.dialed() != 1 {
				t.Fatalf("go-redis discarded a connection with a push waiting on it:%s", dump(ops))
			}
			before := ops[:w]
			k := kinds(before)
			if len(k) < 4 || k[0] != opSetDeadline || k[1] != opSyscallConn || k[2] != opRawRead || k[3] != opRead {
				t.Fatalf("with a push waiting, the health check is no longer SetDeadline(zero), SyscallConn, RawConn.Read, then a Read of the push: maint's check flag marks that Read as the check's:%s", dump(before))
			}
			if idle == 0 {
				if len(k) != 5 || k[4] != opSetWrite {
					t.Fatalf("a push on a connection returned to the pool less than 5 s ago is no longer left in the buffer until the command's reply is read:%s", dump(before))
				}
				return
			}
			var probe time.Duration
			for _, o := range before[4:] {
				if o.kind == opSetRead && !o.dl.IsZero() {
					probe = o.dl.Sub(o.at)
				}
			}
			if probe <= 0 || probe > 50*time.Millisecond {
				t.Fatalf("after 5 s idle, go-redis no longer drains a buffered push before the command under a 50 ms read deadline (saw %v):%s", probe, dump(before))
			}
			after := ops[w:]
			last := after[len(after)-3:]
			if kinds(last)[0] != opSetRead || !last[0].dl.IsZero() || last[1].kind != opSyscallConn || last[2].kind != opRawRead {
				t.Fatalf("after 5 s idle, go-redis no longer peeks the socket after the reply (SetReadDeadline(zero), SyscallConn, RawConn.Read):%s", dump(after))
			}
		})
	}
}
