package mainttest

import (
	"strconv"
	"strings"

	"github.com/maintkit/maint/internal/resp"
)

// reply is the answer to one command and what it counts for.
type reply struct {
	out         []byte
	err         bool   // answered with an error
	errLine     string // the error, without '-' and CRLF
	unknown     bool   // unknown command or subcommand
	masterQuery bool   // get-master-addr-by-name answered with an address
	named       string // that address
	handshake   bool   // CLIENT MAINT_NOTIFICATIONS, refused
	quit        bool   // close the connection once out is written
}

func (r *reply) fail(msg string) {
	r.out = resp.AppendError(r.out, msg)
	r.err, r.errLine = true, msg
}

func (r *reply) unknownCommand(raw string, args [][]byte) {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	b.WriteString(clip(raw))
	b.WriteString("', with args beginning with: ")
	for _, a := range args {
		b.WriteByte('\'')
		b.WriteString(clip(string(a)))
		b.WriteString("' ")
	}
	r.fail(b.String())
	r.unknown = true
}

func (r *reply) unknownSub(sub []byte, cmd string) {
	r.fail("ERR unknown subcommand '" + clip(string(sub)) + "'. Try " + cmd + " HELP.")
	r.unknown = true
}

func (r *reply) arity(cmd string) {
	r.fail("ERR wrong number of arguments for '" + cmd + "' command")
}

// clip shortens an echoed argument as Redis does (128 bytes).
func clip(s string) string {
	if len(s) > 128 {
		return s[:128]
	}
	return s
}

// serve answers one command; the caller holds c.mu.
func (c *sconn) serve(out []byte, name, raw string, args [][]byte) reply {
	r := reply{out: out}
	if c.subscribedLocked() && !c.resp3 {
		switch name {
		case "SUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "PING", "QUIT", "RESET":
		default:
			r.fail("ERR Can't execute '" + strings.ToLower(raw) +
				"': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
			return r
		}
	}
	switch name {
	case "PING":
		switch {
		case len(args) > 1:
			r.arity("ping")
		case c.subscribedLocked() && !c.resp3:
			msg := ""
			if len(args) == 1 {
				msg = string(args[0])
			}
			r.out = resp.AppendArrayHeader(r.out, 2)
			r.out = resp.AppendBulk(r.out, "pong")
			r.out = resp.AppendBulk(r.out, msg)
		case len(args) == 1:
			r.out = resp.AppendBulk(r.out, args[0])
		default:
			r.out = append(r.out, "+PONG\r\n"...)
		}
	case "ECHO":
		if len(args) != 1 {
			r.arity("echo")
			break
		}
		r.out = resp.AppendBulk(r.out, args[0])
	case "HELLO":
		c.hello(&r, args)
	case "AUTH":
		switch len(args) {
		case 1:
			r.fail("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		case 2:
			if !authOK(args[0]) {
				r.fail("WRONGPASS invalid username-password pair or user is disabled.")
				break
			}
			r.out = append(r.out, "+OK\r\n"...)
		default:
			r.fail("ERR syntax error")
		}
	case "CLIENT":
		c.client(&r, args)
	case "SENTINEL":
		c.sentinel(&r, args)
	case "SUBSCRIBE", "PSUBSCRIBE":
		c.subscribe(&r, name == "PSUBSCRIBE", args)
	case "UNSUBSCRIBE", "PUNSUBSCRIBE":
		c.unsubscribe(&r, name == "PUNSUBSCRIBE", args)
	case "ROLE":
		r.out = resp.AppendArrayHeader(r.out, 2)
		r.out = resp.AppendBulk(r.out, "sentinel")
		r.out = resp.AppendArrayHeader(r.out, 1)
		r.out = resp.AppendBulk(r.out, c.s.d.name)
	case "INFO":
		r.out = resp.AppendBulk(r.out, c.s.info())
	case "QUIT":
		r.out = append(r.out, "+OK\r\n"...)
		r.quit = true
	case "RESET":
		c.resp3, c.name, c.channels, c.patterns = false, "", nil, nil
		r.out = append(r.out, "+RESET\r\n"...)
	default:
		r.unknownCommand(raw, args)
	}
	return r
}

// authOK reports whether AUTH's or HELLO's username is accepted: the
// service has no password, so only the default user exists (with any
// password, as for a nopass user).
func authOK(user []byte) bool { return strings.EqualFold(string(user), "default") }

func (c *sconn) hello(r *reply, args [][]byte) {
	proto := 0
	if len(args) > 0 {
		v, err := strconv.Atoi(string(args[0]))
		if err != nil {
			r.fail("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			r.fail("NOPROTO unsupported protocol version")
			return
		}
		proto = v
		args = args[1:]
	}
	name := c.name
	for len(args) > 0 {
		switch opt := strings.ToUpper(string(args[0])); {
		case opt == "AUTH" && len(args) >= 3:
			if !authOK(args[1]) {
				r.fail("WRONGPASS invalid username-password pair or user is disabled.")
				return
			}
			args = args[3:]
		case opt == "SETNAME" && len(args) >= 2:
			if !validClientName(args[1]) {
				r.fail("ERR Client names cannot contain spaces, newlines or special characters.")
				return
			}
			name = string(args[1])
			args = args[2:]
		default:
			r.fail("ERR Syntax error in HELLO option '" + clip(string(args[0])) + "'")
			return
		}
	}
	switch proto {
	case 2:
		c.resp3 = false
	case 3:
		c.resp3 = true
	}
	c.name = name
	p := int64(2)
	if c.resp3 {
		p = 3
	}
	r.out = c.appendMapHeader(r.out, 6)
	r.out = resp.AppendBulk(r.out, "server")
	r.out = resp.AppendBulk(r.out, "redis")
	r.out = resp.AppendBulk(r.out, "version")
	r.out = resp.AppendBulk(r.out, sentinelVersion)
	r.out = resp.AppendBulk(r.out, "proto")
	r.out = resp.AppendInt(r.out, p)
	r.out = resp.AppendBulk(r.out, "id")
	r.out = resp.AppendInt(r.out, int64(c.id))
	r.out = resp.AppendBulk(r.out, "mode")
	r.out = resp.AppendBulk(r.out, "sentinel")
	r.out = resp.AppendBulk(r.out, "modules")
	r.out = resp.AppendArrayHeader(r.out, 0)
}

// validClientName reports a name CLIENT SETNAME accepts: printable ASCII
// without spaces.
func validClientName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

func (c *sconn) client(r *reply, args [][]byte) {
	if len(args) == 0 {
		r.arity("client")
		return
	}
	switch sub := strings.ToUpper(string(args[0])); sub {
	case "MAINT_NOTIFICATIONS":
		// A Discovery Service is no data node: refused like on a server
		// without support, whatever the arguments.
		r.unknownSub(args[0], "CLIENT")
		r.handshake = true
	case "SETNAME":
		if len(args) != 2 {
			r.arity("client|setname")
			return
		}
		if !validClientName(args[1]) {
			r.fail("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.name = string(args[1])
		r.out = append(r.out, "+OK\r\n"...)
	case "GETNAME":
		if c.name == "" {
			r.out = c.appendNull(r.out)
			return
		}
		r.out = resp.AppendBulk(r.out, c.name)
	case "ID":
		r.out = resp.AppendInt(r.out, int64(c.id))
	case "SETINFO":
		if len(args) != 3 {
			r.arity("client|setinfo")
			return
		}
		switch strings.ToUpper(string(args[1])) {
		case "LIB-NAME", "LIB-VER":
			r.out = append(r.out, "+OK\r\n"...)
		default:
			r.fail("ERR Unrecognized option '" + clip(string(args[1])) + "'")
		}
	default:
		r.unknownSub(args[0], "CLIENT")
	}
}

// sentinel answers the SENTINEL subcommands.
func (c *sconn) sentinel(r *reply, args [][]byte) {
	if len(args) == 0 {
		r.arity("sentinel")
		return
	}
	d := c.s.d
	sub := strings.ToLower(string(args[0]))
	withName := func() bool {
		if len(args) != 2 {
			r.arity("sentinel|" + sub)
			return false
		}
		if string(args[1]) != d.name {
			r.fail("ERR No such master with that name")
			return false
		}
		return true
	}
	switch sub {
	case "get-master-addr-by-name":
		if len(args) != 2 {
			r.arity("sentinel|" + sub)
			return
		}
		if string(args[1]) != d.name {
			r.out = c.appendNull(r.out)
			return
		}
		m := c.s.Master()
		r.out = resp.AppendArrayHeader(r.out, 2)
		r.out = resp.AppendBulk(r.out, m.ip)
		r.out = resp.AppendBulk(r.out, m.port)
		r.masterQuery, r.named = true, m.addr
	case "master":
		if withName() {
			r.out = c.appendMasterInfo(r.out)
		}
	case "masters":
		if len(args) != 1 {
			r.arity("sentinel|" + sub)
			return
		}
		r.out = resp.AppendArrayHeader(r.out, 1)
		r.out = c.appendMasterInfo(r.out)
	case "replicas", "slaves":
		if !withName() {
			return
		}
		reps := c.s.Replicas()
		m := c.s.Master()
		r.out = resp.AppendArrayHeader(r.out, len(reps))
		for _, ep := range reps {
			r.out = c.appendReplicaInfo(r.out, ep, m)
		}
	case "sentinels":
		if !withName() {
			return
		}
		var others []*Sentinel
		for _, p := range c.s.Peers() {
			if p != c.s {
				others = append(others, p)
			}
		}
		r.out = resp.AppendArrayHeader(r.out, len(others))
		for _, p := range others {
			r.out = c.appendSentinelInfo(r.out, p)
		}
	case "myid":
		if len(args) != 1 {
			r.arity("sentinel|" + sub)
			return
		}
		r.out = resp.AppendBulk(r.out, c.s.runID)
	case "ckquorum":
		if withName() {
			n := len(c.s.Peers())
			r.out = resp.AppendSimple(r.out, "OK "+strconv.Itoa(n)+" usable Sentinels. Quorum and failover authorization can be reached")
		}
	case "failover":
		if !withName() {
			return
		}
		reps := c.s.Replicas()
		if len(reps) == 0 {
			r.fail("NOGOODSLAVE No suitable replica to promote")
			return
		}
		// Switch on an Emulator goroutine: it publishes to subscribers,
		// maybe this very connection, whose lock the caller holds.
		to := reps[0]
		e := c.s.e
		e.mu.Lock()
		if !e.closed {
			e.goLocked(func() { d.switchTo(to, "sentinel_failover") })
		}
		e.mu.Unlock()
		r.out = append(r.out, "+OK\r\n"...)
	default:
		r.unknownSub(args[0], "SENTINEL")
	}
}

// info is the INFO text: the server and sentinel sections.
func (s *Sentinel) info() string {
	m := s.Master()
	var b strings.Builder
	b.WriteString("# Server\r\nredis_version:" + sentinelVersion + "\r\nredis_mode:sentinel\r\ntcp_port:" + s.port + "\r\n")
	b.WriteString("run_id:" + s.runID + "\r\n\r\n# Sentinel\r\nsentinel_masters:1\r\n")
	b.WriteString("master0:name=" + s.d.name + ",status=ok,address=" + m.addr +
		",slaves=" + strconv.Itoa(len(s.Replicas())) + ",sentinels=" + strconv.Itoa(len(s.Peers())) + "\r\n")
	return b.String()
}

// appendMapHeader appends a map header in RESP3, or the header of the flat
// array RESP2 uses for maps.
func (c *sconn) appendMapHeader(dst []byte, n int) []byte {
	if c.resp3 {
		return resp.AppendMapHeader(dst, n)
	}
	return resp.AppendArrayHeader(dst, 2*n)
}

// appendNull appends the null of the connection's protocol.
func (c *sconn) appendNull(dst []byte) []byte {
	if c.resp3 {
		return resp.AppendNull(dst)
	}
	return append(dst, "*-1\r\n"...)
}

// appendKV appends a map of string pairs.
func (c *sconn) appendKV(dst []byte, kv ...string) []byte {
	dst = c.appendMapHeader(dst, len(kv)/2)
	for _, s := range kv {
		dst = resp.AppendBulk(dst, s)
	}
	return dst
}

func epRunID(ep *Endpoint) string { return shaHex("endpoint " + ep.addr) }

func (c *sconn) appendMasterInfo(dst []byte) []byte {
	d := c.s.d
	d.mu.Lock()
	m, nrep, nsent, epoch := d.master, len(d.replicas), len(d.members), d.epoch
	d.mu.Unlock()
	return c.appendKV(dst,
		"name", d.name, "ip", m.ip, "port", m.port, "runid", epRunID(m),
		"flags", "master", "link-pending-commands", "0", "link-refcount", "1",
		"last-ping-sent", "0", "last-ok-ping-reply", "0", "last-ping-reply", "0",
		"down-after-milliseconds", "5000", "info-refresh", "0",
		"role-reported", "master", "role-reported-time", "0",
		"config-epoch", strconv.FormatInt(epoch, 10),
		"num-slaves", strconv.Itoa(nrep), "num-other-sentinels", strconv.Itoa(nsent-1),
		"quorum", strconv.Itoa(nsent/2+1), "failover-timeout", "180000", "parallel-syncs", "1")
}

func (c *sconn) appendReplicaInfo(dst []byte, ep, master *Endpoint) []byte {
	return c.appendKV(dst,
		"name", ep.addr, "ip", ep.ip, "port", ep.port, "runid", epRunID(ep),
		"flags", "slave", "link-pending-commands", "0", "link-refcount", "1",
		"last-ping-sent", "0", "last-ok-ping-reply", "0", "last-ping-reply", "0",
		"down-after-milliseconds", "5000", "info-refresh", "0",
		"role-reported", "slave", "role-reported-time", "0",
		"master-link-down-time", "0", "master-link-status", "ok",
		"master-host", master.ip, "master-port", master.port,
		"slave-priority", "100", "slave-repl-offset", "0", "replica-announced", "1")
}

func (c *sconn) appendSentinelInfo(dst []byte, p *Sentinel) []byte {
	return c.appendKV(dst,
		"name", p.runID, "ip", p.ip, "port", p.port, "runid", p.runID,
		"flags", "sentinel", "link-pending-commands", "0", "link-refcount", "1",
		"last-ping-sent", "0", "last-ok-ping-reply", "0", "last-ping-reply", "0",
		"down-after-milliseconds", "5000", "last-hello-message", "0",
		"voted-leader", "?", "voted-leader-epoch", "0")
}
