//go:build unix

package maint_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint"
)

// BenchmarkCommands measures what a command costs with plain go-redis, with
// go-redis's built-in handler and with maint, each client in a leaf of its
// own, named for benchstat's projections (server=, load=, client=). The
// servers are an in-memory one (the client's own cost only: the leaf to
// profile, or to count instructions of under valgrind), an embedded
// miniredis and the real Redis named by MAINT_TEST_REDIS ("host:port"),
// when set. The side-by-side comparison, interleaved in one leaf, is
// BenchmarkSideBySide (sidebyside_bench_test.go). The RESP framing throughput of
// the stripper alone is BenchmarkStripperThroughput in internal/resp.

// benchKey is the key every GET reads; its value is benchValue.
const (
	benchKey   = "maint:bench:key"
	benchValue = "0123456789abcdef"
	// pipelineLen is the number of commands in one pipeline.
	pipelineLen = 10
	// parallelism is how many goroutines per GOMAXPROCS the parallel loads run.
	parallelism = 4
)

// benchServer is a Redis server the benchmarks run against.
type benchServer struct {
	name string
	// options returns the client options for it: go-redis's defaults, on its
	// address.
	options func() *redis.Options
}

// benchServers returns the servers: an in-memory one (no network, no
// server work: the client's own cost per command, the worst case for the
// ratio), an embedded miniredis started for b, and the Redis named by
// MAINT_TEST_REDIS, if any.
func benchServers(b *testing.B) []benchServer {
	b.Helper()
	mr := benchMiniredis(b)
	servers := []benchServer{
		{"memory", func() *redis.Options {
			return &redis.Options{Addr: "memory:6379", Dialer: func(context.Context, string, string) (net.Conn, error) {
				return newMemConn()
			}}
		}},
		{"miniredis", func() *redis.Options { return &redis.Options{Addr: mr.Addr()} }},
	}
	if addr := os.Getenv("MAINT_TEST_REDIS"); addr != "" {
		servers = append(servers, benchServer{"redis", func() *redis.Options { return &redis.Options{Addr: addr} }})
	}
	return servers
}

// memConn is a connection to an in-memory Redis that answers at once: GET
// with benchValue, HELLO with a RESP3 map, anything else (CLIENT
// MAINT_NOTIFICATIONS included, as Redis Enterprise does) with +OK.
//
// Its SyscallConn is the socket of an idle socket pair, so that go-redis's
// pool health check peeks a real, empty socket on every Get, as it does over
// TCP, with or without maint.
type memConn struct {
	idle [2]*os.File // a socket pair nothing is ever written to

	mu     sync.Mutex // guards the following
	cond   sync.Cond
	out    []byte // replies not yet read
	in     []byte // a partial command
	closed bool
}

func newMemConn() (*memConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	c := &memConn{idle: [2]*os.File{os.NewFile(uintptr(fds[0]), "idle0"), os.NewFile(uintptr(fds[1]), "idle1")}}
	c.cond.L = &c.mu
	return c, nil
}

// SyscallConn returns the idle socket's.
func (c *memConn) SyscallConn() (syscall.RawConn, error) { return c.idle[0].SyscallConn() }

var (
	memHello = []byte("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n" +
		"$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n" +
		"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n")
	memGet = []byte("$16\r\n" + benchValue + "\r\n")
	memOK  = []byte("+OK\r\n")
)

// Write answers every complete command in p.
func (c *memConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.in = append(c.in, p...)
	for {
		name, _, n := memCommand(c.in)
		if n == 0 {
			break
		}
		c.in = c.in[:copy(c.in, c.in[n:])]
		switch {
		case strings.EqualFold(name, "get"):
			c.out = append(c.out, memGet...)
		case strings.EqualFold(name, "hello"):
			c.out = append(c.out, memHello...)
		default:
			c.out = append(c.out, memOK...)
		}
	}
	c.cond.Broadcast()
	return len(p), nil
}

// memCommand parses one RESP command array at the start of b and returns its
// name, its first argument and its length, or n == 0 if b holds no complete
// command.
func memCommand(b []byte) (name, arg1 string, n int) {
	line := func(at int) (string, int) {
		i := bytes.Index(b[at:], []byte("\r\n"))
		if i < 0 {
			return "", -1
		}
		return string(b[at : at+i]), at + i + 2
	}
	if len(b) == 0 || b[0] != '*' {
		return "", "", 0
	}
	h, at := line(1)
	if at < 0 {
		return "", "", 0
	}
	argc, _ := strconv.Atoi(h)
	for i := range argc {
		if at >= len(b) || b[at] != '$' {
			return "", "", 0
		}
		l, next := line(at + 1)
		if next < 0 {
			return "", "", 0
		}
		size, _ := strconv.Atoi(l)
		if next+size+2 > len(b) {
			return "", "", 0
		}
		switch i {
		case 0:
			name = string(b[next : next+size])
		case 1:
			arg1 = string(b[next : next+size])
		}
		at = next + size + 2
	}
	return name, arg1, at
}

// Read returns pending replies, waiting for some.
func (c *memConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.out) == 0 && !c.closed {
		c.cond.Wait()
	}
	if len(c.out) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.out)
	c.out = c.out[:copy(c.out, c.out[n:])]
	return n, nil
}

// Close closes the connection.
func (c *memConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.cond.Broadcast()
		_ = c.idle[0].Close()
		_ = c.idle[1].Close()
	}
	return nil
}

func (c *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// memAddr is the address of both ends of a memConn.
type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "127.0.0.1:6379" }

// benchClient is one of the clients compared.
type benchClient struct {
	name string
	// open returns a client with opt and a function that closes it.
	open func(opt *redis.Options) (*redis.Client, func())
}

// benchClients are plain go-redis (its built-in handler off), go-redis with
// its built-in handler (ModeEnabled) and maint (AddHook on the plain
// client).
var benchClients = []benchClient{
	{"plain", func(opt *redis.Options) (*redis.Client, func()) {
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		rdb := redis.NewClient(opt)
		return rdb, func() { _ = rdb.Close() }
	}},
	{"maint", func(opt *redis.Options) (*redis.Client, func()) {
		// The one-line integration on the same client.
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		rdb := redis.NewClient(opt)
		m := maint.New(maint.WithLogf(func(string, ...any) {}))
		rdb.AddHook(m)
		return rdb, func() {
			_ = rdb.Close()
			_ = m.Close()
		}
	}},
	{"builtin", func(opt *redis.Options) (*redis.Client, func()) {
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeEnabled}
		rdb := redis.NewClient(opt)
		return rdb, func() { _ = rdb.Close() }
	}},
}

// benchLoad is one way of issuing commands.
type benchLoad struct {
	name string
	// cmdsPerOp is how many commands one op sends.
	cmdsPerOp int
	// run performs n ops on rdb and fails b on an error.
	run func(b *testing.B, rdb *redis.Client, n int)
}

var benchLoads = []benchLoad{
	{"single", 1, func(b *testing.B, rdb *redis.Client, n int) {
		ctx := context.Background()
		for range n {
			if err := rdb.Get(ctx, benchKey).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}},
	{"parallel", 1, func(b *testing.B, rdb *redis.Client, n int) {
		ctx := context.Background()
		err := benchCrew(b).run(n, func(n int) error {
			for range n {
				if err := rdb.Get(ctx, benchKey).Err(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}},
	{fmt.Sprintf("pipeline%d", pipelineLen), pipelineLen, func(b *testing.B, rdb *redis.Client, n int) {
		ctx := context.Background()
		pipe := rdb.Pipeline()
		for range n {
			for range pipelineLen {
				pipe.Get(ctx, benchKey)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}},
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// crews holds the crew of each running benchmark.
var crews sync.Map // *testing.B -> *crew

// benchCrew returns b's crew, started on first use and stopped with b.
func benchCrew(b *testing.B) *crew {
	if c, ok := crews.Load(b); ok {
		return c.(*crew)
	}
	c := newCrew()
	crews.Store(b, c)
	b.Cleanup(func() {
		crews.Delete(b)
		c.stop()
	})
	return c
}

// crew is a fixed set of goroutines that run shares of a parallel load, so
// that no goroutine is started (and no stack grown) inside a measurement.
type crew struct {
	work []chan int
	done chan error
	f    func(n int) error // set before each run
}

func newCrew() *crew {
	g := parallelism * runtime.GOMAXPROCS(0)
	c := &crew{work: make([]chan int, g), done: make(chan error, g)}
	for i := range c.work {
		c.work[i] = make(chan int)
		go func(work <-chan int) {
			for n := range work {
				c.done <- c.f(n)
			}
		}(c.work[i])
	}
	return c
}

// run splits n ops over the crew and waits for them.
func (c *crew) run(n int, f func(n int) error) error {
	c.f = f
	g := len(c.work)
	for i, w := range c.work {
		share := n / g
		if i < n%g {
			share++
		}
		w <- share
	}
	var first error
	for range g {
		if err := <-c.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *crew) stop() {
	for _, w := range c.work {
		close(w)
	}
}

// prepare writes the key the loads read and warms the client's pool.
func prepare(b *testing.B, rdb *redis.Client, l benchLoad) {
	b.Helper()
	if err := rdb.Set(context.Background(), benchKey, benchValue, 0).Err(); err != nil {
		b.Fatal(err)
	}
	l.run(b, rdb, 4*parallelism*runtime.GOMAXPROCS(0))
}

// BenchmarkCommands measures each client on its own: compare the client=plain
// and client=maint leaves of the same server and load with benchstat.
func BenchmarkCommands(b *testing.B) {
	for _, srv := range benchServers(b) {
		for _, l := range benchLoads {
			for _, c := range benchClients {
				if c.name == "builtin" && srv.name == "redis" {
					continue // redis-server 7 refuses the built-in handler's opt-in
				}
				b.Run(fmt.Sprintf("server=%s/load=%s/client=%s", srv.name, l.name, c.name), func(b *testing.B) {
					rdb, closeClient := c.open(srv.options())
					defer closeClient()
					prepare(b, rdb, l)
					b.ReportAllocs()
					b.ResetTimer()
					if l.name == "parallel" {
						ctx := context.Background()
						b.SetParallelism(parallelism)
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								if err := rdb.Get(ctx, benchKey).Err(); err != nil {
									b.Error(err)
									return
								}
							}
						})
					} else {
						l.run(b, rdb, b.N)
					}
					b.StopTimer()
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*l.cmdsPerOp), "ns/cmd")
				})
			}
		}
	}
}
