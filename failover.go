package maint

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The failover client (Redis Sentinel, Redis Enterprise's Discovery
// Service).
//
// go-redis builds a FailoverClient's data-node client and each sentinel
// client from the same FailoverOptions: the same Dialer, the same OnConnect
// (sentinel.go: clientOptions and sentinelOptions). maint must wrap and opt
// in the data nodes' connections only.
//
// The seam is the data-node client's own dial hook: its pool dials through
// masterReplicaDialer, which asks a sentinel for the master's address and
// then calls FailoverOptions.Dialer with it; the sentinel clients have hook
// chains of their own, which maint never joins. So the failover hook, on
// the data-node client, wraps exactly the data nodes' connections
// (TestContractFailoverClientAddr).
//
// FailoverOptions.Dialer, which maint also wraps, serves the dials that
// do not go through that hook: the sentinels', and the data nodes' dialled
// before the hook is in (MinIdleConns dials started while NewFailoverClient
// runs reach the Dialer after it returns, through the hook chain they
// started with: TestContractFailoverMinIdleDialsBeforeHook). Under the hook
// it steps aside (the hook wraps), and records the addresses it is asked
// for: every one but the last of one data-node dial is a sentinel's (the
// sentinel lookups nested in masterReplicaDialer come before the master's
// dial). Outside the hook, an address that is a sentinel's (configured, or
// learned so) is let through; any other is a data node's, and wrapped.
// OnConnect is never touched, so HandshakeRequired (which checks the
// answer in OnConnect) acts as HandshakeAuto here.
//
// A MOVING's successor is of no use to a failover client: its dialer asks
// the sentinels at each dial, whatever address it is given. The Maint asks
// for null endpoints (moving-endpoint-type none, unless EndpointType is
// set) and treats a named successor as null, so it holds new work until
// the Discovery Service names another master, as for DNS with a null
// endpoint: its probes dial through the FailoverClient's own dialer, which
// asks the sentinels.

// failoverAddr is the address go-redis gives a FailoverClient's data-node
// client (FailoverOptions.clientOptions), which its dialer ignores
// (TestContractFailoverClientAddr).
const failoverAddr = "FailoverClient"

// failoverTarget is the key of a failover Maint's one target: a host name
// with a port, so that the handoff takes addresses to identify nodes (the
// sentinels name the master by its address) and waits for another one.
const failoverTarget = "sentinel-master:0"

// failoverMaint returns a Maint set up for a failover client's data nodes.
func (g *Group) failoverMaint() *Maint {
	m := g.newMaint()
	setFailover(m)
	return m
}

func setFailover(m *Maint) {
	if m.s.endpoint == "" {
		m.s.endpoint = "none"
	}
	m.s.allow = func(string) bool { return false } // the dialer asks the sentinels, not the successor
	m.s.failedOver = failedOverSwitch()
	if m.s.handshake == HandshakeRequired {
		m.s.handshake = HandshakeAuto
	}
}

// failoverHook is the Maint of a failover client as a hook: its DialHook
// opts the data nodes' connections in on the wire.
type failoverHook struct {
	*Maint
	o  dialOpts
	fs *sentinelSet // nil when FailoverOptions.Dialer is not maint's (Instrument)
}

// sentinelSet tells the dials outside the failover hook apart: sentinels'
// or data nodes' dialled before the hook was in.
//
// Under the hook, FailoverOptions.Dialer is asked for sentinels first (the
// lookups nested in masterReplicaDialer, each complete before the next) and
// for the master last: an address is a sentinel's once the same data-node
// dial asks for another after it. Outside the hook, an address is a
// sentinel's if it is configured or learned so; a dial to an address a dial
// under the hook has just asked for waits for the verdict. Any other
// address is a data node's before the hook is in, and for a grace after it
// (DialTimeout + ReadTimeout: data-node dials started before AddHook reach
// the Dialer after their sentinel lookups); past the grace, every dial
// outside the hook is a sentinel's (a discovered sentinel's client: go-redis
// dials data nodes only through the hook, now).
type sentinelSet struct {
	mu      sync.Mutex
	known   map[string]bool
	pending map[string]int // addresses some dial under the hook asked for last
	changed chan struct{}  // closed and replaced at every change
	hooked  atomic.Int64   // mono: when the hook went in (0: not yet)
	grace   time.Duration
}

func newSentinelSet(opt *redis.FailoverOptions) *sentinelSet {
	s := &sentinelSet{known: make(map[string]bool), pending: make(map[string]int), changed: make(chan struct{})}
	for _, a := range opt.SentinelAddrs {
		s.known[a] = true
	}
	dial, read := opt.DialTimeout, opt.ReadTimeout
	if dial <= 0 {
		dial = 5 * time.Second
	}
	if read <= 0 {
		read = 3 * time.Second
	}
	s.grace = dial + read
	return s
}

// isSentinel reports whether addr, dialled outside the hook, is a
// sentinel's, waiting (bounded by ctx) while a dial under the hook may still
// say.
func (s *sentinelSet) isSentinel(ctx context.Context, addr string) bool {
	for {
		s.mu.Lock()
		if s.known[addr] {
			s.mu.Unlock()
			return true
		}
		if s.pending[addr] == 0 {
			s.mu.Unlock()
			h := s.hooked.Load()
			return h != 0 && time.Duration(monoNow()-h) >= s.grace
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// changedLocked wakes the dials waiting in isSentinel. s.mu is held.
func (s *sentinelSet) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// failoverDialKey marks a data-node dial under the failover hook; its value
// follows the addresses FailoverOptions.Dialer is asked for meanwhile.
type failoverDialKey struct{}

type failoverDial struct {
	s    *sentinelSet
	last string // the address asked for last: undecided
}

// begin records a data-node dial under the hook.
func (s *sentinelSet) begin() *failoverDial { return &failoverDial{s: s} }

// add records that the dial asks for addr: the one asked for before was a
// sentinel's.
func (d *failoverDial) add(addr string) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.last != "" {
		if d.last != addr {
			s.known[d.last] = true
		}
		s.unpendLocked(d.last)
	}
	d.last = addr
	s.pending[addr]++
	s.changedLocked()
}

// end records that the dial is over: the address asked for last was the
// master's.
func (d *failoverDial) end() {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.last != "" {
		s.unpendLocked(d.last)
		d.last = ""
	}
	s.changedLocked()
}

func (s *sentinelSet) unpendLocked(addr string) {
	if s.pending[addr]--; s.pending[addr] <= 0 {
		delete(s.pending, addr)
	}
}

// DialHook wraps the data nodes' dials, all under failoverTarget: go-redis
// dials them at failoverAddr, whatever the master's address is.
func (h failoverHook) DialHook(next redis.DialHook) redis.DialHook {
	if h.fs != nil {
		h.fs.hooked.CompareAndSwap(0, monoNow())
	}
	d := h.Maint.dialWith(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return next(ctx, network, failoverAddr)
	}, h.o)
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		if h.fs == nil {
			return wrapFailover(d(ctx, network, failoverTarget))
		}
		fd := h.fs.begin()
		c, err := d(context.WithValue(ctx, failoverDialKey{}, fd), network, failoverTarget)
		fd.end()
		return wrapFailover(c, err)
	}
}

// failoverDialOpts are what the failover route knows of the data nodes'
// connections.
func failoverDialOpts(m *Maint, tlsOn bool, protocol int) dialOpts {
	return dialOpts{tls: tlsOn, inject: m.s.handshake != HandshakeOff && protocol != 2}
}

// ConfigureFailover prepares FailoverOptions for a new failover client
// (redis.NewFailoverClient) with a new Maint of the group, and returns the
// hook to add to that client (rdb.AddHook(h)); or use NewFailoverClient.
// The data nodes' connections are wrapped and opted in; the sentinels'
// never are. The hook is an io.Closer (its Maint's Close): close it after
// its client, or the group keeps its Maint until the group's Close.
func (g *Group) ConfigureFailover(opt *redis.FailoverOptions) redis.Hook {
	needOptions("ConfigureFailover", opt)
	m := g.failoverMaint()
	fs := configureFailover(g, m, opt)
	g.add(m, nil, nil)
	return failoverHook{Maint: m, o: failoverDialOpts(m, opt.TLSConfig != nil, opt.Protocol), fs: fs}
}

// configureFailover wraps opt's Dialer for m, unless opt is configured
// already (then it returns nil).
func configureFailover(g *Group, m *Maint, opt *redis.FailoverOptions) *sentinelSet {
	if !claimKind(g, opt) {
		m.emit(Event{Kind: EventMisuse, Detail: "these FailoverOptions were configured for another failover client already (their Dialer is that client's Maint's): a second client built from them has two Maints on its data-node connections; build each failover client from its own FailoverOptions"})
		return nil
	}
	fs := newSentinelSet(opt)
	base := opt.Dialer
	if base == nil {
		tlsCfg, timeout := opt.TLSConfig, opt.DialTimeout
		base = redis.NewDialer(&redis.Options{TLSConfig: tlsCfg, DialTimeout: timeout})
	}
	o := failoverDialOpts(m, opt.TLSConfig != nil, opt.Protocol)
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if fd, ok := ctx.Value(failoverDialKey{}).(*failoverDial); ok {
			fd.add(addr)
		}
		if m.innerDial(ctx, o) || m.stopped.Load() || fs.isSentinel(ctx, addr) {
			return base(ctx, network, addr)
		}
		// A data node's dial outside the hook: before it was in.
		dial := func(ctx context.Context, network, _ string) (net.Conn, error) { return base(ctx, network, addr) }
		return wrapFailover(m.dialWith(dial, o)(ctx, network, failoverTarget))
	}
	return fs
}

// NewFailoverClient is ConfigureFailover, redis.NewFailoverClient and
// AddHook in one call.
func (g *Group) NewFailoverClient(opt *redis.FailoverOptions) *redis.Client {
	needOptions("NewFailoverClient", opt)
	m := g.failoverMaint()
	fs := configureFailover(g, m, opt)
	rdb := redis.NewFailoverClient(opt)
	rdb.AddHook(failoverHook{Maint: m, o: failoverDialOpts(m, opt.TLSConfig != nil, opt.Protocol), fs: fs})
	// Probes of the data nodes go through the client's own dialer, which
	// asks the sentinels (the connections dialled while the client was
	// being built left a dialer to one address there).
	if d := rdb.Options().Dialer; d != nil {
		next := dialFunc(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d(ctx, network, failoverAddr)
		})
		m.target(failoverTarget).next.Store(&next)
	}
	g.add(m, rdb, nil)
	return rdb
}
