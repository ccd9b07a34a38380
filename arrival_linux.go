//go:build linux

package maint

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// arrivedAgo is how long ago the socket under c last received data, 0 if
// it cannot tell (not a TCP socket, a wrapper that hides it): the kernel's
// TCP_INFO time since data last arrived, in milliseconds. The bytes c has
// just read arrived no later, so a notification among them is at least
// this old; a client idle since it came reads it only now (onMoving).
// One system call, made only when a MOVING is read.
func (c *conn) arrivedAgo() time.Duration {
	sc, ok := socketOf(c.raw)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var ms uint32
	_ = rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			ms = info.Last_data_recv
		}
	})
	return time.Duration(ms) * time.Millisecond
}

// socketOf returns the socket under nc: nc itself, or what a TLS
// connection (or any wrapper with NetConn) is over.
func socketOf(nc net.Conn) (syscall.Conn, bool) {
	for range 8 {
		if sc, ok := nc.(syscall.Conn); ok {
			return sc, true
		}
		w, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		nc = w.NetConn()
	}
	return nil, false
}
