package main

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// dialLog wraps a dial function and records every connection a client makes:
// where it went, when, whether it carried bytes and when the client closed
// it. It sits under whatever the client installs (go-redis's handler, maint),
// so the same measurement applies to all three clients.
type dialLog struct {
	next func(ctx context.Context, network, addr string) (net.Conn, error)

	failed atomic.Int64 // dials that returned an error

	mu  sync.Mutex // guards all
	all []*loggedConn
}

// loggedConn is one connection of a dialLog.
type loggedConn struct {
	net.Conn
	remote  string
	at      time.Time
	written atomic.Int64
	closed  atomic.Int64 // unix nanoseconds when the client closed it; 0 while open
}

// Write counts the bytes the client wrote.
func (c *loggedConn) Write(p []byte) (int, error) {
	c.written.Add(int64(len(p)))
	return c.Conn.Write(p)
}

// Close records when the client closed the connection.
func (c *loggedConn) Close() error {
	c.closed.CompareAndSwap(0, time.Now().UnixNano())
	return c.Conn.Close()
}

func (d *dialLog) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.next(ctx, network, addr)
	if err != nil {
		d.failed.Add(1)
		return nil, err
	}
	lc := &loggedConn{Conn: c, remote: c.RemoteAddr().String(), at: time.Now()}
	d.mu.Lock()
	d.all = append(d.all, lc)
	d.mu.Unlock()
	return lc, nil
}

// connSummary is what the dial log says about the connections to one address.
type connSummary struct {
	used        int       // connections that carried bytes (go-redis wrote its handshake at least)
	openAtEnd   int       // used connections the client had not closed
	lastClosed  time.Time // when the client closed the last used one (zero if none closed)
	usedSinceAt int       // used connections dialled at or after since
}

// summary describes the connections to addr that carried bytes. Connections
// that never carried a byte (maint's DNS probes, dials maint discarded for
// landing on a retiring node) are not counted: go-redis never used them.
func (d *dialLog) summary(addr string, since time.Time) connSummary {
	d.mu.Lock()
	defer d.mu.Unlock()
	var s connSummary
	for _, c := range d.all {
		if c.remote != addr || c.written.Load() == 0 {
			continue
		}
		s.used++
		if !c.at.Before(since) {
			s.usedSinceAt++
		}
		cl := c.closed.Load()
		if cl == 0 {
			s.openAtEnd++
			continue
		}
		if t := time.Unix(0, cl); t.After(s.lastClosed) {
			s.lastClosed = t
		}
	}
	return s
}
