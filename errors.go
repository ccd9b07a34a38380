package maint

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrRetired is returned by a connection that a handoff took out of
// circulation: go-redis's pool health check receives it and dials a
// replacement instead of reusing the connection.
var ErrRetired = errors.New("maint: connection retired by a maintenance handoff")

// ErrDrainCap is the error of a read or write on a retired connection that
// maint closed at the drain cap, idle (a connection held past the cap, with
// Conn() or Watch, and used again): maint never closes a connection with a
// command in flight, so no command's reply is cut by it.
var ErrDrainCap = errors.New("maint: connection closed at the drain cap of a maintenance handoff")

// ErrSuccessorRejected is returned for a dial to a named successor that the
// configured policy refuses or whose TLS certificate does not prove the
// original server name.
var ErrSuccessorRejected = errors.New("maint: successor endpoint rejected")

// ErrHeld wraps the context error of a command that was waiting for a
// replacement connection when its context ended.
var ErrHeld = errors.New("maint: command held for a replacement connection")

// ErrClosed is returned by a wait (a held command, a dial waiting out a
// doomed landing) that Close interrupted. After Close a Maint steps aside:
// dials and commands go through as if it were not installed.
var ErrClosed = errors.New("maint: closed")

// TimeoutError is the error of a read or write that timed out under a
// deadline maint relaxed (its node under maintenance, or the connection being
// drained): it names the relaxation, so that a timeout a user sees during a
// migration says so. A timeout under a deadline maint left as go-redis asked
// (no maintenance, a longer timeout than the relaxed one, relaxation off, or
// one of go-redis's own probes) is returned as it is. It is a net.Error whose
// Timeout is true, as the error it wraps, so go-redis treats it exactly as
// that error.
type TimeoutError struct {
	Node    string        // the node under maintenance
	Relaxed time.Duration // the relaxed timeout the deadline was raised to
	Err     error         // the underlying timeout
}

// Error describes the timeout and the relaxation it happened under.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("maint: i/o timeout on %s during maintenance (deadline relaxed to at least %v): %v", e.Node, e.Relaxed, e.Err)
}

// Timeout reports true: this is a timeout.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary reports true, as net timeouts do.
func (e *TimeoutError) Temporary() bool { return true }

// Unwrap returns the underlying timeout.
func (e *TimeoutError) Unwrap() error { return e.Err }

var _ net.Error = (*TimeoutError)(nil)
