package maint

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint/internal/resp"
)

// clusterState is what the Maints of one cluster's node clients share: a
// cluster's maintenance (SMIGRATING, SMIGRATED) concerns the slot map, which
// belongs to the ClusterClient, not to any one node client.
//
// An SMIGRATED arrives on many connections of possibly several nodes, each
// node client with its own Maint: the state acts on the first copy of each
// sequence id and ignores the others, and ignores a replay (servers replay
// the latest completion to new connections) that the slot map maint last
// saw already shows. Acting on one means:
//
//   - one reload of the ClusterClient's slot map (lazy, go-redis's own),
//     asked reloadDelay later unless go-redis's own reload showed the moves
//     first;
//   - until that reload is seen (a CLUSTER SLOTS reply agreeing with the
//     moves) and a little after, or a bound, the source's node client sends
//     the commands of the moved slots straight to the destination's node
//     client: no MOVED round trip through the source, and no further reload
//     (a MOVED would make go-redis reload again);
//   - a source left with no slot has its connections retired, as after a
//     MOVING, once the reload is seen and its pools are quiet: idle ones
//     closed then, busy ones when their reply is in.
//
// docs/design.md ("Cluster") says why each step is so.
type clusterState struct {
	mu sync.Mutex // guards the following
	// reload marks the ClusterClient's slot map for reload; nil until the
	// ClusterClient is known (bind).
	reload  func()
	members []*clusterMember
	seen    map[int64]mono // SMIGRATED sequence ids handled, until they expire
	// owner is the slot map last seen (CLUSTER SLOTS replies read through
	// the node clients, and the moves of the SMIGRATEDs acted on since):
	// for each slot, 1 + an index in owners, 0 when unknown. nil until a
	// slot map is seen.
	owner  []uint16
	owners []string

	// moved is every slot moved recently, for transactions, which only the
	// ClusterClient's own hook can send elsewhere (see clusterHook); nil
	// when none: the hook's whole cost.
	moved atomic.Pointer[movedSlots]
	// pending are the reloads SMIGRATEDs asked for, not yet done. Guarded by mu.
	pending []*pendingReload

	c clusterCounters

	subs shardSubs // sharded subscribers follow their slot (clusterpubsub.go)
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
}

// movedSlots are slots moved recently, and where to.
type movedSlots struct {
	idx   [numSlots]uint8 // 0: not moved; else 1 + an index in to
	to    []*dest
	moves []slotMove   // what a slot map must show to count as the reload
	until atomic.Int64 // mono: past it the overlay is gone
}

// dest is where moved slots went.
type dest struct {
	addr string
	mb   atomic.Pointer[clusterMember] // resolved when the node client is known
}

// slotMove is one SMIGRATED triplet, parsed, with canonical addresses.
type slotMove struct {
	src, dst string
	r        []slotRange
}

// Bounds of the cluster state.
const (
	// movedFor bounds how long commands of moved slots are sent straight
	// to the destination when the reload is not seen.
	movedFor = 10 * time.Second
	// movedAfterReload is how long they still are once the reload is
	// seen: commands routed by the old slot map just before go-redis swaps
	// in the new one.
	movedAfterReload = time.Second
	// seenSMigrated is how long an SMIGRATED sequence id is remembered.
	seenSMigrated = 10 * time.Minute
	// maxSeenSMigrated bounds the sequence ids remembered.
	maxSeenSMigrated = 1024
	// emptiedFor bounds how long a source left with no slot keeps retiring
	// the connections it gets.
	emptiedFor = time.Minute
	// drainTick is how often the connections of an emptied source are
	// looked at to close those that owe nothing.
	drainTick = 20 * time.Millisecond
)

type clusterCounters struct {
	smigrated, copies, stale, malformed, reloads, reloadsSeen, slotMaps, forwarded, redirected, emptied, emptiedClosed atomic.Uint64
}

// ClusterStats are the counters of a cluster's maint, shared by the Maints
// of all its node clients.
type ClusterStats struct {
	SMigrated uint64 // SMIGRATED notifications acted on (one per sequence id)
	Copies    uint64 // copies of an SMIGRATED already acted on, ignored
	Stale     uint64 // SMIGRATED replays the slot map already showed, ignored
	Malformed uint64 // SMIGRATED notifications whose moves could not be read
	Reloads   uint64 // slot-map reloads maint asked the ClusterClient for
	// ReloadsSeen counts the SMIGRATEDs whose reload maint did not ask for:
	// go-redis's own, on a MOVED, already showed the moves (Stale ones
	// included).
	ReloadsSeen uint64
	SlotMaps    uint64 // CLUSTER SLOTS replies read through the node clients
	Forwarded   uint64 // commands, pipelines and transactions sent straight to a moved slot's destination
	Redirected  uint64 // commands answered with a MOVED of maint's own (destination's node client not known yet)
	Emptied     uint64 // sources left with no slot, whose connections were retired
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
		Malformed: c.malformed.Load(), Reloads: c.reloads.Load(), ReloadsSeen: c.reloadsSeen.Load(), SlotMaps: c.slotMaps.Load(),
		Forwarded: c.forwarded.Load(), Redirected: c.redirected.Load(),
		Emptied: c.emptied.Load(), EmptiedClosed: c.emptiedClosed.Load(),
	}
}

// newClusterState returns the state of one cluster; reload may be nil.
func newClusterState(reload func()) *clusterState {
	return &clusterState{reload: reload, seen: make(map[int64]mono)}
}

// bind sets the reload of the ClusterClient's slot map, unless one is set;
// it reports whether it set it.
func (cs *clusterState) bind(reload func()) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.reload != nil {
		return false
	}
	cs.reload = reload
	return true
}

// join records a node client of the cluster and its Maint, so that
// commands of slots moved to it can be sent to it directly.
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

// canonLocked is the address a member is known by, or addr itself.
func (cs *clusterState) canonLocked(addr string) string {
	if mb := cs.findLocked(addr); mb != nil {
		return mb.addr
	}
	return addr
}

// reached reports whether m's node client dialled addr or reached it.
func (m *Maint) reached(addr string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.targets[addr] != nil || m.nodes[addr] != nil
}

// onSMigrated handles an SMIGRATED read on a connection of one of the
// cluster's node clients. It runs on the goroutine reading the connection
// and does not block.
func (cs *clusterState) onSMigrated(m *Maint, c *conn, nt resp.Notification) {
	now := monoNow()
	cs.mu.Lock()
	if _, ok := cs.seen[nt.Seq]; ok {
		cs.mu.Unlock()
		cs.c.copies.Add(1)
		m.c.replayed.Add(1)
		return
	}
	cs.rememberLocked(nt.Seq, now)
	moves, err := cs.parseMovesLocked(nt.Moves)
	if err != nil || len(moves) == 0 {
		cs.mu.Unlock()
		cs.c.malformed.Add(1)
		what := "SMIGRATED with no move"
		if err != nil {
			what = fmt.Sprintf("SMIGRATED moves: %v", err)
		}
		m.badInput(c, nt.Seq, what)
		return
	}
	if cs.owner != nil && cs.showsLocked(moves) {
		// The slot map maint last saw already has these moves: a replay,
		// or go-redis reloaded on a MOVED before the SMIGRATED came.
		cs.mu.Unlock()
		cs.c.stale.Add(1)
		cs.c.reloadsSeen.Add(1)
		m.c.replayed.Add(1)
		return
	}
	var emptied []*clusterMember
	maps := cs.c.slotMaps.Load()
	if cs.owner != nil {
		before := cs.ownersLocked()
		cs.applyLocked(moves)
		after := cs.ownersLocked()
		for _, mv := range moves {
			if before[mv.src] && !after[mv.src] {
				if mb := cs.findLocked(mv.src); mb != nil && !contains(emptied, mb) {
					emptied = append(emptied, mb)
				}
			}
		}
	}
	until := now + int64(movedFor)
	cs.moved.Store(merge(cs.moved.Load(), moves, "", until, now))
	for _, mb := range cs.members {
		src, dst := false, false
		for _, mv := range moves {
			src = src || mv.src == mb.addr
			dst = dst || mv.dst == mb.addr
		}
		switch prev := mb.m.away.Load(); {
		case src:
			mb.m.away.Store(merge(prev, moves, mb.addr, until, now))
			mb.m.migrating.Store(nil) // the overlay knows where they went
		case dst && prev != nil:
			// Slots moving back to a node that gave them away recently are
			// its own again: never sent on from there.
			mb.m.away.Store(merge(prev, moves, mb.addr, prev.until.Load(), now))
		}
	}
	cs.resolveLocked(cs.moved.Load())
	for _, mb := range cs.members {
		if a := mb.m.away.Load(); a != nil {
			cs.resolveLocked(a)
		}
	}
	// A destination with no node client yet (a node new to the client)
	// gets one from go-redis's reload: no point waiting for it.
	delay := reloadDelay
	for _, mv := range moves {
		if mb := cs.findLocked(mv.dst); mb == nil || mb.rdb == nil {
			delay = 0
		}
	}
	// Pending before the lock is let go: a slot map seen from now on counts.
	var p *pendingReload
	if cs.reload != nil {
		p = &pendingReload{moves: moves}
		cs.pending = append(cs.pending, p)
	}
	cs.mu.Unlock()

	cs.c.smigrated.Add(1)
	if p != nil && !m.goBackground(func() { cs.reloadLater(m, p, delay) }) {
		cs.dropPending(p)
	}
	m.logf("maint: SMIGRATED %d acted on: %s; slot map reload in %v unless go-redis reloads first",
		nt.Seq, describeMoves(moves), delay)
	for _, mb := range emptied {
		mb.m.retireEmptied(nt.Seq, "SMIGRATED left it with no slot", mb.rdb, maps)
	}
	cs.shardMoves(m, moves) // sharded subscribers of the moved slots follow them (clusterpubsub.go)
}

// pendingReload is the slot-map reload an SMIGRATED asked for, until it is
// done: by maint, or by go-redis itself (a MOVED met by a pipeline or a
// transaction written before the SMIGRATED was read).
type pendingReload struct {
	moves []slotMove
	seen  atomic.Bool // a slot map showing the moves was seen
}

// reloadDelay is how long maint waits before asking for the reload an
// SMIGRATED calls for: commands of the moved slots go straight to their
// destination meanwhile, and the MOVEDs of the pipelines and transactions
// written before the SMIGRATED was read come back within it. go-redis
// reloads on those itself; a reload asked just after its own completes
// would be a second one.
const reloadDelay = 100 * time.Millisecond

// reloadLater asks for p's reload after delay (reloadDelay, or 0 when a
// destination has no node client yet), unless a slot map showing its moves
// was seen by then. It runs on one of m's goroutines.
func (cs *clusterState) reloadLater(m *Maint, p *pendingReload, delay time.Duration) {
	defer cs.dropPending(p)
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-m.ctx.Done():
			return
		}
	}
	if p.seen.Load() {
		cs.c.reloadsSeen.Add(1)
		return
	}
	cs.mu.Lock()
	reload := cs.reload
	cs.mu.Unlock()
	cs.c.reloads.Add(1)
	reload()
}

func (cs *clusterState) dropPending(p *pendingReload) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, x := range cs.pending {
		if x == p {
			cs.pending = append(cs.pending[:i:i], cs.pending[i+1:]...)
			return
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

// parseMovesLocked reads SMIGRATED triplets, addresses made canonical.
func (cs *clusterState) parseMovesLocked(in []resp.SlotMove) ([]slotMove, error) {
	out := make([]slotMove, 0, len(in))
	for _, mv := range in {
		r, err := parseSlots(mv.Slots)
		if err != nil {
			return nil, fmt.Errorf("%w: %q", err, mv.Slots)
		}
		if mv.Dst == "" || len(r) == 0 {
			continue
		}
		out = append(out, slotMove{src: cs.canonLocked(mv.Src), dst: cs.canonLocked(mv.Dst), r: r})
	}
	return out, nil
}

// showsLocked reports whether the slot map known has every move done.
func (cs *clusterState) showsLocked(moves []slotMove) bool {
	for _, mv := range moves {
		for _, r := range mv.r {
			for s := r.lo; s <= r.hi; s++ {
				o := cs.owner[s]
				if o == 0 || cs.owners[o-1] != mv.dst {
					return false
				}
			}
		}
	}
	return true
}

// applyLocked does the moves on the slot map known.
func (cs *clusterState) applyLocked(moves []slotMove) {
	for _, mv := range moves {
		o := cs.ownerIndexLocked(mv.dst)
		for _, r := range mv.r {
			for s := r.lo; s <= r.hi; s++ {
				cs.owner[s] = o
			}
		}
	}
}

func (cs *clusterState) ownerIndexLocked(addr string) uint16 {
	for i, a := range cs.owners {
		if a == addr {
			return uint16(i + 1)
		}
	}
	cs.owners = append(cs.owners, addr)
	return uint16(len(cs.owners))
}

// ownersLocked returns the addresses owning at least one slot.
func (cs *clusterState) ownersLocked() map[string]bool {
	has := make([]bool, len(cs.owners)+1)
	for _, o := range cs.owner {
		has[o] = true
	}
	out := make(map[string]bool)
	for i, a := range cs.owners {
		if has[i+1] {
			out[a] = true
		}
	}
	return out
}

// merge returns the overlay of prev (when still in force) plus moves (only
// those from src, unless src is ""), in force until until.
func merge(prev *movedSlots, moves []slotMove, src string, until, now mono) *movedSlots {
	mv := &movedSlots{}
	if prev != nil && prev.until.Load() > now {
		mv.idx = prev.idx
		mv.to = append(mv.to, prev.to...)
		mv.moves = append(mv.moves, prev.moves...)
	}
	for _, x := range moves {
		if src != "" && x.src != src {
			continue
		}
		mv.moves = append(mv.moves, x)
		at := -1
		for i, d := range mv.to {
			if d.addr == x.dst {
				at = i
			}
		}
		if at < 0 {
			if len(mv.to) == 255 {
				continue // more destinations than an overlay holds: left to redirects
			}
			mv.to = append(mv.to, &dest{addr: x.dst})
			at = len(mv.to) - 1
		}
		for _, r := range x.r {
			for s := r.lo; s <= r.hi; s++ {
				mv.idx[s] = uint8(at + 1)
			}
		}
	}
	// Slots moved back to src are no longer away from it.
	if src != "" {
		for _, x := range moves {
			if x.dst == src {
				for _, r := range x.r {
					for s := r.lo; s <= r.hi; s++ {
						mv.idx[s] = 0
					}
				}
			}
		}
	}
	mv.until.Store(until)
	return mv
}

// resolveLocked links an overlay's destinations to their node clients.
func (cs *clusterState) resolveLocked(mv *movedSlots) {
	for _, d := range mv.to {
		if d.mb.Load() == nil {
			if mb := cs.findLocked(d.addr); mb != nil && mb.rdb != nil {
				d.mb.Store(mb)
			}
		}
	}
}

// lookup returns where slot moved, or nil.
func (mv *movedSlots) lookup(slot int) *dest {
	if slot < 0 || slot >= numSlots {
		return nil
	}
	if i := mv.idx[slot]; i != 0 {
		return mv.to[i-1]
	}
	return nil
}

// client returns the destination's node client, resolving it if it joined
// since the overlay was made; nil when unknown or closed.
func (d *dest) client(cs *clusterState) *redis.Client {
	mb := d.mb.Load()
	if mb == nil {
		cs.mu.Lock()
		if x := cs.findLocked(d.addr); x != nil && x.rdb != nil {
			d.mb.Store(x)
			mb = x
		}
		cs.mu.Unlock()
	}
	if mb == nil || mb.rdb == nil || mb.m.stopped.Load() {
		return nil
	}
	return mb.rdb
}

// sawSlotMap reads a CLUSTER SLOTS reply that went through a node client:
// the slot map go-redis is about to use. It is the reload the overlays
// wait for when it agrees with their moves, and it shows which nodes own
// no slot any more.
func (cs *clusterState) sawSlotMap(slots []redis.ClusterSlot) {
	if len(slots) == 0 {
		return
	}
	cs.c.slotMaps.Add(1)
	now := monoNow()
	cs.mu.Lock()
	first := cs.owner == nil
	var before map[string]bool
	if first {
		cs.owner = make([]uint16, numSlots)
	} else {
		before = cs.ownersLocked()
	}
	clear(cs.owner)
	for _, s := range slots {
		if len(s.Nodes) == 0 || s.Start < 0 || s.End >= numSlots || s.Start > s.End {
			continue
		}
		o := cs.ownerIndexLocked(cs.canonLocked(s.Nodes[0].Addr))
		for i := s.Start; i <= s.End; i++ {
			cs.owner[i] = o
		}
	}
	after := cs.ownersLocked()
	cs.markGoneLocked(slots, now)
	var emptied []*clusterMember
	for _, mb := range cs.members {
		if after[mb.addr] {
			mb.m.emptied.Store(0) // it owns slots again
		} else if before[mb.addr] {
			emptied = append(emptied, mb)
		}
	}
	// The reload the overlays wait for: commands routed by the old map just
	// before go-redis swaps the new one in are still sent on, briefly.
	shorten := func(mv *movedSlots) {
		if mv != nil && cs.showsLocked(mv.moves) {
			if end := now + int64(movedAfterReload); mv.until.Load() > end {
				mv.until.Store(end)
			}
		}
	}
	shorten(cs.moved.Load())
	for _, mb := range cs.members {
		shorten(mb.m.away.Load())
	}
	for _, p := range cs.pending {
		if cs.showsLocked(p.moves) {
			p.seen.Store(true)
		}
	}
	maps := cs.c.slotMaps.Load() - 1 // this map is the reload
	cs.mu.Unlock()
	for _, mb := range emptied {
		mb.m.retireEmptied(0, "no longer in the slot map", mb.rdb, maps)
	}
}

// markGoneLocked notes, for each member, whether the slot map names its
// node (as an owner or a replica): go-redis's ClusterClient closes the
// node clients a reloaded map no longer names, a minute later
// (TestContractClusterNodeGC).
func (cs *clusterState) markGoneLocked(slots []redis.ClusterSlot, now mono) {
	named := make(map[string]bool, len(cs.members))
	for _, s := range slots {
		for _, n := range s.Nodes {
			named[cs.canonLocked(n.Addr)] = true
		}
	}
	for _, mb := range cs.members {
		switch {
		case named[mb.addr]:
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

// movedError is the MOVED a node client's hook answers for a slot its node
// has just given away, when the destination's node client is not known:
// go-redis's ClusterClient follows it at once (and reloads its slot map).
type movedError struct {
	slot int
	addr string
}

func (e *movedError) Error() string { return "MOVED " + strconv.Itoa(e.slot) + " " + e.addr }

// RedisError marks it as a reply of the server's kind, as go-redis's own
// MOVED is: not a transport error.
func (e *movedError) RedisError() {}

// awayProcess sends a command for a slot m's node has just given away
// straight to the destination. It reports whether it served the command.
func (m *Maint) awayProcess(ctx context.Context, a *movedSlots, cmd redis.Cmder) (bool, error) {
	cs := m.s.cluster
	if isForwarded(ctx) {
		return false, nil // sent on once already: never twice (a slot moving back and forth)
	}
	if cs == nil || a.until.Load() <= monoNow() {
		m.away.CompareAndSwap(a, nil)
		return false, nil
	}
	slot := cmdSlot(cmd.Args())
	d := a.lookup(slot)
	if d == nil {
		return false, nil
	}
	if r := d.client(cs); r != nil {
		cs.c.forwarded.Add(1)
		return true, r.Process(forwarded(ctx), cmd)
	}
	cs.c.redirected.Add(1)
	err := &movedError{slot: slot, addr: d.addr}
	cmd.SetErr(err)
	return true, err
}

// awayMoved handles a MOVED the source answered to a command written before
// maint read the SMIGRATED: the command did not run there, so it is sent to
// the destination the SMIGRATED named, and go-redis never sees the MOVED
// (following it would reload the slot map once more). A pipeline's or a
// transaction's MOVED is go-redis's: it acts on it inside its read loop.
func (m *Maint) awayMoved(ctx context.Context, a *movedSlots, cmd redis.Cmder, err error) (bool, error) {
	cs := m.s.cluster
	if isForwarded(ctx) {
		return false, nil // sent on once already: never twice (a slot moving back and forth)
	}
	if cs == nil || !strings.HasPrefix(err.Error(), "MOVED ") || a.until.Load() <= monoNow() {
		return false, nil
	}
	d := a.lookup(cmdSlot(cmd.Args()))
	if d == nil {
		return false, nil
	}
	f := strings.Fields(err.Error())
	if len(f) != 3 {
		return false, nil
	}
	cs.mu.Lock()
	same := cs.canonLocked(f[2]) == d.addr
	cs.mu.Unlock()
	if !same {
		return false, nil // moved on since: go-redis follows it
	}
	r := d.client(cs)
	if r == nil {
		return false, nil
	}
	cs.c.forwarded.Add(1)
	return true, r.Process(forwarded(ctx), cmd)
}

// forwardedKey marks the context of a command maint sent on to a moved
// slot's destination.
type forwardedKey struct{}

// forwarded returns ctx marked as forwarded.
func forwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, true)
}

// isForwarded reports whether ctx is a forwarded command's: it is not sent
// on again.
func isForwarded(ctx context.Context) bool {
	return ctx.Value(forwardedKey{}) != nil
}

// isTx reports whether a pipeline is a transaction or needs its
// connection's state (ASKING): it is never split.
func isTx(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "multi", "exec", "discard", "watch", "unwatch", "asking":
			return true
		}
	}
	return false
}

// awayPipeline sends the commands of a pipeline whose slots m's node has
// just given away straight to their destinations, and the rest through
// next. A transaction is left whole (see clusterHook). It reports whether
// it served the pipeline.
func (m *Maint) awayPipeline(ctx context.Context, a *movedSlots, cmds []redis.Cmder, next redis.ProcessPipelineHook) (bool, error) {
	cs := m.s.cluster
	if isForwarded(ctx) {
		return false, nil // sent on once already: never twice (a slot moving back and forth)
	}
	if cs == nil || a.until.Load() <= monoNow() {
		m.away.CompareAndSwap(a, nil)
		return false, nil
	}
	if isTx(cmds) {
		return false, nil
	}
	type group struct {
		r    *redis.Client
		cmds []redis.Cmder
	}
	var groups []group
	rest := make([]redis.Cmder, 0, len(cmds))
	for _, c := range cmds {
		var r *redis.Client
		if d := a.lookup(cmdSlot(c.Args())); d != nil {
			r = d.client(cs)
		}
		if r == nil {
			rest = append(rest, c)
			continue
		}
		at := -1
		for i := range groups {
			if groups[i].r == r {
				at = i
			}
		}
		if at < 0 {
			groups = append(groups, group{r: r})
			at = len(groups) - 1
		}
		groups[at].cmds = append(groups[at].cmds, c)
	}
	if len(groups) == 0 {
		return false, nil
	}
	for _, g := range groups {
		fctx := forwarded(ctx)
		p := g.r.Pipeline()
		for _, c := range g.cmds {
			_ = p.Process(fctx, c)
		}
		_, _ = p.Exec(fctx)
		for _, c := range g.cmds {
			if isRedirect(c.Err()) {
				c.SetErr(nil)
				rest = append(rest, c) // not run there: the source's answer routes it
			} else {
				cs.c.forwarded.Add(1)
			}
		}
	}
	if len(rest) == 0 {
		// Served here: go-redis keeps each command's own result.
		return true, nil
	}
	return true, next(ctx, rest)
}

// isRedirect reports whether err is a MOVED or ASK reply: the command did
// not run.
func isRedirect(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ")
}

// clusterHook is the hook maint adds to the ClusterClient itself: a
// transaction on a slot moved recently goes straight to the destination's
// node client. (A node client's hook cannot answer a cluster transaction
// itself: go-redis treats that as fatal.) With no slot moved recently it
// costs one atomic load per pipeline.
type clusterHook struct{ cs *clusterState }

// DialHook passes dials through.
func (h clusterHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook passes commands through.
func (h clusterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook sends a transaction on a slot moved recently to its
// destination.
func (h clusterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if mv := h.cs.moved.Load(); mv != nil && len(cmds) > 2 {
			if done, err := h.cs.txForward(ctx, mv, cmds); done {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// txForward runs a cluster transaction (MULTI, commands, EXEC) whose slot
// moved recently on the destination's node client, whole. It reports
// whether it did; a transaction the destination redirects (nothing ran) is
// left to go-redis.
func (cs *clusterState) txForward(ctx context.Context, mv *movedSlots, cmds []redis.Cmder) (bool, error) {
	if isForwarded(ctx) {
		return false, nil // sent on once already: never twice (a slot moving back and forth)
	}
	if mv.until.Load() <= monoNow() {
		cs.moved.CompareAndSwap(mv, nil)
		return false, nil
	}
	if cmds[0].Name() != "multi" || cmds[len(cmds)-1].Name() != "exec" {
		return false, nil
	}
	inner := cmds[1 : len(cmds)-1]
	slot := -1
	for _, c := range inner {
		s := cmdSlot(c.Args())
		if s < 0 {
			continue
		}
		if slot >= 0 && s != slot {
			return false, nil // cross-slot: go-redis refuses it
		}
		slot = s
	}
	d := mv.lookup(slot)
	if d == nil {
		return false, nil
	}
	r := d.client(cs)
	if r == nil {
		return false, nil
	}
	fctx := forwarded(ctx)
	_, err := r.TxPipelined(fctx, func(p redis.Pipeliner) error {
		for _, c := range inner {
			_ = p.Process(fctx, c)
		}
		return nil
	})
	for _, c := range inner {
		if isRedirect(c.Err()) {
			// The transaction was aborted there (nothing ran): go-redis
			// routes it.
			for _, c := range inner {
				c.SetErr(nil)
			}
			return false, nil
		}
	}
	cs.c.forwarded.Add(1)
	return true, err
}

// retireEmptied retires the connections of m's node, which has no slot any
// more, as after a MOVING: once go-redis routes nothing new there (a slot
// map newer than afterMaps was seen) and its node client's pools are quiet
// (no connection in use, no command waiting for one: a command routed there
// before the reload still gets a connection, the endpoint refusing new
// ones), every connection that owes nothing is closed, and the others as
// their replies come in. The endpoint's removal then finds none. Bounded by
// emptiedFor; rdb is m's node client, nil when unknown (then a connection
// owing nothing counts as quiet).
func (m *Maint) retireEmptied(seq int64, why string, rdb *redis.Client, afterMaps uint64) {
	if m.stopped.Load() {
		return
	}
	m.emptied.Store(monoNow() + int64(emptiedFor))
	if cs := m.s.cluster; cs != nil {
		cs.c.emptied.Add(1)
	}
	m.emit(Event{Kind: EventRetire, Seq: seq, Detail: why + "; its connections retire once the slot map is reloaded and its pool is quiet"})
	if !m.draining.CompareAndSwap(false, true) {
		return
	}
	if !m.goBackground(func() { m.drainEmptied(seq, rdb, afterMaps) }) {
		m.draining.Store(false)
	}
}

// isEmptied reports whether m's node was left with no slot, recently.
func (m *Maint) isEmptied() bool {
	u := m.emptied.Load()
	return u != 0 && monoNow() < u
}

// drainEmptied is retireEmptied's loop, on one of m's goroutines.
func (m *Maint) drainEmptied(seq int64, rdb *redis.Client, afterMaps uint64) {
	defer m.draining.Store(false)
	cs := m.s.cluster
	t := time.NewTicker(drainTick)
	defer t.Stop()
	retired := false
	for {
		if !m.isEmptied() {
			return // it owns slots again, or the bound passed
		}
		if !retired && (cs == nil || cs.c.slotMaps.Load() > afterMaps) && m.quiet(rdb) {
			retired = true
			n := 0
			for _, nd := range m.nodeList() {
				n += m.retire(nd, true)
			}
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
func (m *Maint) nodeList() []*node {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*node, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	return out
}

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

// migratingSlots are the slots of the SMIGRATINGs read on a node client's
// connections, until their cap.
type migratingSlots struct {
	bits  [numSlots / 64]uint64
	until mono
	// firstMoved is when a MOVED for one of them was first sent on (mono):
	// the SMIGRATED should follow within movedWithoutSMigrated.
	firstMoved atomic.Int64
}

// movedWithoutSMigrated bounds how long MOVEDs for slots an SMIGRATING
// named are sent on by maint while the SMIGRATED has not been read: past
// it, go-redis follows them (and reloads) as it would without maint.
const movedWithoutSMigrated = 2 * time.Second

// noteMigrating records the slots of an SMIGRATING read on one of m's
// connections.
func (m *Maint) noteMigrating(nt resp.Notification) {
	rs, err := parseSlots(nt.Slots)
	if err != nil || len(rs) == 0 {
		return
	}
	now := monoNow()
	mg := &migratingSlots{until: now + int64(m.s.relaxCap)}
	if prev := m.migrating.Load(); prev != nil && prev.until > now {
		mg.bits = prev.bits
	}
	for _, r := range rs {
		for s := r.lo; s <= r.hi; s++ {
			mg.bits[s/64] |= 1 << (s % 64)
		}
	}
	m.migrating.Store(mg)
}

// migratingMoved handles a MOVED the node answered, before any SMIGRATED
// was read, for a slot an SMIGRATING it sent named: the migration has just
// completed and the SMIGRATED is on its way. The command did not run, so it
// is sent to the destination the MOVED names, when its node client is
// known, and go-redis does not see the MOVED: the slot-map reload is the
// SMIGRATED's, one, not one more for each such MOVED.
func (m *Maint) migratingMoved(ctx context.Context, mg *migratingSlots, cmd redis.Cmder, err error) (bool, error) {
	cs := m.s.cluster
	if isForwarded(ctx) {
		return false, nil // sent on once already: never twice (a slot moving back and forth)
	}
	now := monoNow()
	if cs == nil || now >= mg.until || !strings.HasPrefix(err.Error(), "MOVED ") {
		return false, nil
	}
	slot := cmdSlot(cmd.Args())
	if slot < 0 || mg.bits[slot/64]&(1<<(slot%64)) == 0 {
		return false, nil
	}
	mg.firstMoved.CompareAndSwap(0, now)
	if now-mg.firstMoved.Load() > int64(movedWithoutSMigrated) {
		return false, nil
	}
	f := strings.Fields(err.Error())
	if len(f) != 3 {
		return false, nil
	}
	d := &dest{addr: f[2]}
	r := d.client(cs)
	if r == nil {
		return false, nil
	}
	cs.c.forwarded.Add(1)
	return true, r.Process(forwarded(ctx), cmd)
}
