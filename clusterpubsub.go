package maint

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/internal/slot"
)

// Sharded pub/sub follows its slot.
//
// When a slot moves, the node that gave it away drops that slot's sharded
// subscriptions and tells each subscriber with a `sunsubscribe` push
// (redis-server 7 does; the emulated cluster does the same). go-redis's
// PubSub takes that push for an ordinary message: the connection stays, the
// channel stays in its list, and nothing arrives any more, with no error.
//
// maint corrects what go-redis does not know and leaves the rest to it: once
// go-redis's slot map gives a subscribed channel's slot to another node, maint
// closes the subscriber connection under go-redis. go-redis's PubSub reads
// the error, reconnects through its slot map (the node owning its first
// channel's slot at that moment) and resubscribes every channel it holds
// (contract_pubsub_test.go pins all three). maint waits for the slot map
// first: a PubSub that reconnected to the old node would meet MOVED for its
// SSUBSCRIBE, which go-redis hands to the reader as a message error and never
// retries, and the subscription would be lost for good.
//
// Two events start it: a `sunsubscribe` push the application did not ask for
// (one that answers the application's own SUNSUBSCRIBE changes nothing: the
// connection counts the confirmations its SUNSUBSCRIBEs owe), and an
// SMIGRATED moving a slot a connection is subscribed in. What a connection is
// subscribed to is read from the SSUBSCRIBE and SUNSUBSCRIBE commands
// go-redis writes on it; nothing else is parsed, and only on the connections
// of cluster node clients.

// slotOwners is what a sharded subscriber needs of the cluster's slot map,
// which is go-redis's own: who owns a channel's slot now, as a PubSub
// reconnecting now would see it, and a way to have the map reloaded. It is
// the one seam between this file and whatever keeps go-redis's map right.
type slotOwners interface {
	// masterOf returns the address of the node go-redis's slot map gives
	// channel's slot to: the node go-redis's PubSub would reconnect to.
	masterOf(ctx context.Context, channel string) (string, error)
	// reload asks go-redis to reload its slot map; it returns at once.
	reload()
}

// clusterOwners is slotOwners on a ClusterClient: MasterForKey runs the
// lookup PubSub's reconnect runs (slotMasterNode on the current state), and
// ReloadState marks the state for a reload (lazy: go-redis runs it on a
// goroutine of its own, at most one every 200ms).
// The ClusterClient is held weakly (see bindCluster): gone, it owns nothing.
type clusterOwners struct {
	cc weak.Pointer[redis.ClusterClient]
}

func (o clusterOwners) masterOf(ctx context.Context, channel string) (string, error) {
	cc := o.cc.Value()
	if cc == nil {
		return "", errClusterGone
	}
	c, err := cc.MasterForKey(ctx, channel)
	if err != nil {
		return "", err
	}
	return c.Options().Addr, nil
}

func (o clusterOwners) reload() {
	if cc := o.cc.Value(); cc != nil {
		cc.ReloadState(context.Background())
	}
}

// errClusterGone is masterOf's error once the ClusterClient is collected.
var errClusterGone = errors.New("maint: the ClusterClient is gone")

// Bounds of following a slot.
const (
	// shardFollowFor bounds how long a subscriber waits for go-redis's slot
	// map to give its slot to another node; past it, the slot did not move
	// (or the map never said so) and the connection is left as it is.
	shardFollowFor = 5 * time.Second
	// shardReloadEvery is how often a reload is asked for meanwhile: a
	// reload may read a node that has not heard of the move yet.
	shardReloadEvery = 250 * time.Millisecond
	// shardPoll is how often the slot map is looked at meanwhile (an
	// atomic load and a slot lookup per subscribed slot).
	shardPoll = 10 * time.Millisecond
	// maxShardChannels bounds the channels a connection's record keeps;
	// past it the record is incomplete and the connection is left alone
	// (maint cannot tell whether go-redis could resubscribe it).
	maxShardChannels = 4096
	// maxShardChannelLen bounds a channel name kept in a record.
	maxShardChannelLen = 512
)

// errShardMoved is why maint closed a sharded subscriber's connection: not a
// server reply (go-redis must take it for a broken connection and reconnect).
var errShardMoved = errors.New("maint: sharded subscriber's slot moved to another node; go-redis's PubSub resubscribes there")

// shardSubs is a cluster's sharded subscribers' share of its state.
type shardSubs struct {
	owners atomic.Pointer[slotOwners] // nil until the ClusterClient is known
	// followed counts the subscriber connections closed because their slot
	// moved; unasked counts the sunsubscribe pushes the application did not
	// ask for; settled counts follows that ended with the slot map still
	// giving the slots to the same node; spanning counts connections left
	// alone because go-redis could not resubscribe them (several slots).
	followed, unasked, settled, spanning atomic.Uint64

	// recent are the slots whose subscribers maint (or their node) closed
	// lately, and the node they left: a connection that subscribes in one
	// of them there
	// within shardFollowFor is go-redis reconnecting (or a new PubSub) by a
	// slot map that went stale again, and it meets MOVED; it follows the
	// slot too. One that subscribes in one of them elsewhere is most often
	// go-redis resubscribing on the slot's new owner, but the slot may have
	// left that node too since the map maint closed by was read: it is
	// looked at once, and follows the slot if it is not on its owner. At
	// most one entry per slot, each expiring.
	recentMu sync.Mutex
	recent   map[int]recentMove
}

// recentMove is a slot that left a node, until when it counts; byServer:
// the node closed its subscriber itself (serverClosed), which says nothing
// of where the slot is.
type recentMove struct {
	from     string
	until    time.Time
	byServer bool
}

// noteMoved remembers that slot sl left from.
func (s *shardSubs) noteMoved(sl int, from string) { s.note(sl, from, false) }

// serverClosed remembers that node from closed a subscriber of slot sl:
// go-redis resubscribes it by its slot map, which may be stale (a removed
// node closes its subscribers while a reshard is still being learnt), and
// meet MOVED. It does not replace what maint did itself.
func (s *shardSubs) serverClosed(sl int, from string) { s.note(sl, from, true) }

func (s *shardSubs) note(sl int, from string, byServer bool) {
	now := time.Now()
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	if e, ok := s.recent[sl]; byServer && ok && !e.byServer && now.Before(e.until) {
		return
	}
	if s.recent == nil {
		s.recent = make(map[int]recentMove)
	}
	if len(s.recent) >= 64 {
		for k, e := range s.recent {
			if !now.Before(e.until) {
				delete(s.recent, k)
			}
		}
	}
	s.recent[sl] = recentMove{from: from, until: now.Add(shardFollowFor), byServer: byServer}
}

// movedAway reports whether maint closed slot sl's subscribers lately
// (lately), and whether they were on node (left).
func (s *shardSubs) movedAway(sl int, node string) (lately, left bool) {
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	e, ok := s.recent[sl]
	lately = ok && time.Now().Before(e.until)
	return lately, lately && e.from == node && !e.byServer
}

// onServerClose notes, when the server closed c, a sharded subscriber,
// that its slots' subscribers should be looked at when go-redis
// resubscribes them (serverClosed).
func (c *conn) onServerClose() {
	rec := c.shard.Load()
	if rec == nil || c.m == nil || c.m.s.cluster == nil || c.t == nil || rec.serverClosed.Swap(true) {
		return
	}
	slots, _ := c.shardSlots()
	for _, ss := range slots {
		c.m.s.cluster.subs.serverClosed(ss.slot, c.t.addr)
	}
}

// bind lets the cluster's subscribers look at cc's slot map, unless they
// look at a ClusterClient's that is not collected yet.
func (s *shardSubs) bind(cc *redis.ClusterClient) {
	var o slotOwners = clusterOwners{weak.Make(cc)}
	for {
		cur := s.owners.Load()
		if cur != nil {
			if co, ok := (*cur).(clusterOwners); !ok || co.cc.Value() != nil {
				return
			}
		}
		if s.owners.CompareAndSwap(cur, &o) {
			return
		}
	}
}

// shardConn is what one connection knows of its sharded subscriptions, from
// the commands written on it.
type shardConn struct {
	mu sync.Mutex // guards the following
	// chans are the channels subscribed (SSUBSCRIBE minus SUNSUBSCRIBE),
	// with their slots; at most maxShardChannels.
	chans map[string]int
	// incomplete: a channel was not recorded (bounds, or a command split
	// over writes).
	incomplete bool
	// own counts the sunsubscribe confirmations the application's own
	// SUNSUBSCRIBEs still owe: those pushes are replies, not news.
	own int
	// following: a follow holds the connection (followShards).
	following atomic.Bool
	// again: a signal came while a follow held the connection; the follow
	// that lets it go follows it again, by that signal (againClaimed: it
	// named no source, or the connection's own node; else againSrcs, the
	// sources it named).
	again        bool
	againClaimed bool
	againSrcs    []string
	againWhy     string
	// droppedAt is when maint learnt that the node dropped the
	// connection's subscriptions (a slot leaves a node with its
	// subscribers): it pushed sunsubscribe, or a map read from the cluster
	// gave one of its slots to another node; 0 before. The connection then
	// delivers nothing more for that slot, even once the slot is back on
	// its node: it must be resubscribed wherever the slot is, by a map
	// read after that.
	droppedAt atomic.Int64
	// serverClosed: a read met the server's close (onServerClose).
	serverClosed atomic.Bool
}

// dropped records that the connection's subscriptions were dropped, as
// maint learnt at (a monotonic time).
func (rec *shardConn) dropped(at mono) {
	for {
		cur := rec.droppedAt.Load()
		if cur >= at || rec.droppedAt.CompareAndSwap(cur, at) {
			return
		}
	}
}

// Commands shardCommand recognises.
const (
	shardNone uint8 = iota
	shardSubscribe
	shardUnsubscribe
)

// shardCommand reports whether p, a write, begins with SSUBSCRIBE or
// SUNSUBSCRIBE as go-redis writes them ("*N\r\n$10\r\nssubscribe\r\n...").
// A handful of byte compares reject every other command.
func shardCommand(p []byte) uint8 {
	if len(p) < 20 || p[0] != '*' {
		return shardNone
	}
	i := 1
	for i < 6 && p[i] != '\r' {
		i++
	}
	if p[i] != '\r' || p[i+2] != '$' || p[i+3] != '1' {
		return shardNone
	}
	switch name := p[i+7:]; p[i+4] {
	case '0':
		if len(name) >= 10 && eqFoldASCII(name[:10], "ssubscribe") {
			return shardSubscribe
		}
	case '2':
		if len(name) >= 12 && eqFoldASCII(name[:12], "sunsubscribe") {
			return shardUnsubscribe
		}
	}
	return shardNone
}

// eqFoldASCII reports whether b is lower (lower case), ignoring ASCII case.
func eqFoldASCII(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// noteShardWrite records a sharded (un)subscription written on c (kind from
// shardCommand). A write that is not exactly one whole command leaves the
// record incomplete rather than guessed.
func (c *conn) noteShardWrite(kind uint8, p []byte) {
	rec := c.shard.Load()
	if rec == nil {
		rec = &shardConn{chans: make(map[string]int)}
		if !c.shard.CompareAndSwap(nil, rec) {
			rec = c.shard.Load()
		}
	}
	_, args, err := resp.CommandName(p)
	stale, lately := false, false
	var cs *clusterState
	if c.m != nil { // a bare conn in the unit tests has none
		cs = c.m.s.cluster
	}
	defer func() { // after the record's lock is let go
		switch {
		case stale:
			// Subscribing where the slot just left: go-redis's slot map went
			// stale again (or a new PubSub read it before the reload); the
			// SSUBSCRIBE meets MOVED. Follow the slot from here too.
			c.m.followShards(cs, []*conn{c}, nil, nil, "SSUBSCRIBE on the node the slot just left")
		case lately:
			// Resubscribing after maint closed the slot's subscriber: on
			// the slot's owner, unless the slot left it meanwhile (the
			// SSUBSCRIBE then meets MOVED). No source is named: a
			// connection on the owner is left alone at once.
			c.m.followShards(cs, []*conn{c}, nil, []string{}, "SSUBSCRIBE of a slot just followed")
		}
	}()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err != nil {
		rec.incomplete = true
		if kind == shardUnsubscribe {
			rec.own++ // at least one confirmation comes
		}
		return
	}
	if kind == shardUnsubscribe {
		if len(args) == 0 {
			// All of them: one confirmation each, or one (nil) for none.
			rec.own += max(1, len(rec.chans))
			clear(rec.chans)
			return
		}
		rec.own += len(args)
		for _, a := range args {
			delete(rec.chans, string(a))
		}
		return
	}
	for _, a := range args {
		if _, ok := rec.chans[string(a)]; ok {
			continue
		}
		if len(rec.chans) >= maxShardChannels || len(a) > maxShardChannelLen {
			rec.incomplete = true
			continue
		}
		sl := slot.Of(a)
		rec.chans[string(a)] = sl
		if cs != nil && c.t != nil {
			l, left := cs.subs.movedAway(sl, c.t.addr)
			stale, lately = stale || left, lately || l
		}
	}
}

// onSunsubscribe sees a sunsubscribe push on c: a confirmation its own
// SUNSUBSCRIBE owes, or the server dropping a subscription because the slot
// moved, and then c follows the slot.
func (c *conn) onSunsubscribe() {
	rec := c.shard.Load()
	cs := c.m.s.cluster
	if rec == nil || cs == nil {
		return
	}
	rec.mu.Lock()
	own := rec.own > 0
	if own {
		rec.own--
	}
	rec.mu.Unlock()
	if own {
		return
	}
	cs.subs.unasked.Add(1)
	rec.dropped(monoNow())
	c.m.followShards(cs, []*conn{c}, nil, nil, "sunsubscribe pushed by the server")
}

// shardSlot is one subscribed slot and a channel of it (what MasterForKey is
// asked about).
type shardSlot struct {
	slot    int
	channel string
}

// shardSlots returns c's subscribed slots, one channel each, and whether
// the record is complete.
func (c *conn) shardSlots() ([]shardSlot, bool) {
	rec := c.shard.Load()
	if rec == nil {
		return nil, true
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := make([]shardSlot, 0, len(rec.chans))
	seen := make(map[int]bool, len(rec.chans))
	for ch, sl := range rec.chans {
		if !seen[sl] {
			seen[sl] = true
			out = append(out, shardSlot{sl, ch})
		}
	}
	return out, !rec.incomplete
}

// followShards starts, on a goroutine of m, the follow of the subscriber
// connections conns not already following (see follow). only, when set,
// limits the slots looked at; srcs are the nodes the signal says the slots
// left (an SMIGRATED's sources, as its triplets name them), nil when the
// signal is about each connection's own node (the server's sunsubscribe, a
// node left with no slot, an SSUBSCRIBE where the slot just left).
func (m *Maint) followShards(cs *clusterState, conns []*conn, only func(int) bool, srcs []string, why string) {
	var mine []*conn
	for _, c := range conns {
		rec := c.shard.Load()
		if rec == nil {
			continue
		}
		if rec.following.CompareAndSwap(false, true) {
			mine = append(mine, c)
			continue
		}
		// A follow holds it: it follows it again when it lets it go, unless
		// it let it go meanwhile.
		rec.noteAgain(srcs, why)
		if rec.following.CompareAndSwap(false, true) {
			rec.takeAgain()
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return
	}
	if !m.goBackground(func() { cs.follow(m, mine, only, srcs, why) }) {
		for _, c := range mine {
			c.shard.Load().following.Store(false)
		}
	}
}

// noteAgain records a signal that came while a follow held the connection.
func (rec *shardConn) noteAgain(srcs []string, why string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !rec.again {
		rec.again, rec.againClaimed, rec.againSrcs = true, false, rec.againSrcs[:0]
	}
	if srcs == nil {
		rec.againClaimed = true
	}
	rec.againSrcs = append(rec.againSrcs, srcs...)
	rec.againWhy = why
}

// takeAgain returns, and forgets, the signal noteAgain recorded, as
// followShards takes its sources (nil: claimed).
func (rec *shardConn) takeAgain() (srcs []string, why string, ok bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !rec.again {
		return nil, "", false
	}
	rec.again = false
	if !rec.againClaimed {
		srcs = append(make([]string, 0, len(rec.againSrcs)), rec.againSrcs...)
	}
	return srcs, rec.againWhy, true
}

// letGo ends a follow's hold on c; a signal that came meanwhile starts
// another.
func (cs *clusterState) letGo(m *Maint, c *conn) {
	rec := c.shard.Load()
	rec.following.Store(false)
	if srcs, why, ok := rec.takeAgain(); ok && c.state.Load() != stateClosed {
		m.followShards(cs, []*conn{c}, nil, srcs, why)
	}
}

// shardFollow is one connection a follow looks after.
type shardFollow struct {
	c    *conn
	node string       // its node, as go-redis names it
	own  *ownerClient // its ClusterClient
	// claimed: the signal says one of its slots left its node (and not
	// only that a slot it is subscribed in moved somewhere).
	claimed bool
}

// ownerClient is a ClusterClient a follow looks at: its slot map (the one
// its PubSubs reconnect by), and the slot map last read from the cluster
// through its node clients for the follow.
type ownerClient struct {
	owners slotOwners
	nodes  []*redis.Client // its node clients: where the cluster is asked
	read   *slotMap        // the last map read from the cluster; nil before
	readAt time.Time
	// readMono is when that read was asked for (monotonic).
	readMono mono
}

// follow moves each connection, bounded by shardFollowFor, once the
// cluster confirms the move: a slot map read from the cluster through the
// node clients of the connection's own ClusterClient (confirmRead) gives
// one of its slots to another node, and the map that ClusterClient routes
// by (the one its PubSub reconnects by) gives the slot to that same node.
// Then, and only then, maint closes the connection, once: go-redis's
// PubSub reconnects through its map and resubscribes. A map maint served
// (after an SMIGRATED) is not the cluster's word: a served map that the
// cluster's contradicts stops being served (refute). A connection whose
// slots stay on its node is left alone; when the signal said they left it,
// that is logged once, at the bound.
func (cs *clusterState) follow(m *Maint, conns []*conn, only func(int) bool, srcs []string, why string) {
	s := &cs.subs
	// Each connection is let go as soon as the follow is done with it: a
	// signal for it from then on starts a follow of its own.
	held := make(map[*conn]bool, len(conns))
	for _, c := range conns {
		held[c] = true
	}
	let := func(c *conn) {
		if held[c] {
			delete(held, c)
			cs.letGo(m, c)
		}
	}
	defer func() {
		for _, c := range conns {
			let(c)
		}
	}()
	fs, owners := cs.followsOf(conns, srcs)
	if len(fs) == 0 {
		m.logf("maint: sharded subscriber (%s): the ClusterClient is not known to maint "+
			"(use Group.NewClusterClient or Instrument): go-redis's PubSub is left as it is", why)
		return
	}
	ctx := m.ctx
	end := time.Now().Add(shardFollowFor)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, o := range owners {
			if o.read == nil || now.Sub(o.readAt) >= shardReloadEvery {
				asked := monoNow()
				if sm := cs.confirmRead(ctx, o.nodes); sm != nil {
					o.read, o.readAt, o.readMono = sm, now, asked
				}
				o.owners.reload()
			}
		}
		fs = cs.closeMoved(ctx, m, fs, only, why, let)
		if len(fs) == 0 {
			return
		}
		if time.Now().After(end) {
			n := 0
			for _, f := range fs {
				if f.claimed {
					n++
				}
			}
			s.settled.Add(uint64(len(fs)))
			if n > 0 {
				m.logf("maint: sharded subscriber (%s): the cluster did not confirm within %v that %d connection(s)' slots left their node: left as they are",
					why, shardFollowFor, n)
			}
			return
		}
		t.Reset(shardPoll)
	}
}

// followsOf returns what a follow needs of conns: each one's node and
// ClusterClient (the first one bound when maint did not see which made
// it), and those ClusterClients, once each. A connection of no known
// ClusterClient is left out.
func (cs *clusterState) followsOf(conns []*conn, srcs []string) ([]*shardFollow, []*ownerClient) {
	var fallback *redis.ClusterClient
	if op := cs.subs.owners.Load(); op != nil {
		if co, ok := (*op).(clusterOwners); ok {
			fallback = co.cc.Value()
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	byCC := map[*redis.ClusterClient]*ownerClient{}
	var owners []*ownerClient
	var fs []*shardFollow
	for _, c := range conns {
		var mb *clusterMember
		for _, x := range cs.members {
			if x.m == c.m {
				mb = x
				break
			}
		}
		if mb == nil {
			continue
		}
		cc := mb.owner.Value()
		if cc == nil {
			cc = fallback
		}
		if cc == nil {
			continue
		}
		o := byCC[cc]
		if o == nil {
			o = &ownerClient{owners: clusterOwners{weak.Make(cc)}}
			if mb.rdb != nil {
				o.nodes = append(o.nodes, mb.rdb)
			}
			for _, x := range cs.members {
				if x.rdb != nil && x != mb && (x.owner.Value() == cc || x.owner.Value() == nil && cc == fallback) {
					o.nodes = append(o.nodes, x.rdb)
				}
			}
			byCC[cc] = o
			owners = append(owners, o)
		}
		claimed := srcs == nil
		for _, src := range srcs {
			if src == mb.addr || mb.m.reached(src) {
				claimed = true
			}
		}
		fs = append(fs, &shardFollow{c: c, node: mb.addr, own: o, claimed: claimed})
	}
	return fs, owners
}

// Bounds of a confirming read.
const confirmReadTimeout = time.Second

// confirmRead reads the slot map from the cluster through the first of
// nodes that answers (CLUSTER SLOTS, else CLUSTER SHARDS), nil when none
// does: the cluster's word a follow moves by. The read is maint's own, not
// go-redis's reload: it is neither served nor handed to go-redis
// (ownRead).
func (cs *clusterState) confirmRead(ctx context.Context, nodes []*redis.Client) *slotMap {
	for _, rdb := range nodes {
		rctx, cancel := context.WithTimeout(context.WithValue(ctx, ownRead{}, true), confirmReadTimeout)
		origin := rdb.Options().Addr
		var sm *slotMap
		slots := redis.NewClusterSlotsCmd(rctx, "cluster", "slots")
		if rdb.Process(rctx, slots) == nil {
			sm = newSlotMap(slots.Val(), origin)
		} else {
			shards := redis.NewClusterShardsCmd(rctx, "cluster", "shards")
			if rdb.Process(rctx, shards) == nil {
				sm, _ = newShardsMap(shards.Val(), origin, rdb.Options().TLSConfig != nil)
			}
		}
		cancel()
		if sm != nil {
			cs.c.confirmReads.Add(1)
			return sm
		}
	}
	return nil
}

// ownRead marks the context of a slot-map read maint makes itself
// (confirmRead): the node clients' hooks pass it through untouched.
type ownRead struct{}

// isOwnRead reports whether ctx is that of one of maint's own reads.
func isOwnRead(ctx context.Context) bool { return ctx.Value(ownRead{}) != nil }

// closeMoved closes the connections of fs one of whose slots the cluster's
// map and their ClusterClient's both give to the same other node, and
// returns those still looked after: the others still open, but those
// that nothing claimed moved and whose slots are where the cluster says.
func (cs *clusterState) closeMoved(ctx context.Context, m *Maint, fs []*shardFollow, only func(int) bool, why string, let func(*conn)) []*shardFollow {
	s := &cs.subs
	keep := fs[:0]
	for _, f := range fs {
		c := f.c
		if c.state.Load() == stateClosed {
			let(c)
			continue
		}
		rec := c.shard.Load()
		slots, complete := c.shardSlots()
		if len(slots) > 1 || !complete {
			// go-redis would resubscribe them all in one SSUBSCRIBE, which
			// the server refuses across slots (CROSSSLOT): closing would
			// lose the channels that did not move too.
			s.spanning.Add(1)
			m.logf("maint: sharded subscriber (%s) on %s: subscribed in %d slot(s) (record complete: %v); "+
				"go-redis resubscribes them in one SSUBSCRIBE, which the server refuses across slots: left as it is",
				why, f.node, len(slots), complete)
			let(c)
			continue
		}
		read := f.own.read
		if read == nil {
			keep = append(keep, f) // no word from the cluster yet
			continue
		}
		moved, home, to, sl := false, true, "", 0
		for _, ss := range slots {
			if only != nil && !only(ss.slot) {
				continue
			}
			owner := read.master(ss.slot)
			if owner == "" {
				continue
			}
			cs.refute(m, ss.slot, read, owner)
			if n, ok := read.node(f.node); ok && n.Addr == owner {
				// The cluster has it on the connection's node: nothing to
				// do, unless the node dropped its subscriptions when the
				// slot left and the map was read after that (the slot came
				// back): go-redis resubscribes them here, once its map says
				// so too.
				if at := rec.droppedAt.Load(); at != 0 && f.own.readMono > at {
					if addr, err := f.own.owners.masterOf(ctx, ss.channel); err == nil && addr == f.node {
						moved, to, sl = true, addr, ss.slot
						break
					}
				}
				continue
			}
			home = false
			rec.dropped(f.own.readMono) // the node gave the slot away, with its subscribers
			addr, err := f.own.owners.masterOf(ctx, ss.channel)
			if err != nil || addr == "" || addr == f.node {
				continue // go-redis's map is behind: reloads are asked for
			}
			if n, ok := read.node(addr); !ok || n.Addr != owner {
				continue // go-redis's map gives it elsewhere still
			}
			moved, to, sl = true, addr, ss.slot
			break
		}
		if !moved {
			if !home || f.claimed || rec.droppedAt.Load() != 0 {
				keep = append(keep, f)
			} else {
				let(c)
			}
			continue
		}
		if c.closeWith(errShardMoved) {
			s.noteMoved(sl, c.t.addr)
			s.followed.Add(1)
			m.emit(Event{Kind: EventRetire, Node: c.n.key, Count: 1,
				Detail: "sharded subscriber (" + why + "): slot " + strconv.Itoa(sl) + " now at " + to +
					": connection closed for go-redis's PubSub to resubscribe there"})
		}
		let(c)
	}
	return keep
}

// refute ends the serving of a map that gives slot to another node than
// the cluster's map read says (owner): a late or replayed SMIGRATED that
// maint applied. The cluster's word wins: go-redis reloads from it.
func (cs *clusterState) refute(m *Maint, slot int, read *slotMap, owner string) {
	sv := cs.serve.Load()
	if sv == nil || sv.until <= monoNow() {
		return
	}
	served := sv.sm.master(slot)
	if served == "" {
		return
	}
	if n, ok := read.node(goRedisAddr(served, sv.sm.origin)); ok && n.Addr == owner {
		return
	}
	if n, ok := read.node(served); ok && n.Addr == owner {
		return
	}
	if !cs.serve.CompareAndSwap(sv, nil) {
		return
	}
	cs.c.refuted.Add(1)
	m.logf("maint: the cluster gives slot %d to %s, not to %s as the slot map maint served: go-redis reloads from the cluster",
		slot, owner, served)
	cs.askReload(m)
}

// shardStats are what maint did for a cluster's sharded subscribers.
type shardStats struct {
	Followed, Unasked, Settled, Spanning uint64
}

func (s *shardSubs) stats() shardStats {
	return shardStats{Followed: s.followed.Load(), Unasked: s.unasked.Load(), Settled: s.settled.Load(),
		Spanning: s.spanning.Load()}
}

// shardMoves hands an SMIGRATED's moves to the sharded subscribers of the
// moved slots, on every node client of the cluster, whatever became of the
// SMIGRATED (applied, unapplied, stale, no map yet): the follow moves each
// one only once the cluster confirms (follow). Node names are not compared
// here: the triplets may name nodes in another form than go-redis does.
func (cs *clusterState) shardMoves(m *Maint, moves []slotMove) {
	cs.mu.Lock()
	ms := make([]*Maint, 0, len(cs.members))
	for _, mb := range cs.members {
		ms = append(ms, mb.m)
	}
	cs.mu.Unlock()
	in := func(sl int) bool {
		for _, mv := range moves {
			for _, r := range mv.r {
				if sl >= r.lo && sl <= r.hi {
					return true
				}
			}
		}
		return false
	}
	var hit []*conn
	for _, mm := range ms {
		for _, n := range mm.nodeList() {
			for _, c := range n.snapshot() {
				if c.shard.Load() == nil {
					continue
				}
				slots, _ := c.shardSlots()
				for _, sl := range slots {
					if in(sl.slot) {
						hit = append(hit, c)
						break
					}
				}
			}
		}
	}
	if len(hit) == 0 {
		return
	}
	srcs := make([]string, 0, len(moves))
	for _, mv := range moves {
		srcs = append(srcs, mv.src)
	}
	m.followShards(cs, hit, in, srcs, "SMIGRATED")
}
