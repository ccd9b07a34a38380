package maint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// Instrument installs maint on an existing go-redis client of any kind, in
// a new Group with the given options (see Group.Instrument). It returns an
// error iff the client is of a type maint does not know.
func Instrument(rdb redis.UniversalClient, opts ...Option) (*Group, error) {
	g := NewGroup(opts...)
	if err := g.Instrument(rdb); err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

// Instrument installs maint on an existing client; prefer the options
// route (NewClient, NewClusterClient, NewRing, NewFailoverClient,
// NewUniversalClient), which watches every connection from the first.
//
//   - A *redis.Client gets one Maint through AddHook; if its options were
//     configured by this group (Configure), that Maint. A failover client
//     (redis.NewFailoverClient, a *redis.Client too) is recognised by the
//     address go-redis gives it and gets a failover Maint (see
//     NewFailoverClient) whose dial hook opts its data nodes' connections
//     in; its sentinels are never touched.
//   - A *redis.ClusterClient gets one Maint per node client: the node
//     clients it has (with a slot map loaded; otherwise Instrument loads it,
//     bounded by a second), and through OnNewNode those it creates later.
//     If its options were configured by this group (ConfigureCluster),
//     Instrument only lets the node Maints reload its slot map.
//   - A *redis.Ring gets one Maint per shard client: those up now, those
//     SetAddrs adds (OnNewNode), and those down now once they are up again
//     (the group polls the Ring at its heartbeat period). The Maints of
//     shards the Ring closes are closed and forgotten.
//
// Connections dialled before Instrument are not watched until the pool
// replaces them: Instrument says so once, with their count.
func (g *Group) Instrument(rdb redis.UniversalClient) error {
	if isNil(rdb) {
		return errors.New("maint: Instrument: the client is nil")
	}
	switch c := rdb.(type) {
	case *redis.Client:
		g.instrumentClient(c)
	case *redis.ClusterClient:
		g.instrumentCluster(c)
	case *redis.Ring:
		g.instrumentRing(c)
	default:
		return fmt.Errorf("maint: %T not supported", rdb)
	}
	return nil
}

func (g *Group) instrumentClient(c *redis.Client) {
	opt := c.Options()
	if cfg := opt.MaintNotificationsConfig; cfg != nil {
		if v, ok := configured.Load(cfg); ok {
			if m := v.(*Maint); g.owns(m) {
				if !m.hooked.Load() {
					c.AddHook(m)
				}
				g.bindClient(m, c)
				g.startClosedSweeper()
				return
			}
		}
	}
	var m *Maint
	var hook redis.Hook
	if opt.Addr == failoverAddr {
		m = g.failoverMaint()
		hook = failoverHook{Maint: m, o: failoverDialOpts(m, opt.TLSConfig != nil, opt.Protocol)}
	} else {
		m = g.newMaint()
		hook = m
	}
	if !g.reserve(c) {
		_ = m.Close()
		return
	}
	n := conns(c)
	c.AddHook(hook)
	g.add(m, c, nil) // reserved: its byCli entry is filled in
	g.unwatched(m, "Instrument", n, 1)
}

func (g *Group) instrumentCluster(c *redis.ClusterClient) {
	opt := c.Options()
	cs := g.clusterOf(opt)
	if cs != nil {
		bindCluster(cs, c)
		ownNodes(cs, c, true)
		return
	}
	if madeByGroup(opt.NewClient) {
		// Options configured by a Group, returned as a copy (go-redis
		// v9.24 on: TestContractClusterNewClient): the node clients its
		// NewClient makes carry their cluster state.
		g.bindThroughNodes(c, true)
		return
	}
	cs = &clusterState{}
	bindCluster(cs, c)
	w := weak.Make(c) // the callback is kept by c itself
	c.OnNewNode(func(node *redis.Client) {
		g.installNode(node, cs, false, &cs.noOptInSaid)
		if c := w.Value(); c != nil {
			cs.own(node, c)
		}
	})
	// The node clients it has already.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var total, nodes int64
	_ = c.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		n, ok := g.installNode(node, cs, false, &cs.noOptInSaid)
		cs.own(node, c)
		if ok && n > 0 {
			g.mu.Lock()
			total += int64(n)
			nodes++
			g.mu.Unlock()
		}
		return nil
	})
	if total > 0 {
		g.unwatched(nil, "Instrument", int(total), int(nodes))
	}
	// A reload at once, through the node clients maint now watches: the
	// slot map maint keeps, so that the first SMIGRATED is served.
	c.ReloadState(context.Background())
}

// bindThroughNodes binds c to the cluster state of its node clients that
// g made (ConfigureCluster's NewClient), those it makes from now on and,
// when existing, those it has: c's options are a copy of the ones g
// configured, which no longer lead to the state.
func (g *Group) bindThroughNodes(c *redis.ClusterClient, existing bool) {
	var bound atomic.Bool
	bind := func(node *redis.Client) {
		g.mu.Lock()
		var cs *clusterState
		if mb := g.byCli[node]; mb != nil {
			cs = mb.m.s.cluster
		}
		g.mu.Unlock()
		if cs == nil {
			return
		}
		if bound.CompareAndSwap(false, true) {
			bindCluster(cs, c)
		}
		cs.own(node, c)
	}
	c.OnNewNode(bind)
	if !existing {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		bind(node)
		return nil
	})
}

func (g *Group) instrumentRing(c *redis.Ring) {
	// Ring.Options is a copy of the options given to NewRing
	// (TestContractRingShards): shard clients this group made through
	// ConfigureRing are recognised by client (reserve), not by options.
	ro := c.Options()
	said := new(sync.Once) // "no opt-in" once for the Ring, not per shard
	g.mu.Lock()
	g.watched = append(g.watched, c)
	if g.ringSaid == nil {
		g.ringSaid = make(map[*redis.Ring]*sync.Once)
	}
	g.ringSaid[c] = said
	g.mu.Unlock()
	c.OnNewNode(func(node *redis.Client) { g.installNode(node, nil, true, said) })
	g.coverRing(c, true)
	g.startSweeper(ro.HeartbeatFrequency, ro.DialTimeout, ro.ReadTimeout)
}

// coverRing installs Maints on r's shards that are up and have none, and
// says how many connections they had dialled before (in one line when
// first).
func (g *Group) coverRing(r *redis.Ring, first bool) {
	var total, shards int
	_ = r.ForEachShard(g.ctx, func(_ context.Context, node *redis.Client) error {
		n, ok := g.installNode(node, nil, true, g.ringOnce(r))
		if ok && n > 0 {
			g.mu.Lock()
			total += n
			shards++
			g.mu.Unlock()
		}
		return nil
	})
	if total > 0 {
		what := "Instrument"
		if !first {
			what = "Instrument: a Ring shard that was down"
		}
		g.unwatched(nil, what, total, shards)
	}
}

// installNode gives a node client created without the options route a
// Maint through AddHook, unless it has one; it returns the connections the
// node client had dialled already.
func (g *Group) installNode(node *redis.Client, cs *clusterState, ring bool, noOptInSaid *sync.Once) (int, bool) {
	if !g.reserve(node) {
		return 0, false
	}
	m := g.newMaint()
	m.s.cluster = cs
	m.s.noOptInSaid = noOptInSaid
	n := conns(node)
	node.AddHook(m)
	if cs != nil {
		cs.join(node, m)
	}
	var live *liveHook
	if ring || cs != nil {
		live = &liveHook{}
		node.AddHook(live)
	}
	if cs != nil {
		g.startClosedSweeper()
	}
	g.add(m, node, live) // reserved: its byCli entry is filled in
	return n, true
}

// reserve claims cli for a Maint of g: false if it has one, or g is closed.
func (g *Group) reserve(cli *redis.Client) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	if _, ok := g.byCli[cli]; ok {
		return false
	}
	g.byCli[cli] = nil
	return true
}

// owns reports whether m is one of g's Maints.
func (g *Group) owns(m *Maint) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, mb := range g.ms {
		if mb.m == m {
			return true
		}
	}
	return false
}

// bindClient records that m is c's Maint.
func (g *Group) bindClient(m *Maint, c *redis.Client) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, mb := range g.ms {
		if mb.m == m {
			mb.cli = c
			m.rel.register(c)
			g.byCli[c] = mb
		}
	}
}

// conns counts the connections a client holds (pool, pub/sub, pipeline
// pool).
func conns(c *redis.Client) int {
	st := c.PoolStats()
	n := int(st.TotalConns) + int(st.PubSubStats.Active)
	if st.PipelineStats != nil {
		n += int(st.PipelineStats.TotalConns)
	}
	return n
}

// unwatched says once per call what Instrument could not reach.
func (g *Group) unwatched(m *Maint, what string, n, clients int) {
	if n <= 0 {
		return
	}
	logf := g.logf
	if m != nil {
		logf = m.logf
	}
	logf("maint: %s: %d connections of %d client(s) were dialled before maint was installed; they are not watched until the pool replaces them (install through the options route to watch every connection)", what, n, clients)
}

// logf logs with the group's WithLogf.
func (g *Group) logf(format string, args ...any) {
	var cfg Config
	for _, o := range g.opts {
		o(&cfg)
	}
	cfg.settings().logf(format, args...)
}

// isNil reports whether rdb is nil or a nil pointer of a client kind.
func isNil(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}
