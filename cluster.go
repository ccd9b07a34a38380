package maint

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint/internal/resp"
)

// clusterState is what the Maints of one cluster's node clients share: a
// cluster's maintenance (SMIGRATING, SMIGRATED) concerns the slot map, which
// belongs to the ClusterClient, not to any one node client.
//
// maint does not route: go-redis's ClusterClient decides where every
// command, pipeline and transaction goes, follows MOVED and ASK, runs its
// hooks and its retries. maint's part is to make go-redis's slot map right
// at once when an SMIGRATED says slots moved, at no round trip:
//
//   - every CLUSTER SLOTS reply go-redis reads through a node client is the
//     slot map maint keeps (handed);
//   - the first copy of an SMIGRATED (by sequence id) whose moves parse, name
//     nodes that map knows and agree with it (each slot is the source's or
//     already the destination's) makes a new map, the moves done; maint asks
//     go-redis to reload (ReloadState) and, for serveFor, answers the
//     CLUSTER SLOTS of go-redis's reloads with that map instead of asking a
//     node: the reload costs no round trip, as Jedis and node-redis update
//     their maps in place;
//   - the cluster's word wins: a MOVED that disagrees with the map served
//     ends the serving (go-redis follows it, and its own reload then asks
//     the cluster), and an SMIGRATED maint cannot apply (a node the map does
//     not know, a slot the map gives to another node) asks go-redis for a
//     reload from the cluster instead;
//   - a source left with no slot has its connections retired, as after a
//     MOVING, once go-redis has the new map and its pools are quiet.
//
// docs/design.md ("Cluster: one router") says why.
type clusterState struct {
	// seedsOptIn: Config.OptIn accepted a seed address, so every node
	// client opts in (optin.go). Set before the first node client.
	seedsOptIn bool
	// noOptInSaid: the cluster's node Maints say "no opt-in" once for
	// the client, not once per node (handshake.go noteCarrying).
	noOptInSaid sync.Once

	mu sync.Mutex // guards the following
	// reloads are the ReloadState of the ClusterClients bound (a Group may
	// build several on the same options), at most maxBound, by client.
	reloads []boundReload
	members []*clusterMember
	seen    map[int64]mono // SMIGRATED sequence ids acted on, until they expire
	// handed is the slot map last handed to go-redis through a node client
	// (read from the cluster, or served); nil until one is.
	handed   *slotMap
	watchers []slotMapWatch
	watchID  int

	// serve is non-nil while go-redis's reloads are answered from maint's
	// map: the node clients' hooks load it for each CLUSTER SLOTS and on
	// each MOVED.
	serve atomic.Pointer[serving]
	// served is closed (and replaced) each time maint starts serving a
	// map: a CLUSTER SLOTS waiting for its reply is answered at once.
	served atomic.Pointer[chan struct{}]
	// maps counts the slot maps handed to go-redis (read or served).
	maps atomic.Uint64
	// loads counts the slot-map loads (CLUSTER SHARDS or SLOTS) the node
	// clients' hooks saw: what tells that a reload maint asked for reached
	// maint's answer (watchReload).
	loads atomic.Uint64
	// reloadWatch: a watchReload runs; unseenSaid: its warning was logged.
	reloadWatch, unseenSaid atomic.Bool

	c clusterCounters

	subs shardSubs // sharded subscribers follow their slot (clusterpubsub.go)
}

// boundReload is one bound ClusterClient's reload.
type boundReload struct {
	key    any
	reload func()
}

// serving is the slot map maint answers go-redis's reloads with, after an
// SMIGRATED.
type serving struct {
	sm *slotMap
	// moves are the SMIGRATEDs' moves sm has over the last map read from
	// the cluster: a CLUSTER SLOTS reply in flight when an SMIGRATED came
	// (its request sent before) gets them done again.
	moves []slotMove
	until mono
}

// slotMapWatch is one watcher of the slot maps handed to go-redis.
type slotMapWatch struct {
	id int
	fn func(slotMapView)
}

// clusterMember is one node client of the cluster.
type clusterMember struct {
	addr string        // the address the ClusterClient names the node by
	m    *Maint        // the node client's Maint
	rdb  *redis.Client // the node client; nil when only its dials were seen
	// goneAt is when the first slot map without the node (as owner or
	// replica) was seen; 0 while the last map seen names it, or before
	// any map seen since it joined lacked it. Guarded by the state's mu.
	goneAt mono
	// owner is the ClusterClient the node client belongs to (own), held
	// weakly; zero when maint did not see it made (its sharded subscribers
	// then look at the first ClusterClient bound: shardSubs.owners).
	owner weak.Pointer[redis.ClusterClient]
}

// slotMove is one SMIGRATED triplet, parsed; src and dst are addresses as
// the triplet gives them until resolveLocked makes them the cluster's.
type slotMove struct {
	src, dst string
	r        []slotRange
}

// Bounds of the cluster state.
const (
	// serveFor is how long, after an SMIGRATED, go-redis's reloads are
	// answered from maint's map: go-redis's own reload (lazy, then a 200ms
	// cooldown, one more if asked meanwhile: TestContractClusterLazyReload)
	// and the one a command that raced it asks on its MOVED.
	serveFor = time.Second
	// maxServedMoves bounds the moves kept to do again on a map in flight.
	maxServedMoves = 256
	// maxBound bounds the ClusterClients whose reloads are kept.
	maxBound = 8
	// seenSMigrated is how long an SMIGRATED sequence id is remembered.
	seenSMigrated = 10 * time.Minute
	// maxSeenSMigrated bounds the sequence ids remembered.
	maxSeenSMigrated = 1024
	// emptiedFor bounds how long a source left with no slot keeps retiring
	// the connections it gets.
	emptiedFor = time.Minute
	// reloadSeenWithin bounds how long a reload maint asks go-redis for
	// may take to reach a node client's hooks (go-redis starts it at once,
	// or at the end of a 200 ms cooldown: TestContractClusterLazyReload).
	reloadSeenWithin = 5 * time.Second
	// drainTick is how often the connections of an emptied source are
	// looked at to close those that owe nothing.
	drainTick = 20 * time.Millisecond
)

type clusterCounters struct {
	smigrated, copies, stale, malformed, unapplied, reloads, reloadsUnseen, served, slotMaps, contradicted, refuted, confirmReads, emptied, emptiedClosed atomic.Uint64
}

// ClusterStats are the counters of a cluster's maint, shared by the Maints
// of all its node clients.
type ClusterStats struct {
	SMigrated uint64 // SMIGRATED notifications acted on (one per sequence id)
	Copies    uint64 // copies of an SMIGRATED already acted on, ignored
	Stale     uint64 // SMIGRATEDs the slot map already showed (replays), ignored
	Malformed uint64 // SMIGRATED notifications whose moves could not be read, ignored
	// Unapplied counts the SMIGRATEDs maint could not apply to the slot map
	// it keeps (a node the map does not know, a slot the map gives another
	// node): go-redis was asked to reload from the cluster instead.
	Unapplied uint64
	Reloads   uint64 // slot-map reloads maint asked the ClusterClient for
	// ReloadsUnseen counts the reloads maint asked for that reached no
	// node client's hooks within 5 s: maint's map could not be served
	// (logged once at Warn). Nonzero means the SMIGRATED handoff is not
	// in force.
	ReloadsUnseen uint64
	// Served counts go-redis's reloads answered from maint's map after an
	// SMIGRATED: no CLUSTER SHARDS or SLOTS round trip.
	Served   uint64
	SlotMaps uint64 // slot-map replies (CLUSTER SHARDS or SLOTS) read from the cluster through the node clients
	// Contradicted counts the MOVED replies that disagreed with the map
	// maint served while it served it, which ended its serving: the
	// cluster's map wins. A MOVED after the serving ended is not counted.
	Contradicted uint64
	// Refuted counts the slot maps maint served that a slot map read from
	// the cluster contradicted (a late or replayed SMIGRATED applied),
	// which ended their serving.
	Refuted uint64
	// ConfirmReads counts the slot maps maint read from the cluster itself
	// to confirm a sharded subscriber's move before moving it.
	ConfirmReads uint64
	Emptied      uint64 // sources left with no slot, whose connections were retired
	// EmptiedClosed counts the connections of emptied sources maint closed
	// (none owed a reply).
	EmptiedClosed uint64
}

// ClusterStats returns the counters of the cluster m's node client belongs
// to; zero outside a cluster.
func (m *Maint) ClusterStats() ClusterStats {
	cs := m.s.cluster
	if cs == nil {
		return ClusterStats{}
	}
	c := &cs.c
	return ClusterStats{
		SMigrated: c.smigrated.Load(), Copies: c.copies.Load(), Stale: c.stale.Load(),
		Malformed: c.malformed.Load(), Unapplied: c.unapplied.Load(), Reloads: c.reloads.Load(), ReloadsUnseen: c.reloadsUnseen.Load(),
		Served: c.served.Load(), SlotMaps: c.slotMaps.Load(), Contradicted: c.contradicted.Load(),
		Refuted: c.refuted.Load(), ConfirmReads: c.confirmReads.Load(),
		Emptied: c.emptied.Load(), EmptiedClosed: c.emptiedClosed.Load(),
	}
}

// newClusterState returns the state of one cluster; reload may be nil.
func newClusterState(reload func()) *clusterState {
	cs := &clusterState{seen: make(map[int64]mono)}
	if reload != nil {
		cs.bind(reload, reload)
	}
	return cs
}

// bind adds the reload of a ClusterClient (key: the client) whose node
// clients share the state, unless it is bound already; it reports whether
// it added it. Past maxBound the oldest is forgotten (a closed client's
// reload is a no-op anyway).
func (cs *clusterState) bind(key any, reload func()) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, b := range cs.reloads {
		if b.key == key {
			return false
		}
	}
	if len(cs.reloads) >= maxBound {
		cs.reloads = append(cs.reloads[:0:0], cs.reloads[1:]...)
	}
	cs.reloads = append(cs.reloads, boundReload{key: key, reload: reload})
	return true
}

// askReload asks every bound ClusterClient to reload its slot map (lazy:
// go-redis reloads on a goroutine of its own), for m, which read the
// SMIGRATED, and watches that the reload reaches maint (watchReload).
func (cs *clusterState) askReload(m *Maint) {
	cs.mu.Lock()
	rs := make([]func(), 0, len(cs.reloads))
	for _, b := range cs.reloads {
		rs = append(rs, b.reload)
	}
	cs.mu.Unlock()
	for _, r := range rs {
		cs.c.reloads.Add(1)
		r()
	}
	if len(rs) > 0 {
		cs.watchReload(m)
	}
}

// watchReload checks that a reload maint asked for reaches a node
// client's hooks as a slot-map load (CLUSTER SHARDS or SLOTS) within
// reloadSeenWithin, one check at a time. When none does, the seam the
// SMIGRATED handoff rests on is not in force (a go-redis release that
// loads its topology another way; ClusterOptions.ClusterSlots, which
// go-redis calls instead of asking a node): go-redis still reloads, from
// the cluster, but maint's map is never served. It is counted
// (ClusterStats.ReloadsUnseen) and said once per cluster at Warn.
func (cs *clusterState) watchReload(m *Maint) {
	if !cs.reloadWatch.CompareAndSwap(false, true) {
		return
	}
	before := cs.loads.Load()
	started := m.goBackground(func() {
		defer cs.reloadWatch.Store(false)
		t := time.NewTimer(reloadSeenWithin)
		defer t.Stop()
		select {
		case <-t.C:
		case <-m.ctx.Done():
			return
		}
		if cs.loads.Load() != before || m.stopped.Load() {
			return
		}
		cs.c.reloadsUnseen.Add(1)
		if cs.unseenSaid.CompareAndSwap(false, true) {
			m.warn("go-redis's slot-map reload did not pass through maint's node hooks: the SMIGRATED handoff is not in force for this cluster (go-redis reloads from the cluster instead); is ClusterOptions.ClusterSlots set, or does this go-redis release load its topology another way?",
				"go_redis", redis.Version(), "within", reloadSeenWithin)
		}
	})
	if !started {
		cs.reloadWatch.Store(false)
	}
}

// join records a node client of the cluster and its Maint: what maps the
// addresses of SMIGRATEDs and slot maps to Maints (a source left with no
// slot, a master's replicas).
func (cs *clusterState) join(rdb *redis.Client, m *Maint) {
	addr := rdb.Options().Addr
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, mb := range cs.members {
		if mb.m == m {
			if mb.rdb == nil {
				mb.rdb, mb.addr = rdb, addr
			}
			return
		}
	}
	cs.members = append(cs.members, &clusterMember{addr: addr, m: m, rdb: rdb})
}

// own records that node, a node client of the cluster, belongs to cc:
// what its sharded subscribers follow by (clusterpubsub.go), since several
// ClusterClients may share one state (one set of options). It is called
// from cc's OnNewNode, for each node client cc makes, and for those it had
// when it was instrumented.
func (cs *clusterState) own(node *redis.Client, cc *redis.ClusterClient) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, mb := range cs.members {
		if mb.rdb == node {
			mb.owner = weak.Make(cc)
			return
		}
	}
}

// ownerOf returns the ClusterClient m's node client belongs to, nil when
// maint does not know it or it was collected.
func (cs *clusterState) ownerOf(m *Maint) *redis.ClusterClient {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, mb := range cs.members {
		if mb.m == m {
			return mb.owner.Value()
		}
	}
	return nil
}

// noteDial records a Maint of the cluster by the address its node client
// dials, when nothing joined it (a route that does not know the node
// client): its connections can then still be retired when it loses its
// slots.
func (cs *clusterState) noteDial(m *Maint, addr string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, mb := range cs.members {
		if mb.m == m {
			return
		}
	}
	cs.members = append(cs.members, &clusterMember{addr: addr, m: m})
}

// leave forgets a Maint that closed.
func (cs *clusterState) leave(m *Maint) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, mb := range cs.members {
		if mb.m == m {
			cs.members = append(cs.members[:i:i], cs.members[i+1:]...)
			return
		}
	}
}

// findLocked returns the member known by addr: the address the ClusterClient
// names it by, one its node client dialled, or one its connections reached
// (an SMIGRATED may carry addresses in CLUSTER SLOTS form or resolved).
func (cs *clusterState) findLocked(addr string) *clusterMember {
	for _, mb := range cs.members {
		if mb.addr == addr {
			return mb
		}
	}
	for _, mb := range cs.members {
		if mb.m.reached(addr) {
			return mb
		}
	}
	return nil
}

// reached reports whether m's node client dialled addr or reached it.
func (m *Maint) reached(addr string) bool { return m.reg.reached(addr) }

// onSMigrated handles an SMIGRATED read on a connection of one of the
// cluster's node clients. It runs on the goroutine reading the connection
// and does not block.
func (cs *clusterState) onSMigrated(m *Maint, c *conn, nt resp.Notification) {
	now := monoNow()
	moves, bad := parseMoves(nt.Moves)
	cs.mu.Lock()
	if _, ok := cs.seen[nt.Seq]; ok {
		cs.mu.Unlock()
		cs.c.copies.Add(1)
		m.c.replayed.Add(1)
		return
	}
	if bad != "" {
		// Not remembered: a good copy of the same sequence id still counts.
		cs.mu.Unlock()
		cs.c.malformed.Add(1)
		m.badInput(c, nt.Seq, "SMIGRATED ignored: "+bad)
		return
	}
	cs.rememberLocked(nt.Seq, now)
	base := cs.currentLocked(now)
	if base == nil {
		// No slot map seen yet: go-redis's own reload reads one.
		cs.mu.Unlock()
		cs.c.smigrated.Add(1)
		cs.askReload(m)
		cs.shardMoves(m, moves)
		return
	}
	resolved, why := cs.resolveLocked(base, moves)
	if why != "" {
		// Whatever maint served is not the cluster's map any more.
		cs.serve.Store(nil)
		cs.mu.Unlock()
		cs.c.unapplied.Add(1)
		m.logf("maint: SMIGRATED %d not applied to the slot map (%s): go-redis reloads it from the cluster", nt.Seq, why)
		cs.askReload(m)
		cs.shardMoves(m, moves)
		return
	}
	if base.shows(resolved) {
		// A replay, or go-redis reloaded on a MOVED before it came: the
		// reloads more such MOVEDs bring (one more after go-redis's
		// cooldown) are answered with that map, which has the moves.
		if s := cs.serve.Load(); s == nil || s.until <= now {
			cs.startServing(&serving{sm: base, until: now + int64(serveFor)})
		}
		cs.mu.Unlock()
		cs.c.stale.Add(1)
		m.c.replayed.Add(1)
		cs.shardMoves(m, moves)
		return
	}
	sm := base.moved(resolved)
	var prev []slotMove
	if s := cs.serve.Load(); s != nil && s.until > now {
		prev = s.moves
	}
	all := append(append(make([]slotMove, 0, len(prev)+len(resolved)), prev...), resolved...)
	if len(all) > maxServedMoves {
		all = all[len(all)-maxServedMoves:]
	}
	cs.startServing(&serving{sm: sm, moves: all, until: now + int64(serveFor)})
	before, after := base.masters(), sm.masters()
	var emptied []*clusterMember
	for _, mv := range resolved {
		if before[mv.src] && !after[mv.src] {
			if mb := cs.findLocked(goRedisAddr(mv.src, base.origin)); mb != nil && !contains(emptied, mb) {
				emptied = append(emptied, mb)
			}
		}
	}
	maps := cs.maps.Load()
	cs.mu.Unlock()

	cs.c.smigrated.Add(1)
	cs.askReload(m)
	m.logf("maint: SMIGRATED %d acted on: %s; go-redis reloads its slot map from maint's, at no round trip",
		nt.Seq, describeMoves(resolved))
	for _, mb := range emptied {
		mb.m.retireEmptied(nt.Seq, "SMIGRATED left it with no slot", mb.rdb, maps)
	}
	cs.shardMoves(m, moves) // sharded subscribers of the moved slots follow them, once the cluster confirms (clusterpubsub.go)
}

// parseMoves reads SMIGRATED triplets; bad says why they cannot be read
// (then none is used): a source or destination that is no host:port, a
// slot list that does not parse (a slot over 16383, an inverted range), no
// triplet or no slot at all.
func parseMoves(in []resp.SlotMove) (moves []slotMove, bad string) {
	if len(in) == 0 {
		return nil, "no move"
	}
	out := make([]slotMove, 0, len(in))
	for _, mv := range in {
		if !validAddr(mv.Src) || !validAddr(mv.Dst) {
			return nil, fmt.Sprintf("bad address in %q -> %q", clip(mv.Src), clip(mv.Dst))
		}
		r, err := parseSlots(mv.Slots)
		if err != nil {
			return nil, fmt.Sprintf("%v: %q", err, clip(mv.Slots))
		}
		if len(r) == 0 {
			return nil, fmt.Sprintf("no slot in %q", clip(mv.Slots))
		}
		out = append(out, slotMove{src: mv.Src, dst: mv.Dst, r: r})
	}
	return out, ""
}

// clip bounds what a log line quotes of network input.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// currentLocked is the slot map go-redis routes by, as far as maint knows:
// the one it serves, else the last one handed.
func (cs *clusterState) currentLocked(now mono) *slotMap {
	if s := cs.serve.Load(); s != nil && s.until > now {
		return s.sm
	}
	return cs.handed
}

// resolveLocked gives moves the cluster's names of their nodes, as sm
// knows them; why says, when it cannot, what sm does not agree with: a
// destination it does not name, a slot it gives a node that is neither the
// source nor the destination.
func (cs *clusterState) resolveLocked(sm *slotMap, moves []slotMove) ([]slotMove, string) {
	out := make([]slotMove, 0, len(moves))
	for _, mv := range moves {
		dst := cs.clusterNameLocked(sm, mv.dst)
		if dst == "" {
			return nil, fmt.Sprintf("destination %s is no node of the slot map", clip(mv.dst))
		}
		src := cs.clusterNameLocked(sm, mv.src)
		for _, r := range mv.r {
			for s := r.lo; s <= r.hi; s++ {
				if o := sm.master(s); o != dst && (src == "" || o != src) {
					return nil, fmt.Sprintf("slot %d is %q's in the slot map, not the source %s's", s, o, clip(mv.src))
				}
			}
		}
		if src == "" {
			src = mv.src
		}
		out = append(out, slotMove{src: src, dst: dst, r: mv.r})
	}
	return out, ""
}

// clusterNameLocked returns the address sm names the node at addr by (addr
// itself, the address go-redis names it by, or one a node client of it
// reached), "" when sm does not name it.
func (cs *clusterState) clusterNameLocked(sm *slotMap, addr string) string {
	if n, ok := sm.node(addr); ok {
		return n.Addr
	}
	for _, mb := range cs.members {
		if mb.m.reached(addr) {
			if n, ok := sm.node(mb.addr); ok {
				return n.Addr
			}
		}
	}
	return ""
}

// loadCmd is a slot-map load a node client is sent: go-redis's reload
// sends CLUSTER SHARDS from v9.24 on (CLUSTER SLOTS when the cluster
// refuses it), CLUSTER SLOTS before (TestContractClusterReloadThroughNodeHook).
type loadCmd interface {
	redis.Cmder
	// fresh returns a new command of the same kind, to send in its stead.
	fresh(ctx context.Context) loadCmd
	// serve sets sm as the reply.
	serve(sm *slotMap)
	// take sets the reply of own, a command fresh made.
	take(own loadCmd)
	// read returns the map own's reply gives, nil when go-redis would not
	// take it either; origin is the node client's address.
	read(own loadCmd, origin string, tls bool) *slotMap
	// cmd is go-redis's command, as the hooks after maint's are handed
	// it: they may assert its type, as go-redis's own code does.
	cmd() redis.Cmder
}

// slotsLoad is a CLUSTER SLOTS.
type slotsLoad struct{ *redis.ClusterSlotsCmd }

func (l slotsLoad) fresh(ctx context.Context) loadCmd {
	return slotsLoad{redis.NewClusterSlotsCmd(ctx, "cluster", "slots")}
}
func (l slotsLoad) cmd() redis.Cmder  { return l.ClusterSlotsCmd }
func (l slotsLoad) serve(sm *slotMap) { l.SetErr(nil); l.SetVal(sm.slots()) }
func (l slotsLoad) take(own loadCmd)  { l.SetVal(own.(slotsLoad).Val()) }
func (l slotsLoad) read(own loadCmd, origin string, _ bool) *slotMap {
	return newSlotMap(own.(slotsLoad).Val(), origin)
}

// shardsLoad is a CLUSTER SHARDS.
type shardsLoad struct{ *redis.ClusterShardsCmd }

func (l shardsLoad) fresh(ctx context.Context) loadCmd {
	return shardsLoad{redis.NewClusterShardsCmd(ctx, "cluster", "shards")}
}
func (l shardsLoad) cmd() redis.Cmder  { return l.ClusterShardsCmd }
func (l shardsLoad) serve(sm *slotMap) { l.SetErr(nil); l.SetVal(sm.shardsReply()) }
func (l shardsLoad) take(own loadCmd)  { l.SetVal(own.(shardsLoad).Val()) }
func (l shardsLoad) read(own loadCmd, origin string, tls bool) *slotMap {
	sm, err := newShardsMap(own.(shardsLoad).Val(), origin, tls)
	if err != nil {
		return nil
	}
	return sm
}

// asLoad returns cmd as a slot-map load, if it is one.
func asLoad(cmd redis.Cmder) (loadCmd, bool) {
	switch c := cmd.(type) {
	case *redis.ClusterSlotsCmd:
		return slotsLoad{c}, true
	case *redis.ClusterShardsCmd:
		return shardsLoad{c}, true
	}
	return nil, false
}

// reloadFunc is the function go-redis's ClusterClient loads its slot map
// in, sending the load through a node client (v9.23.0 and v9.24.0:
// TestContractClusterReloadFromLoadState).
const reloadFunc = "github.com/redis/go-redis/v9.(*ClusterClient).loadState"

// reloadMark marks a context whose slot-map load is go-redis's reload,
// for tests that drive a node hook by hand.
type reloadMark struct{}

// fromReload reports whether the slot-map load a node client's hook runs
// now is go-redis's reload: sent from reloadFunc, on the caller's
// goroutine. Anything else is the application's own CLUSTER SHARDS or
// SLOTS (cc.ClusterSlots, or a node client's), whose reply go-redis
// installs nowhere: maint neither answers it from its served map nor
// takes its reply for the map go-redis was handed (nodes gone, emptied).
// The same arguments, the same command types and contexts reach the hook
// either way; only the stack tells. It is read only for slot-map loads.
func fromReload(ctx context.Context) bool {
	if ctx.Value(reloadMark{}) != nil {
		return true
	}
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if f.Function == reloadFunc {
			return true
		}
		if !more {
			return false
		}
	}
}

// load runs go-redis's reload's slot-map load a node client is sent
// (fromReload): while maint serves its map, the reply is that map, with no
// round trip; otherwise the cluster's reply, which maint keeps. A request
// still waiting for its reply when an SMIGRATED starts the serving
// (go-redis reloading on a MOVED, its request queued behind a busy
// source's pool) is answered with the served map at once: go-redis folds
// the reload maint asks for into the one running
// (TestContractClusterLazyReload). The cluster's reply, when it comes, is
// still kept.
func (cs *clusterState) load(ctx context.Context, m *Maint, cmd loadCmd, next redis.ProcessHook) error {
	cs.loads.Add(1)
	if cs.serveTo(m, cmd) {
		return nil
	}
	sig := cs.servedSignal()
	own := cmd.fresh(ctx)
	done := make(chan error, 1)
	ask := func() { // ends with next: bounded by go-redis's timeouts
		err := next(ctx, own.cmd())
		if err == nil {
			cs.c.slotMaps.Add(1)
		}
		done <- err // buffered: a reply no longer awaited is dropped
	}
	// m's goroutine, which m's Close waits for: a request answered from
	// the served map meanwhile still runs to its reply, the connection
	// then going back to the pool clean. Close the client first and its
	// connections close, which ends the read at once. m closed: asked
	// here.
	if !m.goBackground(ask) {
		ask()
	}
	select {
	case err := <-done:
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		cs.sawSlotMap(m, cmd, own)
		if cs.serveTo(m, cmd) {
			return nil // an SMIGRATED came while the reply was on its way
		}
		cmd.take(own)
		return nil
	case <-sig:
		if cs.serveTo(m, cmd) {
			return nil
		}
		err := <-done
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		cs.sawSlotMap(m, cmd, own)
		cmd.take(own)
		return nil
	}
}

// serveTo answers cmd with the map maint serves, if it serves one now.
func (cs *clusterState) serveTo(m *Maint, cmd loadCmd) bool {
	s := cs.serve.Load()
	if s == nil || s.until <= monoNow() {
		return false
	}
	cmd.serve(s.sm)
	cs.c.served.Add(1)
	cs.hand(m, s.sm, false)
	return true
}

// startServing serves s, and answers the CLUSTER SLOTS waiting for their
// replies.
func (cs *clusterState) startServing(s *serving) {
	cs.serve.Store(s)
	fresh := make(chan struct{})
	if old := cs.served.Swap(&fresh); old != nil {
		close(*old)
	}
}

// servedSignal is closed when maint next starts serving a map.
func (cs *clusterState) servedSignal() <-chan struct{} {
	for {
		if p := cs.served.Load(); p != nil {
			return *p
		}
		fresh := make(chan struct{})
		cs.served.CompareAndSwap(nil, &fresh)
	}
}

// sawSlotMap keeps a slot-map reply read from the cluster through m's
// node client (own, a fresh load of cmd's kind): the slot map go-redis is
// about to use. While maint serves its map, the reply was asked before the
// SMIGRATED came: the moves are done on it again.
func (cs *clusterState) sawSlotMap(m *Maint, cmd, own loadCmd) {
	cs.mu.Lock()
	origin, tls := "", false
	for _, mb := range cs.members {
		if mb.m == m {
			origin = mb.addr
			if mb.rdb != nil {
				tls = mb.rdb.Options().TLSConfig != nil
			}
		}
	}
	cs.mu.Unlock()
	sm := cmd.read(own, origin, tls)
	if sm == nil {
		return
	}
	cs.hand(m, sm, true)
}

// hand records sm as the slot map go-redis was handed through m's node
// client (read from the cluster, or served), and tells the watchers.
func (cs *clusterState) hand(m *Maint, sm *slotMap, read bool) {
	now := monoNow()
	cs.mu.Lock()
	if !read {
		// Served: go-redis names its nodes relative to the node it asked.
		cp := *sm
		for _, mb := range cs.members {
			if mb.m == m {
				cp.origin = mb.addr
			}
		}
		sm = &cp
	}
	before := cs.currentLocked(now) // the served map, if any: what go-redis was to have
	cs.handed = sm
	if s := cs.serve.Load(); s != nil && s.until > now && read {
		if moves, why := cs.resolveLocked(sm, s.moves); why == "" {
			cs.serve.Store(&serving{sm: sm.moved(moves), moves: s.moves, until: s.until})
		} else {
			cs.serve.CompareAndSwap(s, nil)
		}
	}
	cs.maps.Add(1)
	maps := cs.maps.Load() - 1 // this map is the reload
	var emptied []*clusterMember
	if read {
		cs.markGoneLocked(sm, now)
	}
	after := sm.masters()
	for _, mb := range cs.members {
		n, ok := sm.node(mb.addr)
		switch {
		case ok && after[n.Addr]:
			mb.m.emptied.clear() // it owns slots (again)
		case read && before != nil && cs.masteredLocked(before, mb.addr):
			emptied = append(emptied, mb)
		}
	}
	ws := append([]slotMapWatch(nil), cs.watchers...)
	cs.mu.Unlock()
	for _, mb := range emptied {
		mb.m.retireEmptied(0, "no longer in the slot map", mb.rdb, maps)
	}
	view := slotMapView{sm: sm}
	for _, w := range ws {
		w.fn(view)
	}
}

// masteredLocked reports whether sm has the node go-redis names addr as a
// master of some slot.
func (cs *clusterState) masteredLocked(sm *slotMap, addr string) bool {
	n, ok := sm.node(addr)
	return ok && sm.masters()[n.Addr]
}

// checkMoved ends the serving of s when a MOVED reply disagrees with its
// map while it is in force: the cluster's word wins, and go-redis's reload
// on that MOVED then asks the cluster. A serving that ended (past its
// until) answers no reload: a MOVED then contradicts nothing maint serves.
func (cs *clusterState) checkMoved(m *Maint, s *serving, err error) {
	if s.until <= monoNow() {
		return
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "MOVED ") {
		return
	}
	f := strings.Fields(msg)
	if len(f) != 3 {
		return
	}
	slot, perr := strconv.Atoi(f[1])
	if perr != nil || slot < 0 || slot >= numSlots {
		return
	}
	cs.mu.Lock()
	agrees := cs.clusterNameLocked(s.sm, f[2]) == s.sm.master(slot)
	cs.mu.Unlock()
	if agrees || !cs.serve.CompareAndSwap(s, nil) {
		return
	}
	cs.c.contradicted.Add(1)
	m.logf("maint: %s disagrees with the slot map maint served: go-redis reloads from the cluster", clip(msg))
}

// checkMovedCmds is checkMoved for the commands of a pipeline.
func (cs *clusterState) checkMovedCmds(m *Maint, cmds []redis.Cmder) {
	for _, c := range cmds {
		s := cs.serve.Load()
		if s == nil {
			return
		}
		if err := c.Err(); err != nil {
			cs.checkMoved(m, s, err)
		}
	}
}

// slotMapView is a slot map handed to go-redis's ClusterClient (read from
// the cluster or served by maint), as go-redis names its nodes.
type slotMapView struct{ sm *slotMap }

// master returns the address go-redis names slot's master by, "" when the
// map assigns the slot to no node.
func (v slotMapView) master(slot int) string {
	if v.sm == nil || slot < 0 || slot >= numSlots {
		return ""
	}
	a := v.sm.master(slot)
	if a == "" {
		return ""
	}
	return goRedisAddr(a, v.sm.origin)
}

// watchSlotMaps calls fn with each slot map handed to go-redis from now on,
// on the goroutine that handed it, just before go-redis installs it (fn
// must not block; a command go-redis routes after fn returned may still
// use the map before). The returned func stops the watch.
func (cs *clusterState) watchSlotMaps(fn func(slotMapView)) (stop func()) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.watchID++
	id := cs.watchID
	cs.watchers = append(cs.watchers, slotMapWatch{id: id, fn: fn})
	return func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		for i, w := range cs.watchers {
			if w.id == id {
				cs.watchers = append(cs.watchers[:i:i], cs.watchers[i+1:]...)
				return
			}
		}
	}
}

// slotMapNow is the slot map go-redis was last handed (zero view before
// any).
func (cs *clusterState) slotMapNow() slotMapView {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return slotMapView{sm: cs.handed}
}

// relaxReplicas opens (end false) or ends the SMIGRATING nt on the node
// clients of the replicas of m's node, which read traffic reaches with
// ReadOnly, RouteByLatency or RouteRandomly: the slot map maint keeps says
// which they are.
func (cs *clusterState) relaxReplicas(m *Maint, nt resp.Notification, end bool) {
	cs.mu.Lock()
	sm := cs.currentLocked(monoNow())
	var self string
	for _, mb := range cs.members {
		if mb.m == m {
			self = mb.addr
		}
	}
	var rs []*Maint
	if sm != nil && self != "" {
		if n, ok := sm.node(self); ok {
			for _, r := range sm.replicas(n.Addr) {
				if mb := cs.findLocked(goRedisAddr(r.Addr, sm.origin)); mb != nil && mb.m != m {
					rs = append(rs, mb.m)
				}
			}
		}
	}
	cs.mu.Unlock()
	for _, rm := range rs {
		for _, n := range rm.nodeList() {
			if end {
				rm.relaxEnd(n, nt)
			} else {
				rm.relax(n, nt)
			}
		}
	}
}

func contains(ms []*clusterMember, mb *clusterMember) bool {
	for _, x := range ms {
		if x == mb {
			return true
		}
	}
	return false
}

func describeMoves(moves []slotMove) string {
	var b strings.Builder
	for i, mv := range moves {
		if i > 0 {
			b.WriteString("; ")
		}
		n := 0
		for _, r := range mv.r {
			n += r.hi - r.lo + 1
		}
		fmt.Fprintf(&b, "%d slots %s -> %s", n, mv.src, mv.dst)
	}
	return b.String()
}

// rememberLocked remembers an SMIGRATED sequence id, forgetting the expired
// ones and, past the bound, the oldest.
func (cs *clusterState) rememberLocked(seq int64, now mono) {
	if len(cs.seen) >= maxSeenSMigrated/2 {
		for k, at := range cs.seen {
			if now-at > int64(seenSMigrated) {
				delete(cs.seen, k)
			}
		}
	}
	for len(cs.seen) >= maxSeenSMigrated {
		oldK, oldAt := int64(0), mono(0)
		first := true
		for k, at := range cs.seen {
			if first || at < oldAt {
				oldK, oldAt, first = k, at, false
			}
		}
		delete(cs.seen, oldK)
	}
	if cs.seen == nil {
		cs.seen = make(map[int64]mono)
	}
	cs.seen[seq] = now
}

// markGoneLocked notes, for each member, whether the slot map read names
// its node (as an owner or a replica): go-redis's ClusterClient closes the
// node clients a reloaded map no longer names, a minute later
// (TestContractClusterNodeGC).
func (cs *clusterState) markGoneLocked(sm *slotMap, now mono) {
	for _, mb := range cs.members {
		switch {
		case sm.named(mb.addr):
			mb.goneAt = 0
		case mb.goneAt == 0:
			mb.goneAt = now
		}
	}
}

// goneFor is how long the slot maps seen have no longer named m's node: 0
// while the last one names it, or when m is not a member.
func (cs *clusterState) goneFor(m *Maint, now mono) time.Duration {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, mb := range cs.members {
		if mb.m == m {
			if mb.goneAt == 0 {
				return 0
			}
			return time.Duration(now - mb.goneAt)
		}
	}
	return 0
}

// retireEmptied retires the connections of m's node, which has no slot any
// more, as after a MOVING: once go-redis routes nothing new there (a slot
// map newer than afterMaps was seen) and its node client's pools are quiet
// (no connection in use, no command waiting for one: a command routed there
// before the reload still gets a connection, the endpoint refusing new
// ones), every connection that owes nothing is closed, and the others as
// their replies come in; its sharded subscribers in one slot follow their
// slot instead (retireEmptiedConns). The endpoint's removal then finds
// none, but a subscriber whose slot go-redis's map still gives to this node
// when the follow's bound passes (S1b). Bounded by
// emptiedFor; rdb is m's node client, nil when unknown (then a connection
// owing nothing counts as quiet).
func (m *Maint) retireEmptied(seq int64, why string, rdb *redis.Client, afterMaps uint64) {
	if m.stopped.Load() {
		return
	}
	m.emptied.mark(monoNow())
	if cs := m.s.cluster; cs != nil {
		cs.c.emptied.Add(1)
	}
	m.emit(Event{Kind: EventRetire, Seq: seq, Detail: why + "; its connections retire once the slot map is reloaded and its pool is quiet"})
	if !m.emptied.startDrain() {
		return
	}
	if !m.goBackground(func() { m.drainEmptied(seq, rdb, afterMaps) }) {
		m.emptied.endDrain()
	}
}

// emptiedNode is the cluster state of a node client's Maint: whether its
// node was left with no slot (recently: for emptiedFor), and whether its
// connections are being drained.
type emptiedNode struct {
	until    atomic.Int64 // mono: when the node stops retiring its connections; 0: never emptied
	draining atomic.Bool  // drainEmptied runs
}

// mark records that the node was left with no slot at now.
func (e *emptiedNode) mark(now mono) { e.until.Store(now + int64(emptiedFor)) }

// clear records that the node owns slots (again).
func (e *emptiedNode) clear() { e.until.Store(0) }

// active reports whether the node was left with no slot, recently.
func (e *emptiedNode) active() bool {
	u := e.until.Load()
	return u != 0 && monoNow() < u
}

// startDrain reports whether the caller is the one to drain (none runs).
func (e *emptiedNode) startDrain() bool { return e.draining.CompareAndSwap(false, true) }

// endDrain records that the drain is over.
func (e *emptiedNode) endDrain() { e.draining.Store(false) }

// isEmptied reports whether m's node was left with no slot, recently.
func (m *Maint) isEmptied() bool { return m.emptied.active() }

// drainEmptied is retireEmptied's loop, on one of m's goroutines.
func (m *Maint) drainEmptied(seq int64, rdb *redis.Client, afterMaps uint64) {
	defer m.emptied.endDrain()
	cs := m.s.cluster
	t := time.NewTicker(drainTick)
	defer t.Stop()
	retired := false
	for {
		if !m.isEmptied() {
			return // it owns slots again, or the bound passed
		}
		if !retired && (cs == nil || cs.maps.Load() > afterMaps) && m.quiet(rdb) {
			retired = true
			n := m.retireEmptiedConns(cs)
			m.emit(Event{Kind: EventRetire, Seq: seq, Count: n, Detail: "the connections of a node with no slot"})
		}
		if retired {
			left := 0
			for _, n := range m.nodeList() {
				closed, _, _ := m.closeRetired(n, true)
				if cs != nil && closed > 0 {
					cs.c.emptiedClosed.Add(uint64(closed))
				}
				for _, c := range n.snapshot() {
					if c.draining() {
						left++
					}
				}
			}
			if left == 0 {
				return
			}
		}
		select {
		case <-t.C:
		case <-m.ctx.Done():
			return
		}
	}
}

// retireEmptiedConns retires the connections of m's node, left with no
// slot, but for its sharded subscribers in one slot: those follow their
// slot (clusterpubsub.go), closed once go-redis's own slot map, the one its
// PubSub reconnects by, gives the slot to another node. The map cs.maps
// counts is the one maint hands go-redis in its CLUSTER SLOTS hook, before
// go-redis installs it: a subscriber closed then would reconnect by the
// old map, to this node, where its SSUBSCRIBE meets MOVED, which go-redis
// does not follow for a PubSub. Where maint does not know the ClusterClient
// (no slot map to follow), they are retired with the others.
func (m *Maint) retireEmptiedConns(cs *clusterState) int {
	follow := cs != nil && (cs.subs.owners.Load() != nil || cs.ownerOf(m) != nil)
	n := 0
	var subs []*conn
	for _, nd := range m.nodeList() {
		for _, c := range nd.snapshot() {
			if follow {
				if slots, complete := c.shardSlots(); len(slots) == 1 && complete {
					subs = append(subs, c)
					continue
				}
			}
			if m.retireConn(c, true) {
				n++
			}
		}
	}
	if len(subs) > 0 {
		m.followShards(cs, subs, nil, nil, "its node was left with no slot")
	}
	return n
}

// quiet reports whether no command uses or waits for a connection of m's
// node client.
func (m *Maint) quiet(rdb *redis.Client) bool {
	if rdb == nil {
		for _, n := range m.nodeList() {
			for _, c := range n.snapshot() {
				if c.owed() != 0 {
					return false
				}
			}
		}
		return true
	}
	ps := rdb.PoolStats()
	for ps != nil {
		if ps.IdleConns != ps.TotalConns || ps.PendingRequests != 0 {
			return false
		}
		ps = (*redis.PoolStats)(ps.PipelineStats)
	}
	return true
}

// nodeList returns m's nodes.
func (m *Maint) nodeList() []*node { return m.reg.nodeList() }

// canonSlots returns a slot list in one canonical form ("1-3,7"), or s
// itself when it cannot be read: what matches an SMIGRATING to its
// SMIGRATED.
func canonSlots(rs []slotRange) string {
	var bits [numSlots / 64]uint64
	for _, r := range rs {
		for s := r.lo; s <= r.hi; s++ {
			bits[s/64] |= 1 << (s % 64)
		}
	}
	var b strings.Builder
	for s := 0; s < numSlots; {
		if bits[s/64]&(1<<(s%64)) == 0 {
			s++
			continue
		}
		e := s
		for e+1 < numSlots && bits[(e+1)/64]&(1<<((e+1)%64)) != 0 {
			e++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s))
		if e > s {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(e))
		}
		s = e + 1
	}
	return b.String()
}

// smigratingSlots is the canonical slot list of an SMIGRATING, or of the
// moves of an SMIGRATED (all of them together).
func smigratingSlots(nt resp.Notification) string {
	var rs []slotRange
	switch nt.Kind {
	case resp.KindSMigrating:
		r, err := parseSlots(nt.Slots)
		if err != nil {
			return nt.Slots
		}
		rs = r
	case resp.KindSMigrated:
		for _, mv := range nt.Moves {
			r, err := parseSlots(mv.Slots)
			if err != nil {
				return ""
			}
			rs = append(rs, r...)
		}
	}
	return canonSlots(rs)
}
