package maint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint"
)

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
