package mainttest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// Event kinds of the emulated Discovery Service. Its listener, connections
// and refused handshakes are logged with the endpoint kinds (KindListen,
// KindAccept, KindClose, KindUnsupported) under the Sentinel's address.
const (
	// KindSentinelSwitch: the Discovery Service started naming another
	// master (Sentinel.SetMaster, Sentinel.Moving, Sentinel.Failover, SENTINEL
	// FAILOVER). Endpoint is the address of the Sentinel the service was
	// created with, Seq the switch's own id, Detail
	// "name old -> new why=... delivered=N": N is the number of +switch-master
	// messages written to subscribers, all of them before the event is logged.
	KindSentinelSwitch = "sentinel_switch"

	// KindSentinelQuery: a Sentinel answered SENTINEL
	// get-master-addr-by-name with an address; Conn is the client
	// connection, Detail the address named ("127.0.0.2:41000"). It is logged
	// just before the answer is written; a test can count with it the dials
	// a client sent to a retiring master.
	KindSentinelQuery = "sentinel_query"
)

// sentinelVersion is the Redis version the emulated Discovery Service
// reports in HELLO and INFO.
const sentinelVersion = "7.2.0"

// SentinelStats is a snapshot of one Sentinel's counters, for assertions.
type SentinelStats struct {
	Open   int // client connections open now
	Opened int // client connections ever accepted

	// Commands counts every command read and answered, errors included.
	Commands int64

	// MasterQueries counts SENTINEL get-master-addr-by-name answered with
	// an address (a query for an unknown name, answered null, is not
	// counted).
	MasterQueries int64

	// Handshakes counts the CLIENT MAINT_NOTIFICATIONS commands read; the
	// Discovery Service refuses every one of them (see AddSentinel).
	Handshakes int64

	// Errors counts the commands answered with an error, handshakes included.
	Errors int64

	// Unknown counts the commands answered with an unknown command or
	// unknown subcommand error, handshakes included: what a client sent
	// that the service does not speak.
	Unknown int64

	// Subscribed counts the connections subscribed to at least one channel
	// or pattern now.
	Subscribed int

	// Switches counts the times the named master changed, summed over the
	// whole Discovery Service (every Sentinel of it reports the same).
	Switches int

	// SwitchMessages counts the +switch-master messages this Sentinel wrote
	// to its subscribers (one per matching channel or pattern).
	SwitchMessages int64
}

// discovery is the topology one Discovery Service serves, shared by its
// Sentinels (AddSentinel and AddPeer).
type discovery struct {
	e    *Emulator
	name string

	switchMu sync.Mutex // one switch at a time: name, publish, log

	mu       sync.Mutex // guards everything below
	master   *Endpoint
	replicas []*Endpoint
	members  []*Sentinel
	epoch    int64
	switches int
	quiet    bool // no +switch-master messages
}

// Sentinel is one node of an emulated Redis Enterprise Discovery Service: a
// loopback server speaking the Redis Sentinel API for one database (the
// master name) of the Emulator. It answers from the emulated topology and
// never relays to the backend. Create it with Emulator.AddSentinel (and
// more nodes of the same service with AddPeer); Emulator.Close closes it.
type Sentinel struct {
	e     *Emulator
	d     *discovery
	addr  string
	ip    string
	port  string
	runID string
	stop  chan struct{} // closed by Close

	refuseMu sync.Mutex // serialises RefuseNew

	mu       sync.Mutex // guards everything below
	ln       net.Listener
	refusing bool
	closed   bool
	conns    map[*sconn]struct{}
	stats    SentinelStats
	latency  time.Duration
}

// AddSentinel starts a Discovery Service for the database masterName whose
// master is the endpoint master, with one node listening on addr, a
// loopback "ip:port" such as "127.0.0.9:0" (any port). Clients find the
// master with SENTINEL get-master-addr-by-name, as go-redis's FailoverClient
// (redis.NewFailoverClient, or redis.NewUniversalClient with MasterName) does.
//
// The service answers, in RESP2 or RESP3 as HELLO chose: PING, ECHO, HELLO
// (with AUTH and SETNAME), AUTH, CLIENT SETNAME/GETNAME/ID/SETINFO, ROLE,
// INFO, QUIT, RESET, SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE, PUNSUBSCRIBE and
// SENTINEL get-master-addr-by-name, master, masters, sentinels, replicas,
// slaves, myid, ckquorum and failover. Everything else gets Redis's unknown
// command (or subcommand) error, as a real sentinel gives for data commands.
// It never sends a push other than pub/sub messages: CLIENT
// MAINT_NOTIFICATIONS, in any case, is refused like on a server without
// support (`-ERR unknown subcommand 'maint_notifications'. Try CLIENT
// HELP.`, subcommand echoed as sent), which is what redis-sentinel answers,
// and is counted in SentinelStats.Handshakes.
func (e *Emulator) AddSentinel(addr, masterName string, master *Endpoint) (*Sentinel, error) {
	if master == nil {
		return nil, errors.New("mainttest: AddSentinel: nil master")
	}
	d := &discovery{e: e, name: masterName, master: master}
	return d.addMember(addr)
}

// AddPeer starts another node of s's Discovery Service, listening on addr:
// it serves the same database and topology, lists the other nodes in
// SENTINEL sentinels, and publishes every switch of the master to its own
// subscribers too.
func (s *Sentinel) AddPeer(addr string) (*Sentinel, error) {
	return s.d.addMember(addr)
}

func (d *discovery) addMember(addr string) (*Sentinel, error) {
	e := d.e
	e.mu.Lock()
	defer e.mu.Unlock()
	ln, bound, err := e.listenLocked("sentinel", addr)
	if err != nil {
		return nil, err
	}
	s := &Sentinel{
		e:     e,
		d:     d,
		addr:  bound.String(),
		ip:    bound.IP.String(),
		port:  strconv.Itoa(bound.Port),
		runID: shaHex("sentinel " + bound.String()),
		stop:  make(chan struct{}),
		ln:    ln,
		conns: make(map[*sconn]struct{}),
	}
	d.mu.Lock()
	d.members = append(d.members, s)
	d.mu.Unlock()
	e.goLocked(func() { s.acceptLoop(ln) })
	e.goLocked(func() { // Emulator.Close knows endpoints only: close s with it
		select {
		case <-e.done:
			s.Close()
		case <-s.stop:
		}
	})
	e.event(Event{Endpoint: s.addr, Kind: KindListen, Detail: "sentinel " + d.name})
	return s, nil
}

// Addr returns the address the Sentinel listens on, e.g. "127.0.0.9:41000",
// for redis.FailoverOptions.SentinelAddrs.
func (s *Sentinel) Addr() string { return s.addr }

// MasterName returns the name of the database the Discovery Service serves.
func (s *Sentinel) MasterName() string { return s.d.name }

// Master returns the endpoint the Discovery Service names as master now.
func (s *Sentinel) Master() *Endpoint {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.master
}

// SetReplicas sets the endpoints SENTINEL replicas (and slaves) lists. A
// switch of the master removes the new master from the list and adds the
// old one.
func (s *Sentinel) SetReplicas(eps ...*Endpoint) {
	s.d.mu.Lock()
	s.d.replicas = append([]*Endpoint(nil), eps...)
	s.d.mu.Unlock()
}

// Replicas returns the endpoints SENTINEL replicas lists now.
func (s *Sentinel) Replicas() []*Endpoint {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return append([]*Endpoint(nil), s.d.replicas...)
}

// Peers returns the nodes of s's Discovery Service, s included, in the
// order they were started.
func (s *Sentinel) Peers() []*Sentinel {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return append([]*Sentinel(nil), s.d.members...)
}

// SetSwitchMessages chooses whether a switch of the master publishes
// +switch-master to subscribed clients (true, the default, as Redis
// Sentinel does) or not (false: clients learn of the new master only when
// they ask again, as from a Discovery Service without pub/sub).
func (s *Sentinel) SetSwitchMessages(on bool) {
	s.d.mu.Lock()
	s.d.quiet = !on
	s.d.mu.Unlock()
}

// SetMaster makes the Discovery Service name ep as master from now on and
// publishes +switch-master ("name old-ip old-port new-ip new-port") on the
// +switch-master channel of every node. It returns the switch's seq, or 0
// when ep is already the master or nil.
func (s *Sentinel) SetMaster(ep *Endpoint) (seq int64) {
	return s.d.switchTo(ep, "set_master")
}

// Stats returns a snapshot of the Sentinel's counters.
func (s *Sentinel) Stats() SentinelStats {
	s.d.mu.Lock()
	switches := s.d.switches
	s.d.mu.Unlock()
	s.mu.Lock()
	st := s.stats
	st.Open = len(s.conns)
	st.Switches = switches
	conns := make([]*sconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns { // c.mu is taken before s.mu elsewhere: not under it
		c.mu.Lock()
		if c.subscribedLocked() {
			st.Subscribed++
		}
		c.mu.Unlock()
	}
	return st
}

// CloseAll closes every client connection of this Sentinel now and returns
// how many it closed.
func (s *Sentinel) CloseAll() int {
	n := s.closeConns("close_all")
	s.e.event(Event{Endpoint: s.addr, Kind: KindCloseAll, Detail: fmt.Sprintf("closed=%d owed=0", n)})
	return n
}

// Close stops the Sentinel: its listener and every connection are closed.
// Its peers keep serving. It is idempotent; Emulator.Close calls it.
func (s *Sentinel) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	if s.ln != nil {
		_ = s.ln.Close()
		s.ln = nil
	}
	s.mu.Unlock()
	s.closeConns("emulator_close")
}

// RefuseNew stops (true) or resumes (false) accepting connections, as a
// Discovery Service node that is down: refusing closes the listener, so new
// dials get "connection refused"; resuming binds the same address again.
// Open connections are not affected. Logged as KindRefuse.
func (s *Sentinel) RefuseNew(refuse bool) {
	s.refuseMu.Lock()
	defer s.refuseMu.Unlock()
	s.mu.Lock()
	same := s.refusing == refuse || s.closed
	s.mu.Unlock()
	if same {
		return
	}
	var ln net.Listener
	if !refuse { // bind without holding locks: it may retry for a while
		var err error
		if ln, err = listenRetry(s.addr); err != nil {
			s.e.event(Event{Endpoint: s.addr, Kind: KindRefuse, Detail: "rebind failed: " + err.Error()})
			return
		}
	}
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.closed || s.closed {
		if ln != nil {
			_ = ln.Close()
		}
		return
	}
	detail := "off"
	if refuse {
		detail = "on"
		_ = s.ln.Close()
		s.ln = nil
	} else {
		s.ln = ln
		e.goLocked(func() { s.acceptLoop(ln) })
	}
	s.refusing = refuse
	e.event(Event{Endpoint: s.addr, Kind: KindRefuse, Detail: detail})
}

// SetLatency delays every answer of this Sentinel by d from now on (0
// removes it): a slow Discovery Service, which holds every dial of a
// FailoverClient. Published messages are not delayed.
func (s *Sentinel) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

// SetMasterAfter schedules SetMaster(ep) after d on a timer the Emulator
// owns (Close stops it).
func (s *Sentinel) SetMasterAfter(ep *Endpoint, d time.Duration) {
	s.e.schedule(d, func() { s.d.switchTo(ep, "set_master") })
}

// wait sleeps for the Sentinel's latency, if any; it reports false when the
// Sentinel or the Emulator closed meanwhile.
func (s *Sentinel) wait() bool {
	s.mu.Lock()
	d := s.latency
	s.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stop:
	case <-s.e.done:
	}
	return false
}

func (s *Sentinel) closeConns(why string) int {
	s.mu.Lock()
	conns := make([]*sconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.shutdown(why) {
			n++
		}
	}
	return n
}

func (s *Sentinel) acceptLoop(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		s.startConn(nc)
	}
}

func (s *Sentinel) startConn(nc net.Conn) {
	e := s.e
	c := &sconn{s: s, id: e.connID.Add(1), nc: nc}
	e.mu.Lock()
	defer e.mu.Unlock()
	s.mu.Lock()
	if e.closed || s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.stats.Opened++
	s.mu.Unlock()
	e.event(Event{Endpoint: s.addr, Kind: KindAccept, Conn: c.id, Detail: "from " + nc.RemoteAddr().String()})
	e.goLocked(c.run)
}

// count adds one served command to the Sentinel's counters.
func (s *Sentinel) count(r reply) {
	s.mu.Lock()
	s.stats.Commands++
	if r.err {
		s.stats.Errors++
	}
	if r.unknown {
		s.stats.Unknown++
	}
	if r.masterQuery {
		s.stats.MasterQueries++
	}
	if r.handshake {
		s.stats.Handshakes++
	}
	s.mu.Unlock()
}

// sconn is one client connection of a Sentinel, served by one goroutine.
// Replies and published messages are written under mu, so they never
// interleave. Lock order: sconn.mu before Sentinel.mu before discovery.mu.
type sconn struct {
	s       *Sentinel
	id      uint64
	nc      net.Conn
	closing atomic.Bool // set once, by shutdown

	mu       sync.Mutex // guards everything below and writes to nc
	closed   bool
	resp3    bool
	name     string
	channels map[string]struct{}
	patterns map[string]struct{}
}

// writeTimeout bounds a write to a client that does not read.
const writeTimeout = 5 * time.Second

func (c *sconn) shutdown(why string) bool {
	if !c.closing.CompareAndSwap(false, true) {
		return false
	}
	_ = c.nc.Close() // first: it ends a write blocked under mu
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	s := c.s
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.e.event(Event{Endpoint: s.addr, Kind: KindClose, Conn: c.id, Detail: why + " owed=0"})
	return true
}

// writeLocked writes b to the client; the caller holds c.mu.
func (c *sconn) writeLocked(b []byte) error {
	if c.closed {
		return net.ErrClosed
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.nc.Write(b)
	return err
}

func (c *sconn) run() {
	br := bufio.NewReaderSize(c.nc, 4096)
	var out []byte
	for {
		frame, err := resp.ReadCommand(br, nil)
		if err != nil {
			if errors.Is(err, resp.ErrMalformed) {
				c.mu.Lock()
				_ = c.writeLocked(resp.AppendError(nil, "ERR Protocol error: "+trimResp(err.Error())))
				c.mu.Unlock()
				c.shutdown("protocol_error")
				return
			}
			c.shutdown("client")
			return
		}
		if isBlankCommand(frame) {
			continue
		}
		name, args, err := resp.CommandName(frame)
		if err != nil {
			c.mu.Lock()
			_ = c.writeLocked(resp.AppendError(nil, "ERR Protocol error: "+trimResp(err.Error())))
			c.mu.Unlock()
			c.shutdown("protocol_error")
			return
		}
		if !c.s.wait() {
			c.shutdown("emulator_close")
			return
		}
		c.mu.Lock()
		r := c.serve(out[:0], name, rawName(frame, name), args)
		out = r.out
		// Counted and logged before the write: a client that got a reply
		// finds it in Stats and Events.
		c.s.count(r)
		if r.handshake {
			c.s.e.event(Event{Endpoint: c.s.addr, Kind: KindUnsupported, Conn: c.id, Detail: r.errLine})
		}
		if r.masterQuery {
			c.s.e.event(Event{Endpoint: c.s.addr, Kind: KindSentinelQuery, Conn: c.id, Detail: r.named})
		}
		werr := c.writeLocked(out)
		c.mu.Unlock()
		if werr != nil {
			c.shutdown("client")
			return
		}
		if r.quit {
			c.shutdown("quit")
			return
		}
		if cap(out) > 64<<10 {
			out = nil
		}
	}
}

func trimResp(s string) string {
	const p = "resp: "
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// isBlankCommand reports the empty inline lines and empty arrays Redis
// ignores.
func isBlankCommand(frame []byte) bool {
	if string(frame) == "*0\r\n" {
		return true
	}
	if frame[0] == '*' {
		return false
	}
	for _, b := range frame {
		if b != ' ' && b != '\t' && b != '\r' && b != '\n' {
			return false
		}
	}
	return true
}

// rawName returns the command name as the client sent it (CommandName
// upper-cases it), for error messages that echo it.
func rawName(frame []byte, upper string) string {
	if len(frame) == 0 || frame[0] != '*' { // inline: the first word
		i := 0
		for i < len(frame) && (frame[i] == ' ' || frame[i] == '\t') {
			i++
		}
		j := i
		for j < len(frame) && frame[j] != ' ' && frame[j] != '\t' && frame[j] != '\r' && frame[j] != '\n' {
			j++
		}
		if j == i {
			return upper
		}
		return string(frame[i:j])
	}
	// *N\r\n$L\r\n<name>\r\n...
	i := indexCRLF(frame)
	if i < 0 || i+2 >= len(frame) {
		return upper
	}
	rest := frame[i+2:]
	j := indexCRLF(rest)
	if j < 1 || rest[0] != '$' {
		return upper
	}
	n, err := strconv.Atoi(string(rest[1:j]))
	if err != nil || n < 0 || j+2+n > len(rest) {
		return upper
	}
	return string(rest[j+2 : j+2+n])
}

func indexCRLF(b []byte) int {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\r' && b[i+1] == '\n' {
			return i
		}
	}
	return -1
}
