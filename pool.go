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

// pin routes new connections of a target to a successor until a deadline. A
// pin belongs to the generation of the MOVING that set it: a late decision of
// an older handoff never clears a newer pin.
type pin struct {
	addr   string
	until  time.Time // the window's end plus the time the pin may outlive it
	window time.Time // the window's end
	gen    uint64
	// landed is where the last dial through the pin landed: the
	// successor's address as the client's dial path resolves it, which a
	// probe of the configured address is compared with (drive.go, settle).
	landed atomic.Pointer[string]
	// dialedAfter: a dial went through the pin after the window since the
	// last probe (drive.go, settle): only then is the pin worth probing.
	dialedAfter atomic.Bool
	// fromLocal: the node that named it is reached at a local address, so
	// a local successor is allowed (see successor.go).
	fromLocal bool
}

// route returns where a new connection for t goes now, and the pin that
// sent it there, if any.
func (t *target) route(now time.Time) (addr string, p *pin) {
	if p := t.pin.Load(); p != nil {
		if now.Before(p.until) {
			return p.addr, p
		}
		t.pin.CompareAndSwap(p, nil)
	}
	return t.addr, nil
}

// unpin drops the pin if the generation gen still owns it.
func (t *target) unpin(gen uint64) {
	if p := t.pin.Load(); p != nil && p.gen == gen {
		t.pin.CompareAndSwap(p, nil)
	}
}

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

func (m *Maint) target(addr string) *target {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.targets[addr]
	if t == nil {
		t = &target{addr: addr}
		m.targets[addr] = t
	}
	t.lastUse.Store(monoNow())
	return t
}

// register adds c to the node of its remote address, creating the node on
// first sight. Lock order: m.mu, then n.mu.
func (m *Maint) register(c *conn, key string) {
	m.mu.Lock()
	n := m.nodes[key]
	if n == nil {
		n = &node{key: key, conns: make(map[*conn]struct{})}
		m.nodes[key] = n
		m.pools.Store(key, c.t.addr)
	}
	n.mu.Lock()
	n.conns[c] = struct{}{}
	c.n = n
	c.t.conns.Add(1)
	r := n.run.Load()
	n.mu.Unlock()
	if m.registered++; m.registered%64 == 0 {
		m.sweepLocked()
	}
	m.mu.Unlock()
	if r != nil {
		r.adopt(c) // it may have been judged before the handoff began
	}
}

// unregister removes c from its node, and forgets a node left with no
// connection and nothing in progress, so that the registry does not grow
// with every address a client ever reached.
func (m *Maint) unregister(c *conn) {
	n := c.n
	c.t.conns.Add(-1)
	n.mu.Lock()
	delete(n.conns, c)
	empty := len(n.conns) == 0
	n.mu.Unlock()
	if !empty {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetIdleLocked(n)
}

// forgetIdleLocked forgets n if it has no connection, no handoff and no
// relaxation in force: the registry holds the live nodes only. m.mu is held.
func (m *Maint) forgetIdleLocked(n *node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.conns) == 0 && n.run.Load() == nil && !n.relaxing() && m.nodes[n.key] == n {
		delete(m.nodes, n.key)
	}
}

// sweepLocked forgets every idle node (a node kept while it was relaxed
// is idle once relaxation ends), and every target with no connection and
// nothing to remember that was not dialled for a while. m.mu is held.
func (m *Maint) sweepLocked() {
	m.prunePoolsLocked() // outcomes.go
	for _, n := range m.nodes {
		m.forgetIdleLocked(n)
	}
	now := monoNow()
	for k, t := range m.targets {
		if t.pin.Load() == nil && t.conns.Load() == 0 && t.spare.Load() == nil && now-t.lastUse.Load() > int64(targetIdle) {
			delete(m.targets, k)
		}
	}
}

// targetIdle is how long a target is kept after its last dial.
const targetIdle = 10 * time.Minute

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

// retire takes every connection now open to n out of circulation (refuse)
// or fences it (see the connection states). A retired subscriber is closed at
// once: it has nothing in flight, and go-redis reconnects and resubscribes it
// on the replacement. The others drain: the pool's health check refuses them,
// and commands already written finish.
func (m *Maint) retire(n *node, refuse bool) int {
	count := 0
	for _, c := range n.snapshot() {
		if m.retireConn(c, refuse) {
			count++
		}
	}
	return count
}

// retireConn retires (refuse) or fences one connection and reports whether
// its state changed. Its deadlines are floored anew (the node's epoch first,
// so that a deadline setter racing with it redoes its work), and a retired
// subscriber is closed at once.
func (m *Maint) retireConn(c *conn, refuse bool) bool {
	if !c.retire(refuse) {
		return false
	}
	c.n.epoch.Add(1)
	c.refloor()
	if refuse {
		m.c.retired.Add(1)
		if c.sub.Load() {
			c.closeWith(ErrRetired)
		}
	}
	return true
}

// refuses reports whether retiring a node now refuses its connections to the
// pool at once rather than fencing them: fencing is only for a hold, and
// only when the process hooks can hold commands before they take one.
func (m *Maint) refuses(holding bool) bool { return !holding || !m.hooked.Load() }

// closeRetired closes the draining connections still open to n that may be
// closed without cutting a command (see conn.closable): the idle ones and the
// subscribers. That is what the drain cap is for in a pool: the old node's
// idle sockets are let go before the server closes them, while a command in
// flight, blocking or not, is never cut by maint (in a multiplexer, where one
// blocked command holds everyone's work, the cap would have had to cut it; in
// a pool it holds nobody's). A connection that owes a reply is left open: its
// reply comes (the pool then refuses it) or the server closes it. It returns
// how many it closed, how many it left because a reply was owed, and how many
// of those wait on a blocking command.
func (m *Maint) closeRetired(n *node, final bool) (closed, owed, blocking int) {
	for _, c := range n.snapshot() {
		cl, o, b := c.closeIfClosable(ErrDrainCap)
		switch {
		case o:
			owed++
			if b {
				blocking++
			}
		case cl:
			closed++
		}
	}
	if final {
		return closed, owed, blocking // the connections left at the cap, idle since
	}
	m.c.closedAtCap.Add(uint64(closed))
	m.c.busyAtCap.Add(uint64(blocking))
	m.c.owedAtCap.Add(uint64(owed))
	return closed, owed, blocking
}
