package maint

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
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
	// shards are, for a map read from CLUSTER SHARDS (go-redis v9.24 on),
	// each group's nodes as the reply gave them (health, role, host name,
	// ports), so that a map served in that form parses in go-redis exactly
	// as the cluster's would; nil for a map read from CLUSTER SLOTS, and
	// nil for a group no shard gave (a destination named by an SMIGRATED
	// only). A shard with no slot is a group too: a node that owns no slot
	// yet is still known (scale-out).
	shards [][]redis.Node
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
	if sm.shards != nil {
		sm.shards = append(sm.shards, nil)
	}
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
	if sm.shards != nil {
		out.shards = sm.shards[:len(sm.shards):len(sm.shards)]
	}
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

// errShards is wrapped by newShardsMap's errors: a CLUSTER SHARDS reply
// go-redis would not take either (it then falls back to CLUSTER SLOTS).
var errShards = errors.New("maint: CLUSTER SHARDS reply go-redis does not take")

// newShardsMap reads a CLUSTER SHARDS reply as go-redis v9.24 reads it
// (newClusterStateFromShards, TestContractClusterShardsParse): per shard
// the one online master (a sole master whatever its health), its replicas
// sorted by address then id, each node at its endpoint (origin's host when
// empty) and its port (the TLS port when the client uses TLS and the node
// has one; origin's port when none). Every shard is a group, one with no
// slot included. tls says whether the ClusterClient uses TLS.
func newShardsMap(shards []redis.ClusterShard, origin string, tls bool) (*slotMap, error) {
	sm := &slotMap{origin: origin, shards: make([][]redis.Node, 0, len(shards))}
	ranges := 0
	for i, sh := range shards {
		mi, err := shardMaster(sh)
		if err != nil {
			return nil, fmt.Errorf("%w: shard %d: %v", errShards, i, err)
		}
		var master redis.ClusterNode
		var replicas []redis.ClusterNode
		raw := make([]redis.Node, len(sh.Nodes))
		for j, n := range sh.Nodes {
			addr, norm, err := shardNodeAddr(n, origin, tls)
			if err != nil {
				return nil, fmt.Errorf("%w: shard %d: %v", errShards, i, err)
			}
			raw[j] = norm
			cn := redis.ClusterNode{ID: n.ID, Addr: addr}
			switch strings.ToLower(n.Role) {
			case "master":
				if j == mi {
					master = cn
				}
			case "replica", "slave":
				replicas = append(replicas, cn)
			default:
				return nil, fmt.Errorf("%w: shard %d: node role %q", errShards, i, clip(n.Role))
			}
		}
		slices.SortFunc(replicas, func(a, b redis.ClusterNode) int {
			if c := cmp.Compare(a.Addr, b.Addr); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
		for _, r := range sh.Slots {
			if r.Start < 0 || r.End < r.Start || r.End >= numSlots {
				return nil, fmt.Errorf("%w: shard %d: slot range %d-%d", errShards, i, r.Start, r.End)
			}
		}
		sm.groups = append(sm.groups, append([]redis.ClusterNode{master}, replicas...))
		sm.shards = append(sm.shards, raw)
		g := uint16(len(sm.groups))
		for _, r := range sh.Slots {
			ranges++
			for s := r.Start; s <= r.End; s++ {
				sm.owner[s] = g
			}
		}
	}
	if ranges == 0 {
		return nil, fmt.Errorf("%w: no slot range", errShards)
	}
	return sm, nil
}

// shardHealth is a node's health as go-redis reads it ("failed" is
// "fail").
func shardHealth(h string) string {
	h = strings.ToLower(h)
	if h == "failed" {
		return "fail"
	}
	return h
}

// shardMaster returns the index of the shard's owner: its one online
// master, else its sole master; an unknown health or role count is an
// error, as in go-redis.
func shardMaster(sh redis.ClusterShard) (int, error) {
	master, online, masters := -1, -1, 0
	for i, n := range sh.Nodes {
		h := shardHealth(n.Health)
		switch h {
		case "online", "fail", "loading":
		default:
			return -1, fmt.Errorf("node %q has unknown health %q", clip(n.ID), clip(n.Health))
		}
		if !strings.EqualFold(n.Role, "master") {
			continue
		}
		master = i
		masters++
		if h == "online" {
			if online >= 0 {
				return -1, errors.New("several online masters")
			}
			online = i
		}
	}
	if online >= 0 {
		return online, nil
	}
	if masters != 1 {
		return -1, fmt.Errorf("%d masters and no online one", masters)
	}
	return master, nil
}

// shardNodeAddr returns the address go-redis gives a CLUSTER SHARDS node
// read from origin (before its loopback and zero-port rewrites, which
// goRedisAddr makes), and the node with what it took from origin written
// in: the map may be served to a node client asked at another address.
func shardNodeAddr(n redis.Node, origin string, tls bool) (string, redis.Node, error) {
	oHost, oPort, oErr := net.SplitHostPort(origin)
	if n.Endpoint == "?" {
		return "", n, errors.New("unknown endpoint")
	}
	if n.Endpoint == "" {
		if oErr != nil || oHost == "" {
			return "", n, errors.New("null endpoint without a usable origin")
		}
		n.Endpoint = oHost
	}
	port := n.Port
	if tls && n.TLSPort > 0 {
		port = n.TLSPort
	}
	if port == 0 {
		p, err := strconv.ParseInt(oPort, 10, 64)
		if oErr != nil || err != nil {
			return "", n, errors.New("zero port without a usable origin")
		}
		port = p
		if tls {
			n.TLSPort = p
		} else {
			n.Port = p
		}
	}
	if port <= 0 || port > 65535 {
		return "", n, fmt.Errorf("invalid port %d", port)
	}
	return net.JoinHostPort(n.Endpoint, strconv.FormatInt(port, 10)), n, nil
}

// shardsReply returns the map as a CLUSTER SHARDS reply: one shard per
// group, its slots in slot order; a group read from CLUSTER SHARDS with the
// nodes as read (and listed with no slot, as the cluster lists a shard that
// owns none), any other with its nodes made from their addresses, online,
// master first. It is new each time.
func (sm *slotMap) shardsReply() []redis.ClusterShard {
	ranges := make([][]redis.SlotRange, len(sm.groups))
	for s := 0; s < numSlots; {
		g := sm.owner[s]
		e := s
		for e+1 < numSlots && sm.owner[e+1] == g {
			e++
		}
		if g != 0 {
			ranges[g-1] = append(ranges[g-1], redis.SlotRange{Start: int64(s), End: int64(e)})
		}
		s = e + 1
	}
	out := make([]redis.ClusterShard, 0, len(sm.groups))
	for i, g := range sm.groups {
		var nodes []redis.Node
		switch {
		case i < len(sm.shards) && sm.shards[i] != nil:
			nodes = append([]redis.Node(nil), sm.shards[i]...)
		case len(ranges[i]) == 0:
			continue
		default:
			nodes = make([]redis.Node, 0, len(g))
			for j, n := range g {
				host, port, _ := net.SplitHostPort(n.Addr)
				p, _ := strconv.ParseInt(port, 10, 64)
				role := "replica"
				if j == 0 {
					role = "master"
				}
				nodes = append(nodes, redis.Node{ID: n.ID, Endpoint: host, IP: host, Port: p, Role: role, Health: "online"})
			}
		}
		out = append(out, redis.ClusterShard{Slots: ranges[i], Nodes: nodes})
	}
	return out
}
