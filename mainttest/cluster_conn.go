package mainttest

import (
	"strconv"
	"strings"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// Event kinds of a Cluster (see also the Kind constants in events.go).
const (
	// KindNodeJoin: an endpoint joined a Cluster's topology (NewCluster,
	// AddNode); Detail lists its slots.
	KindNodeJoin = "node_join"
	// KindSlotOwner: slots changed owner; Endpoint is the new owner, Detail
	// has the slots, the old owner and whether an SMIGRATED announced it.
	KindSlotOwner = "slot_owner"
	// KindSlotMigrationStart: a MigrateSlots began on its source (before
	// its SMIGRATING); Detail has the slots and destinations.
	KindSlotMigrationStart = "slot_migration_start"
	// KindNodeRemove: a node left the topology and stopped accepting
	// (RemoveNode, SlotMigration.RemoveSource).
	KindNodeRemove = "node_remove"
	// KindRemovedClose: a removed node closed the connections it still
	// had; Detail has "closed=N owed=M". Each connection's KindClose gives
	// the reason "removed".
	KindRemovedClose = "removed_close"
	// KindSlotMap: a node answered CLUSTER SLOTS, SHARDS or NODES (Detail
	// names which); Conn is the asking connection. Clients reload their slot
	// map with these, so a reload is observable by waiting for one.
	KindSlotMap = "slot_map"
	// KindRedirect: a node refused a key command with a redirect or a
	// cluster error (ClusterConfig.LogRedirects only); Conn is the
	// connection, Detail the reply ("MOVED 100 127.0.0.3:7000").
	KindRedirect = "redirect"
)

// ClusterStats are the counters of a Cluster node, in Stats.Cluster. Each is
// counted when the reply is queued, so a client that got one finds it here.
type ClusterStats struct {
	Moved     int64 // -MOVED redirects served
	Ask       int64 // -ASK redirects served
	TryAgain  int64 // -TRYAGAIN replies (multi-key request on a slot in migration, keys split)
	CrossSlot int64 // -CROSSSLOT replies
	Down      int64 // -CLUSTERDOWN replies (unassigned slot)
	// Asking counts the ASKING commands answered.
	Asking int64
	// SlotMaps counts the slot-map requests answered: CLUSTER SLOTS, SHARDS
	// and NODES (ClusterSlots, ClusterShards and ClusterNodes separately).
	SlotMaps                                  int64
	ClusterSlots, ClusterShards, ClusterNodes int64
	// ClosedAtRemoval counts the connections closed by the node's removal.
	ClosedAtRemoval int
}

// clusterConn is a connection's cluster state, used by its read loop only.
type clusterConn struct {
	asking bool     // ASKING was sent: the next command may use an importing slot
	multi  bool     // inside MULTI
	dirty  bool     // a queued command was refused: EXEC aborts
	keys   [][]byte // keys of the commands queued in MULTI
	buf    [][]byte // scratch for one command's keys
}

// redirect is the kind of a refused command.
type redirect uint8

const (
	served redirect = iota
	redirMoved
	redirAsk
	redirTryAgain
	redirCrossSlot
	redirDown
)

const (
	errCrossSlot = "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
	errTryAgain  = "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
	errDown      = "-CLUSTERDOWN Hash slot not served\r\n"
	errExecAbort = "-EXECABORT Transaction discarded because of previous errors.\r\n"
)

var (
	okReply    = []byte("+OK\r\n")
	discardCmd = []byte("*1\r\n$7\r\nDISCARD\r\n")
)

// command is the cluster's part of a connection's read loop, for one
// command (name upper case, frame its RESP array). It either answers the
// command itself (forward false) or says what to relay: frame, or another
// frame with its name and the reply that replaces the backend's (replace,
// when not nil).
func (m *clusterMember) command(c *conn, frame []byte, name string, args [][]byte) (fwd []byte, fwdName string, replace []byte, forward bool) {
	cc := &c.cc
	t := m.cl.topo.Load()
	asking := cc.asking
	if !cc.multi && name != "ASKING" && name != "MULTI" {
		cc.asking = false // ASKING covers one command, or a whole MULTI
	}
	switch name {
	case "CLUSTER":
		c.queueLocal(m.clusterCommand(c, t, args))
		return nil, "", nil, false
	case "ASKING":
		if len(args) != 0 {
			c.queueLocal(resp.AppendError(nil, "ERR wrong number of arguments for 'asking' command"))
			return nil, "", nil, false
		}
		cc.asking = true
		m.count(func(s *ClusterStats) { s.Asking++ })
		c.queueLocal(okReply)
		return nil, "", nil, false
	case "READONLY", "READWRITE":
		c.queueLocal(okReply)
		return nil, "", nil, false
	case "RESET":
		*cc = clusterConn{}
		return frame, name, nil, true
	case "MULTI":
		if !cc.multi {
			cc.multi, cc.dirty, cc.keys = true, false, cc.keys[:0]
		}
		return frame, name, nil, true
	case "DISCARD":
		cc.multi, cc.dirty, cc.asking, cc.keys = false, false, false, cc.keys[:0]
		return frame, name, nil, true
	case "EXEC":
		if !cc.multi {
			return frame, name, nil, true // the backend says EXEC without MULTI
		}
		dirty, keys := cc.dirty, cc.keys
		cc.multi, cc.dirty, cc.asking, cc.keys = false, false, false, cc.keys[:0]
		if dirty {
			return discardCmd, "DISCARD", []byte(errExecAbort), true
		}
		// A real cluster checks the transaction's keys together at EXEC:
		// the slot may have moved or started migrating since they were
		// queued, and queued commands may span slots.
		if reply, kind := t.route(m.idx, keys, asking); kind != served {
			m.countRedirect(c, kind, reply)
			return discardCmd, "DISCARD", reply, true
		}
		return frame, name, nil, true
	}
	if m.shardCommand(c, t, name, args) { // sharded pub/sub is the node's own (cluster_pubsub.go)
		return nil, "", nil, false
	}
	keys := keysOf(cc.buf[:0], name, args)
	cc.buf = keys[:0]
	if len(keys) == 0 {
		return frame, name, nil, true
	}
	if reply, kind := t.route(m.idx, keys, asking); kind != served {
		m.countRedirect(c, kind, reply)
		if cc.multi {
			cc.dirty = true // refused at queue time: EXEC aborts
		}
		c.queueLocal(reply)
		return nil, "", nil, false
	}
	if cc.multi {
		cc.keys = append(cc.keys, keys...) // args are this command's own copy
	}
	return frame, name, nil, true
}

// count updates the node's ClusterStats under its lock.
func (m *clusterMember) count(f func(*ClusterStats)) {
	m.ep.mu.Lock()
	f(&m.ep.stats.Cluster)
	m.ep.mu.Unlock()
}

// countRedirect counts a refused command and, with LogRedirects, logs it.
func (m *clusterMember) countRedirect(c *conn, kind redirect, reply []byte) {
	if m.cl.logRedirects {
		m.cl.e.event(Event{Endpoint: m.ep.addr, Kind: KindRedirect, Conn: c.id,
			Detail: strings.TrimSuffix(string(reply[1:]), "\r\n")})
	}
	m.count(func(s *ClusterStats) {
		switch kind {
		case redirMoved:
			s.Moved++
		case redirAsk:
			s.Ask++
		case redirTryAgain:
			s.TryAgain++
		case redirCrossSlot:
			s.CrossSlot++
		case redirDown:
			s.Down++
		}
	})
}

// route decides whether node self serves a request on keys (at least one),
// as a Redis Cluster node does: all keys in one slot (else -CROSSSLOT); the
// slot owned here (else -MOVED to its owner), unless it is migrating away
// and some keys already left (-ASK to the destination when all did,
// -TRYAGAIN when only some did); or importing here and the connection sent
// ASKING (-TRYAGAIN for a multi-key request whose keys did not all arrive).
func (t *topology) route(self int, keys [][]byte, asking bool) ([]byte, redirect) {
	if len(keys) == 0 {
		return nil, served
	}
	slot := KeySlot(keys[0])
	for _, k := range keys[1:] {
		if KeySlot(k) != slot {
			return []byte(errCrossSlot), redirCrossSlot
		}
	}
	owner := int(t.owner[slot])
	if owner < 0 {
		return []byte(errDown), redirDown
	}
	mig := t.mig[slot]
	if owner == self {
		if mig == nil || mig.src != self || mig.keyMoved == nil {
			return nil, served
		}
		moved := 0
		for _, k := range keys {
			if mig.keyMoved(string(k)) {
				moved++
			}
		}
		switch {
		case moved == 0:
			return nil, served
		case moved < len(keys):
			return []byte(errTryAgain), redirTryAgain
		}
		return redirectReply("ASK", slot, t.nodes[mig.dst].ep.addr), redirAsk
	}
	if mig != nil && mig.dst == self && asking {
		if len(keys) > 1 {
			for _, k := range keys {
				if mig.keyMoved == nil || !mig.keyMoved(string(k)) {
					return []byte(errTryAgain), redirTryAgain
				}
			}
		}
		return nil, served
	}
	return redirectReply("MOVED", slot, t.nodes[owner].ep.addr), redirMoved
}

func redirectReply(kind string, slot int, addr string) []byte {
	b := make([]byte, 0, len(kind)+len(addr)+16)
	b = append(b, '-')
	b = append(b, kind...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(slot), 10)
	b = append(b, ' ')
	b = append(b, addr...)
	return append(b, "\r\n"...)
}

// clusterCommand answers a CLUSTER subcommand from topology t.
func (m *clusterMember) clusterCommand(c *conn, t *topology, args [][]byte) []byte {
	if len(args) == 0 {
		return resp.AppendError(nil, "ERR wrong number of arguments for 'cluster' command")
	}
	c.mu.Lock()
	resp3 := c.resp3
	c.mu.Unlock()
	sub := strings.ToUpper(string(args[0]))
	switch sub {
	case "SLOTS", "SHARDS", "NODES":
		var b []byte
		m.count(func(s *ClusterStats) {
			s.SlotMaps++
			switch sub {
			case "SLOTS":
				s.ClusterSlots++
			case "SHARDS":
				s.ClusterShards++
			default:
				s.ClusterNodes++
			}
		})
		switch sub {
		case "SLOTS":
			b = t.appendSlots(nil, resp3)
		case "SHARDS":
			b = t.appendShards(nil, resp3)
		default:
			b = appendText(nil, t.nodesText(m.idx), resp3)
		}
		m.cl.e.event(Event{Endpoint: m.ep.addr, Kind: KindSlotMap, Conn: c.id, Detail: "CLUSTER " + sub})
		return b
	case "INFO":
		return appendText(nil, t.infoText(), resp3)
	case "MYID":
		return resp.AppendBulk(nil, t.nodes[m.idx].id)
	case "MYSHARDID":
		return resp.AppendBulk(nil, shardID(t.nodes[m.idx].id))
	case "KEYSLOT":
		if len(args) != 2 {
			return resp.AppendError(nil, "ERR wrong number of arguments for 'cluster|keyslot' command")
		}
		return resp.AppendInt(nil, int64(KeySlot(args[1])))
	}
	return resp.AppendError(nil, "ERR unknown subcommand '"+string(args[0])+"'. Try CLUSTER HELP.")
}

// shardID derives a shard id from a node id (one node per shard here).
func shardID(nodeID string) string {
	b := []byte(nodeID)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// appendText appends a text reply: a verbatim string in RESP3, as Redis 7
// answers CLUSTER NODES and INFO, a bulk string in RESP2.
func appendText(dst []byte, text string, resp3 bool) []byte {
	if !resp3 {
		return resp.AppendBulk(dst, text)
	}
	dst = append(dst, '=')
	dst = strconv.AppendInt(dst, int64(len(text)+4), 10)
	dst = append(dst, "\r\ntxt:"...)
	dst = append(dst, text...)
	return append(dst, "\r\n"...)
}

// runs returns the maximal runs of slots with one owner, in slot order.
func (t *topology) runs() (out []struct {
	r     SlotRange
	owner int
}) {
	for s := 0; s < NumSlots; s++ {
		o := int(t.owner[s])
		if n := len(out); n > 0 && out[n-1].owner == o && out[n-1].r.End == s-1 {
			out[n-1].r.End = s
			continue
		}
		out = append(out, struct {
			r     SlotRange
			owner int
		}{SlotRange{s, s}, o})
	}
	return out
}

// appendSlots appends the CLUSTER SLOTS reply: one entry per run of slots
// with one owner, each [start, end, [ip, port, id, {}]] as Redis 7 sends
// (no replicas).
func (t *topology) appendSlots(dst []byte, resp3 bool) []byte {
	runs := t.runs()
	n := 0
	for _, r := range runs {
		if r.owner >= 0 {
			n++
		}
	}
	dst = resp.AppendArrayHeader(dst, n)
	for _, r := range runs {
		if r.owner < 0 {
			continue
		}
		node := t.nodes[r.owner]
		dst = resp.AppendArrayHeader(dst, 3)
		dst = resp.AppendInt(dst, int64(r.r.Start))
		dst = resp.AppendInt(dst, int64(r.r.End))
		dst = resp.AppendArrayHeader(dst, 4)
		dst = resp.AppendBulk(dst, node.ep.ip)
		port, _ := strconv.Atoi(node.ep.port)
		dst = resp.AppendInt(dst, int64(port))
		dst = resp.AppendBulk(dst, node.id)
		dst = appendMapHeader(dst, 0, resp3)
	}
	return dst
}

// appendMapHeader appends a map header: %n in RESP3, an array of 2n in RESP2.
func appendMapHeader(dst []byte, n int, resp3 bool) []byte {
	if resp3 {
		return resp.AppendMapHeader(dst, n)
	}
	return resp.AppendArrayHeader(dst, 2*n)
}

// appendShards appends the CLUSTER SHARDS reply: one shard per node in the
// topology (one master, no replicas), slots as start/end integer pairs.
func (t *topology) appendShards(dst []byte, resp3 bool) []byte {
	n := 0
	for _, nd := range t.nodes {
		if !nd.removed {
			n++
		}
	}
	dst = resp.AppendArrayHeader(dst, n)
	for i, nd := range t.nodes {
		if nd.removed {
			continue
		}
		rs := t.slotsOf(i)
		dst = appendMapHeader(dst, 2, resp3)
		dst = resp.AppendBulk(dst, "slots")
		dst = resp.AppendArrayHeader(dst, 2*len(rs))
		for _, r := range rs {
			dst = resp.AppendInt(dst, int64(r.Start))
			dst = resp.AppendInt(dst, int64(r.End))
		}
		dst = resp.AppendBulk(dst, "nodes")
		dst = resp.AppendArrayHeader(dst, 1)
		dst = appendMapHeader(dst, 7, resp3)
		port, _ := strconv.Atoi(nd.ep.port)
		dst = resp.AppendBulk(dst, "id")
		dst = resp.AppendBulk(dst, nd.id)
		dst = resp.AppendBulk(dst, "port")
		dst = resp.AppendInt(dst, int64(port))
		dst = resp.AppendBulk(dst, "ip")
		dst = resp.AppendBulk(dst, nd.ep.ip)
		dst = resp.AppendBulk(dst, "endpoint")
		dst = resp.AppendBulk(dst, nd.ep.ip)
		dst = resp.AppendBulk(dst, "role")
		dst = resp.AppendBulk(dst, "master")
		dst = resp.AppendBulk(dst, "replication-offset")
		dst = resp.AppendInt(dst, 0)
		dst = resp.AppendBulk(dst, "health")
		dst = resp.AppendBulk(dst, "online")
	}
	return dst
}

// nodesText is the CLUSTER NODES text as node self sees it: one line per
// node, "id ip:port@cport flags master ping pong epoch link slots...", with
// self's open migrations as [slot->-id] (migrating) and [slot-<-id]
// (importing).
func (t *topology) nodesText(self int) string {
	var b strings.Builder
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for i, nd := range t.nodes {
		if nd.removed {
			continue
		}
		port, _ := strconv.Atoi(nd.ep.port)
		flags := "master"
		if i == self {
			flags = "myself,master"
		}
		b.WriteString(nd.id)
		b.WriteString(" " + nd.ep.ip + ":" + nd.ep.port + "@" + strconv.Itoa((port+10000)%65536))
		b.WriteString(" " + flags + " - 0 " + now + " " + strconv.FormatInt(t.epoch, 10) + " connected")
		for _, r := range t.slotsOf(i) {
			b.WriteString(" " + r.String())
		}
		if i == self {
			for s := 0; s < NumSlots; s++ {
				mg := t.mig[s]
				switch {
				case mg == nil:
				case mg.src == self:
					b.WriteString(" [" + strconv.Itoa(s) + "->-" + t.nodes[mg.dst].id + "]")
				case mg.dst == self:
					b.WriteString(" [" + strconv.Itoa(s) + "-<-" + t.nodes[mg.src].id + "]")
				}
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// infoText is the CLUSTER INFO text.
func (t *topology) infoText() string {
	assigned, known, size := 0, 0, 0
	for s := range t.owner {
		if t.owner[s] >= 0 {
			assigned++
		}
	}
	for i, nd := range t.nodes {
		if nd.removed {
			continue
		}
		known++
		if len(t.slotsOf(i)) > 0 {
			size++
		}
	}
	state := "ok"
	if assigned < NumSlots {
		state = "fail"
	}
	ep := strconv.FormatInt(t.epoch, 10)
	lines := []string{
		"cluster_state:" + state,
		"cluster_slots_assigned:" + strconv.Itoa(assigned),
		"cluster_slots_ok:" + strconv.Itoa(assigned),
		"cluster_slots_pfail:0",
		"cluster_slots_fail:0",
		"cluster_known_nodes:" + strconv.Itoa(known),
		"cluster_size:" + strconv.Itoa(size),
		"cluster_current_epoch:" + ep,
		"cluster_my_epoch:" + ep,
	}
	return strings.Join(lines, "\r\n") + "\r\n"
}
