package main

import (
	"time"

	"github.com/maintkit/maint/mainttest"
)

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
func summary(rec *mainttest.Recorder, addr string, since time.Time) connSummary {
	var s connSummary
	for _, c := range rec.Conns() {
		if c.Remote != addr || c.Written() == 0 {
			continue
		}
		s.used++
		if !c.Dialed.Before(since) {
			s.usedSinceAt++
		}
		if !c.IsClosed() {
			s.openAtEnd++
			continue
		}
		if t := c.Closed(); t.After(s.lastClosed) {
			s.lastClosed = t
		}
	}
	return s
}
