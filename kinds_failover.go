package maint

import (
	"context"
	"net"
	"sync"

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

// sentinelSet is the sentinel addresses a failover route knows: the
// configured ones and the ones learned under the hook. Under the hook,
// FailoverOptions.Dialer is asked for sentinels first (the lookups nested in
// masterReplicaDialer, each complete before the next) and for the master
// last: an address is a sentinel's once the same data-node dial asks for
// another after it, and the master's when the dial ends with it. While an
// address is undecided, a dial to it outside the hook (a sentinel client's
// MinIdleConns dial, started as its lookup begins) waits for the verdict.
type sentinelSet struct {
	mu      sync.Mutex
	known   map[string]bool
	pending map[string]*pendingAddr
}

type pendingAddr struct {
	n    int
	done chan struct{}
}

func newSentinelSet(addrs []string) *sentinelSet {
	s := &sentinelSet{known: make(map[string]bool), pending: make(map[string]*pendingAddr)}
	for _, a := range addrs {
		s.known[a] = true
	}
	return s
}

// isSentinel reports whether addr is a sentinel's, waiting (bounded by ctx)
// while a data-node dial under the hook has yet to say.
func (s *sentinelSet) isSentinel(ctx context.Context, addr string) bool {
	for {
		s.mu.Lock()
		if s.known[addr] {
			s.mu.Unlock()
			return true
		}
		p := s.pending[addr]
		s.mu.Unlock()
		if p == nil {
			return false
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return false
		}
	}
}

// resolveLocked ends one undecided use of addr. s.mu is held.
func (s *sentinelSet) resolveLocked(addr string) {
	if p := s.pending[addr]; p != nil {
		if p.n--; p.n == 0 {
			close(p.done)
			delete(s.pending, addr)
		}
	}
}

// failoverDialKey marks a data-node dial under the failover hook; its value
// follows the addresses FailoverOptions.Dialer is asked for meanwhile.
type failoverDialKey struct{}

type failoverDial struct {
	s    *sentinelSet
	last string // the address asked for last: undecided
}

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
		s.resolveLocked(d.last)
	}
	d.last = addr
	p := s.pending[addr]
	if p == nil {
		p = &pendingAddr{done: make(chan struct{})}
		s.pending[addr] = p
	}
	p.n++
}

// end records that the dial is over: the address asked for last was the
// master's.
func (d *failoverDial) end() {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.last != "" {
		s.resolveLocked(d.last)
		d.last = ""
	}
}

// DialHook wraps the data nodes' dials, all under failoverTarget: go-redis
// dials them at failoverAddr, whatever the master's address is.
func (h failoverHook) DialHook(next redis.DialHook) redis.DialHook {
	d := h.Maint.dialWith(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return next(ctx, network, failoverAddr)
	}, h.o)
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		if h.fs == nil {
			return wrapFailover(d(ctx, network, failoverTarget))
		}
		fd := &failoverDial{s: h.fs}
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
// never are.
func (g *Group) ConfigureFailover(opt *redis.FailoverOptions) redis.Hook {
	m := g.failoverMaint()
	fs := configureFailover(g, m, opt)
	g.add(m, nil, nil)
	return failoverHook{Maint: m, o: failoverDialOpts(m, opt.TLSConfig != nil, opt.Protocol), fs: fs}
}

// configureFailover wraps opt's Dialer for m, unless opt is configured
// already (then it returns nil).
func configureFailover(g *Group, m *Maint, opt *redis.FailoverOptions) *sentinelSet {
	if !claimKind(g, opt) {
		return nil
	}
	fs := newSentinelSet(opt.SentinelAddrs)
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
