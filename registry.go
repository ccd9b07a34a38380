package maint

import (
	"sync"
	"sync/atomic"
	"time"
)

// target is what go-redis dials: the configured address of the client.
type target struct {
	addr string

	pin        atomic.Pointer[pin] // successor to dial instead, during a window
	lastRemote atomic.Pointer[string]
	next       atomic.Pointer[dialFunc] // the dial path below the Maint, for DNS probes
	// tlsOn is set by Configure when the client uses TLS; opaque when a
	// connection of the target hid its TLS state (a Dialer returning a
	// wrapped *tls.Conn), so that a successor could not be verified.
	tlsOn, opaque, warnedOpaque atomic.Bool
	// learnedName is the TLS server name the target's connections sent
	// (see tlsName).
	learnedName atomic.Pointer[string]
	lastUse     atomic.Int64 // mono: the last dial
	// conns counts the target's open connections: a target is never
	// forgotten under them (a MOVING they read pins its successor here).
	conns atomic.Int64
	// spare is a probe's connection that landed on a replacement, waiting
	// for the next dial (spare.go).
	spare atomic.Pointer[spare]
	// relaxUntil (mono, 0 for none) relaxes every connection of the target,
	// to the retiring node and to its successor alike, from a MOVING until
	// its handoff ends (relax.go: relaxMoving).
	relaxUntil atomic.Int64
}

// tlsOpaque reports whether the target uses TLS through connections whose
// TLS state cannot be inspected.
func (t *target) tlsOpaque() bool { return t.tlsOn.Load() && t.opaque.Load() }

// node is a server endpoint, identified by the remote address its
// connections reached. It is the scope of a MOVING: every connection the
// client holds to the node is concerned, whichever connection read it.
type node struct {
	key string
	// failedOverSeq is 1 + the seq of the last FAILED_OVER probed for the
	// node (failover_switch.go); 0: none.
	failedOverSeq atomic.Int64

	mu    sync.Mutex // guards the following
	conns map[*conn]struct{}
	// lastMoving is the sequence id of the latest MOVING acted on, so that the
	// copies every connection receives start one handoff, not one each.
	lastMoving int64

	run atomic.Pointer[run] // the handoff retiring this node, if any

	// Relaxation (relax.go): in force while now < relaxUntil (mono; 0 means
	// none), read on every deadline set. ops, ended and tailUntil are
	// guarded by mu.
	relaxUntil atomic.Int64
	// epoch changes whenever deadlines must be floored anew (relaxation
	// starts, connections are retired); see conn.refloor. Read with
	// relaxUntil on every deadline set: kept beside it.
	epoch     atomic.Uint64
	ops       []op
	ended     []int64
	tailUntil mono

	rw          relaxWatch   // relaxation reported (relaxwatch.go), guarded by mu
	lastDrained atomic.Int64 // unix ns: a retired or fenced connection last closed
}

// registry is what a Maint knows of where its clients' connections go: the
// targets (the addresses go-redis dials) and the nodes (the endpoints the
// connections reached), with each node's connections. It holds the live
// ones only: a node with no connection and nothing in progress, and a
// target idle for targetIdle, are forgotten.
type registry struct {
	mu         sync.Mutex // guards the maps and registered; lock order: registry.mu, then node.mu
	targets    map[string]*target
	nodes      map[string]*node
	registered uint64 // registrations, to sweep idle nodes now and then
	// pools maps a node's key to its pool's name, for events (poolOf).
	pools sync.Map
}

// target returns the target of addr, made on first sight.
func (g *registry) target(addr string) *target {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.targets[addr]
	if t == nil {
		t = &target{addr: addr}
		if g.targets == nil {
			g.targets = make(map[string]*target)
		}
		g.targets[addr] = t
	}
	t.lastUse.Store(monoNow())
	return t
}

// add puts c in the node of its remote address key, creating the node on
// first sight, and returns the handoff retiring that node, if any.
func (g *registry) add(c *conn, key string) *run {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nodes[key]
	if n == nil {
		n = &node{key: key, conns: make(map[*conn]struct{})}
		if g.nodes == nil {
			g.nodes = make(map[string]*node)
		}
		g.nodes[key] = n
		g.pools.Store(key, c.t.addr)
	}
	n.mu.Lock()
	n.conns[c] = struct{}{}
	c.n = n
	c.t.conns.Add(1)
	r := n.run.Load()
	n.mu.Unlock()
	if g.registered++; g.registered%64 == 0 {
		g.sweepLocked()
	}
	return r
}

// remove takes c out of its node, and forgets a node left with no
// connection and nothing in progress, so that the registry does not grow
// with every address a client ever reached.
func (g *registry) remove(c *conn) {
	n := c.n
	c.t.conns.Add(-1)
	n.mu.Lock()
	delete(n.conns, c)
	empty := len(n.conns) == 0
	n.mu.Unlock()
	if empty {
		g.forgetIdle(n)
	}
}

// forgetIdle forgets n if it is idle (see forgetIdleLocked).
func (g *registry) forgetIdle(n *node) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgetIdleLocked(n)
}

// forgetIdleLocked forgets n if it has no connection, no handoff and no
// relaxation in force: the registry holds the live nodes only. g.mu is held.
func (g *registry) forgetIdleLocked(n *node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.conns) == 0 && n.run.Load() == nil && !n.relaxing() && g.nodes[n.key] == n {
		delete(g.nodes, n.key)
	}
}

// sweepLocked forgets every idle node (a node kept while it was relaxed
// is idle once relaxation ends), and every target with no connection and
// nothing to remember that was not dialled for a while. g.mu is held.
func (g *registry) sweepLocked() {
	g.prunePoolsLocked()
	for _, n := range g.nodes {
		g.forgetIdleLocked(n)
	}
	now := monoNow()
	for k, t := range g.targets {
		if t.pin.Load() == nil && t.conns.Load() == 0 && t.spare.Load() == nil && now-t.lastUse.Load() > int64(targetIdle) {
			delete(g.targets, k)
		}
	}
}

// targetIdle is how long a target is kept after its last dial.
const targetIdle = 10 * time.Minute

// prunePoolsLocked forgets the pool names of nodes forgotten before this
// sweep: a node's late events (a handoff's report) still find its pool
// until the next sweep. g.mu is held.
func (g *registry) prunePoolsLocked() {
	g.pools.Range(func(k, _ any) bool {
		if _, ok := g.nodes[k.(string)]; !ok {
			g.pools.Delete(k)
		}
		return true
	})
}

// poolOf is the name of the pool whose connections reached node: the
// configured address of the target whose connection registered it first.
func (g *registry) poolOf(node string) string {
	if v, ok := g.pools.Load(node); ok {
		return v.(string)
	}
	return ""
}

// nodeList returns the nodes known now.
func (g *registry) nodeList() []*node {
	g.mu.Lock()
	defer g.mu.Unlock()
	return valuesOf(g.nodes)
}

// targetList returns the targets known now.
func (g *registry) targetList() []*target {
	g.mu.Lock()
	defer g.mu.Unlock()
	return valuesOf(g.targets)
}

// valuesOf returns the values of a map, in no order.
func valuesOf[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// reached reports whether addr was dialled (a target) or reached (a node).
func (g *registry) reached(addr string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.targets[addr] != nil || g.nodes[addr] != nil
}

// openConns counts the connections of every target.
func (g *registry) openConns() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, t := range g.targets {
		n += t.conns.Load()
	}
	return n
}

// target returns the target of addr, made on first sight.
func (m *Maint) target(addr string) *target { return m.reg.target(addr) }

// register adds c to the node of its remote address; a handoff already
// retiring that node adopts it (its dial may have been judged before the
// handoff began).
func (m *Maint) register(c *conn, key string) {
	if r := m.reg.add(c, key); r != nil {
		r.adopt(c)
	}
}

// unregister removes c from its node.
func (m *Maint) unregister(c *conn) { m.reg.remove(c) }

// snapshot returns the node's connections.
func (n *node) snapshot() []*conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		cs = append(cs, c)
	}
	return cs
}
