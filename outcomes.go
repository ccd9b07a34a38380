package maint

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// What became of the connections maint takes out of circulation, and of
// the errors maint returns: the events (EventConnClosed, EventError) that
// tell a metrics package such as maintotel the spec's close reasons and
// error paths. Neither runs on the path of a command that succeeds.

// closedConn reports the close of c, a connection maint had taken out of
// circulation (fenced or retired), with the reason: maint's own close
// under a command (the drain cap), the server's close (what a read or the
// health check's peek met), or go-redis's close after maint's check
// refused the connection's reuse.
func (m *Maint) closedConn(c *conn) {
	e := Event{Kind: EventConnClosed, Node: c.n.key, Pool: c.t.addr, Count: 1, Detail: CloseHealthcheckFailed}
	switch why := c.closeErr.Load(); {
	case why != nil && !errors.Is(*why, ErrRetired):
		e.Detail, e.Err = CloseError, *why
	case why == nil && c.peerClosed.Load():
		e.Detail = CloseServer
	}
	m.emit(e)
}

// noteErr reports a command's final error when it is one of maint's (see
// EventError): a timeout under maintenance, a command cut at the drain
// cap, held until its context ended, refused a successor, or interrupted
// by Close. It costs a comparison for redis.Nil and a walk of the error's
// chain otherwise, and nothing when the command succeeded.
func (m *Maint) noteErr(err error) {
	if err == nil || err == redis.Nil {
		return
	}
	e := Event{Kind: EventError, Err: err}
	var te *TimeoutError
	switch {
	case errors.As(err, &te):
		e.Node = te.Node
	case errors.Is(err, ErrHeld), errors.Is(err, ErrDrainCap), errors.Is(err, ErrClosed),
		errors.Is(err, ErrSuccessorRejected), errors.Is(err, ErrRetired):
	default:
		return
	}
	m.emit(e)
}

// serverReply is an error reply of the server that maint handled itself
// (EventError with Internal set). It is a redis.Error, as go-redis's own
// error replies are, so that metrics read its status code.
type serverReply string

func (e serverReply) Error() string { return string(e) }

// RedisError marks it a Redis error reply (redis.Error).
func (serverReply) RedisError() {}

var _ redis.Error = serverReply("")
