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

	// recent are the slots whose subscribers maint closed lately, and the
	// node they left: a connection that subscribes in one of them there
	// within shardFollowFor is go-redis reconnecting (or a new PubSub) by a
	// slot map that went stale again, and it meets MOVED; it follows the
	// slot too. At most one entry per slot, each expiring.
	recentMu sync.Mutex
	recent   map[int]recentMove
}

// recentMove is a slot that left a node, until when it counts.
type recentMove struct {
	from  string
	until time.Time
}

// noteMoved remembers that slot sl left from.
func (s *shardSubs) noteMoved(sl int, from string) {
	now := time.Now()
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
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
	s.recent[sl] = recentMove{from: from, until: now.Add(shardFollowFor)}
}

// movedAway reports whether slot sl left node from lately.
func (s *shardSubs) movedAway(sl int, from string) bool {
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	e, ok := s.recent[sl]
	return ok && e.from == from && time.Now().Before(e.until)
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
	// following: a follow is under way for the connection.
	following atomic.Bool
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
	stale := false
	var cs *clusterState
	if c.m != nil { // a bare conn in the unit tests has none
		cs = c.m.s.cluster
	}
	defer func() { // after the record's lock is let go
		if stale {
			// Subscribing where the slot just left: go-redis's slot map went
			// stale again (or a new PubSub read it before the reload); the
			// SSUBSCRIBE meets MOVED. Follow the slot from here too.
			c.m.followShards(&cs.subs, []*conn{c}, nil, "SSUBSCRIBE on the node the slot just left")
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
		stale = stale || (cs != nil && c.t != nil && cs.subs.movedAway(sl, c.t.addr))
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
	c.m.followShards(&cs.subs, []*conn{c}, nil, "sunsubscribe pushed by the server")
}

// slotsMoved makes the sharded subscribers of the moved slots follow them:
// every connection of the Maints ms subscribed in a slot moved(src, slot)
// says moved away from src, the address its node client dials. m is the
// Maint that read the news.
func (s *shardSubs) slotsMoved(m *Maint, ms []*Maint, moved func(src string, slot int) bool) {
	var subs []*conn
	for _, mm := range ms {
		for _, n := range mm.nodeList() {
			n.mu.Lock()
			for c := range n.conns {
				if c.shard.Load() != nil {
					subs = append(subs, c)
				}
			}
			n.mu.Unlock()
		}
	}
	if len(subs) == 0 {
		return
	}
	only := func(c *conn, sl int) bool { return moved(c.t.addr, sl) }
	var hit []*conn
	for _, c := range subs {
		slots, _ := c.shardSlots()
		for _, sl := range slots {
			if only(c, sl.slot) {
				hit = append(hit, c)
				break
			}
		}
	}
	if len(hit) > 0 {
		m.followShards(s, hit, only, "SMIGRATED")
	}
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
// connections cs not already following (see follow); only, when set, limits
// the slots looked at.
func (m *Maint) followShards(s *shardSubs, cs []*conn, only func(*conn, int) bool, why string) {
	var mine []*conn
	for _, c := range cs {
		if rec := c.shard.Load(); rec != nil && rec.following.CompareAndSwap(false, true) {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return
	}
	if !m.goBackground(func() { s.follow(m, mine, only, why) }) {
		for _, c := range mine {
			c.shard.Load().following.Store(false)
		}
	}
}

// follow waits, bounded by shardFollowFor, for go-redis's slot map to give a
// slot each connection is subscribed in to another node, asking for reloads
// meanwhile, and then closes that connection: go-redis's PubSub reconnects
// through the map and resubscribes. A connection whose slots stay where they
// are is left alone.
func (s *shardSubs) follow(m *Maint, cs []*conn, only func(*conn, int) bool, why string) {
	defer func() {
		for _, c := range cs {
			c.shard.Load().following.Store(false)
		}
	}()
	op := s.owners.Load()
	if op == nil {
		m.logf("maint: sharded subscriber (%s): the ClusterClient is not known to maint "+
			"(use Group.NewClusterClient or Instrument): go-redis's PubSub is left as it is", why)
		return
	}
	owners := *op
	ctx := m.ctx
	end := time.Now().Add(shardFollowFor)
	var nextReload time.Time
	t := time.NewTimer(shardPoll)
	defer t.Stop()
	left := append([]*conn(nil), cs...)
	for {
		left = s.closeMoved(ctx, m, owners, left, only, why)
		if len(left) == 0 {
			return
		}
		now := time.Now()
		if now.After(end) {
			s.settled.Add(uint64(len(left)))
			m.logf("maint: sharded subscriber (%s): go-redis's slot map still gives %d connection(s)' slots to their node after %v: left as they are",
				why, len(left), shardFollowFor)
			return
		}
		if !now.Before(nextReload) {
			owners.reload()
			nextReload = now.Add(shardReloadEvery)
		}
		t.Reset(shardPoll)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// closeMoved closes the connections of cs one of whose slots the slot map
// now gives to another node, and returns the others still open.
func (s *shardSubs) closeMoved(ctx context.Context, m *Maint, owners slotOwners, cs []*conn, only func(*conn, int) bool, why string) []*conn {
	keep := cs[:0]
	for _, c := range cs {
		if c.state.Load() == stateClosed {
			continue
		}
		slots, complete := c.shardSlots()
		if len(slots) > 1 || !complete {
			// go-redis would resubscribe them all in one SSUBSCRIBE, which
			// the server refuses across slots (CROSSSLOT): closing would
			// lose the channels that did not move too.
			s.spanning.Add(1)
			m.logf("maint: sharded subscriber (%s) on %s: subscribed in %d slot(s) (record complete: %v); "+
				"go-redis resubscribes them in one SSUBSCRIBE, which the server refuses across slots: left as it is",
				why, c.t.addr, len(slots), complete)
			continue
		}
		moved, to, sl := false, "", 0
		for _, ss := range slots {
			if only != nil && !only(c, ss.slot) {
				continue
			}
			addr, err := owners.masterOf(ctx, ss.channel)
			if err == nil && addr != "" && addr != c.t.addr {
				moved, to, sl = true, addr, ss.slot
				break
			}
		}
		if !moved {
			keep = append(keep, c)
			continue
		}
		if c.closeWith(errShardMoved) {
			s.noteMoved(sl, c.t.addr)
			s.followed.Add(1)
			m.emit(Event{Kind: EventRetire, Node: c.n.key, Count: 1,
				Detail: "sharded subscriber (" + why + "): slot " + strconv.Itoa(sl) + " now at " + to +
					": connection closed for go-redis's PubSub to resubscribe there"})
		}
	}
	return keep
}

// shardStats are what maint did for a cluster's sharded subscribers.
type shardStats struct {
	Followed, Unasked, Settled, Spanning uint64
}

func (s *shardSubs) stats() shardStats {
	return shardStats{Followed: s.followed.Load(), Unasked: s.unasked.Load(), Settled: s.settled.Load(),
		Spanning: s.spanning.Load()}
}

// shardMoves hands an SMIGRATED's moves, once acted on, to the sharded
// subscribers of the moved slots (slotsMoved). It is the SMIGRATED path's
// whole dependency on cluster.go's types.
func (cs *clusterState) shardMoves(m *Maint, moves []slotMove) {
	cs.mu.Lock()
	var ms []*Maint
	for _, mb := range cs.members {
		for _, mv := range moves {
			if mv.src == mb.addr {
				ms = append(ms, mb.m)
				break
			}
		}
	}
	cs.mu.Unlock()
	if len(ms) == 0 {
		return
	}
	cs.subs.slotsMoved(m, ms, func(src string, sl int) bool {
		for _, mv := range moves {
			if mv.src != src {
				continue
			}
			for _, r := range mv.r {
				if sl >= r.lo && sl <= r.hi {
					return true
				}
			}
		}
		return false
	})
}
