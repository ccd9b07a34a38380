//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris || illumos

package maint

import (
	"io"
	"syscall"
)

// peek looks at the socket without consuming or blocking, and records what it
// found in c.peekState. It is a method value stored once per connection, so
// the health check allocates nothing for it.
func (c *conn) peek(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case n > 0:
		c.peekState = peekData
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		c.peekState = peekEmpty
	default:
		if n == 0 && err == nil {
			c.peerClosed.Store(true) // the server closed it
		}
		c.peekState = peekOther
	}
	return true
}

// peek peeks as much of w.buf as the socket holds, without consuming or
// blocking; w.n is how much.
func (w *window) peek(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), w.buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err != nil || n < 0 {
		n = 0
	}
	w.n = n
	return true
}

// take reads bytes just peeked off the socket, into w.buf[w.got:w.want].
// Returning false when the socket would block lets the runtime wait for it.
func (w *window) take(fd uintptr) bool {
	n, err := syscall.Read(int(fd), w.buf[w.got:w.want])
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		return false
	case err != nil:
		w.err = err
	case n == 0:
		w.err = io.ErrUnexpectedEOF
	default:
		w.got += n
	}
	return true
}
