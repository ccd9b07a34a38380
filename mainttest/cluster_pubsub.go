package mainttest

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/maintkit/maint/internal/resp"
)

// Sharded pub/sub on an emulated cluster is each node's own, as on a real
// one: SSUBSCRIBE and SUNSUBSCRIBE are answered by the node owning the
// channels' slot (else -MOVED, -CROSSSLOT across slots), SPUBLISH reaches the
// subscribers of that node only, and when a slot changes owner the node that
// gave it away drops its subscribers of that slot's channels, pushing each
// one `sunsubscribe <channel> <count>` as redis-server 7 does (count: the
// sharded channels the connection is still subscribed to). The backend never
// sees these commands.

// shardPubSub holds a Cluster's sharded subscriptions.
type shardPubSub struct {
	mu sync.Mutex // guards the following
	// subs: node index → channel → subscribed connections.
	subs map[int]map[string]map[*conn]struct{}
	// byConn: connection → its node index and channels.
	byConn map[*conn]*shardSubscriber
	// silent: slots given away drop their subscribers without a word.
	silent atomic.Bool
}

// SetShardUnsubscribePush says whether a node that gives a slot away pushes
// sunsubscribe to that slot's sharded subscribers, as redis-server does (the
// default), or drops them silently (off), as a server that announces the
// move with SMIGRATED only might.
func (cl *Cluster) SetShardUnsubscribePush(on bool) { cl.shard.silent.Store(!on) }

// shardSubscriber is one connection's sharded subscriptions.
type shardSubscriber struct {
	node  int
	chans map[string]struct{}
}

// shardCommand answers SSUBSCRIBE, SUNSUBSCRIBE and SPUBLISH on a node of the
// cluster, and reports whether name was one of them.
func (m *clusterMember) shardCommand(c *conn, t *topology, name string, args [][]byte) bool {
	switch name {
	case "SSUBSCRIBE", "SUNSUBSCRIBE", "SPUBLISH":
	default:
		return false
	}
	if (name == "SSUBSCRIBE" && len(args) == 0) || (name == "SPUBLISH" && len(args) != 2) {
		c.queueLocal(resp.AppendError(nil, "ERR wrong number of arguments for '"+lower(name)+"' command"))
		return true
	}
	keys := args
	if name == "SPUBLISH" {
		keys = args[:1]
	}
	if reply, kind := t.route(m.idx, keys, false); kind != served {
		m.countRedirect(c, kind, reply)
		c.queueLocal(reply)
		return true
	}
	ps := &m.cl.shard
	switch name {
	case "SPUBLISH":
		n := ps.publish(c.e, m.idx, string(args[0]), args[1])
		c.queueLocal(resp.AppendInt(nil, int64(n)))
	case "SSUBSCRIBE":
		c.queueLocal(ps.subscribe(c, m.idx, args))
	default:
		c.queueLocal(ps.unsubscribe(c, args))
	}
	return true
}

func lower(s string) string {
	b := []byte(s)
	for i, x := range b {
		if 'A' <= x && x <= 'Z' {
			b[i] = x + 'a' - 'A'
		}
	}
	return string(b)
}

// shardFrame is a sharded pub/sub confirmation or message, a push on a
// RESP3 connection and an array on a RESP2 one.
func shardFrame(resp3 bool, kind, channel string, last any) []byte {
	var b []byte
	if resp3 {
		b = resp.AppendPushHeader(b, 3)
	} else {
		b = resp.AppendArrayHeader(b, 3)
	}
	b = resp.AppendBulk(b, kind)
	if channel == "" && kind == "sunsubscribe" {
		if resp3 {
			b = resp.AppendNull(b)
		} else {
			b = append(b, "$-1\r\n"...)
		}
	} else {
		b = resp.AppendBulk(b, channel)
	}
	switch v := last.(type) {
	case int:
		return resp.AppendInt(b, int64(v))
	case []byte:
		return resp.AppendBulk(b, v)
	}
	return b
}

// subscribe subscribes c, on node idx, to channels and returns the
// confirmations.
func (ps *shardPubSub) subscribe(c *conn, idx int, channels [][]byte) []byte {
	resp3 := c.isRESP3()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.byConn == nil {
		ps.byConn = make(map[*conn]*shardSubscriber)
		ps.subs = make(map[int]map[string]map[*conn]struct{})
	}
	sub := ps.byConn[c]
	if sub == nil {
		sub = &shardSubscriber{node: idx, chans: make(map[string]struct{})}
		ps.byConn[c] = sub
	}
	var out []byte
	for _, ch := range channels {
		name := string(ch)
		if _, ok := sub.chans[name]; !ok {
			sub.chans[name] = struct{}{}
			byCh := ps.subs[idx]
			if byCh == nil {
				byCh = make(map[string]map[*conn]struct{})
				ps.subs[idx] = byCh
			}
			cs := byCh[name]
			if cs == nil {
				cs = make(map[*conn]struct{})
				byCh[name] = cs
			}
			cs[c] = struct{}{}
		}
		out = append(out, shardFrame(resp3, "ssubscribe", name, len(sub.chans))...)
	}
	return out
}

// unsubscribe unsubscribes c from channels (all of them when none) and
// returns the confirmations.
func (ps *shardPubSub) unsubscribe(c *conn, channels [][]byte) []byte {
	resp3 := c.isRESP3()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	sub := ps.byConn[c]
	if len(channels) == 0 {
		if sub == nil || len(sub.chans) == 0 {
			return shardFrame(resp3, "sunsubscribe", "", 0)
		}
		for ch := range sub.chans {
			channels = append(channels, []byte(ch))
		}
	}
	var out []byte
	for _, ch := range channels {
		n := 0
		if sub != nil {
			ps.dropLocked(c, sub, string(ch))
			n = len(sub.chans)
		}
		out = append(out, shardFrame(resp3, "sunsubscribe", string(ch), n)...)
	}
	if sub != nil && len(sub.chans) == 0 {
		delete(ps.byConn, c)
	}
	return out
}

// dropLocked removes channel from sub, c's subscriptions. The caller holds
// ps.mu.
func (ps *shardPubSub) dropLocked(c *conn, sub *shardSubscriber, channel string) {
	if _, ok := sub.chans[channel]; !ok {
		return
	}
	delete(sub.chans, channel)
	byCh := ps.subs[sub.node]
	delete(byCh[channel], c)
	if len(byCh[channel]) == 0 {
		delete(byCh, channel)
	}
	if len(byCh) == 0 {
		delete(ps.subs, sub.node)
	}
}

// publish delivers payload to node idx's subscribers of channel and returns
// how many it reached.
func (ps *shardPubSub) publish(e *Emulator, idx int, channel string, payload []byte) int {
	ps.mu.Lock()
	var to []*conn
	for c := range ps.subs[idx][channel] {
		to = append(to, c)
	}
	ps.mu.Unlock()
	n := 0
	for _, c := range to {
		if c.pushAlways(func(resp3 bool) []byte { return shardFrame(resp3, "smessage", channel, payload) }) {
			n++
		}
	}
	return n
}

// forget drops a closed connection's subscriptions.
func (ps *shardPubSub) forget(c *conn) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if sub := ps.byConn[c]; sub != nil {
		for ch := range sub.chans {
			ps.dropLocked(c, sub, ch)
		}
		delete(ps.byConn, c)
	}
}

// slotsMoved drops, on every node that gave a slot away from old to t, the
// subscriptions of that slot's channels, pushing sunsubscribe to each
// subscriber as redis-server does.
func (ps *shardPubSub) slotsMoved(old, t *topology) {
	if old == nil {
		return
	}
	ps.mu.Lock()
	type note struct {
		c     *conn
		frame func(resp3 bool) []byte
	}
	var notes []note
	for idx, byCh := range ps.subs {
		var gone []string
		for ch := range byCh {
			if s := KeySlot(ch); int(old.owner[s]) == idx && int(t.owner[s]) != idx {
				gone = append(gone, ch)
			}
		}
		sort.Strings(gone) // one order, run after run
		for _, ch := range gone {
			for c := range byCh[ch] {
				sub := ps.byConn[c]
				ps.dropLocked(c, sub, ch)
				n := len(sub.chans)
				if n == 0 {
					delete(ps.byConn, c)
				}
				ch := ch
				notes = append(notes, note{c, func(resp3 bool) []byte { return shardFrame(resp3, "sunsubscribe", ch, n) }})
			}
		}
	}
	ps.mu.Unlock()
	if ps.silent.Load() {
		return
	}
	for _, n := range notes {
		n.c.pushAlways(n.frame)
	}
}

// setTopo installs t as the cluster's topology; the caller holds cl.mu.
// Sharded subscribers of slots a node gave away lose them (slotsMoved).
func (cl *Cluster) setTopo(t *topology) {
	old := cl.topo.Swap(t)
	cl.shard.slotsMoved(old, t)
}

// isRESP3 reports whether c speaks RESP3.
func (c *conn) isRESP3() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resp3
}

// pushAlways queues a frame (chosen by the connection's protocol) to be
// written at the next frame boundary, opted in or not, and reports whether
// the connection was still open.
func (c *conn) pushAlways(frame func(resp3 bool) []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.pushes = append(c.pushes, frame(c.resp3)...)
	c.cond.Signal()
	return true
}
