//go:build unix

package maint

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoConn is a raw connection that answers every write with one canned
// reply from memory, and whose SyscallConn is an idle socket, so that a
// health check peeks a real, empty socket. It takes no lock: the
// benchmarks of this file measure the wrapper, not the connection.
type echoConn struct {
	fakeConn
	reply   []byte
	pending int
	idle    [2]*os.File
}

func newEchoConn(tb testing.TB, reply string) *echoConn {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	e := &echoConn{fakeConn: fakeConn{remote: "127.0.0.2:6379"}, reply: []byte(reply),
		idle: [2]*os.File{os.NewFile(uintptr(fds[0]), "idle0"), os.NewFile(uintptr(fds[1]), "idle1")}}
	tb.Cleanup(func() { _ = e.idle[0].Close(); _ = e.idle[1].Close() })
	return e
}

func (e *echoConn) Write(p []byte) (int, error) { e.pending++; return len(p), nil }
func (e *echoConn) Read(p []byte) (int, error) {
	if e.pending == 0 {
		return 0, nil
	}
	e.pending--
	return copy(p, e.reply), nil
}
func (e *echoConn) SyscallConn() (syscall.RawConn, error) { return e.idle[0].SyscallConn() }

// perCommand does to c what go-redis's pool and connection do for one
// command (or pipeline) on a pooled connection: the health check
// (SetDeadline(0), SyscallConn, a peek), the write deadline and the writes,
// the read deadline and the reads until the reply's want bytes have come.
type perCommand struct {
	writes   [][]byte
	want     int
	buf      []byte
	peek     func(fd uintptr) bool
	deadline time.Time
}

func newPerCommand(want int, writes ...string) *perCommand {
	// The deadline has go-redis's shape: a wall-clock time in Local, an
	// hour ahead (time.Unix(0, now).Add(timeout)).
	p := &perCommand{want: want, buf: make([]byte, 32<<10), deadline: time.Unix(0, time.Now().UnixNano()).Add(time.Hour)}
	for _, w := range writes {
		p.writes = append(p.writes, []byte(w))
	}
	p.peek = func(fd uintptr) bool {
		var b [1]byte
		_, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}
	return p
}

type deadliner interface {
	Write([]byte) (int, error)
	Read([]byte) (int, error)
	SetDeadline(time.Time) error
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	SyscallConn() (syscall.RawConn, error)
}

func (p *perCommand) run(tb testing.TB, c deadliner) {
	_ = c.SetDeadline(time.Time{})
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	_ = rc.Read(p.peek)
	_ = c.SetWriteDeadline(p.deadline)
	for _, w := range p.writes {
		_, _ = c.Write(w)
	}
	_ = c.SetReadDeadline(p.deadline)
	for got := 0; got < p.want; {
		n, err := c.Read(p.buf)
		if err != nil || n == 0 {
			tb.Fatalf("read after %d of %d bytes: %d, %v", got, p.want, n, err)
		}
		got += n
	}
}

// BenchmarkConnPerCommand measures the connection wrapper's share of one
// command (raw: the same sequence on the unwrapped connection): the
// difference is maint's per-command cost in the connection, with no
// network and no go-redis. Under valgrind --tool=callgrind the difference
// of instructions counts it without noise.
func BenchmarkConnPerCommand(b *testing.B) {
	const get, reply = "*2\r\n$3\r\nget\r\n$15\r\nmaint:bench:key\r\n", "$16\r\n0123456789abcdef\r\n"
	for _, wrapped := range []bool{false, true} {
		name := "raw"
		if wrapped {
			name = "maint"
		}
		b.Run(name, func(b *testing.B) {
			raw := newEchoConn(b, reply)
			var c deadliner = raw
			if wrapped {
				m := New(WithLogf(func(string, ...any) {}))
				defer m.Close()
				c = m.wrap(m.target("redis.test:6379"), raw, raw.remote)
			}
			p := newPerCommand(len(reply), get)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p.run(b, c)
			}
		})
	}
}

// BenchmarkConnPubSub measures the wrapper's share of reading pub/sub
// messages (pushes it passes through): ten messages per op, in one read.
func BenchmarkConnPubSub(b *testing.B) {
	msg := ">3\r\n$7\r\nmessage\r\n$7\r\nchannel\r\n$64\r\n" + strings.Repeat("p", 64) + "\r\n"
	m := New(WithLogf(func(string, ...any) {}))
	defer m.Close()
	raw := &scriptConn{echoConn: newEchoConn(b, ""), script: []byte(strings.Repeat(msg, 10)), chunk: 32 << 10}
	c := m.wrap(m.target("redis.test:6379"), raw, raw.remote)
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	for range b.N {
		raw.reset()
		if n, err := c.Read(buf); n != len(raw.script) || err != nil {
			b.Fatal(n, err)
		}
	}
}
