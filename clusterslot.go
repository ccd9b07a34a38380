package maint

import (
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint/internal/slot"
)

// numSlots is the number of hash slots of a Redis cluster.
const numSlots = slot.N

// slotRange is an inclusive range of slots.
type slotRange struct{ lo, hi int }

// errSlots is wrapped by parseSlots' errors.
var errSlots = errors.New("maint: malformed slot list")

// parseSlots reads a slot list as SMIGRATING and SMIGRATED carry it:
// "123,456-789", spaces allowed around the items.
func parseSlots(s string) ([]slotRange, error) {
	var out []slotRange
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil {
			return nil, errSlots
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
				return nil, errSlots
			}
		}
		if a < 0 || b >= numSlots || a > b {
			return nil, errSlots
		}
		out = append(out, slotRange{a, b})
	}
	return out, nil
}

// slotMap is a cluster's slot map as CLUSTER SLOTS gives it: for each slot,
// its node group (master first, then replicas), addresses as the cluster
// names them. A slotMap is never changed once built: moves make a new one.
// Its size is bounded by the map it was read from (at most one group per
// range), whatever the addresses an SMIGRATED names.
type slotMap struct {
	owner  [numSlots]uint16 // 1 + an index in groups; 0: unassigned
	groups [][]redis.ClusterNode
	// origin is the address (as go-redis names it) of the node the map was
	// read from: go-redis rewrites the map's loopback addresses relative to
	// it (goRedisAddr).
	origin string
}

// newSlotMap reads a CLUSTER SLOTS reply; nil when it assigns no slot.
func newSlotMap(slots []redis.ClusterSlot, origin string) *slotMap {
	sm := &slotMap{origin: origin}
	for _, s := range slots {
		if len(s.Nodes) == 0 || s.Start < 0 || s.End >= numSlots || s.Start > s.End {
			continue
		}
		g := sm.groupOf(s.Nodes)
		for i := s.Start; i <= s.End; i++ {
			sm.owner[i] = g
		}
	}
	if len(sm.groups) == 0 {
		return nil
	}
	return sm
}

// groupOf returns the index (plus one) of the group nodes, added if new.
func (sm *slotMap) groupOf(nodes []redis.ClusterNode) uint16 {
	for i, g := range sm.groups {
		if sameNodes(g, nodes) {
			return uint16(i + 1)
		}
	}
	sm.groups = append(sm.groups, append([]redis.ClusterNode(nil), nodes...))
	return uint16(len(sm.groups))
}

func sameNodes(a, b []redis.ClusterNode) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Addr != b[i].Addr {
			return false
		}
	}
	return true
}

// master returns the address of slot's master, "" when unassigned.
func (sm *slotMap) master(slot int) string {
	if g := sm.owner[slot]; g != 0 {
		return sm.groups[g-1][0].Addr
	}
	return ""
}

// node returns the node the map knows by addr (master or replica), as the
// cluster names it: addr itself, or the address go-redis names it by.
func (sm *slotMap) node(addr string) (redis.ClusterNode, bool) {
	for _, g := range sm.groups {
		for _, n := range g {
			if n.Addr == addr || goRedisAddr(n.Addr, sm.origin) == addr {
				return n, true
			}
		}
	}
	return redis.ClusterNode{}, false
}

// masterGroup returns the group whose master is addr (with its replicas),
// or the node alone when it masters no slot.
func (sm *slotMap) masterGroup(n redis.ClusterNode) []redis.ClusterNode {
	for _, g := range sm.groups {
		if g[0].Addr == n.Addr {
			return g
		}
	}
	return []redis.ClusterNode{n}
}

// replicas returns the replicas of the master at addr (as the cluster
// names it).
func (sm *slotMap) replicas(addr string) []redis.ClusterNode {
	var out []redis.ClusterNode
	for _, g := range sm.groups {
		if g[0].Addr == addr {
			for _, r := range g[1:] {
				if !hasNode(out, r.Addr) {
					out = append(out, r)
				}
			}
		}
	}
	return out
}

func hasNode(ns []redis.ClusterNode, addr string) bool {
	for _, n := range ns {
		if n.Addr == addr {
			return true
		}
	}
	return false
}

// masters returns the addresses that master at least one slot.
func (sm *slotMap) masters() map[string]bool {
	used := make([]bool, len(sm.groups)+1)
	for _, g := range sm.owner {
		used[g] = true
	}
	out := make(map[string]bool, len(sm.groups))
	for i, g := range sm.groups {
		if used[i+1] {
			out[g[0].Addr] = true
		}
	}
	return out
}

// named reports whether the map names addr (as go-redis names nodes) as a
// master or a replica.
func (sm *slotMap) named(addr string) bool {
	_, ok := sm.node(addr)
	return ok
}

// moved returns a copy of sm with the moves done: each moved slot gets its
// destination's group (the destination's replicas with it). The moves'
// addresses are the cluster's names (see clusterState.resolveLocked).
func (sm *slotMap) moved(moves []slotMove) *slotMap {
	out := &slotMap{owner: sm.owner, groups: sm.groups[:len(sm.groups):len(sm.groups)], origin: sm.origin}
	for _, mv := range moves {
		n, _ := sm.node(mv.dst)
		if n.Addr == "" {
			n = redis.ClusterNode{Addr: mv.dst}
		}
		g := out.groupOf(sm.masterGroup(n))
		for _, r := range mv.r {
			for s := r.lo; s <= r.hi; s++ {
				out.owner[s] = g
			}
		}
	}
	return out
}

// shows reports whether every slot of moves has its destination as master.
func (sm *slotMap) shows(moves []slotMove) bool {
	for _, mv := range moves {
		for _, r := range mv.r {
			for s := r.lo; s <= r.hi; s++ {
				if sm.master(s) != mv.dst {
					return false
				}
			}
		}
	}
	return true
}

// slots returns the map as a CLUSTER SLOTS reply: one entry per run of
// slots with the same group, in slot order. It is a new slice each time.
func (sm *slotMap) slots() []redis.ClusterSlot {
	var out []redis.ClusterSlot
	for s := 0; s < numSlots; {
		g := sm.owner[s]
		e := s
		for e+1 < numSlots && sm.owner[e+1] == g {
			e++
		}
		if g != 0 {
			out = append(out, redis.ClusterSlot{Start: s, End: e, Nodes: append([]redis.ClusterNode(nil), sm.groups[g-1]...)})
		}
		s = e + 1
	}
	return out
}

// goRedisAddr is the address go-redis's ClusterClient names a node by when
// a slot map read from origin gives it as addr: a loopback address is
// rewritten to origin's host unless origin is loopback itself, and port 0
// (TLS-only clusters) to origin's port (TestContractClusterAddressRewrite).
func goRedisAddr(addr, origin string) string {
	oHost, oPort, err := net.SplitHostPort(origin)
	if err != nil {
		return addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() && !isLoopbackHost(oHost) {
		host = oHost
	}
	if port == "0" && oPort != "" && oPort != "0" {
		port = oPort
	}
	return net.JoinHostPort(host, port)
}

// isLoopbackHost is go-redis's test of a loopback origin: a loopback IP,
// "localhost", or a *.docker.internal name.
func isLoopbackHost(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	h := strings.ToLower(host)
	return h == "localhost" || strings.HasSuffix(h, ".docker.internal")
}

// validAddr reports whether addr is host:port with a host and a port in
// 1..65535: what an SMIGRATED's source and destination must be.
func validAddr(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p > 0 && p <= 65535
}
