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

// peekWindow peeks as much of c.win as the socket holds, without consuming
// or blocking; c.winN is how much.
func (c *conn) peekWindow(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), c.win, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err != nil || n < 0 {
		n = 0
	}
	c.winN = n
	return true
}

// take reads bytes just peeked off the socket, into c.win[c.winGot:c.winWant].
// Returning false when the socket would block lets the runtime wait for it.
func (c *conn) take(fd uintptr) bool {
	n, err := syscall.Read(int(fd), c.win[c.winGot:c.winWant])
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		return false
	case err != nil:
		c.winErr = err
	case n == 0:
		c.winErr = io.ErrUnexpectedEOF
	default:
		c.winGot += n
	}
	return true
}
