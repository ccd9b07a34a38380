package main

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The soak's episodes: a few related maintenance events each. A soak plays
// a seeded random sequence of them, one after another with short gaps.
const (
	// epNamed: MOVING naming the successor; DNS follows before or after the
	// window's end.
	epNamed = "named"
	// epNullEarly: MOVING with a null endpoint; DNS moves within the window.
	epNullEarly = "null-dns-early"
	// epNullLate: MOVING with a null endpoint; DNS moves after the window's end.
	epNullLate = "null-dns-late"
	// epZero: MOVING announcing a 0-second window (named or null); the node
	// closes 0.3 to 0.6s later, DNS moves within 0.8s.
	epZero = "zero-window"
	// epChained: MOVING, then a MOVING on its successor while the first
	// window runs or right after it.
	epChained = "chained"
	// epSuperseded: MOVING naming one successor, then a newer MOVING of the
	// same node naming another, a late copy of the first (older seq), and a
	// MOVING of the first successor to the second.
	epSuperseded = "superseded"
	// epMigrating: MIGRATING, replies slower than ReadTimeout, MIGRATED.
	epMigrating = "migrating"
	// epMigratingMoving: as epMigrating, with a MOVING of the node while its
	// replies are slow.
	epMigratingMoving = "migrating+moving"
	// epFailover: FAILING_OVER, slow replies, FAILED_OVER.
	epFailover = "failing-over"
	// epFailoverMoving: as epFailover, with a MOVING while slow.
	epFailoverMoving = "failing-over+moving"
)

// episodeWeights is the mix of episodes, in the order the generator draws.
var episodeWeights = []struct {
	kind   string
	weight int
}{
	{epNamed, 14}, {epNullEarly, 12}, {epNullLate, 12}, {epZero, 6}, {epChained, 12},
	{epSuperseded, 8}, {epMigrating, 10}, {epMigratingMoving, 7}, {epFailover, 10}, {epFailoverMoving, 7},
}

// The actions of a plan.
const (
	actMoving      = "moving"       // Node.Moving{To, Null, Window, CloseJitter, StopAccepting}
	actDNS         = "dns"          // DNS names Node
	actAccept      = "accept"       // Node accepts again (RefuseNew(false)) before it is named
	actMigrating   = "migrating"    // Node.Migrating(StartsIn)
	actMigrated    = "migrated"     // Node.Migrated
	actFailingOver = "failing_over" // Node.FailingOver(StartsIn)
	actFailedOver  = "failed_over"  // Node.FailedOver
	actLateCopy    = "late_copy"    // Node.SendRaw of the notification action Of sent, same seq
)

// action is one step of a plan, at a fixed offset from the start of the load.
type action struct {
	At       time.Duration
	Kind     string
	Node     int // the endpoint acted on; for DNS the one it names
	To       int // MOVING: the successor
	Null     bool
	Window   time.Duration
	Jitter   time.Duration // MOVING: CloseJitter
	StartsIn time.Duration
	Of       int // late copy: the index of the action whose notification is re-sent
	Episode  int
}

// notification reports whether the action sends a maintenance notification.
func (a action) notification() bool {
	switch a.Kind {
	case actDNS, actAccept:
		return false
	}
	return true
}

// nodeName is the node's IP, as the report shows it.
func nodeName(i int) string { return fmt.Sprintf("127.0.0.%d", i+2) }

func (a action) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "+%6.3fs ", a.At.Seconds())
	switch a.Kind {
	case actMoving:
		to := nodeName(a.To)
		if a.Null {
			to = "null (successor " + nodeName(a.To) + ")"
		}
		fmt.Fprintf(&b, "MOVING on %s window %v (closes %v later) -> %s", nodeName(a.Node), a.Window, a.Jitter, to)
	case actDNS:
		fmt.Fprintf(&b, "DNS %s -> %s", host, nodeName(a.Node))
	case actAccept:
		fmt.Fprintf(&b, "%s accepts connections again", nodeName(a.Node))
	case actMigrating, actFailingOver:
		fmt.Fprintf(&b, "%s on %s starts in %v", strings.ToUpper(a.Kind), nodeName(a.Node), a.StartsIn)
	case actMigrated, actFailedOver:
		fmt.Fprintf(&b, "%s on %s", strings.ToUpper(a.Kind), nodeName(a.Node))
	case actLateCopy:
		fmt.Fprintf(&b, "late copy on %s of the notification of step %d", nodeName(a.Node), a.Of+1)
	}
	return b.String()
}

// episode is one entry of the plan's summary.
type episode struct {
	Kind  string        `json:"kind"`
	At    time.Duration `json:"-"`
	End   time.Duration `json:"-"`
	AtS   float64       `json:"at"`
	EndS  float64       `json:"end"`
	First int           `json:"first_step"` // index of its first action
}

// plan is a seeded sequence of maintenance actions over nodes endpoints,
// the same for every client of a soak.
type plan struct {
	Seed     uint64
	Nodes    int
	Actions  []action
	Episodes []episode
}

// Plan timing.
const (
	// nodeRest is how long after its window (and the close) a node waits
	// before it may be named as a successor again.
	nodeRest = 300 * time.Millisecond
	// acceptLead is how long before the MOVING naming it a refusing node
	// accepts connections again.
	acceptLead = 200 * time.Millisecond
	// planTail is how long the load runs on after the last episode ends.
	planTail = time.Second
)

// planner is the state a plan is generated from: which node serves, which
// nodes may be named, which refuse connections.
type planner struct {
	r        *rand.Rand
	nodes    int
	cur      int             // the node serving, that DNS names once it has moved
	free     []time.Duration // when each node may be named as a successor
	refusing []bool          // the node stopped accepting at its window's end
	lastDNS  time.Duration   // DNS changes keep the order of the plan
	acts     []action
	eps      []episode
}

func (p *planner) clone() *planner {
	c := *p
	c.free = append([]time.Duration(nil), p.free...)
	c.refusing = append([]bool(nil), p.refusing...)
	c.acts = append([]action(nil), p.acts...)
	c.eps = append([]episode(nil), p.eps...)
	return &c
}

// newPlan generates the plan of seed over nodes endpoints: episodes from
// from on, each ending by until (the last one may end early: the generator
// tries a few more draws when one does not fit, then stops). The sequence
// depends only on the seed, the node count and the times.
func newPlan(seed uint64, nodes int, from, until time.Duration) *plan {
	p := &planner{r: rand.New(rand.NewPCG(seed, 0x6d61696e74)), nodes: nodes,
		free: make([]time.Duration, nodes), refusing: make([]bool, nodes)}
	t := from
	for misses := 0; misses < 8 && t < until; {
		next := p.clone()
		end, ok := next.episode(t)
		switch {
		case !ok: // no node may be named yet
			t += 250 * time.Millisecond
		case end > until:
			misses++
		default:
			p = next
			t = end + p.dur(300*time.Millisecond, 1200*time.Millisecond)
		}
	}
	return sortPlan(&plan{Seed: seed, Nodes: nodes, Actions: p.acts, Episodes: p.eps})
}

// sortPlan orders the actions by time (stable: the generation order breaks
// ties) and renumbers what refers to them.
func sortPlan(pl *plan) *plan {
	idx := make([]int, len(pl.Actions))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(pl.Actions[a].At, pl.Actions[b].At) })
	newIdx := make([]int, len(idx))
	sorted := make([]action, len(idx))
	for n, old := range idx {
		newIdx[old] = n
		sorted[n] = pl.Actions[old]
	}
	for n := range sorted {
		if sorted[n].Kind == actLateCopy {
			sorted[n].Of = newIdx[sorted[n].Of]
		}
	}
	for e := range pl.Episodes {
		pl.Episodes[e].First = -1
	}
	for n, a := range sorted {
		if ep := &pl.Episodes[a.Episode]; ep.First < 0 {
			ep.First = n
		}
	}
	pl.Actions = sorted
	return pl
}

// dur is a uniform random duration in [lo, hi), to the millisecond.
func (p *planner) dur(lo, hi time.Duration) time.Duration {
	ms := int64((hi - lo) / time.Millisecond)
	if ms <= 0 {
		return lo
	}
	return lo + time.Duration(p.r.Int64N(ms))*time.Millisecond
}

// frac is f of d, f uniform in [lo, hi).
func (p *planner) frac(d time.Duration, lo, hi float64) time.Duration {
	f := lo + p.r.Float64()*(hi-lo)
	return time.Duration(float64(d) * f).Round(time.Millisecond)
}

func (p *planner) coin(prob float64) bool { return p.r.Float64() < prob }

// window draws a MOVING window: 1s, 2s or 3s.
func (p *planner) window() time.Duration {
	switch n := p.r.IntN(100); {
	case n < 35:
		return time.Second
	case n < 75:
		return 2 * time.Second
	}
	return 3 * time.Second
}

func (p *planner) add(a action) int {
	a.Episode = len(p.eps) - 1
	p.acts = append(p.acts, a)
	return len(p.acts) - 1
}

// target picks a node that may be named as a successor at t, other than
// the serving node and the ones excluded; ok is false when none may.
func (p *planner) target(t time.Duration, exclude ...int) (int, bool) {
	var cands []int
	for n := range p.nodes {
		if n == p.cur || p.free[n] > t-acceptLead {
			continue
		}
		skip := false
		for _, e := range exclude {
			skip = skip || n == e
		}
		if !skip {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return 0, false
	}
	return cands[p.r.IntN(len(cands))], true
}

// moving adds a MOVING of the serving node to successor to at t (and the
// accept that must precede it), and makes to the serving node. It returns
// when the old node closes its connections.
func (p *planner) moving(t time.Duration, to int, null bool, window, jitter time.Duration) time.Duration {
	from := p.cur
	if p.refusing[to] {
		p.add(action{At: t - acceptLead, Kind: actAccept, Node: to})
		p.refusing[to] = false
	}
	p.add(action{At: t, Kind: actMoving, Node: from, To: to, Null: null, Window: window, Jitter: jitter})
	closes := t + window + jitter
	p.refusing[from] = true
	p.free[from] = max(p.free[from], closes+nodeRest)
	p.cur = to
	return closes
}

// dns adds a DNS change naming node at t, after every earlier DNS change.
func (p *planner) dns(t time.Duration, node int) time.Duration {
	t = max(t, p.lastDNS+50*time.Millisecond)
	p.lastDNS = t
	p.add(action{At: t, Kind: actDNS, Node: node})
	return t
}

// dnsAt is when DNS follows a MOVING sent at t: within the window (early)
// or after its close.
func (p *planner) dnsAt(t, window, jitter time.Duration, early bool) time.Duration {
	if early {
		return t + p.frac(window, 0.2, 0.8)
	}
	return t + window + jitter + p.dur(200*time.Millisecond, 800*time.Millisecond)
}

// episode draws one episode starting at t and returns when it ends; ok is
// false when no successor may be named at t.
func (p *planner) episode(t time.Duration) (end time.Duration, ok bool) {
	n := p.r.IntN(100)
	kind := episodeWeights[len(episodeWeights)-1].kind
	for _, w := range episodeWeights {
		if n < w.weight {
			kind = w.kind
			break
		}
		n -= w.weight
	}
	p.eps = append(p.eps, episode{Kind: kind, At: t, First: len(p.acts)})
	switch kind {
	case epNamed, epNullEarly, epNullLate, epZero:
		end, ok = p.single(t, kind)
	case epChained:
		end, ok = p.chained(t)
	case epSuperseded:
		end, ok = p.superseded(t)
	default:
		end, ok = p.slow(t, kind)
	}
	ep := &p.eps[len(p.eps)-1]
	ep.End = end
	ep.AtS, ep.EndS = t.Seconds(), end.Seconds()
	return end, ok
}

// single is one MOVING: named, null with early or late DNS, or a 0s window.
func (p *planner) single(t time.Duration, kind string) (time.Duration, bool) {
	to, ok := p.target(t)
	if !ok {
		return 0, false
	}
	from := p.cur
	window, jitter := p.window(), p.dur(0, 250*time.Millisecond)
	null := kind == epNullEarly || kind == epNullLate
	early := kind == epNullEarly || (kind == epNamed && p.coin(0.5))
	if kind == epZero {
		window, jitter = 0, p.dur(300*time.Millisecond, 600*time.Millisecond)
		null = p.coin(0.5)
	}
	closes := p.moving(t, to, null, window, jitter)
	mv := len(p.acts) - 1
	var dnsT time.Duration
	if kind == epZero {
		dnsT = p.dns(t+p.dur(50*time.Millisecond, 800*time.Millisecond), to)
	} else {
		dnsT = p.dns(p.dnsAt(t, window, jitter, early), to)
	}
	if window > 0 && p.coin(0.3) {
		// Another copy of the same MOVING (same seq) while the window runs.
		p.add(action{At: t + p.frac(window, 0.1, 0.9), Kind: actLateCopy, Node: from, Of: mv})
	}
	return max(closes, dnsT), true
}

// chained is a MOVING, then a MOVING on its successor during its window or
// right after it.
func (p *planner) chained(t time.Duration) (time.Duration, bool) {
	y, ok := p.target(t)
	if !ok {
		return 0, false
	}
	z, ok := p.target(t, y)
	if !ok {
		return 0, false
	}
	w1, j1 := p.window(), p.dur(0, 250*time.Millisecond)
	c1 := p.moving(t, y, p.coin(0.5), w1, j1)
	dnsY := p.dnsAt(t, w1, j1, p.coin(0.5))
	o := t + p.frac(w1, 0.3, 1) + p.dur(0, j1+400*time.Millisecond)
	if dnsY < o { // otherwise DNS goes from the first node straight to the last
		p.dns(dnsY, y)
	}
	w2, j2 := p.window(), p.dur(0, 250*time.Millisecond)
	c2 := p.moving(o, z, p.coin(0.5), w2, j2)
	dnsZ := p.dns(p.dnsAt(o, w2, j2, p.coin(0.5)), z)
	return max(c1, c2, dnsZ), true
}

// superseded is a MOVING naming one successor, a newer MOVING of the same
// node naming another while the first window runs, a late copy of the
// first, and a MOVING of the first successor to the second: the clients
// that went there already are told too, and the first successor retires
// like any node that stops serving.
func (p *planner) superseded(t time.Duration) (time.Duration, bool) {
	y, ok := p.target(t)
	if !ok {
		return 0, false
	}
	z, ok := p.target(t, y)
	if !ok {
		return 0, false
	}
	x := p.cur
	w1 := 2*time.Second + time.Duration(p.r.IntN(2))*time.Second
	p.moving(t, y, false, w1, 0)
	first := len(p.acts) - 1
	p.cur = x
	o := t + p.frac(w1, 0.2, 0.6)
	w2, j2 := p.window(), p.dur(0, 250*time.Millisecond)
	closesX := p.moving(o, z, p.coin(0.3), w2, j2)
	p.add(action{At: o + p.dur(50*time.Millisecond, min(500*time.Millisecond, w2*8/10)), Kind: actLateCopy, Node: x, Of: first})
	p.cur = y
	w3, j3 := p.window(), p.dur(0, 250*time.Millisecond)
	closesY := p.moving(o+p.dur(0, 300*time.Millisecond), z, false, w3, j3)
	dnsZ := p.dns(p.dnsAt(o, w2, j2, p.coin(0.5)), z)
	return max(closesX, closesY, dnsZ), true
}

// slow is a MIGRATING or FAILING_OVER of the serving node, replies slower
// than ReadTimeout until its completion, sometimes a MOVING of the node
// while they are slow, and sometimes a late copy of the start or of the
// completion after the completion.
func (p *planner) slow(t time.Duration, kind string) (time.Duration, bool) {
	start, done := actMigrating, actMigrated
	if kind == epFailover || kind == epFailoverMoving {
		start, done = actFailingOver, actFailedOver
	}
	x := p.cur
	startsIn := time.Duration(p.r.IntN(2)) * time.Second
	slowFor := p.dur(time.Second, 2*time.Second)
	first := p.add(action{At: t, Kind: start, Node: x, StartsIn: startsIn})
	completion := t + startsIn + slowFor
	end := completion
	if kind == epMigratingMoving || kind == epFailoverMoving {
		at := t + startsIn + p.frac(slowFor, 0.2, 0.7)
		to, ok := p.target(at)
		if !ok {
			return 0, false
		}
		w, j := 2*time.Second+time.Duration(p.r.IntN(2))*time.Second, p.dur(0, 250*time.Millisecond)
		null := p.coin(0.5)
		closes := p.moving(at, to, null, w, j)
		dnsT := p.dns(p.dnsAt(at, w, j, p.coin(0.5)), to)
		p.free[x] = max(p.free[x], completion+nodeRest)
		end = max(end, closes, dnsT)
	}
	last := p.add(action{At: completion, Kind: done, Node: x})
	if p.coin(0.5) {
		of := first
		if p.coin(0.5) {
			of = last
		}
		at := completion + p.dur(100*time.Millisecond, 600*time.Millisecond)
		p.add(action{At: at, Kind: actLateCopy, Node: x, Of: of})
		end = max(end, at)
	}
	return end, true
}
