package maint

import (
	"context"
	"net"

	"github.com/redis/go-redis/v9"
)

// The failover client (Redis Sentinel, Redis Enterprise's Discovery
// Service).
//
// go-redis builds a FailoverClient's data-node client and each sentinel
// client from the same FailoverOptions: the same Dialer, the same OnConnect
// (sentinel.go: clientOptions and sentinelOptions). maint must wrap and opt
// in the data nodes' connections only. The seam is the data-node client's
// own dial hook: its pool dials through masterReplicaDialer, which asks a
// sentinel for the master's address and then calls FailoverOptions.Dialer
// with it; the sentinel clients have hook chains of their own, which maint
// never joins. So the Maint's DialHook, on the data-node client, wraps
// exactly the data nodes' connections, and FailoverOptions.Dialer, which
// maint also wraps, steps aside for every dial under that hook (the
// sentinel dials nested in it included) and for every dial once the hook is
// in. Before it is in (MinIdleConns dials while NewFailoverClient runs),
// the Dialer wraps the dials to addresses that are not sentinels'
// (FailoverOptions.SentinelAddrs). OnConnect is never touched, so
// HandshakeRequired (which opts in through OnConnect) acts as HandshakeAuto
// here.
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
	o dialOpts
}

// DialHook wraps the data nodes' dials, all under failoverTarget: go-redis
// dials them at failoverAddr, whatever the master's address is.
func (h failoverHook) DialHook(next redis.DialHook) redis.DialHook {
	d := h.Maint.dialWith(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return next(ctx, network, failoverAddr)
	}, h.o)
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d(ctx, network, failoverTarget)
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
	configureFailover(g, m, opt)
	g.add(m, nil, nil)
	return failoverHook{Maint: m, o: failoverDialOpts(m, opt.TLSConfig != nil, opt.Protocol)}
}

// configureFailover wraps opt's Dialer for m, unless opt is configured
// already.
func configureFailover(g *Group, m *Maint, opt *redis.FailoverOptions) {
	if !claimKind(g, opt) {
		return
	}
	sentinels := make(map[string]bool, len(opt.SentinelAddrs))
	for _, a := range opt.SentinelAddrs {
		sentinels[a] = true
	}
	base := opt.Dialer
	if base == nil {
		tlsCfg, timeout := opt.TLSConfig, opt.DialTimeout
		base = redis.NewDialer(&redis.Options{TLSConfig: tlsCfg, DialTimeout: timeout})
	}
	o := failoverDialOpts(m, opt.TLSConfig != nil, opt.Protocol)
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if m.innerDial(ctx, o) || m.hooked.Load() || m.stopped.Load() || sentinels[addr] {
			return base(ctx, network, addr)
		}
		// A data node dialled before the hook is in.
		dial := func(ctx context.Context, network, _ string) (net.Conn, error) { return base(ctx, network, addr) }
		return m.dialWith(dial, o)(ctx, network, failoverTarget)
	}
}

// NewFailoverClient is ConfigureFailover, redis.NewFailoverClient and
// AddHook in one call.
func (g *Group) NewFailoverClient(opt *redis.FailoverOptions) *redis.Client {
	m := g.failoverMaint()
	configureFailover(g, m, opt)
	rdb := redis.NewFailoverClient(opt)
	rdb.AddHook(failoverHook{Maint: m, o: failoverDialOpts(m, opt.TLSConfig != nil, opt.Protocol)})
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
