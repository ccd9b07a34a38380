package mainttest

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ClusterConfig configures an emulated OSS Cluster API (Emulator.NewCluster).
// The zero value gives three nodes splitting the 16384 slots evenly.
type ClusterConfig struct {
	// Nodes is the number of endpoints when Addrs is empty (default 3).
	// They listen on 127.0.0.2, 127.0.0.3, ... with one port shared by all
	// (any free one), as the nodes of a Redis Enterprise database do.
	Nodes int

	// Addrs, when set, lists the endpoints' loopback listen addresses
	// ("127.0.0.2:0" for any port), one node each, in order.
	Addrs []string

	// Slots, when set, gives each node's slots as a slot list ("0-5460",
	// "0-100,200"), in node order; slots no node owns are unassigned and
	// answered -CLUSTERDOWN. Empty splits the slots evenly, in node order, as
	// redis-cli --cluster create does.
	Slots []string

	// LogRedirects logs every -MOVED, -ASK, -TRYAGAIN, -CROSSSLOT and
	// -CLUSTERDOWN served as a KindRedirect event (with the connection and
	// the reply), to tell when and on which connection each happened. Off
	// by default: a reshard under load serves thousands.
	LogRedirects bool
}

// Cluster is an emulated Redis Enterprise OSS Cluster API: endpoints of one
// Emulator (so all in front of its one backend) that each own hash slots,
// answer CLUSTER SLOTS, SHARDS, NODES, INFO, MYID and KEYSLOT from the
// emulated topology and redirect key commands for slots they do not own.
// Because the data lives in the one backend, moving a slot copies nothing:
// only the ownership changes. Create it with Emulator.NewCluster; the
// Emulator's Close releases it.
type Cluster struct {
	e            *Emulator
	logRedirects bool

	mu   sync.Mutex // serialises topology changes
	topo atomic.Pointer[topology]

	shard shardPubSub // sharded pub/sub, each node's own (cluster_pubsub.go)
}

// topology is an immutable snapshot of the cluster's state; changes
// replace it whole, so routing a command takes no lock.
type topology struct {
	nodes []clusterNode // by node index; removed nodes stay, flagged
	owner [NumSlots]int16
	// mig holds the slots being migrated, nil when none.
	mig   map[int]*slotMigration
	epoch int64
}

// clusterNode is one node of a topology.
type clusterNode struct {
	ep      *Endpoint
	id      string // 40 hex characters, as Redis node ids
	removed bool
}

// slotMigration is an open migration of some slots from src to dst.
type slotMigration struct {
	src, dst int
	keyMoved func(key string) bool
}

// clusterMember ties an Endpoint to its Cluster and node index.
type clusterMember struct {
	cl  *Cluster
	ep  *Endpoint
	idx int
}

// NewCluster starts the endpoints of an emulated cluster (see ClusterConfig)
// and returns it. The endpoints are ordinary Endpoints as well: Moving,
// SetLatency, CloseAll and the others work on them as on any endpoint.
func (e *Emulator) NewCluster(cfg ClusterConfig) (*Cluster, error) {
	n := len(cfg.Addrs)
	if n == 0 {
		n = cfg.Nodes
		if n <= 0 {
			n = 3
		}
	}
	if n > 200 {
		return nil, fmt.Errorf("mainttest: cluster: %d nodes (at most 200)", n)
	}
	t := &topology{epoch: 1}
	if err := t.assign(cfg.Slots, n); err != nil {
		return nil, err
	}
	eps, err := e.clusterEndpoints(cfg.Addrs, n)
	if err != nil {
		return nil, err
	}
	cl := &Cluster{e: e, logRedirects: cfg.LogRedirects}
	for i, ep := range eps {
		t.nodes = append(t.nodes, clusterNode{ep: ep, id: nodeID(ep.addr)})
		ep.cluster.Store(&clusterMember{cl: cl, ep: ep, idx: i})
	}
	cl.topo.Store(t)
	for i, ep := range eps {
		e.event(Event{Endpoint: ep.addr, Kind: KindNodeJoin, Detail: "slots=" + FormatSlots(t.slotsOf(i))})
	}
	return cl, nil
}

// assign gives the slots to n nodes as ClusterConfig.Slots says.
func (t *topology) assign(slots []string, n int) error {
	for i := range t.owner {
		t.owner[i] = -1
	}
	if len(slots) == 0 {
		// As redis-cli --cluster create: 0-5460, 5461-10922, 10923-16383.
		per := float64(NumSlots) / float64(n)
		for i := 0; i < n; i++ {
			lo, hi := int(math.Round(float64(i)*per)), int(math.Round(float64(i+1)*per))-1
			for s := lo; s <= hi && s < NumSlots; s++ {
				t.owner[s] = int16(i)
			}
		}
		return nil
	}
	if len(slots) > n {
		return fmt.Errorf("mainttest: cluster: %d slot lists for %d nodes", len(slots), n)
	}
	for i, list := range slots {
		if list == "" {
			continue
		}
		rs, err := ParseSlots(list)
		if err != nil {
			return fmt.Errorf("mainttest: cluster node %d: %w", i, err)
		}
		for _, r := range rs {
			for s := r.Start; s <= r.End; s++ {
				if t.owner[s] >= 0 {
					return fmt.Errorf("mainttest: cluster: slot %d given to nodes %d and %d", s, t.owner[s], i)
				}
				t.owner[s] = int16(i)
			}
		}
	}
	return nil
}

// clusterEndpoints starts n endpoints on addrs, or on 127.0.0.2, 127.0.0.3,
// ... with one port when addrs is empty.
func (e *Emulator) clusterEndpoints(addrs []string, n int) ([]*Endpoint, error) {
	if len(addrs) > 0 {
		eps := make([]*Endpoint, 0, len(addrs))
		for _, a := range addrs {
			ep, err := e.AddEndpoint(a)
			if err != nil {
				for _, ep := range eps {
					ep.RefuseNew(true)
				}
				return nil, fmt.Errorf("mainttest: cluster: %w", err)
			}
			eps = append(eps, ep)
		}
		return eps, nil
	}
	var lastErr error
	for try := 0; try < 20; try++ {
		eps := make([]*Endpoint, 0, n)
		port := "0"
		for i := 0; i < n; i++ {
			ep, err := e.AddEndpoint(net.JoinHostPort("127.0.0."+strconv.Itoa(2+i), port))
			if err != nil {
				lastErr = err
				break
			}
			port = ep.port
			eps = append(eps, ep)
		}
		if len(eps) == n {
			return eps, nil
		}
		if errors.Is(lastErr, ErrClosed) {
			return nil, lastErr
		}
		for _, ep := range eps { // the port is taken on one IP: try another
			ep.RefuseNew(true)
		}
	}
	return nil, fmt.Errorf("mainttest: cluster: no port free on 127.0.0.2..%d: %w", 1+n, lastErr)
}

// nodeID derives a stable 40-hex-character node id from an address.
func nodeID(addr string) string {
	sum := sha1.Sum([]byte("mainttest node " + addr))
	return hex.EncodeToString(sum[:])
}

// Emulator returns the Emulator the cluster's endpoints belong to.
func (cl *Cluster) Emulator() *Emulator { return cl.e }

// Nodes returns the endpoints in the topology now (removed ones left out),
// in node order.
func (cl *Cluster) Nodes() []*Endpoint {
	t := cl.topo.Load()
	out := make([]*Endpoint, 0, len(t.nodes))
	for _, n := range t.nodes {
		if !n.removed {
			out = append(out, n.ep)
		}
	}
	return out
}

// Addrs returns the addresses of Nodes, as a ClusterClient's Addrs.
func (cl *Cluster) Addrs() []string {
	nodes := cl.Nodes()
	out := make([]string, len(nodes))
	for i, ep := range nodes {
		out[i] = ep.addr
	}
	return out
}

// NodeID returns ep's node id (40 hex characters, as CLUSTER MYID answers),
// or "" when ep is not a node of this cluster.
func (cl *Cluster) NodeID(ep *Endpoint) string {
	t := cl.topo.Load()
	if i := cl.indexOf(t, ep); i >= 0 {
		return t.nodes[i].id
	}
	return ""
}

// Owner returns the endpoint owning slot now, or nil when the slot is
// unassigned or out of range.
func (cl *Cluster) Owner(slot int) *Endpoint {
	if slot < 0 || slot >= NumSlots {
		return nil
	}
	t := cl.topo.Load()
	if o := t.owner[slot]; o >= 0 {
		return t.nodes[o].ep
	}
	return nil
}

// OwnerOf returns the endpoint owning key's slot now (see KeySlot).
func (cl *Cluster) OwnerOf(key string) *Endpoint { return cl.Owner(KeySlot(key)) }

// Slots returns the slots ep owns now, sorted and merged.
func (cl *Cluster) Slots(ep *Endpoint) []SlotRange {
	t := cl.topo.Load()
	return t.slotsOf(cl.indexOf(t, ep))
}

// indexOf returns ep's node index in t, or -1.
func (cl *Cluster) indexOf(t *topology, ep *Endpoint) int {
	if ep == nil {
		return -1
	}
	m := ep.cluster.Load()
	if m == nil || m.cl != cl || m.idx >= len(t.nodes) {
		return -1
	}
	return m.idx
}

// slotsOf returns the ranges node idx owns.
func (t *topology) slotsOf(idx int) []SlotRange {
	if idx < 0 {
		return nil
	}
	var out []SlotRange
	for s := 0; s < NumSlots; s++ {
		if int(t.owner[s]) != idx {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End == s-1 {
			out[n-1].End = s
		} else {
			out = append(out, SlotRange{s, s})
		}
	}
	return out
}

// clone returns a copy of t to modify, with the next epoch.
func (t *topology) clone() *topology {
	n := *t
	n.nodes = append([]clusterNode(nil), t.nodes...)
	if t.mig != nil {
		n.mig = make(map[int]*slotMigration, len(t.mig))
		for s, m := range t.mig {
			n.mig[s] = m
		}
	}
	n.epoch++
	return &n
}

// member checks that ep is a node of cl still in the topology and returns
// its index. The caller holds cl.mu.
func (cl *Cluster) member(t *topology, ep *Endpoint, what string) (int, error) {
	i := cl.indexOf(t, ep)
	if i < 0 {
		return -1, fmt.Errorf("mainttest: cluster: %s is not a node of this cluster", what)
	}
	if t.nodes[i].removed {
		return -1, fmt.Errorf("mainttest: cluster: %s %s was removed", what, ep.addr)
	}
	return i, nil
}

// AddNode starts an endpoint on addr (a loopback "ip:port", as for
// AddEndpoint) and adds it to the topology owning no slots: it appears in
// CLUSTER SHARDS and NODES at once, and in CLUSTER SLOTS once it owns a
// slot (SetOwner, MigrateSlots).
func (cl *Cluster) AddNode(addr string) (*Endpoint, error) {
	ep, err := cl.e.AddEndpoint(addr)
	if err != nil {
		return nil, fmt.Errorf("mainttest: cluster: %w", err)
	}
	cl.mu.Lock()
	t := cl.topo.Load().clone()
	t.nodes = append(t.nodes, clusterNode{ep: ep, id: nodeID(ep.addr)})
	ep.cluster.Store(&clusterMember{cl: cl, ep: ep, idx: len(t.nodes) - 1})
	cl.topo.Store(t)
	cl.mu.Unlock()
	cl.e.event(Event{Endpoint: ep.addr, Kind: KindNodeJoin, Detail: "slots="})
	return ep, nil
}

// SetOwner gives slots (a slot list such as "0-100,200") to ep at once,
// with no notification: clients learn it from the next MOVED. Migrations
// open on those slots end without their SMIGRATED.
func (cl *Cluster) SetOwner(slots string, ep *Endpoint) error {
	rs, err := ParseSlots(slots)
	if err != nil {
		return err
	}
	cl.mu.Lock()
	old := cl.topo.Load()
	idx, err := cl.member(old, ep, "owner")
	if err != nil {
		cl.mu.Unlock()
		return err
	}
	t := old.clone()
	for _, r := range rs {
		for s := r.Start; s <= r.End; s++ {
			t.owner[s] = int16(idx)
			delete(t.mig, s)
		}
	}
	cl.setTopo(t) // sharded subscribers of moved slots are dropped
	cl.mu.Unlock()
	cl.e.event(Event{Endpoint: ep.addr, Kind: KindSlotOwner, Detail: "slots=" + FormatSlots(rs) + " notified=false"})
	return nil
}

// RemoveNode takes ep, which must own no slot, out of the topology: it
// leaves CLUSTER SLOTS, SHARDS and NODES, stops accepting connections at
// once and closes the connections it still has after closeAfter (counted in
// ClusterStats.ClosedAtRemoval; replies still owed in Stats.OwedAtClose).
// Until then it answers its connections' key commands with -MOVED.
func (cl *Cluster) RemoveNode(ep *Endpoint, closeAfter time.Duration) error {
	cl.mu.Lock()
	err := cl.removeLocked(ep, closeAfter)
	cl.mu.Unlock()
	if err != nil {
		return err
	}
	cl.retire(ep, closeAfter)
	return nil
}

// removeLocked is RemoveNode with cl.mu held.
func (cl *Cluster) removeLocked(ep *Endpoint, closeAfter time.Duration) error {
	old := cl.topo.Load()
	idx, err := cl.member(old, ep, "node")
	if err != nil {
		return err
	}
	if rs := old.slotsOf(idx); len(rs) > 0 {
		return fmt.Errorf("mainttest: cluster: node %s still owns slots %s", ep.addr, FormatSlots(rs))
	}
	for _, m := range old.mig {
		if m.dst == idx {
			return fmt.Errorf("mainttest: cluster: node %s is importing slots", ep.addr)
		}
	}
	t := old.clone()
	t.nodes[idx].removed = true
	cl.topo.Store(t)
	cl.e.event(Event{Endpoint: ep.addr, Kind: KindNodeRemove, Detail: "close_after=" + closeAfter.String()})
	return nil
}

// retire stops a removed node accepting and closes its connections after
// closeAfter.
func (cl *Cluster) retire(ep *Endpoint, closeAfter time.Duration) {
	ep.setRefusing(true, "removed")
	cl.e.schedule(closeAfter, func() {
		at := time.Now()
		n, owed := ep.closeConns("removed")
		ep.mu.Lock()
		ep.stats.Cluster.ClosedAtRemoval += n
		ep.mu.Unlock()
		cl.e.event(Event{At: at, Endpoint: ep.addr, Kind: KindRemovedClose, Detail: fmt.Sprintf("closed=%d owed=%d", n, owed)})
	})
}

// ReplaceNode hands every slot of old to nw, a node of the cluster (see
// AddNode), and takes old out of the topology at once, without a
// notification and without touching old's listener or connections: the
// server side of a MOVING of a cluster endpoint, whose window end (or
// RefuseNew, CloseAll) deals with those. Slots migrating from or to old
// are an error.
func (cl *Cluster) ReplaceNode(old, nw *Endpoint) error {
	cl.mu.Lock()
	t0 := cl.topo.Load()
	oi, err := cl.member(t0, old, "old")
	if err != nil {
		cl.mu.Unlock()
		return err
	}
	ni, err := cl.member(t0, nw, "new")
	if err != nil {
		cl.mu.Unlock()
		return err
	}
	if oi == ni {
		cl.mu.Unlock()
		return fmt.Errorf("mainttest: cluster: node %s replaced by itself", old.addr)
	}
	for s, m := range t0.mig {
		if m.src == oi || m.dst == oi {
			cl.mu.Unlock()
			return fmt.Errorf("mainttest: cluster: slot %d of %s is migrating", s, old.addr)
		}
	}
	rs := t0.slotsOf(oi)
	t := t0.clone()
	for _, r := range rs {
		for s := r.Start; s <= r.End; s++ {
			t.owner[s] = int16(ni)
		}
	}
	t.nodes[oi].removed = true
	cl.setTopo(t) // sharded subscribers of moved slots are dropped
	cl.mu.Unlock()
	if len(rs) > 0 {
		cl.e.event(Event{Endpoint: nw.addr, Kind: KindSlotOwner, Detail: "slots=" + FormatSlots(rs) + " from=" + old.addr + " notified=false"})
	}
	cl.e.event(Event{Endpoint: old.addr, Kind: KindNodeRemove, Detail: "replaced_by=" + nw.addr})
	return nil
}
