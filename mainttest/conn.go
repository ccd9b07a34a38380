package mainttest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// entry is one reply a client connection is owed, in command order.
type entry struct {
	isLocal bool
	// hang, on a local entry, is a reply that never comes (AnswerNone):
	// nothing after it is written.
	hang bool
	// local holds an intercepted reply (+OK / -ERR) followed by any pushes
	// that must not overtake it (replays, events injected meanwhile).
	local []byte
	// onReply, for a backend entry, sees the backend's reply under conn.mu.
	onReply func(frame []byte)
	// replace, for a backend entry, is written instead of the backend's
	// reply (a cluster EXEC turned into a DISCARD answers its redirect).
	replace []byte
}

// conn is one client connection of an endpoint and its own backend
// connection. Four goroutines serve it: run (dials the backend, then reads
// client commands), forwardLoop (relays them, with latency), backendLoop
// (frames the backend's output) and writeLoop (the only writer to the
// client, so injected pushes land between frames).
type conn struct {
	e      *Emulator
	ep     *Endpoint
	id     uint64
	nc     net.Conn
	ctx    context.Context // cancelled by shutdown
	cancel context.CancelFunc

	// used: the client sent a command beyond a connection's handshake;
	// toldAtOptIn: its opt-in's reply replayed an open MOVING (see
	// Stats.UnusedAtWindowEnd). Read and written under mu.
	used, toldAtOptIn bool

	mu      sync.Mutex
	cond    *sync.Cond // wakes writeLoop
	fcond   *sync.Cond // wakes forwardLoop
	bc      net.Conn
	closed  bool
	resp3   bool
	optedIn bool
	everIn  bool   // counted in Stats.OptedIn
	epType  string // requested moving-endpoint-type, lower case ("" = bare ON)

	outQ          []entry     // replies owed, in order
	fwdQ          []fwdItem   // commands read, not yet relayed
	pushes        []byte      // injected push frames not tied to a local reply
	bout          [][]byte    // backend frames not yet written
	replyAt       []time.Time // with latency after execution: when each relayed command's reply may go
	bEOF          bool        // the backend connection ended
	closeAfter    bool        // close once every owed reply is written (protocol error, AnswerClose)
	closeWhy      string      // the reason closeAfter gives
	backendErrMsg string

	cc clusterConn // cluster state (ASKING, MULTI), read loop only
}

// startConn registers an accepted client connection and starts serving it.
func (e *Emulator) startConn(ep *Endpoint, nc net.Conn) {
	c := &conn{e: e, ep: ep, id: e.connID.Add(1), nc: nc}
	c.cond = sync.NewCond(&c.mu)
	c.fcond = sync.NewCond(&c.mu)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		c.cancel()
		_ = nc.Close()
		return
	}
	ep.mu.Lock()
	ep.conns[c] = struct{}{}
	ep.stats.Open++
	ep.stats.Opened++
	ep.mu.Unlock()
	e.event(Event{Endpoint: ep.addr, Kind: KindAccept, Conn: c.id, Detail: "from " + nc.RemoteAddr().String()})
	e.goLocked(c.run)
}

// shutdown closes the connection once. byEmulator marks a server-side close
// whose owed replies count in Stats.OwedAtClose. It returns the replies
// still owed and whether this call closed the connection.
func (c *conn) shutdown(reason string, byEmulator bool) (owed int64, ok bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, false
	}
	c.closed = true
	owed = int64(len(c.outQ))
	unused := !c.used && c.toldAtOptIn
	bc := c.bc
	c.cond.Broadcast()
	c.fcond.Broadcast()
	c.mu.Unlock()
	c.cancel()
	_ = c.nc.Close()
	if bc != nil {
		_ = bc.Close()
	}
	ep := c.ep
	ep.mu.Lock()
	if _, ok := ep.conns[c]; ok {
		delete(ep.conns, c)
		ep.stats.Open--
	}
	if byEmulator {
		ep.stats.OwedAtClose += owed
	}
	if reason == "window_end" {
		ep.stats.ClosedAtWindowEnd++
		if unused {
			ep.stats.UnusedAtWindowEnd++
		}
	}
	ep.mu.Unlock()
	if m := ep.cluster.Load(); m != nil {
		m.cl.shard.forget(c) // its sharded subscriptions (cluster_pubsub.go)
	}
	c.e.event(Event{Endpoint: ep.addr, Kind: KindClose, Conn: c.id, Detail: fmt.Sprintf("%s owed=%d", reason, owed)})
	return owed, true
}

// queueLocalLocked appends an intercepted reply. The caller holds c.mu.
func (c *conn) queueLocalLocked(b []byte) {
	c.outQ = append(c.outQ, entry{isLocal: true, local: b})
	c.cond.Signal()
}

func (c *conn) queueLocal(b []byte) {
	c.mu.Lock()
	c.queueLocalLocked(b)
	c.mu.Unlock()
}

// push queues an injected push frame if the connection is an opted-in RESP3
// one, and reports whether it did. The push is written at the next frame
// boundary, but never ahead of an intercepted reply already owed (so a +OK
// always precedes the pushes its opt-in made possible).
func (c *conn) push(frame []byte) bool {
	return c.pushWith(func(string) []byte { return frame })
}

// pushWith is push with a frame chosen by the connection's endpoint type.
func (c *conn) pushWith(frame func(epType string) []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.resp3 || !c.optedIn {
		return false
	}
	f := frame(c.epType)
	for i := len(c.outQ) - 1; i >= 0; i-- {
		if c.outQ[i].isLocal {
			c.outQ[i].local = append(c.outQ[i].local, f...)
			c.cond.Signal()
			return true
		}
	}
	c.pushes = append(c.pushes, f...)
	c.cond.Signal()
	return true
}

// run dials the backend, starts the other three goroutines and relays the
// client's commands until the connection ends.
func (c *conn) run() {
	var d net.Dialer
	bc, err := d.DialContext(c.ctx, "tcp", c.e.backend)
	if err != nil {
		if c.ctx.Err() == nil {
			c.e.logf("mainttest: %s: conn %d: backend: %v", c.ep.addr, c.id, err)
		}
		c.shutdown("backend", false)
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = bc.Close()
		return
	}
	c.bc = bc
	c.mu.Unlock()

	e := c.e
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		c.shutdown("emulator_close", true)
		return
	}
	e.goLocked(func() { c.backendLoop(bufio.NewReaderSize(bc, 32<<10)) })
	e.goLocked(c.writeLoop)
	e.goLocked(func() { c.forwardLoop(bufio.NewWriterSize(bc, 16<<10)) })
	e.mu.Unlock()

	c.readLoop(bufio.NewReaderSize(c.nc, 16<<10))
}

// subscribeLike reports the pub/sub commands whose RESP3 replies are pushes.
func subscribeLike(name string) (subscribe, unsubscribe bool) {
	switch name {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE":
		return true, false
	case "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE":
		return false, true
	}
	return false, false
}

var emptyArray = []byte("*0\r\n")

// fwdItem is a command read from the client, waiting to be relayed.
type fwdItem struct {
	name string // upper case, for per-command latency
	data []byte // RESP array to send to the backend
}

// readLoop reads the client's commands as they arrive: it answers the
// handshake itself, queues one owed reply per relayed command (so every
// command read counts in OwedAtClose) and hands the command to forwardLoop.
func (c *conn) readLoop(cr *bufio.Reader) {
	for {
		frame, err := resp.ReadCommand(cr, nil)
		if err != nil {
			if errors.Is(err, resp.ErrMalformed) {
				c.protocolError(err)
			} else {
				c.shutdown("client", false)
			}
			return
		}
		if frame[0] != '*' && len(bytes.TrimSpace(frame)) == 0 || bytes.Equal(frame, emptyArray) {
			continue // Redis ignores empty inline lines and empty arrays
		}
		c.ep.mu.Lock()
		c.ep.stats.Commands++
		c.ep.mu.Unlock()
		name, args, err := resp.CommandName(frame)
		if err != nil {
			c.protocolError(err)
			return
		}
		if name == "CLIENT" && len(args) > 0 && strings.EqualFold(string(args[0]), "MAINT_NOTIFICATIONS") {
			if !c.handshake(args) {
				return // AnswerClose: read nothing more
			}
			continue
		}
		if frame[0] != '*' { // inline: the backend may not speak it
			inline := resp.AppendArrayHeader(nil, len(args)+1)
			inline = resp.AppendBulk(inline, name)
			for _, a := range args {
				inline = resp.AppendBulk(inline, a)
			}
			frame = inline
		}
		var replace []byte
		if m := c.ep.cluster.Load(); m != nil { // a Cluster node: route by slot
			var forward bool
			if frame, name, replace, forward = m.command(c, frame, name, args); !forward {
				continue
			}
		}

		replies := 1
		var onReply func([]byte)
		c.mu.Lock()
		if !c.used && !isHandshakeName(name) {
			c.used = true
		}
		switch sub, unsub := subscribeLike(name); {
		case sub || unsub:
			switch {
			case c.resp3:
				replies = 0 // the confirmations are pushes
			case sub:
				replies = max(1, len(args))
			default:
				replies = len(args) // unknown without args: relayed unmatched
			}
		case name == "HELLO" && len(args) > 0:
			prev := c.resp3
			switch string(args[0]) {
			case "3":
				c.resp3 = true
			case "2":
				c.resp3 = false
			}
			onReply = func(f []byte) {
				if f[0] == '-' || f[0] == '!' {
					c.resp3 = prev // HELLO failed: protocol unchanged
				}
			}
		case name == "RESET":
			c.resp3, c.optedIn = false, false
		}
		for i := 0; i < replies; i++ {
			en := entry{}
			if i == 0 {
				en.onReply, en.replace = onReply, replace
			}
			c.outQ = append(c.outQ, en)
		}
		c.fwdQ = append(c.fwdQ, fwdItem{name: name, data: frame})
		c.fcond.Signal()
		c.mu.Unlock()
	}
}

// forwardLoop relays queued commands to the backend in order, applying the
// endpoint's latency before each one.
func (c *conn) forwardLoop(bw *bufio.Writer) {
	for {
		c.mu.Lock()
		for !c.closed && len(c.fwdQ) == 0 {
			c.fcond.Wait()
		}
		if c.closed {
			c.mu.Unlock()
			return
		}
		it := c.fwdQ[0]
		c.fwdQ[0] = fwdItem{}
		c.fwdQ = c.fwdQ[1:]
		more := len(c.fwdQ) > 0
		c.mu.Unlock()

		if c.ep.latencyAfterExecution() {
			// The endpoint's lock before the connection's, never inside it:
			// optIn and Stats take them in that order.
			at := time.Now().Add(c.ep.latencyFor(it.name))
			c.mu.Lock()
			c.replyAt = append(c.replyAt, at)
			c.mu.Unlock()
		} else if lat := c.ep.latencyFor(it.name); lat > 0 {
			if bw.Flush() != nil {
				c.shutdown("backend", false)
				return
			}
			t := time.NewTimer(lat)
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
				return
			}
		}
		if _, err := bw.Write(it.data); err != nil {
			c.shutdown("backend", false)
			return
		}
		if !more {
			if err := bw.Flush(); err != nil {
				c.shutdown("backend", false)
				return
			}
		}
	}
}

// protocolError answers a malformed command like Redis does and closes the
// connection once the replies owed before it are written.
func (c *conn) protocolError(err error) {
	msg := strings.TrimPrefix(err.Error(), "resp: ")
	c.mu.Lock()
	c.queueLocalLocked(resp.AppendError(nil, "ERR Protocol error: "+msg))
	c.closeAfter, c.closeWhy = true, "protocol_error"
	c.mu.Unlock()
}

// handshake answers CLIENT MAINT_NOTIFICATIONS without forwarding it, as
// the endpoint's Handshake says. It reports false when the connection reads
// no more commands (AnswerClose).
func (c *conn) handshake(args [][]byte) bool {
	ep := c.ep
	switch h := ep.takeHandshake(); h.Answer {
	case AnswerError:
		msg := h.Error
		if msg == "" {
			msg = "ERR unknown subcommand '" + string(args[0]) + "'. Try CLIENT HELP."
		}
		c.queueLocal(resp.AppendError(nil, msg))
		c.e.event(Event{Endpoint: ep.addr, Kind: KindUnsupported, Conn: c.id, Detail: msg})
		return true
	case AnswerNone:
		c.mu.Lock()
		c.outQ = append(c.outQ, entry{isLocal: true, hang: true})
		c.mu.Unlock()
		c.e.event(Event{Endpoint: ep.addr, Kind: KindHandshakeIgnored, Conn: c.id})
		return true
	case AnswerClose:
		c.mu.Lock()
		c.closeAfter, c.closeWhy = true, "handshake"
		c.cond.Signal()
		c.mu.Unlock()
		return false
	}
	if len(args) < 2 {
		c.queueLocal(resp.AppendError(nil, "ERR wrong number of arguments for 'client|maint_notifications' command"))
		return true
	}
	switch strings.ToUpper(string(args[1])) {
	case "ON":
		typ := ""
		rest := args[2:]
		for len(rest) > 0 {
			if len(rest) < 2 || !strings.EqualFold(string(rest[0]), "moving-endpoint-type") {
				c.queueLocal(resp.AppendError(nil, "ERR syntax error"))
				return true
			}
			typ = strings.ToLower(string(rest[1]))
			switch typ {
			case "internal-ip", "internal-fqdn", "external-ip", "external-fqdn", "none":
			default:
				c.queueLocal(resp.AppendError(nil, "ERR invalid moving-endpoint-type '"+string(rest[1])+"'"))
				return true
			}
			rest = rest[2:]
		}
		ep.optIn(c, typ)
	case "OFF":
		if len(args) != 2 {
			c.queueLocal(resp.AppendError(nil, "ERR syntax error"))
			return true
		}
		c.mu.Lock()
		c.optedIn = false
		c.queueLocalLocked([]byte("+OK\r\n"))
		c.mu.Unlock()
		c.e.event(Event{Endpoint: ep.addr, Kind: KindOptOut, Conn: c.id})
	default:
		c.queueLocal(resp.AppendError(nil, "ERR syntax error"))
	}
	return true
}

// backendLoop frames the backend's output for writeLoop.
func (c *conn) backendLoop(br *bufio.Reader) {
	for {
		f, err := resp.ReadFrame(br, nil)
		c.mu.Lock()
		if err == nil && len(c.replyAt) > 0 && len(f) > 0 && f[0] != '>' {
			at := c.replyAt[0]
			c.replyAt = c.replyAt[1:]
			if d := time.Until(at); d > 0 {
				c.mu.Unlock()
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-c.ctx.Done():
					t.Stop()
					return
				}
				c.mu.Lock()
			}
		}
		if err != nil {
			c.bEOF = true
			if !c.closed && !errors.Is(err, net.ErrClosed) {
				c.backendErrMsg = err.Error()
			}
			c.cond.Broadcast()
			c.mu.Unlock()
			return
		}
		c.bout = append(c.bout, f)
		c.cond.Signal()
		c.mu.Unlock()
	}
}

// bigFrame is the size from which a backend frame is written by itself
// rather than copied into the batch of small ones.
const bigFrame = 64 << 10

// writeLoop is the only writer to the client: it interleaves owed replies,
// backend frames and injected pushes, always whole frames.
func (c *conn) writeLoop() {
	var buf []byte
	for {
		var served int64
		var big []byte // a big backend frame, written alone and uncopied
		c.mu.Lock()
		for {
			if c.closed {
				c.mu.Unlock()
				return
			}
			buf = append(buf[:0], c.pushes...)
			c.pushes = c.pushes[:0]
			served = 0
			for {
				if len(c.outQ) > 0 && c.outQ[0].hang {
					break // a reply that never comes: nothing after it either
				}
				if len(c.outQ) > 0 && c.outQ[0].isLocal {
					buf = append(buf, c.outQ[0].local...)
					c.popLocked()
					continue
				}
				if len(c.bout) == 0 {
					break
				}
				f := c.bout[0]
				if len(f) >= bigFrame && len(buf) > 0 {
					break // write what comes before it first
				}
				c.bout[0] = nil
				c.bout = c.bout[1:]
				// Pushes and attributes don't answer a command. A reply
				// with nothing owed (RESP2 pub/sub messages, MONITOR) is
				// relayed as is.
				if f[0] != '>' && f[0] != '|' && len(c.outQ) > 0 {
					if fn := c.outQ[0].onReply; fn != nil {
						fn(f)
					}
					if r := c.outQ[0].replace; r != nil {
						f = r
					}
					c.popLocked()
					served++
				}
				if len(f) >= bigFrame {
					big = f
					break
				}
				buf = append(buf, f...)
			}
			if len(buf) > 0 || big != nil {
				break
			}
			if c.bEOF {
				msg := c.backendErrMsg
				c.mu.Unlock()
				if msg != "" {
					c.e.logf("mainttest: %s: conn %d: backend: %s", c.ep.addr, c.id, msg)
				}
				c.shutdown("backend", false)
				return
			}
			if c.closeAfter && len(c.outQ) == 0 {
				why := c.closeWhy
				c.mu.Unlock()
				c.shutdown(why, why == "handshake")
				return
			}
			c.cond.Wait()
		}
		c.mu.Unlock()
		// Counted before the write, so a client that got a reply always
		// finds it in Stats.
		if served > 0 {
			c.ep.served(served, time.Now())
		}
		out := buf
		if big != nil {
			out = big
		}
		if _, err := c.nc.Write(out); err != nil {
			c.shutdown("client", false)
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil // don't pin one huge reply's buffer
		}
	}
}

// popLocked drops the head of outQ: its reply is being written.
func (c *conn) popLocked() {
	c.outQ[0] = entry{}
	c.outQ = c.outQ[1:]
}

// isHandshakeName reports whether a command of this name (upper case, as
// resp.CommandName gives it) is one a client sends in a connection's
// handshake (go-redis's: HELLO, AUTH, SELECT, READONLY, CLIENT SETNAME /
// SETINFO / TRACKING / MAINT_NOTIFICATIONS).
func isHandshakeName(name string) bool {
	switch name {
	case "HELLO", "AUTH", "SELECT", "READONLY", "CLIENT":
		return true
	}
	return false
}
