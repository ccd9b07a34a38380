//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris || illumos

package maint

import "syscall"

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
		c.peekState = peekOther
	}
	return true
}
