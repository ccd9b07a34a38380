package mainttest

import (
	"strconv"
	"strings"
)

// HandshakeAnswer is how an endpoint answers CLIENT MAINT_NOTIFICATIONS.
type HandshakeAnswer int

const (
	// AnswerOK answers like Redis Enterprise: +OK (ON opts the connection
	// in, OFF out), or -ERR for a malformed handshake. The default.
	AnswerOK HandshakeAnswer = iota
	// AnswerError answers with the error line Handshake.Error and records
	// nothing: the connection is not opted in.
	AnswerError
	// AnswerNone never answers. Nothing more is written to the connection,
	// neither the replies to later commands nor pushes, as on a server stuck
	// on the command, until the client (or the Emulator) closes it.
	AnswerNone
	// AnswerClose closes the connection when the handshake is read, once
	// the replies owed before it are written. Commands sent after it are
	// never read.
	AnswerClose
)

// String returns the answer's name: "ok", "error", "none" or "close".
func (a HandshakeAnswer) String() string {
	switch a {
	case AnswerOK:
		return "ok"
	case AnswerError:
		return "error"
	case AnswerNone:
		return "none"
	case AnswerClose:
		return "close"
	}
	return "HandshakeAnswer(" + strconv.Itoa(int(a)) + ")"
}

// Handshake says how an endpoint answers CLIENT MAINT_NOTIFICATIONS, ON or
// OFF (see Endpoint.SetHandshake). The zero value answers like Redis
// Enterprise.
type Handshake struct {
	// Answer is the kind of answer.
	Answer HandshakeAnswer

	// Error is the error line of AnswerError, without the leading '-' and
	// the CRLF, e.g. "LOADING Redis is loading the dataset in memory".
	// Empty means the error of a server without support:
	// `ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.`, with
	// the subcommand echoed as sent. CR and LF are sent as spaces.
	Error string

	// Times, when positive, makes this a temporary answer: it applies to the
	// next Times handshakes the endpoint reads, after which the standing
	// answer (the last one set without Times) applies again. 0 sets the
	// standing answer and drops any temporary one.
	Times int
}

// SetHandshake sets how this endpoint answers CLIENT MAINT_NOTIFICATIONS
// from the next handshake it reads on; the default is Config.Handshake (or
// Config.Unsupported). Connections already opted in stay opted in. Every
// handshake read is counted in Stats.Handshakes whatever the answer.
func (ep *Endpoint) SetHandshake(h Handshake) {
	h.Error = strings.NewReplacer("\r", " ", "\n", " ").Replace(h.Error)
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if h.Times > 0 {
		ep.hsTemp, ep.hsLeft = h, h.Times
		return
	}
	ep.hs, ep.hsLeft = h, 0
}

// SetUnsupported makes this endpoint answer CLIENT MAINT_NOTIFICATIONS like
// a server without support (true: SetHandshake(Handshake{Answer:
// AnswerError})) or like Redis Enterprise (false: SetHandshake(Handshake{})),
// from the next handshake on. Connections already opted in stay opted in.
func (ep *Endpoint) SetUnsupported(unsupported bool) {
	if unsupported {
		ep.SetHandshake(Handshake{Answer: AnswerError})
		return
	}
	ep.SetHandshake(Handshake{})
}

// takeHandshake counts a handshake read and returns the answer it gets.
func (ep *Endpoint) takeHandshake() Handshake {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.stats.Handshakes++
	if ep.hsLeft > 0 {
		ep.hsLeft--
		return ep.hsTemp
	}
	return ep.hs
}
