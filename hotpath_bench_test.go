//go:build unix

package maint

import (
	"os"
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
// command on a pooled connection: the health check (SetDeadline(0),
// SyscallConn, a peek), the write deadline and the write, the read deadline
// and the read of the reply.
type perCommand struct {
	cmd, buf []byte
	peek     func(fd uintptr) bool
	deadline time.Time
}

func newPerCommand(cmd string) *perCommand {
	p := &perCommand{cmd: []byte(cmd), buf: make([]byte, 32<<10), deadline: time.Unix(1<<40, 0)}
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
	_, _ = c.Write(p.cmd)
	_ = c.SetReadDeadline(p.deadline)
	_, _ = c.Read(p.buf)
}

// BenchmarkConnPerCommand measures the connection wrapper's share of one
// command (raw: the same sequence on the unwrapped connection): the
// difference is maint's per-command cost in the connection, with no
// network and no go-redis. Under valgrind --tool=callgrind the difference
// of instructions counts it without noise.
func BenchmarkConnPerCommand(b *testing.B) {
	const get = "*2\r\n$3\r\nget\r\n$15\r\nmaint:bench:key\r\n"
	for _, wrapped := range []bool{false, true} {
		name := "raw"
		if wrapped {
			name = "maint"
		}
		b.Run(name, func(b *testing.B) {
			raw := newEchoConn(b, "$16\r\n0123456789abcdef\r\n")
			var c deadliner = raw
			if wrapped {
				m := New(WithLogf(func(string, ...any) {}))
				defer m.Close()
				c = m.wrap(m.target("redis.test:6379"), raw, raw.remote)
			}
			p := newPerCommand(get)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p.run(b, c)
			}
		})
	}
}
