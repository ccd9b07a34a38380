package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// The reshard scenario: go-redis's ClusterClient on a 3-endpoint emulated
// OSS Cluster API. Node 0's slots (a third of them) migrate to nodes 1 and
// 2 under load, announced with SMIGRATING and SMIGRATED; node 0, left with
// no slot, is removed: it leaves the slot map, stops accepting and closes
// its connections a window later. Four clients in turn: no handler,
// go-redis's built-in with default options (a default ClusterClient never
// reloads on SMIGRATED), go-redis's built-in with MaintNotificationsConfig
// set (it reloads on every SMIGRATED it reads), and maint (Instrument, or
// with --maint-route configure Group.NewClusterClient).
//
// While its slots migrate, the source is slow: every reply a little
// (reshardLatency), and the replies to one kind of write, the verified
// INCRBYs to a key it owns, past ReadTimeout (reshardSlowFor). Those
// replies come after the write ran, as from a server busy migrating: a
// client whose timeout is not relaxed on that connection gives up on a
// write that happened; with MaxRetries -1 it fails, with retries it runs
// it again (and again, while the source stays slow). maint relaxes every
// connection to the node from the SMIGRATING to the SMIGRATED; go-redis's
// built-in only the connection that read the SMIGRATING. The slow writes
// are few (reshardSlowRate), so that even held past ReadTimeout they take
// a fraction of the source's pool and a client that waits for them is
// never short of connections.

// reshardClient is one of the clients the reshard compares.
type reshardClient struct {
	name, title string
	kind        clientKind // for --clients
	configured  bool       // built-in: MaintNotificationsConfig set
}

var reshardClients = []reshardClient{
	{"none", "no handler", clientNone, false},
	{"builtin", "built-in, defaults", clientBuiltin, false},
	{"builtin-config", "built-in, config set", clientBuiltin, true},
	{"maint", "maint", clientMaint, false},
}

const (
	// reshardLatency slows the source's replies while its slots migrate.
	reshardLatency = 2 * time.Millisecond
	// reshardSlowLead is how long after the SMIGRATING the source starts
	// answering the slow writes slowly: time for a client to read it.
	reshardSlowLead = 200 * time.Millisecond
	// reshardSlowCmd is the command whose replies the source slows past
	// ReadTimeout during the migration: only the scenario's slow writes
	// use it.
	reshardSlowCmd = "INCRBY"
	// reshardSlots is what moves: node 0's slots, half to each other node.
	reshardSlotsA, reshardSlotsB = "0-2730", "2731-5460"
	// reshardPrefix prefixes the scenario's keys.
	reshardPrefix = "rs:"
)

// reshardSlowFor is how late the source answers a slow write: half a
// ReadTimeout past it.
func reshardSlowFor(s *settings) time.Duration { return s.readTimeout + s.readTimeout/2 }

// reshardSlowRate is how many slow writes the load sends per second: as
// many as keep a quarter of the pool busy while each waits for its reply.
func reshardSlowRate(s *settings) float64 {
	return max(1, float64(s.pool)/4/reshardSlowFor(s).Seconds())
}

// reshardSlowEvery is one scheduled command in how many that is a slow
// write.
func reshardSlowEvery(s *settings) int64 {
	return max(1, int64(float64(s.rate)/reshardSlowRate(s)+0.5))
}

// reshardSlowKey is the slow writes' hash tag: one slot of node 0's, which
// migrates.
var reshardSlowKey = func() string {
	for i := 0; ; i++ {
		tag := "{rs:w" + strconv.Itoa(i) + "}"
		if sl := mainttest.KeySlot(tag); sl <= 5460 {
			return tag
		}
	}
}()

// reshardCloseAfter is how long the removed node keeps its connections
// open: a window, and at least until the last slow reply is owed (the
// slowing stops at the SMIGRATED, right before the removal), so that the
// close cuts no reply the scenario delayed on purpose.
func reshardCloseAfter(s *settings) time.Duration {
	return max(s.window, reshardSlowFor(s)+500*time.Millisecond)
}

// reshardSpan is how long the disturbance lasts: the migration (one
// window), then the removed node's close.
func reshardSpan(s *settings) time.Duration {
	return s.window + reshardCloseAfter(s) + 500*time.Millisecond
}

// reshardRun is what one client did in the reshard.
type reshardRun struct {
	Client     string `json:"client"`
	MaxRetries int    `json:"max_retries"`
	OK         int64  `json:"ok"`
	Failed     int64  `json:"failed"`
	NotStarted int64  `json:"not_started"`
	Unfinished int64  `json:"unfinished"`
	// Slow counts the slow writes sent while the source answered them past
	// ReadTimeout.
	Slow int64 `json:"slow_writes"`
	// Duplicated counts INCRs and INCRBYs applied more often than sent (a
	// write run twice); Lost, acknowledged ones missing.
	Duplicated int64 `json:"duplicated"`
	Lost       int64 `json:"lost"`
	// Redirects counts the MOVED and ASK the nodes served (each one
	// followed by go-redis); RedirectsAfter those served after the
	// SMIGRATED was sent.
	Redirects int64 `json:"redirects"`
	// TimedOutUnrelaxed counts the command deadlines met on the wire on a
	// connection to a node maint had not relaxed then (for a control,
	// every one): before the SMIGRATING is read, only a machine too busy
	// to answer within ReadTimeout makes one. TimedOutRelaxed counts those
	// met while it had (relaxed past the slow writes' delay: none expected).
	TimedOutUnrelaxed int64 `json:"timed_out_unrelaxed"`
	TimedOutRelaxed   int64 `json:"timed_out_relaxed"`
	RedirectsAfter    int64 `json:"redirects_after_smigrated"`
	// SlotMaps counts the slot-map requests served from the SMIGRATING on.
	SlotMaps int64 `json:"slot_map_reloads"`
	// RemovedClosed counts the connections the removed node had to close,
	// RepliesLost the replies they still owed.
	RemovedClosed int                 `json:"removed_node_closed"`
	RepliesLost   int64               `json:"replies_lost"`
	Before        latency             `json:"latency_before"`
	During        latency             `json:"latency_during"`
	Errors        []errorCount        `json:"errors,omitempty"`
	Maint         *maint.ClusterStats `json:"maint,omitempty"`

	client reshardClient
}

// reshardReport is the JSON of the reshard scenario.
type reshardReport struct {
	Summary string        `json:"summary"`
	Runs    []*reshardRun `json:"runs"`
	// MaintWritesWrong counts maint's writes run twice and acknowledged
	// writes lost, over its runs (--check fails on any).
	MaintWritesWrong int64 `json:"maint_writes_wrong"`
	// MaintHandoffOff counts maint's runs whose SMIGRATED handoff was not
	// in force: an SMIGRATED acted on whose reload go-redis never had
	// answered from maint's map (--check fails on any).
	MaintHandoffOff int `json:"maint_handoff_off"`
	// MaintRemovedClosed counts the connections the removed node had to
	// close in maint's runs (--check fails on any).
	MaintRemovedClosed int `json:"maint_removed_node_closed"`
}

// reshardOnly reports whether the reshard is the only scenario of the run.
func reshardOnly(s *settings) bool {
	return len(s.scenarios) == 1 && s.scenarios[0].name == "reshard"
}

// reshardCluster describes the cluster the reshard runs against, for the
// header of a reshard-only run.
func reshardCluster(s *settings) string {
	return fmt.Sprintf("Each client runs alone against a fresh emulated OSS Cluster API (ClusterClient): nodes 127.0.0.2,\n"+
		"127.0.0.3 and 127.0.0.4 own slots 0-5460, 5461-10922 and 10923-16383; 127.0.0.2's slots migrate to\n"+
		"the other two over %v, its verified INCRBYs answered %v late after they ran (%.1f/s sent), then it\n"+
		"is removed (its connections closed %v later). Once with MaxRetries -1 and once with go-redis's default (3).",
		s.window, reshardSlowFor(s), reshardSlowRate(s), reshardCloseAfter(s))
}

// reshardState is one load slot's verification state: the INCRs each of
// its keys was acknowledged, and those whose outcome is unknown (failed).
type reshardState struct {
	acked, unknown map[string]int64
}

// runReshard plays the reshard for every client and both retry settings,
// prints its table and adds it to rep.
func runReshard(rn *runner, rep *report, stdout io.Writer) error {
	s := rn.s
	rr := &reshardReport{Summary: reshardSummary}
	for _, c := range reshardClients {
		want := false
		for _, k := range s.clients {
			want = want || k == c.kind
		}
		if !want {
			continue
		}
		for _, retries := range []int{-1, 0} {
			r, err := rn.reshard(c, retries)
			if err != nil {
				return err
			}
			rr.Runs = append(rr.Runs, r)
			if c.kind == clientMaint {
				rep.MaintFailed += r.Failed
				rep.MaintNotStarted += r.NotStarted
				rep.MaintRuns++
				rr.MaintWritesWrong += r.Duplicated + r.Lost
				if m := r.Maint; m != nil && (m.SMigrated > 0 && m.Served == 0 || m.ReloadsUnseen > 0) {
					rr.MaintHandoffOff++
				}
				rr.MaintRemovedClosed += r.RemovedClosed
			}
		}
	}
	rep.Reshard = rr
	rep.Scenarios = append(rep.Scenarios, &scenarioReport{Name: "reshard", Summary: reshardSummary})
	if !s.json {
		printReshard(stdout, rr)
	}
	return nil
}

const reshardSummary = "ClusterClient, 3 endpoints: a third of the slots migrate (SMIGRATING, SMIGRATED), " +
	"then their emptied source is removed"

// reshard plays the scenario once for client c.
func (rn *runner) reshard(c reshardClient, maxRetries int) (*reshardRun, error) {
	s := rn.s
	emu, err := mainttest.New(mainttest.Config{Backend: s.redis, Logf: rn.logf})
	if err != nil {
		return nil, err
	}
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{Nodes: 3})
	if err != nil {
		return nil, fmt.Errorf("an emulated cluster on 127.0.0.2 to 127.0.0.4: %w", err)
	}
	nodes := cl.Nodes()
	src := nodes[0]
	// The source's slow replies come after the command ran.
	src.SetLatencyAfterExecution(true)
	wire := newWireTimeouts(emu.Dialer())
	opt := &redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		Dialer:       wire.dial,
		Protocol:     3,
		PoolSize:     s.pool,
		MaxRetries:   maxRetries,
		ReadTimeout:  s.readTimeout,
		WriteTimeout: s.readTimeout,
		PoolTimeout:  s.poolTimeout,
	}
	switch {
	case c.kind == clientNone:
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	case c.configured:
		opt.MaintNotificationsConfig = &maintnotifications.Config{
			Mode: maintnotifications.ModeEnabled, EndpointType: maintnotifications.EndpointTypeInternalIP}
	}
	var cc *redis.ClusterClient
	var g *maint.Group
	switch {
	case c.kind == clientMaint && s.maintRoute == routeConfigure:
		// The options route: every node client's Maint is in place before
		// its first dial.
		g = maint.NewGroup(maint.WithLogf(rn.logf), maint.WithOnEvent(wire.event))
		cc = g.NewClusterClient(opt)
	case c.kind == clientMaint:
		// One line on an existing client, before its first command.
		cc = redis.NewClusterClient(opt)
		if g, err = maint.Instrument(cc, maint.WithLogf(rn.logf), maint.WithOnEvent(wire.event)); err != nil {
			_ = cc.Close()
			return nil, err
		}
	default:
		cc = redis.NewClusterClient(opt)
	}
	if g != nil && s.live != nil {
		g.Observe(s.live.observe) // --metrics-addr
	}
	defer func() {
		_ = cc.Close()
		if g != nil {
			_ = g.Close()
		}
	}()
	ctx := context.Background()
	if err := cc.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("reshard: first command: %w", err)
	}

	start := time.Now().Add(50 * time.Millisecond)
	length := s.before + reshardSpan(s) + afterSpan
	if s.duration > 0 {
		length = s.duration
	}
	end := start.Add(length)
	var slowing atomic.Bool
	var slow atomic.Int64
	l := startLoad(reshardOp(cc, reshardSlowEvery(s), &slowing, &slow), s.rate, s.goroutines, start, end,
		func(int) any { return &reshardState{acked: map[string]int64{}, unknown: map[string]int64{}} })
	label := fmt.Sprintf("reshard %-14s MaxRetries %2s", c.name, retriesLabel(maxRetries))
	stopProg := rn.prog.start(label, start, length, l)

	time.Sleep(time.Until(start.Add(s.before)))
	slotMapsBefore := reshardSlotMaps(nodes)
	if _, err := cl.MigrateSlots(mainttest.SlotMigration{
		From: src, To: nodes[1], Slots: reshardSlotsA,
		Also:         []mainttest.SlotTarget{{Slots: reshardSlotsB, To: nodes[2]}},
		Duration:     s.window,
		Latency:      reshardLatency,
		RemoveSource: true,
		CloseAfter:   reshardCloseAfter(s),
	}); err != nil {
		l.stop(0)
		stopProg()
		return nil, err
	}
	// A moment after the SMIGRATING, the source answers the slow writes
	// past ReadTimeout, until the SMIGRATED.
	time.Sleep(reshardSlowLead)
	src.SetCommandLatency(reshardSlowCmd, reshardSlowFor(s))
	slowing.Store(true)
	wctx, cancel := context.WithTimeout(ctx, s.window+10*time.Second)
	_, err = emu.WaitEvent(wctx, mainttest.IsKind(src, mainttest.KindSMigrated))
	cancel()
	src.SetCommandLatency(reshardSlowCmd, 0)
	slowing.Store(false)
	if err != nil {
		l.stop(0)
		stopProg()
		return nil, fmt.Errorf("reshard: no SMIGRATED: %w", err)
	}
	redirectsAt := reshardRedirects(nodes)
	l.wait(endGrace)
	stopProg()

	r := &reshardRun{Client: c.name, MaxRetries: effectiveRetries(maxRetries), client: c, Slow: slow.Load(),
		OK: l.ok.Load(), Failed: l.failed.Load(), NotStarted: l.notStarted.Load(), Unfinished: l.unfinished.Load(),
		Errors: l.errors(), Before: l.latency(0, s.before), During: l.latency(s.before, s.before+reshardSpan(s))}
	r.TimedOutUnrelaxed, r.TimedOutRelaxed = wire.unrelaxed.Load(), wire.whileRelaxed.Load()
	r.Redirects = reshardRedirects(nodes)
	r.RedirectsAfter = r.Redirects - redirectsAt
	r.SlotMaps = reshardSlotMaps(nodes) - slotMapsBefore
	st := src.Stats()
	r.RemovedClosed, r.RepliesLost = st.Cluster.ClosedAtRemoval, st.OwedAtClose
	if g != nil {
		if ms := g.Maints(); len(ms) > 0 {
			cs := ms[0].ClusterStats()
			r.Maint = &cs
		}
	}
	// Verify the INCRs against the backend.
	mr := emu.Miniredis()
	for _, sl := range l.slots {
		vs := sl.state.(*reshardState)
		for key, acked := range vs.acked {
			final := int64(0)
			if mr != nil {
				if v, err := mr.Get(key); err == nil {
					final, _ = strconv.ParseInt(v, 10, 64)
				}
			} else if v, err := cc.Get(ctx, key).Int64(); err == nil {
				final = v
			}
			switch unk := vs.unknown[key]; {
			case final > acked+unk:
				r.Duplicated += final - acked - unk
			case final < acked:
				r.Lost += acked - final
			}
		}
	}
	return r, nil
}

// reshardOp is the scenario's load: on each slot's own keys, in turn,
// INCR (verified), SET then GET, a pipeline of INCRs over several slots,
// and a MULTI/EXEC of two INCRs on one hash tag. One scheduled command is
// one of these; a pipeline or a transaction fails as one. Every
// slowEvery-th scheduled command is instead a slow write: INCRBY 1
// (verified) on a key of the migrating slot reshardSlowKey, counted in
// slow while slowing is set.
func reshardOp(cc *redis.ClusterClient, slowEvery int64, slowing *atomic.Bool, slow *atomic.Int64) op {
	var n atomic.Int64
	return func(ctx context.Context, s *slot) error {
		st := s.state.(*reshardState)
		base := reshardPrefix + strconv.Itoa(s.id)
		settle := func(key string, err error) error {
			if err != nil {
				st.unknown[key]++
				return err
			}
			st.acked[key]++
			return nil
		}
		if n.Add(1)%slowEvery == 0 {
			if slowing.Load() {
				slow.Add(1)
			}
			key := reshardPrefix + reshardSlowKey + ":" + strconv.Itoa(s.id)
			return settle(key, cc.IncrBy(ctx, key, 1).Err())
		}
		switch s.n % 5 {
		case 0, 1:
			key := base + ":c"
			return settle(key, cc.Incr(ctx, key).Err())
		case 2:
			key := base + ":s"
			if err := cc.Set(ctx, key, s.n, 0).Err(); err != nil {
				return err
			}
			return cc.Get(ctx, key).Err()
		case 3:
			keys := []string{base + ":p0", base + ":p1", base + ":p2"}
			cmds, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Incr(ctx, k)
				}
				return nil
			})
			var first error
			for i, k := range keys {
				var e error
				if i < len(cmds) {
					e = cmds[i].Err()
				} else {
					e = err
				}
				if e2 := settle(k, e); e2 != nil && first == nil {
					first = e2
				}
			}
			return first
		default:
			tag := "{" + base + "}"
			_, err := cc.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, tag+"a")
				p.Incr(ctx, tag+"b")
				return nil
			})
			_ = settle(tag+"a", err)
			return settle(tag+"b", err)
		}
	}
}

func reshardRedirects(nodes []*mainttest.Endpoint) int64 {
	var n int64
	for _, ep := range nodes {
		st := ep.Stats().Cluster
		n += st.Moved + st.Ask
	}
	return n
}

func reshardSlotMaps(nodes []*mainttest.Endpoint) int64 {
	var n int64
	for _, ep := range nodes {
		n += ep.Stats().Cluster.SlotMaps
	}
	return n
}

// printReshard prints the reshard's table: a column per client, the
// MaxRetries -1 and default runs side by side in each cell.
func printReshard(w io.Writer, rr *reshardReport) {
	type col struct {
		c          reshardClient
		noRetry, d *reshardRun
	}
	var cols []*col
	for _, r := range rr.Runs {
		if len(cols) == 0 || cols[len(cols)-1].c.name != r.client.name {
			cols = append(cols, &col{c: r.client})
		}
		if r.MaxRetries < 0 {
			cols[len(cols)-1].noRetry = r
		} else {
			cols[len(cols)-1].d = r
		}
	}
	fmt.Fprintf(w, "\n== reshard: %s\n\n", rr.Summary)
	t := &table{}
	head := []string{"MaxRetries -1 / 3"}
	for _, c := range cols {
		head = append(head, c.c.title)
	}
	t.row(head...)
	pair := func(label string, f func(r *reshardRun) string) {
		cells := []string{label}
		for _, c := range cols {
			a, b := "-", "-"
			if c.noRetry != nil {
				a = f(c.noRetry)
			}
			if c.d != nil {
				b = f(c.d)
			}
			cells = append(cells, a+" / "+b)
		}
		t.row(cells...)
	}
	i64 := func(f func(r *reshardRun) int64) func(r *reshardRun) string {
		return func(r *reshardRun) string { return strconv.FormatInt(f(r), 10) }
	}
	pair("failed commands", i64(func(r *reshardRun) int64 { return r.Failed }))
	pair("writes run twice (INCR, INCRBY)", i64(func(r *reshardRun) int64 { return r.Duplicated }))
	pair("acknowledged writes lost", i64(func(r *reshardRun) int64 { return r.Lost }))
	pair("MOVED/ASK served by the nodes", i64(func(r *reshardRun) int64 { return r.Redirects }))
	pair("  after the SMIGRATED was sent", i64(func(r *reshardRun) int64 { return r.RedirectsAfter }))
	pair("slot-map round trips (CLUSTER SLOTS)", i64(func(r *reshardRun) int64 { return r.SlotMaps }))
	pair("  reloads answered by maint's map", i64(func(r *reshardRun) int64 {
		if r.Maint == nil {
			return 0
		}
		return int64(r.Maint.Served)
	}))
	pair("conns the removed node closed", func(r *reshardRun) string { return strconv.Itoa(r.RemovedClosed) })
	pair("p99 before, ms", func(r *reshardRun) string { return fmtMs(r.Before.P99) })
	pair("p99 during, ms", func(r *reshardRun) string { return fmtMs(r.During.P99) })
	pair("slow writes sent (INCRBY)", i64(func(r *reshardRun) int64 { return r.Slow }))
	pair("deadlines met on the wire, node not relaxed", i64(func(r *reshardRun) int64 { return r.TimedOutUnrelaxed }))
	pair("deadlines met on the wire, node relaxed", i64(func(r *reshardRun) int64 { return r.TimedOutRelaxed }))
	pair("not started", i64(func(r *reshardRun) int64 { return r.NotStarted }))
	t.write(w)
	fmt.Fprintf(w, "(a ClusterClient retries a timed-out command up to MaxRedirects times whatever MaxRetries says)\n")
	var errs []string
	for _, c := range cols {
		for _, r := range []*reshardRun{c.noRetry, c.d} {
			if r == nil {
				continue
			}
			for _, e := range r.Errors {
				errs = append(errs, fmt.Sprintf("  %-20s MaxRetries %2d %6d × %s", c.c.title, r.MaxRetries, e.Count, clip(e.Error, 90)))
			}
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "\nerrors\n%s\n", strings.Join(errs, "\n"))
	}
}
