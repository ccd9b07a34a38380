package maint

import "errors"

// ErrRetired is returned by a connection that a handoff took out of
// circulation: go-redis's pool health check receives it and dials a
// replacement instead of reusing the connection.
var ErrRetired = errors.New("maint: connection retired by a maintenance handoff")

// ErrDrainCap is the error of a command still in flight on a retired
// connection when the drain cap passed: the connection was closed under it,
// as the server's close at the window's end would have done, but earlier.
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
