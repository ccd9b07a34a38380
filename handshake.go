package maint

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// HELLO 3, the opt-in goes right behind it (writeFirst), unless the
// endpoint refused it within the cooldown.
//
// Which connection asks is decided at that first write, not at the dial: a
// connection may be dialled and never written (go-redis initialises idle
// connections, MinIdleConns ones among them, lazily), so a leader chosen at
// the dial could keep every other connection waiting for an answer that
// never comes. At its first write, a connection to an endpoint whose answer
// is not known either leads (sends the opt-in, the only one in flight for
// that endpoint) or waits for the leader's answer, bounded by
// handshakeWait: an endpoint that refuses is asked once, not once per
// connection of a cold burst.
func (c *conn) prepareHandshake(_ context.Context, tlsOn bool) {
	if c.remote == "" {
		return
	}
	typ := c.m.endpointType(c.remote, tlsOn)
	cmd := resp.AppendArrayHeader(nil, 5)
	for _, a := range []string{"CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", typ} {
		cmd = resp.AppendBulk(cmd, []byte(a))
	}
	c.inject = cmd
}

// takeTurn decides, at c's first write, whether c sends the opt-in: not
// when its endpoint refused it within the cooldown; at once when the
// endpoint accepted it (every connection must opt in); as the leader when
// no answer is known and none is awaited; otherwise after the awaited
// answer, bounded by handshakeWait (past it, c asks anyway).
func (m *Maint) takeTurn(c *conn) bool {
	deadline := time.Now().Add(c.handshakeBound())
	for {
		send, ch := m.hs.turn(c, monoNow())
		if ch == nil {
			return send
		}
		d := time.Until(deadline)
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-ch:
		case <-t.C:
		case <-m.ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
	}
}

// handshakeBound is how long c may wait for another connection's opt-in
// answer: handshakeWait, or longer up to the write deadline go-redis set on
// c (less a margin for the write itself), so that a slow server's answer
// is waited for rather than asked again by every connection of a burst.
func (c *conn) handshakeBound() time.Duration {
	d := handshakeWait
	if asked := c.wdl.askedMono(); asked != 0 {
		if left := time.Duration(asked-monoNow()) - handshakeMargin; left > d {
			d = left
		}
	}
	return d
}

// handshakeMargin is left of a write deadline for the write itself.
const handshakeMargin = 200 * time.Millisecond

// handshakeWait bounds how long a new connection waits for the answer to
// another connection's opt-in to the same endpoint.
const handshakeWait = time.Second

// handshakes is the Maint's table of the endpoints' answers to the opt-in,
// by the address a connection reached: one leader asks, the others wait for
// its answer, and a refusal for lack of support is remembered for the
// cooldown. Its methods are the only ones to touch it; bounded (maxHS).
type handshakes struct {
	retry time.Duration // how long a refusal for lack of support is remembered (HandshakeRetry)

	sawOptIn atomic.Bool // a connection of the Maint was opened with an opt-in
	noOptIn  sync.Once   // said once: connections open without one (noteNoOptIn)

	mu sync.Mutex // guards m, and the hsLead of every connection
	m  map[string]*hsState
}

// hsState is what a Maint knows of one endpoint's answer to the opt-in.
// Guarded by handshakes.mu.
type hsState struct {
	pending      chan struct{} // closed when the leading opt-in is answered (or its connection ends)
	ok           bool          // the endpoint accepted an opt-in
	refusedUntil mono          // it refused for lack of support: not asked until then
	refusal      string        // what it answered then
	last         mono          // the last answer, for pruning
}

// init sets how long a refusal for lack of support is remembered.
func (hs *handshakes) init(retry time.Duration) { hs.retry = retry }

// stateLocked returns remote's entry, made on first sight. hs.mu is held.
func (hs *handshakes) stateLocked(remote string, now mono) *hsState {
	st := hs.m[remote]
	if st == nil {
		hs.pruneLocked(now)
		st = &hsState{}
		hs.m[remote] = st
	}
	return st
}

// turn is one look at c's endpoint for takeTurn: whether c sends the
// opt-in now, or, when ch is not nil, the answer to wait for first.
func (hs *handshakes) turn(c *conn, now mono) (send bool, ch chan struct{}) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	st := hs.stateLocked(c.remote, now)
	switch {
	case st.refusedUntil > now:
		return false, nil
	case st.ok:
		return true, nil
	case st.pending == nil:
		st.pending = make(chan struct{})
		c.hsLead = st
		return true, nil
	}
	return false, st.pending
}

// answered records the answer to c's opt-in (accepted, or refused for lack
// of support), and wakes the connections waiting for it.
func (hs *handshakes) answered(c *conn, accepted, refused bool, msg string) {
	now := monoNow()
	hs.mu.Lock()
	defer hs.mu.Unlock()
	st := hs.stateLocked(c.remote, now)
	st.last = now
	if accepted {
		st.ok = true
		st.refusedUntil = 0
	}
	if refused {
		st.ok = false
		st.refusal = msg
		if hs.retry > 0 {
			st.refusedUntil = now + int64(hs.retry)
		}
	}
	if c.hsLead == st && st.pending != nil {
		close(st.pending)
		st.pending = nil
	}
	c.hsLead = nil
}

// refusal reports whether remote's answer to the opt-in is known, and the
// refusal it answered, if it refused for lack of support within the
// cooldown ("" otherwise).
func (hs *handshakes) refusal(remote string) (known bool, msg string) {
	now := monoNow()
	hs.mu.Lock()
	defer hs.mu.Unlock()
	st := hs.m[remote]
	if st == nil {
		return false, ""
	}
	if st.refusedUntil > now {
		return true, st.refusal
	}
	return st.ok, ""
}

// refusedNow reports whether remote refused the opt-in within the cooldown.
func (hs *handshakes) refusedNow(remote string, now mono) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	st := hs.m[remote]
	return st != nil && st.refusedUntil > now
}

// leadGone releases the connections waiting on c's opt-in when c ends
// before its answer came.
func (hs *handshakes) leadGone(c *conn) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if st := c.hsLead; st != nil && st.pending != nil {
		close(st.pending)
		st.pending = nil
	}
	c.hsLead = nil
}

// maxHS bounds the endpoints remembered.
const maxHS = 1024

// pruneLocked forgets endpoints whose last answer is old and that are
// not refused now, and the oldest ones past maxHS. hs.mu is held.
func (hs *handshakes) pruneLocked(now mono) {
	if hs.m == nil {
		hs.m = make(map[string]*hsState)
	}
	for k, st := range hs.m {
		if st.pending == nil && st.refusedUntil <= now && now-st.last > int64(hsForget) {
			delete(hs.m, k)
		}
	}
	for k, st := range hs.m {
		if len(hs.m) < maxHS {
			break
		}
		if st.pending == nil {
			delete(hs.m, k)
		}
	}
}

// hsForget is how long an endpoint's last answer is remembered.
const hsForget = 10 * time.Minute

// writeFirst writes go-redis's first write (commands commands), and the
// opt-in behind it when the write starts with HELLO 3.
func (c *conn) writeFirst(p []byte, commands int) (int, error) {
	cmd := c.inject
	c.inject = nil
	if commands < 1 || !isHello3(p) || !c.m.takeTurn(c) {
		return c.writeRaw(p) // no RESP3 here, or the endpoint refused it lately
	}
	c.awaitOptIn = true
	// The replies to the commands of p are go-redis's (HELLO alone, in
	// go-redis v9.23: TestGoRedisWritesHelloFirst); the next one is ours.
	c.rd.DropReply(commands)
	n, err := c.writeRaw(p)
	if err != nil {
		return n, err
	}
	c.optInSent.Store(monoNow())
	c.m.hs.sawOptIn.Store(true)
	if _, err := c.writeRaw(cmd); err != nil {
		return n, err
	}
	c.m.c.handshakes.Add(1)
	return n, nil
}

// isHello3 reports whether p starts with a whole HELLO 3 command.
func isHello3(p []byte) bool {
	name, arg, _ := commandAt(p, 0)
	return eqFoldASCII(name, "hello") && string(arg) == "3"
}

// readOptInReply reads on after a read (n bytes of p) that completed the
// replies written before the injected opt-in (go-redis's HELLO), until the
// opt-in's reply has been read too: the server answers both at once, and
// replays what is open on the node (a MOVING) right behind the opt-in's
// reply. Read here, before go-redis writes its next command, a replayed
// MOVING retires the connection before it carries one (refusesFirstUse).
// The wait is under go-redis's own read deadline for HELLO's reply, and
// costs go-redis nothing: the reply to whatever it writes next comes only
// behind the opt-in's. Past that deadline HELLO's reply is returned alone
// (the opt-in's is read whenever it comes) and go-redis sets its next
// deadline. It returns the bytes of p filled, and an error other than the
// deadline's timeout.
func (c *conn) readOptInReply(p []byte, n int) (int, error) {
	if n >= len(p) {
		return n, nil
	}
	var err error
	for n < len(p) && c.rd.NextIsDropped() {
		var k int
		k, err = c.rd.ReadDrop(c.rawRd, p[n:])
		n += k
		if err != nil {
			break
		}
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		err = nil // HELLO's reply is whole; go-redis's next read meets its own deadline
	}
	return n, err
}

// onHandshakeReply receives the reply to the injected opt-in, which the
// Stripper took out of the stream.
func (c *conn) onHandshakeReply(frame []byte) {
	c.awaitOptIn = false
	c.optInTime.Store(monoNow())
	c.optInAt.Store(c.rd.Replies() + 1) // the dropped reply is not counted
	if len(frame) == 0 {
		c.m.hs.answered(c, false, false, "")
		return
	}
	switch frame[0] {
	case '+':
		c.optedIn.Store(true)
		c.m.hs.answered(c, true, false, "")
	case '-', '!':
		msg := errorText(frame)
		if noSupport(msg) {
			c.m.noteRefusal(c, msg)
		} else {
			c.m.c.handshakeErrors.Add(1)
			c.m.hs.answered(c, false, false, "")
			// A transient refusal (LOADING, BUSY...), handled: the connection
			// carries on without notifications (outcomes.go).
			c.m.emit(Event{Kind: EventError, Node: c.remote, Internal: true, Err: serverReply(msg)})
		}
	default:
		c.m.hs.answered(c, false, false, "")
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

// noteRefusal records that c's endpoint refused the opt-in for lack of
// support, for the cooldown, and says so once per endpoint and cooldown.
func (m *Maint) noteRefusal(c *conn, msg string) {
	again := m.hs.refusedNow(c.remote, monoNow()) // another connection of the same burst
	m.hs.answered(c, false, true, msg)
	if again {
		return
	}
	m.c.unsupported.Add(1)
	m.emit(Event{Kind: EventUnsupported, Node: c.remote, Detail: msg})
}

// noteHandshakeWrite looks at a write of a connection that has carried no
// command of the application yet, and reports whether it carries the
// first one, and one that may run on another connection instead
// (refusesFirstUse). A write of the handshake's commands only (HELLO,
// AUTH, SELECT, READONLY, CLIENT ...: isHandshakeCommand) does not; go-redis's
// own opt-in among them (CLIENT MAINT_NOTIFICATIONS, when go-redis opts in
// itself) is remembered, so that a MOVING right behind its reply is known
// for a replay (replayed). Any other command in the write makes it the
// application's. It is not to be moved when it starts what go-redis keeps
// on its connection: a WATCH (the Tx's own connection) or a subscription or
// MONITOR (the PubSub's, which the process hooks do not see). It runs on
// the writer, before the bytes leave, while the connection is new: the hot
// path pays one load for it.
func (c *conn) noteHandshakeWrite(p []byte) (movable bool) {
	for i := 0; ; {
		name, arg, next := commandAt(p, i)
		if name == nil {
			if i == 0 {
				break // not a command go-redis writes: the application's
			}
			return false // the handshake's commands, all of them
		}
		if !isHandshakeCommand(name) {
			c.carried.Store(true)
			c.noteCarrying()
			return !eqFoldASCII(name, "watch") && !isSubscribing(name)
		}
		if eqFoldASCII(name, "client") && eqFoldASCII(arg, "maint_notifications") {
			now := monoNow()
			c.optInTime.Store(now)
			c.optInSent.Store(now)
			c.m.hs.sawOptIn.Store(true)
			c.optInAt.Store(c.written.Load() + 1) // its reply is the written-th
		}
		if next >= len(p) {
			return false
		}
		i = next
	}
	c.carried.Store(true)
	c.noteCarrying()
	return true
}

// noteCarrying runs once per connection, at its first command of the
// application: a connection opened without the opt-in (neither go-redis's
// nor maint's was written) will be told of no maintenance. When no
// connection of the Maint has had one, maint is installed but off: said
// once at Warn, and counted (Stats.NoOptIn). A connection left without one
// because another's opt-in to the endpoint was refused lately is not.
func (c *conn) noteCarrying() {
	if c.optInSent.Load() != 0 || c.awaitOptIn ||
		c.m.hs.sawOptIn.Load() || c.m.stopped.Load() {
		return
	}
	c.m.c.noOptIn.Add(1)
	once := &c.m.hs.noOptIn
	if c.m.s.noOptInSaid != nil {
		once = c.m.s.noOptInSaid
	}
	once.Do(func() {
		c.m.warn("connections open without the maintenance opt-in (CLIENT MAINT_NOTIFICATIONS): "+
			"the server tells maint of no maintenance, and maint does nothing for this client. "+
			"The opt-in needs RESP3 (Protocol 3) and either maint's dial path (Configure, NewClient, a Group, Instrument) "+
			"or go-redis's MaintNotificationsConfig not disabled (NewMultiDBClient disables it on members that set none)",
			"endpoint", c.t.addr)
	})
}

// isHandshakeCommand reports whether name is one of the commands go-redis
// opens a connection with (redis.go initConn), which an application may
// also send itself: never a command maint moves or runs again.
func isHandshakeCommand(name []byte) bool {
	return eqFoldASCII(name, "auth") || eqFoldASCII(name, "hello") || eqFoldASCII(name, "select") ||
		eqFoldASCII(name, "client") || eqFoldASCII(name, "readonly")
}

// isSubscribing reports whether name makes a connection a subscriber.
func isSubscribing(name []byte) bool {
	return eqFoldASCII(name, "subscribe") || eqFoldASCII(name, "psubscribe") ||
		eqFoldASCII(name, "ssubscribe") || eqFoldASCII(name, "monitor")
}

// replayed reports whether a notification read now on c comes right behind
// the reply to c's opt-in, with no reply between: the server's replay of
// what is open on the node (a MOVING's window with the whole seconds left),
// or a notification sent just then, which c cannot tell apart. Right
// behind means in the same read as the opt-in's reply (the server writes
// both at once: however late the client reads them, they arrive
// together), or within replayWithin of the opt-in. It is called from the
// Stripper's callbacks, where its count is current; c.replies is still the
// count before this read (countReplies runs after it).
func (c *conn) replayed() bool {
	at := c.optInAt.Load()
	if at == 0 || c.rd.Replies()+1 != at {
		return false
	}
	return c.replies.Load()+1 < at || monoNow()-c.optInTime.Load() < int64(replayWithin)
}

// replayWithin bounds how long after its opt-in a connection's first
// notification, read apart from the opt-in's reply, counts as a replay:
// servers replay milliseconds after the opt-in's reply.
const replayWithin = time.Second

// sinceOptIn is how long ago c wrote its opt-in: the server reckoned a
// replay's time left no sooner.
func (c *conn) sinceOptIn() time.Duration {
	return time.Duration(max(monoNow()-c.optInSent.Load(), 0))
}

// commandAt returns the first two arguments (the name and the first
// argument) of the command at p[i:], a RESP array of bulk strings, and the
// offset after it; a nil name for what is not a whole command of that form
// (arg is nil when the command has no argument).
func commandAt(p []byte, i int) (name, arg []byte, next int) {
	if i+4 > len(p) || p[i] != '*' {
		return nil, nil, 0
	}
	j := bytes.Index(p[i:], crlf)
	if j < 0 {
		return nil, nil, 0
	}
	n, ok := digits(p[i+1 : i+j])
	if !ok || n < 1 {
		return nil, nil, 0
	}
	i += j + 2
	for k := 0; k < n; k++ {
		if i >= len(p) || p[i] != '$' {
			return nil, nil, 0
		}
		j := bytes.Index(p[i:], crlf)
		if j < 0 {
			return nil, nil, 0
		}
		size, ok := digits(p[i+1 : i+j])
		start := i + j + 2
		if !ok || start+size+2 > len(p) {
			return nil, nil, 0
		}
		switch k {
		case 0:
			name = p[start : start+size]
		case 1:
			arg = p[start : start+size]
		}
		i = start + size + 2
	}
	return name, arg, i
}

var crlf = []byte("\r\n")

// digits parses a length of one to nine decimal digits.
func digits(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, true
}
