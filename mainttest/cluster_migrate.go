package mainttest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// SlotMigration describes a slot migration started with Cluster.MigrateSlots:
// the maintenance a Redis Enterprise OSS Cluster API announces with
// SMIGRATING and SMIGRATED.
type SlotMigration struct {
	// From is the source node; it must own every slot moved.
	From *Endpoint
	// To is the destination of Slots.
	To *Endpoint
	// Slots is the slot list moved to To, such as "0-5460" or "1,5-9".
	Slots string
	// Also moves more of From's slots, to other destinations (or To), in
	// the same operation: one SMIGRATING, one SMIGRATED with a triplet per
	// destination.
	Also []SlotTarget

	// Duration is how long the slots are in migration, from SMIGRATING to
	// the ownership change and SMIGRATED. 0 changes ownership at once (the
	// SMIGRATED still follows the SMIGRATING, from a timer).
	Duration time.Duration
	// Latency is extra latency on every command From relays during the
	// migration (it adds to SetLatency and the others).
	Latency time.Duration
	// KeyMoved tells which keys already left From during the migration:
	// From answers a command whose keys all moved with -ASK to the
	// destination, and one whose keys only partly moved with -TRYAGAIN; the
	// destination serves a command after ASKING (-TRYAGAIN for a multi-key
	// one whose keys did not all arrive). nil: every key stays on From
	// until the ownership change, so From serves them all. Use AllKeys for
	// a migration whose keys all moved at once. It is called on the
	// endpoints' read loops and must be safe for concurrent use.
	KeyMoved func(key string) bool

	// TripletAddr, when set, names the nodes in SMIGRATED's triplets (a
	// host name, a resolved address); nil gives "ip:port" as CLUSTER SLOTS
	// does.
	TripletAddr func(ep *Endpoint) string

	// SourceOnly sends SMIGRATING and SMIGRATED to From's connections only;
	// by default the destinations' connections get them as well.
	SourceOnly bool
	// TripletPerRange gives each contiguous range its own [src, dst, slots]
	// triplet in SMIGRATED, instead of one per destination, so the same
	// source and destination appear in several triplets.
	TripletPerRange bool

	// RemoveSource removes From from the topology right after the
	// SMIGRATED when it owns no slot any more (see Cluster.RemoveNode): it
	// leaves CLUSTER SLOTS, stops accepting at once and closes its
	// connections CloseAfter later.
	RemoveSource bool
	// CloseAfter is how long a removed source keeps its open connections
	// (answering their key commands with -MOVED) before it closes them.
	CloseAfter time.Duration
}

// SlotTarget is one more destination of a SlotMigration.
type SlotTarget struct {
	Slots string    // slot list moved, such as "100-200"
	To    *Endpoint // their destination
}

// AllKeys is a SlotMigration.KeyMoved under which every key of the
// migrating slots has already moved: the source redirects every command
// for them with -ASK.
func AllKeys(string) bool { return true }

// MigrateSlots starts a slot migration and returns the seq of its SMIGRATING
// at once; the rest runs on Emulator timers. At once: the slots enter the
// migrating state (From migrating, each destination importing, see
// KeyMoved), From's Latency applies and SMIGRATING (one slot list with every
// slot moved) goes to From's opted-in RESP3 connections and, unless
// SourceOnly, the destinations'. After Duration: the slots change owner,
// the latency ends, and SMIGRATED [seq, [[src, dst, slots], ...]] (addresses
// "ip:port" as CLUSTER SLOTS gives them) goes to the same connections, with
// its own seq; with RemoveSource an emptied From is then removed. Every step
// is logged (KindSlotMigrationStart, KindSMigrating, KindSlotOwner,
// KindSMigrated, KindNodeRemove, KindRemovedClose), so a test can wait for
// the SMIGRATED with WaitEvent(IsKind(m.From, KindSMigrated)).
func (cl *Cluster) MigrateSlots(m SlotMigration) (seq int64, err error) {
	targets := append([]SlotTarget{{Slots: m.Slots, To: m.To}}, m.Also...)
	type move struct {
		dst int
		rs  []SlotRange
	}
	var moves []move
	var all []SlotRange

	cl.mu.Lock()
	old := cl.topo.Load()
	src, err := cl.member(old, m.From, "From")
	if err != nil {
		cl.mu.Unlock()
		return 0, err
	}
	taken := map[int]bool{}
	for _, tg := range targets {
		dst, err := cl.member(old, tg.To, "To")
		if err != nil {
			cl.mu.Unlock()
			return 0, err
		}
		if dst == src {
			cl.mu.Unlock()
			return 0, fmt.Errorf("mainttest: cluster: migration from %s to itself", m.From.addr)
		}
		rs, err := ParseSlots(tg.Slots)
		if err != nil {
			cl.mu.Unlock()
			return 0, err
		}
		for _, r := range rs {
			for s := r.Start; s <= r.End; s++ {
				switch {
				case int(old.owner[s]) != src:
					err = fmt.Errorf("mainttest: cluster: slot %d is not owned by %s", s, m.From.addr)
				case old.mig[s] != nil:
					err = fmt.Errorf("mainttest: cluster: slot %d is already migrating", s)
				case taken[s]:
					err = fmt.Errorf("mainttest: cluster: slot %d moved twice", s)
				}
				if err != nil {
					cl.mu.Unlock()
					return 0, err
				}
				taken[s] = true
			}
		}
		moves = append(moves, move{dst, rs})
		all = append(all, rs...)
	}
	all = mergeRanges(all)
	t := old.clone()
	if t.mig == nil {
		t.mig = make(map[int]*slotMigration)
	}
	for _, mv := range moves {
		sm := &slotMigration{src: src, dst: mv.dst, keyMoved: m.KeyMoved}
		for _, r := range mv.rs {
			for s := r.Start; s <= r.End; s++ {
				t.mig[s] = sm
			}
		}
	}
	cl.topo.Store(t)
	cl.mu.Unlock()

	e := cl.e
	notify := []*Endpoint{m.From}
	if !m.SourceOnly {
		for _, mv := range moves {
			if ep := t.nodes[mv.dst].ep; !containsEndpoint(notify, ep) {
				notify = append(notify, ep)
			}
		}
	}
	var dsts []string
	for _, mv := range moves {
		dsts = append(dsts, t.nodes[mv.dst].ep.addr)
	}
	slots := FormatSlots(all)
	e.event(Event{Endpoint: m.From.addr, Kind: KindSlotMigrationStart,
		Detail: fmt.Sprintf("slots=%s to=%s duration=%s latency=%s", slots, strings.Join(dsts, ","), m.Duration, m.Latency)})

	m.From.mu.Lock()
	m.From.slotLatency += m.Latency
	m.From.mu.Unlock()
	seq = e.nextSeq()
	frame := resp.AppendSMigrating(nil, seq, slots)
	for _, ep := range notify {
		ep.broadcastEvent(KindSMigrating, seq, frame, "slots="+slots, func() {
			ep.smigrating = append(ep.smigrating, openSMigrating{seq: seq, frame: frame})
		})
	}
	migSeq := seq

	e.schedule(m.Duration, func() {
		for _, ep := range notify { // no longer replayed once it completes
			ep.mu.Lock()
			ep.smigrating = slices.DeleteFunc(ep.smigrating, func(sm openSMigrating) bool { return sm.seq == migSeq })
			ep.mu.Unlock()
		}

		m.From.mu.Lock()
		m.From.slotLatency -= m.Latency
		m.From.mu.Unlock()

		cl.mu.Lock()
		t := cl.topo.Load().clone()
		var triplets []resp.SlotMove
		var owners []Event
		for _, mv := range moves {
			var moved []SlotRange // slots still migrating under this MigrateSlots
			for _, r := range mv.rs {
				for s := r.Start; s <= r.End; s++ {
					if sm := t.mig[s]; sm != nil && sm.src == src && sm.dst == mv.dst && int(t.owner[s]) == src {
						t.owner[s] = int16(mv.dst)
						delete(t.mig, s)
						moved = append(moved, SlotRange{s, s})
					}
				}
			}
			moved = mergeRanges(moved)
			if len(moved) == 0 {
				continue // SetOwner took them meanwhile
			}
			from, to := t.nodes[src].ep.addr, t.nodes[mv.dst].ep.addr
			owners = append(owners, Event{Endpoint: to, Kind: KindSlotOwner,
				Detail: "slots=" + FormatSlots(moved) + " from=" + from + " notified=true"})
			if m.TripletAddr != nil {
				from, to = m.TripletAddr(t.nodes[src].ep), m.TripletAddr(t.nodes[mv.dst].ep)
			}
			if m.TripletPerRange {
				for _, r := range moved {
					triplets = append(triplets, resp.SlotMove{Src: from, Dst: to, Slots: r.String()})
				}
			} else {
				triplets = append(triplets, resp.SlotMove{Src: from, Dst: to, Slots: FormatSlots(moved)})
			}
		}
		cl.setTopo(t) // sharded subscribers of moved slots are dropped
		remove := m.RemoveSource && len(t.slotsOf(src)) == 0
		var rmErr error
		if remove {
			rmErr = cl.removeLocked(m.From, m.CloseAfter)
		}
		cl.mu.Unlock()

		for _, ev := range owners {
			e.event(ev)
		}
		if len(triplets) > 0 {
			seq := e.nextSeq()
			frame := resp.AppendSMigrated(nil, seq, triplets)
			for _, ep := range notify {
				ep.broadcastEvent(KindSMigrated, seq, frame, fmt.Sprintf("moves=%d", len(triplets)), nil)
			}
		}
		switch {
		case remove && rmErr == nil:
			cl.retire(m.From, m.CloseAfter)
		case rmErr != nil:
			e.event(Event{Endpoint: m.From.addr, Kind: KindNodeRemove, Detail: "failed: " + rmErr.Error()})
		}
	})
	return seq, nil
}

func containsEndpoint(eps []*Endpoint, ep *Endpoint) bool {
	for _, x := range eps {
		if x == ep {
			return true
		}
	}
	return false
}
