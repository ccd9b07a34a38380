//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris || illumos)

package maint

import "errors"

// peek cannot look at the socket on this platform: go-redis's own check
// decides, as without maint.
func (c *conn) peek(fd uintptr) bool {
	c.peekState = peekOther
	return true
}

func (w *window) peek(fd uintptr) bool {
	w.n = 0
	return true
}

func (w *window) take(fd uintptr) bool {
	w.err = errNoPeek
	return true
}

var errNoPeek = errors.New("maint: cannot take bytes off the socket on this platform")
