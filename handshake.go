package maint

import (
	"bytes"
	"strings"

	"github.com/maintkit/maint/internal/resp"
)

// The opt-in handshake of the options route (Configure, NewClient), mode
// HandshakeAuto.
//
// maint writes CLIENT MAINT_NOTIFICATIONS ON itself, on the wire, right
// behind go-redis's HELLO 3 (the first command of every RESP3 connection),
// and takes the reply out of the stream before go-redis reads it. It costs
// no round trip of its own, and neither the reply nor a refusal ever
// reaches go-redis: not the application's hooks, not its Limiter, not its
// error counts (the complaint of go-redis issue #3853 and its downstream
// reports, where every connection to a server without support logs and
// counts an error).
//
// A refusal that means "no support" (an unknown command or subcommand) is
// remembered for the endpoint that answered (the address the connection
// reached, not the configured one: behind one name, an upgraded proxy may
// accept what an old one refuses) for HandshakeRetry (default a minute);
// the next connection after that asks again, so a rolling upgrade is under
// maint within a minute. Any other error (LOADING, BUSY, NOAUTH...) is
// transient and not remembered. One log line per endpoint and cooldown, not
// one per connection.

// prepareHandshake arms the connection's first write: if it is go-redis's
// HELLO 3, the opt-in goes right behind it. Nothing is armed for an
// endpoint that refused it within the cooldown.
func (c *conn) prepareHandshake(tlsOn bool) {
	if c.remote == "" || c.m.refusedRecently(c.remote) {
		return
	}
	typ := c.m.endpointType(c.remote, tlsOn)
	cmd := resp.AppendArrayHeader(nil, 5)
	for _, a := range []string{"CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", typ} {
		cmd = resp.AppendBulk(cmd, []byte(a))
	}
	c.inject = cmd
	c.rd.OnDropped = c.onHandshakeReply
}

// writeFirst writes go-redis's first command, and the opt-in behind it
// when that command is HELLO 3.
func (c *conn) writeFirst(p []byte) (int, error) {
	cmd := c.inject
	c.inject = nil
	if !isHello3(p) {
		return c.raw.Write(p)
	}
	c.rd.DropReply(1) // HELLO's reply is go-redis's; the next one is ours
	n, err := c.raw.Write(p)
	if err != nil {
		return n, err
	}
	if _, err := c.raw.Write(cmd); err != nil {
		return n, err
	}
	c.m.c.handshakes.Add(1)
	return n, nil
}

// isHello3 reports whether p starts with a HELLO 3 command.
func isHello3(p []byte) bool {
	if len(p) < 4 || p[0] != '*' {
		return false
	}
	i := bytes.Index(p, []byte("\r\n"))
	if i < 0 {
		return false
	}
	rest := p[i+2:]
	const hello = "$5\r\nhello\r\n$1\r\n3\r\n"
	if len(rest) < len(hello) {
		return false
	}
	return strings.EqualFold(string(rest[:len(hello)]), hello)
}

// onHandshakeReply receives the reply to the injected opt-in, which the
// Stripper took out of the stream.
func (c *conn) onHandshakeReply(frame []byte) {
	if len(frame) == 0 {
		return
	}
	switch frame[0] {
	case '+':
		c.optedIn.Store(true)
	case '-', '!':
		msg := errorText(frame)
		if noSupport(msg) {
			c.m.noteRefusal(c.remote, msg)
		} else {
			c.m.c.handshakeErrors.Add(1)
		}
	}
}

// errorText is the text of a simple or blob error frame.
func errorText(frame []byte) string {
	s := strings.TrimSuffix(string(frame), "\r\n")
	if frame[0] == '!' {
		if i := strings.Index(s, "\r\n"); i >= 0 {
			return s[i+2:]
		}
	}
	return s[1:]
}

// noSupport reports whether an error answering the opt-in means the server
// does not support maintenance notifications at all.
func noSupport(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "unknown subcommand") || strings.Contains(m, "unknown command") ||
		strings.Contains(m, "unknown option")
}

// maxRefusals bounds the endpoints remembered as refusing.
const maxRefusals = 1024

// refusedRecently reports whether endpoint refused the opt-in for lack of
// support within the cooldown.
func (m *Maint) refusedRecently(endpoint string) bool {
	if m.s.handshakeRetry < 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.refusals[endpoint]
	if !ok {
		return false
	}
	if until <= monoNow() {
		delete(m.refusals, endpoint)
		return false
	}
	return true
}

// noteRefusal remembers that endpoint refused the opt-in for lack of
// support, for the cooldown, and says so once per endpoint and cooldown.
func (m *Maint) noteRefusal(endpoint, msg string) {
	now := monoNow()
	m.mu.Lock()
	if m.refusals == nil {
		m.refusals = make(map[string]mono)
	}
	if until, ok := m.refusals[endpoint]; ok && until > now {
		m.mu.Unlock()
		return // another connection of the same burst
	}
	for k, until := range m.refusals {
		if until <= now || len(m.refusals) >= maxRefusals {
			delete(m.refusals, k)
		}
	}
	if m.s.handshakeRetry > 0 {
		m.refusals[endpoint] = now + int64(m.s.handshakeRetry)
	}
	m.mu.Unlock()
	m.c.unsupported.Add(1)
	m.logf("maint: %s does not support maintenance notifications (%s); asking again in %v", endpoint, msg, m.s.handshakeRetry)
	m.emit(Event{Kind: EventUnsupported, Node: endpoint, Detail: msg})
}
