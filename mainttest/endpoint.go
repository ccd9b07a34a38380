package mainttest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Endpoint is one emulated Redis Enterprise endpoint (a proxy on one node): a
// RESP relay listening on a loopback address, in front of the Emulator's
// backend. Its methods inject maintenance events into its own connections.
type Endpoint struct {
	e    *Emulator
	addr string // "ip:port" as bound
	ip   string
	port string
	fqdn atomic.Pointer[string]
	// cluster is set when the endpoint is a node of a Cluster.
	cluster atomic.Pointer[clusterMember]

	refuseMu sync.Mutex // serialises RefuseNew

	mu          sync.Mutex // guards everything below
	ln          net.Listener
	refusing    bool
	conns       map[*conn]struct{}
	stats       Stats
	firstServed bool

	hs     Handshake // the standing answer to CLIENT MAINT_NOTIFICATIONS
	hsTemp Handshake // a temporary answer, for hsLeft more handshakes
	hsLeft int

	latency      time.Duration
	cmdLatency   map[string]time.Duration
	maintLatency time.Duration
	// latencyAfter applies latency to replies, after the backend executed
	// the command, instead of before relaying it (SetLatencyAfterExecution).
	latencyAfter bool
	// slotLatency is the extra latency of the slot migrations (MigrateSlots)
	// leaving this endpoint now.
	slotLatency time.Duration

	migrating   *maintOp // open MIGRATING, nil when none
	failingOver *maintOp // open FAILING_OVER, nil when none
	completion  []byte   // latest MIGRATED/FAILED_OVER frame, replayed on opt-in
	completionK string   // its kind
	moving      *movingOp
	// smigrating are the SMIGRATING frames of the slot migrations open on
	// this endpoint (sent to its connections, their SMIGRATED not yet), in
	// the order sent.
	smigrating []openSMigrating
	// replayActive replays an open MIGRATING, FAILING_OVER or SMIGRATING to
	// connections opting in while it lasts (SetReplayActive), as Redis
	// Enterprise does.
	replayActive bool
}

// openSMigrating is a slot migration's SMIGRATING, open on an endpoint
// until its SMIGRATED.
type openSMigrating struct {
	seq   int64
	frame []byte
}

// maintOp is an open MIGRATING or FAILING_OVER.
type maintOp struct {
	seq     int64
	started bool // its "starts in" elapsed: maint latency applies
	kind    string
	shards  string
	startAt time.Time // when its "starts in" elapses
}

// movingOp is the MOVING whose window is open on an endpoint.
type movingOp struct {
	seq int64
	m   Moving
	end time.Time // the window's end (without CloseJitter)
}

// Stats is a snapshot of an endpoint's counters, for assertions.
type Stats struct {
	Open    int // client connections open now
	Opened  int // client connections ever accepted
	OptedIn int // connections that ever opted in (CLIENT MAINT_NOTIFICATIONS ON answered +OK)
	// OpenOptedIn counts the connections open now that are opted in: every
	// open connection has opted in when it equals Open (OptedIn also counts
	// closed ones).
	OpenOptedIn int

	// Handshakes counts the CLIENT MAINT_NOTIFICATIONS commands read (ON
	// and OFF), whatever the answer (see SetHandshake); OptedIn counts the
	// connections they opted in.
	Handshakes int

	// ClosedAtWindowEnd counts the connections the Emulator closed at the
	// end of a MOVING window, summed over MOVINGs; UnusedAtWindowEnd those
	// of them that were told of the MOVING in their opt-in's reply (the
	// replay) and sent no command beyond a handshake's (HELLO, AUTH,
	// SELECT, READONLY, CLIENT ...).
	ClosedAtWindowEnd int
	UnusedAtWindowEnd int

	// Commands counts the commands read from clients, every one
	// (handshakes included: HELLO, AUTH, CLIENT MAINT_NOTIFICATIONS ...).
	// Zero means no client sent this endpoint anything but, over TLS, its
	// TLS handshake.
	Commands int64

	// Served counts backend replies relayed to clients (intercepted
	// handshakes, pushes and unsolicited frames are not counted).
	Served int64

	// OwedAtClose counts the replies still owed to clients when the Emulator
	// closed their connections (window end, CloseAll, Close): the commands
	// those clients lost. Connections closed by the client or the backend do
	// not count.
	OwedAtClose int64

	// Pending counts the replies owed to the endpoint's clients right now:
	// commands read and not yet answered (slow or in flight).
	Pending int64

	FirstServed, LastServed time.Time // when the first and last counted reply was relayed

	// Cluster holds the counters of a Cluster node (zero elsewhere).
	Cluster ClusterStats
}

// SlotMove is one [source, destination, slots] triplet of an SMIGRATED push:
// slots (e.g. "0-100,200") moved from node Src to node Dst ("host:port").
type SlotMove struct {
	Src, Dst, Slots string
}

// Moving describes a MOVING event started with Endpoint.Moving.
type Moving struct {
	// Window is the grace window. On the wire the time is whole seconds,
	// rounded up, at least 1 for a positive Window (0 for Window <= 0). The
	// close happens at the real Window (+CloseJitter), so sub-second windows
	// work in tests.
	Window time.Duration

	// To is the successor endpoint, the server side of the move. nil sends a
	// null endpoint to everyone.
	To *Endpoint

	// Null sends a null endpoint ("_") even though To is set (all 11 MOVINGs
	// measured on Redis Enterprise were null).
	Null bool

	// CloseJitter is extra delay after Window before the connections still on
	// the old endpoint are closed (0 is fine).
	CloseJitter time.Duration

	// StopAccepting makes the old endpoint refuse new connections after the
	// close (see Endpoint.RefuseNew).
	StopAccepting bool

	// DNSHost, when set together with To, schedules
	// DNS().SetAfter(DNSHost, DNSLag, To's IP) at the MOVING. DNSLag may be
	// shorter or longer than the window.
	DNSHost string
	DNSLag  time.Duration
}

// listenLocked listens on addr, which must be a loopback "ip:port", for an
// endpoint or a sentinel (what, in errors), unless the Emulator is closed.
// e.mu is held.
func (e *Emulator) listenLocked(what, addr string) (net.Listener, *net.TCPAddr, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("mainttest: %s address %q: %w", what, addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, nil, fmt.Errorf("mainttest: %s address %q: not a loopback IP", what, addr)
	}
	if e.closed {
		return nil, nil, ErrClosed
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("mainttest: listen %s: %w", addr, err)
	}
	return ln, ln.Addr().(*net.TCPAddr), nil
}

// AddEndpoint starts an endpoint listening on addr, a loopback "ip:port"
// such as "127.0.0.2:0" (any port) or "127.0.0.3:41000". On Linux all of
// 127.0.0.0/8 is loopback, so two endpoints can differ by IP, port or both.
func (e *Emulator) AddEndpoint(addr string) (*Endpoint, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ln, bound, err := e.listenLocked("endpoint", addr)
	if err != nil {
		return nil, err
	}
	ep := &Endpoint{
		e:          e,
		addr:       bound.String(),
		ip:         bound.IP.String(),
		port:       strconv.Itoa(bound.Port),
		ln:         ln,
		conns:      make(map[*conn]struct{}),
		cmdLatency: make(map[string]time.Duration),
	}
	ep.hs = e.cfg.Handshake
	if e.cfg.Unsupported {
		ep.hs = Handshake{Answer: AnswerError}
	}
	if ep.hs.Times > 0 {
		ep.hsTemp, ep.hsLeft, ep.hs = ep.hs, ep.hs.Times, Handshake{}
	}
	e.endpoints = append(e.endpoints, ep)
	e.goLocked(func() { ep.acceptLoop(ln) })
	e.event(Event{Endpoint: ep.addr, Kind: KindListen})
	return ep, nil
}

// Addr returns the address the endpoint listens on, e.g. "127.0.0.2:41000".
func (ep *Endpoint) Addr() string { return ep.addr }

// IP returns the endpoint's IP, e.g. "127.0.0.2".
func (ep *Endpoint) IP() string { return ep.ip }

// Port returns the endpoint's port, e.g. "41000".
func (ep *Endpoint) Port() string { return ep.port }

// SetFQDN sets the host name put in MOVING for connections that asked for an
// internal-fqdn or external-fqdn endpoint type (default: the IP). Point the
// name at the endpoint with DNS().Set for clients that dial it.
func (ep *Endpoint) SetFQDN(host string) {
	ep.fqdn.Store(&host)
}

// Stats returns a snapshot of the endpoint's counters.
func (ep *Endpoint) Stats() Stats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	s := ep.stats
	for c := range ep.conns {
		c.mu.Lock()
		s.Pending += int64(len(c.outQ))
		if c.optedIn && !c.closed {
			s.OpenOptedIn++
		}
		c.mu.Unlock()
	}
	return s
}

// SetLatency sets extra latency for every command relayed from now on
// (intercepted handshakes are answered at once). It adds to
// SetCommandLatency and SetMaintLatency.
func (ep *Endpoint) SetLatency(d time.Duration) {
	ep.mu.Lock()
	ep.latency = d
	ep.mu.Unlock()
}

// SetCommandLatency sets extra latency for one command name only
// (case-insensitive, e.g. "get"); 0 removes it.
func (ep *Endpoint) SetCommandLatency(name string, d time.Duration) {
	name = strings.ToUpper(name)
	ep.mu.Lock()
	if d <= 0 {
		delete(ep.cmdLatency, name)
	} else {
		ep.cmdLatency[name] = d
	}
	ep.mu.Unlock()
}

// SetMaintLatency sets extra latency for every command relayed while a
// MIGRATING or FAILING_OVER is in progress: from its "starts in" until the
// matching MIGRATED or FAILED_OVER. Set it before the event; default 0.
func (ep *Endpoint) SetMaintLatency(d time.Duration) {
	ep.mu.Lock()
	ep.maintLatency = d
	ep.mu.Unlock()
}

// SetLatencyAfterExecution chooses where the endpoint's latency
// (SetLatency, SetCommandLatency, SetMaintLatency) applies: false (the
// default) delays each command before it is relayed to the backend, so a
// client that gives up on it leaves it unexecuted; true relays it at once and
// delays its reply, so the command has run when the client gives up: what a
// server slowed by a migration may do, and what shows a client that retries
// such a command running a write twice.
func (ep *Endpoint) SetLatencyAfterExecution(after bool) {
	ep.mu.Lock()
	ep.latencyAfter = after
	ep.mu.Unlock()
}

// latencyAfterExecution reports whether latency applies to replies.
func (ep *Endpoint) latencyAfterExecution() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.latencyAfter
}

// latencyFor returns the delay to apply before relaying command name
// (upper case).
func (ep *Endpoint) latencyFor(name string) time.Duration {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	d := ep.latency + ep.cmdLatency[name] + ep.slotLatency
	if (ep.migrating != nil && ep.migrating.started) || (ep.failingOver != nil && ep.failingOver.started) {
		d += ep.maintLatency
	}
	return d
}

// RefuseNew stops (true) or resumes (false) accepting connections. Refusing
// closes the listener, so new dials get "connection refused"; resuming binds
// the same address again. Open connections are not affected.
func (ep *Endpoint) RefuseNew(refuse bool) {
	ep.setRefusing(refuse, "")
}

func (ep *Endpoint) setRefusing(refuse bool, why string) {
	e := ep.e
	ep.refuseMu.Lock() // one change at a time on this endpoint
	defer ep.refuseMu.Unlock()
	ep.mu.Lock()
	same := ep.refusing == refuse
	ep.mu.Unlock()
	if same {
		return
	}
	var ln net.Listener
	if !refuse { // bind without holding locks: it may retry for a while
		var err error
		if ln, err = listenRetry(ep.addr); err != nil {
			e.event(Event{Endpoint: ep.addr, Kind: KindRefuse, Detail: "rebind failed: " + err.Error()})
			return
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		if ln != nil {
			_ = ln.Close()
		}
		return
	}
	ep.mu.Lock()
	detail := "off"
	if refuse {
		detail = "on"
		_ = ep.ln.Close()
		ep.ln = nil
	} else {
		ep.ln = ln
		e.goLocked(func() { ep.acceptLoop(ln) })
	}
	ep.refusing = refuse
	ep.mu.Unlock()
	if why != "" {
		detail += " (" + why + ")"
	}
	e.event(Event{Endpoint: ep.addr, Kind: KindRefuse, Detail: detail})
}

// listenRetry binds addr, retrying briefly: a just-closed listener's port
// can take a moment to become free again.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for i := 0; i < 50; i++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, err
}

// CloseAll closes every client connection of the endpoint now and returns
// how many it closed. Replies still owed are added to Stats.OwedAtClose.
func (ep *Endpoint) CloseAll() int {
	n, owed := ep.closeConns("close_all")
	ep.e.event(Event{Endpoint: ep.addr, Kind: KindCloseAll, Detail: fmt.Sprintf("closed=%d owed=%d", n, owed)})
	return n
}

// closeConns closes every connection of the endpoint as the server, and
// returns how many it closed and how many replies they still owed.
func (ep *Endpoint) closeConns(reason string) (n int, owed int64) {
	ep.mu.Lock()
	conns := ep.connsLocked()
	ep.mu.Unlock()
	return closeAll(conns, reason)
}

// connsLocked is the endpoint's connections now. ep.mu is held.
func (ep *Endpoint) connsLocked() []*conn {
	conns := make([]*conn, 0, len(ep.conns))
	for c := range ep.conns {
		conns = append(conns, c)
	}
	return conns
}

// closeAll closes conns for reason, and returns how many it closed and the
// replies they still owed.
func closeAll(conns []*conn, reason string) (n int, owed int64) {
	for _, c := range conns {
		if o, ok := c.shutdown(reason, true); ok {
			n++
			owed += o
		}
	}
	return n, owed
}

// shutdown is the endpoint's part of Emulator.Close.
func (ep *Endpoint) shutdown() {
	ep.mu.Lock()
	if ep.ln != nil {
		_ = ep.ln.Close()
		ep.ln = nil
	}
	ep.mu.Unlock()
	ep.closeConns("emulator_close")
}

func (ep *Endpoint) acceptLoop(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // listener closed (RefuseNew, StopAccepting or Close)
		}
		if cfg := ep.e.cfg.TLS; cfg != nil {
			nc = tls.Server(nc, cfg)
		}
		ep.e.startConn(ep, nc)
	}
}

// connGone removes a closed connection from the endpoint's books.
func (ep *Endpoint) connGone(c *conn, owed int64, byEmulator bool) {
	ep.mu.Lock()
	if _, ok := ep.conns[c]; ok {
		delete(ep.conns, c)
		ep.stats.Open--
	}
	if byEmulator {
		ep.stats.OwedAtClose += owed
	}
	ep.mu.Unlock()
}

// served records n relayed backend replies.
func (ep *Endpoint) served(n int64, now time.Time) {
	ep.mu.Lock()
	ep.stats.Served += n
	if ep.stats.FirstServed.IsZero() {
		ep.stats.FirstServed = now
	}
	ep.stats.LastServed = now
	first := !ep.firstServed
	ep.firstServed = true
	ep.mu.Unlock()
	if first {
		ep.e.event(Event{At: now, Endpoint: ep.addr, Kind: KindFirstServed})
	}
}

// broadcastLocked queues frame for every opted-in RESP3 connection and returns how
// many got it. The caller holds ep.mu.
func (ep *Endpoint) broadcastLocked(frame []byte) int {
	n := 0
	for c := range ep.conns {
		if c.push(frame) {
			n++
		}
	}
	return n
}
