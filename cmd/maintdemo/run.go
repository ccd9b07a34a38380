package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// host is the name every client is configured with; the emulator's DNS
// resolves it to the node that serves the database.
const host = "redis.test"

// endGrace is how long the commands in flight at the end of the load may
// take to finish before they are cancelled (and counted as unfinished).
const endGrace = 5 * time.Second

// blockingKey is the list the blocking scenario's BLPOP waits on.
const blockingKey = "maintdemo:q"

// database is one emulated Redis Enterprise database whose nodes listen on
// the same port and different loopback IPs (127.0.0.2, 127.0.0.3, ...): an
// endpoint move changes the IP, as in a real cluster. The scenarios use two
// nodes, old and nw; the soak uses more.
type database struct {
	emu     *mainttest.Emulator
	nodes   []*mainttest.Endpoint
	old, nw *mainttest.Endpoint // nodes[0] and nodes[1]
	addr    string              // host:port the clients dial
	dials   *mainttest.Recorder

	mu     sync.Mutex // guards timers
	timers []*time.Timer
}

// openDatabase starts an emulator with n >= 2 nodes, the first one named by
// host in the emulator's DNS.
func openDatabase(s *settings, n int) (*database, error) {
	emu, err := mainttest.New(mainttest.Config{Backend: s.redis})
	if err != nil {
		return nil, err
	}
	var nodes []*mainttest.Endpoint
	for range 20 { // the port picked on 127.0.0.2 may be taken on another IP
		nodes, err = addNodes(emu, n)
		if err == nil {
			break
		}
	}
	if err != nil {
		_ = emu.Close()
		return nil, fmt.Errorf("%d loopback endpoints on 127.0.0.2 to 127.0.0.%d (Linux has all of 127.0.0.0/8; "+
			"on macOS: sudo ifconfig lo0 alias 127.0.0.2 up, and so on): %w", n, n+1, err)
	}
	emu.DNS().Set(host, nodes[0].IP())
	d := &database{emu: emu, nodes: nodes, old: nodes[0], nw: nodes[1],
		addr: net.JoinHostPort(host, nodes[0].Port())}
	d.dials = mainttest.NewRecorder(emu.Dialer())
	return d, nil
}

// addNodes adds n endpoints on 127.0.0.2, 127.0.0.3, ... with one port. On
// failure the endpoints already added stay (unused) and the caller tries
// again with another port.
func addNodes(emu *mainttest.Emulator, n int) ([]*mainttest.Endpoint, error) {
	first, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	nodes := []*mainttest.Endpoint{first}
	for i := 1; i < n; i++ {
		ep, err := emu.AddEndpoint(fmt.Sprintf("127.0.0.%d:%s", i+2, first.Port()))
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, ep)
	}
	return nodes, nil
}

// after runs f after delay, unless the database is closed first.
func (d *database) after(delay time.Duration, f func()) {
	d.mu.Lock()
	d.timers = append(d.timers, time.AfterFunc(delay, f))
	d.mu.Unlock()
}

func (d *database) close() {
	d.mu.Lock()
	for _, t := range d.timers {
		t.Stop()
	}
	d.mu.Unlock()
	_ = d.emu.Close()
}

// runResult is what one client did in one scenario with one retry setting.
type runResult struct {
	Client     string `json:"client"`
	MaxRetries int    `json:"max_retries"`
	OK         int64  `json:"ok"`
	Failed     int64  `json:"failed"`
	// NotStarted counts commands due while --goroutines were in flight.
	NotStarted int64 `json:"not_started"`
	// Unfinished counts commands still in flight endGrace after the end.
	Unfinished int64          `json:"unfinished"`
	Errors     []errorCount   `json:"errors,omitempty"`
	Timeline   timeline       `json:"timeline"`
	Before     latency        `json:"latency_before"`
	During     latency        `json:"latency_during"`
	Blocking   *blockingCall  `json:"blocking,omitempty"`
	Maint      *maintStats    `json:"maint,omitempty"`
	Builtin    *builtinStats  `json:"builtin,omitempty"`
	Failover   *failoverStats `json:"failover,omitempty"`

	kind clientKind
}

// errorCount is one error message and how many commands failed with it.
type errorCount struct {
	Error string `json:"error"`
	Count int64  `json:"count"`
}

// latency summarises the latencies of successful commands, in milliseconds.
type latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	// LagP99 is how late the load generator started the commands, p99: it
	// is part of the latencies above (they run from the scheduled start).
	LagP99 float64 `json:"start_lag_p99_ms"`
}

// timeline holds the moments of a run in seconds from the start of the load
// (null when it did not happen) and what the old node saw.
type timeline struct {
	Event       *float64 `json:"event"`
	DNSMoved    *float64 `json:"dns_moved,omitempty"`
	SlowFrom    *float64 `json:"slow_from,omitempty"`
	Completion  *float64 `json:"completion,omitempty"`
	WindowEnd   *float64 `json:"window_end,omitempty"`
	OldLastUsed *float64 `json:"old_last_served,omitempty"`
	OldClosed   *float64 `json:"old_conns_closed,omitempty"`

	OldOpenAtEnd  int     `json:"old_conns_open_at_end"`
	OldAfterEvent int     `json:"old_conns_opened_after_event"`
	FailedDials   int64   `json:"failed_dials"`
	ServerClosed  int     `json:"server_closed"`
	RepliesLost   int64   `json:"replies_lost"`
	OldServed     int64   `json:"old_served"`
	NewServed     int64   `json:"new_served"`
	LoadEnd       float64 `json:"load_end"`
	DuringEnd     float64 `json:"during_end"`
}

// blockingCall is the fate of the blocking scenario's BLPOP.
type blockingCall struct {
	SentAt   float64  `json:"sent_at"`
	PushedAt *float64 `json:"pushed_at,omitempty"`
	DoneAt   *float64 `json:"done_at,omitempty"`
	Value    string   `json:"value,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// maintStats are maint's counters (maint.Stats).
type maintStats struct {
	Notifications uint64 `json:"notifications"`
	Handoffs      uint64 `json:"handoffs"`
	Retired       uint64 `json:"retired"`
	ClosedAtCap   uint64 `json:"closed_at_cap"`
	BusyAtCap     uint64 `json:"busy_at_cap"`
	Doomed        uint64 `json:"doomed"`
	Held          uint64 `json:"held"`
	HeldTimeouts  uint64 `json:"held_timeouts"`
	Relaxations   uint64 `json:"relaxations"`
}

// builtinStats is what go-redis's built-in handler reports.
type builtinStats struct {
	ActiveHandoffs int `json:"active_handoffs_at_end"`
}

// runner plays runs and collects verbose logs.
type runner struct {
	s    *settings
	logf func(format string, args ...any) // verbose log; never nil
	prog *progress
	// metrics are what the maint runs recorded, for --metrics (metrics.go).
	metrics []metricsRun
}

// run plays scenario sc once for client k with maxRetries (0: go-redis's
// default) against a fresh emulated database.
func (rn *runner) run(sc *scenario, k clientKind, maxRetries int) (*runResult, error) {
	if sc.run != nil {
		return sc.run(rn, sc, k, maxRetries)
	}
	s := rn.s
	d, err := openDatabase(s, 2)
	if err != nil {
		return nil, err
	}
	defer d.close()
	if sc.prepare != nil {
		sc.prepare(d, s)
	}
	tag := fmt.Sprintf("%s/%s/retries=%d", sc.name, k, maxRetries)
	var events eventLog
	rdb, m := newClient(k, d, s, maxRetries,
		func(format string, args ...any) { rn.logf("%s: maint: "+format, append([]any{tag}, args...)...) },
		events.add)
	closeClient := func() {
		_ = rdb.Close()
		if m != nil {
			_ = m.Close()
		}
	}
	defer closeClient()
	ctx := context.Background()
	if err := warm(ctx, rdb, s.pool); err != nil {
		return nil, fmt.Errorf("%s: first commands: %w", tag, err)
	}
	if sc.blocking {
		pusher := redis.NewClient(&redis.Options{Addr: d.emu.BackendAddr(), Protocol: 2,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		defer pusher.Close()
		if err := pusher.Del(ctx, blockingKey).Err(); err != nil {
			return nil, fmt.Errorf("%s: backend: %w", tag, err)
		}
		d.after(s.before+s.window+blockingPushAfter, func() { pusher.LPush(ctx, blockingKey, "job") })
	}

	span := sc.span(s)
	total := s.runLength(sc)
	start := time.Now()
	l := startLoad(setGet(rdb), s.rate, s.goroutines, start, start.Add(total), nil)
	stopProgress := rn.prog.start(fmt.Sprintf("%-14s %-17s MaxRetries %2s", sc.name, k.title(), retriesLabel(maxRetries)), start, total, l)

	var blk *blockingCall
	blkDone := make(chan struct{})
	blkCtx, blkCancel := context.WithCancel(ctx)
	defer blkCancel()
	if sc.blocking {
		blk = &blockingCall{SentAt: (s.before - blockingLead).Seconds()}
		d.after(s.before-blockingLead, func() {
			defer close(blkDone)
			v, err := rdb.BLPop(blkCtx, 0, blockingKey).Result()
			at := time.Since(start).Seconds()
			if blkCtx.Err() != nil && err != nil {
				blk.Error = "still waiting at the end of the run"
				return
			}
			blk.DoneAt = &at
			if err != nil {
				blk.Error = normalizeError(err)
			} else if len(v) == 2 {
				blk.Value = v[1]
			}
		})
	} else {
		close(blkDone)
	}

	sleepUntil(start.Add(s.before))
	eventAt := time.Now()
	sc.trigger(d, s)
	l.wait(endGrace)
	blkCancel()
	<-blkDone
	stopProgress()

	r := rn.result(k, maxRetries, l, d, sc, start, eventAt, span, total)
	if blk != nil {
		pushedAt := (s.before + s.window + blockingPushAfter).Seconds()
		blk.PushedAt = &pushedAt
		r.Blocking = blk
		if blk.Error != "" || blk.Value == "" {
			// With retries disabled, a BLPOP still blocked when the server
			// closes the old node's connections at the window's end fails
			// with that close's error, whatever the handler (go-redis alone
			// too): listed, not counted as a command the handler failed.
			byServer := maxRetries < 0 && blk.DoneAt != nil && *blk.DoneAt >= (s.before+s.window).Seconds() &&
				!strings.HasPrefix(blk.Error, "maint:")
			if !byServer {
				r.Failed++
			}
			msg := blk.Error
			if msg == "" {
				msg = "no value"
			}
			r.Errors = append(r.Errors, errorCount{Error: "BLPOP: " + msg, Count: 1})
		}
	}
	if m != nil {
		r.Maint = rn.maintResult(tag, m.Stats(), &events)
	}
	if k == clientBuiltin {
		if mgr := rdb.GetMaintNotificationsManager(); mgr != nil {
			r.Builtin = &builtinStats{ActiveHandoffs: int(mgr.GetActiveOperationCount())}
		}
	}
	if s.verbose {
		for _, ev := range d.emu.Events() {
			rn.logf("%s: emulator: %s", tag, ev)
		}
		for _, ev := range events.all() {
			rn.logf("%s: maint event: %s %s", tag, ev.At.Format("15:04:05.000000"), ev)
		}
	}
	return r, nil
}

// timeline reads the emulator's log and the dial log. It must run before the
// client is closed: closing it closes every connection.
// result is what every scenario run reports of its load: the counts, the
// latency before and during the event (at eventAt, lasting span) and the
// timeline.
func (rn *runner) result(k clientKind, maxRetries int, l *load, d *database, sc *scenario, start, eventAt time.Time, span, total time.Duration) *runResult {
	r := &runResult{Client: k.String(), MaxRetries: effectiveRetries(maxRetries), kind: k,
		OK: l.ok.Load(), Failed: l.failed.Load(), NotStarted: l.notStarted.Load(), Unfinished: l.unfinished.Load(),
		Errors: l.errors()}
	evOff := eventAt.Sub(start)
	r.Before = l.latency(0, evOff)
	r.During = l.latency(evOff, evOff+span)
	r.Timeline = rn.timeline(d, sc, start, eventAt)
	r.Timeline.LoadEnd = total.Seconds()
	r.Timeline.DuringEnd = (evOff + span).Seconds()
	return r
}

// maintResult is maint's counters for a run's result; with --metrics it
// also records what the run's maint saw.
func (rn *runner) maintResult(tag string, st maint.Stats, events *eventLog) *maintStats {
	if rn.s.metrics {
		rn.recordMetrics(tag, st, events.all())
	}
	return maintStatsOf(st)
}

// maintStatsOf is the part of maint's counters a result reports.
func maintStatsOf(st maint.Stats) *maintStats {
	return &maintStats{Notifications: st.Notifications, Handoffs: st.Handoffs, Retired: st.Retired,
		ClosedAtCap: st.ClosedAtCap, BusyAtCap: st.BusyAtCap, Doomed: st.Doomed, Held: st.Held,
		HeldTimeouts: st.HeldTimeouts, Relaxations: st.Relaxations}
}

func (rn *runner) timeline(d *database, sc *scenario, start, eventAt time.Time) timeline {
	evs := d.emu.Events()
	at := func(t time.Time) *float64 {
		if t.IsZero() {
			return nil
		}
		v := t.Sub(start).Seconds()
		return &v
	}
	var tl timeline
	for _, kind := range []string{mainttest.KindMoving, mainttest.KindMigrating} {
		if ev, ok := firstEvent(evs, d.old.Addr(), kind); ok {
			tl.Event = at(ev.At)
		}
	}
	if ev, ok := firstEvent(evs, "", mainttest.KindDNS, eventAt); ok {
		tl.DNSMoved = at(ev.At)
	}
	if ev, ok := firstEvent(evs, d.old.Addr(), mainttest.KindMaintStart); ok {
		tl.SlowFrom = at(ev.At)
	}
	if ev, ok := firstEvent(evs, d.old.Addr(), mainttest.KindMigrated); ok {
		tl.Completion = at(ev.At)
	}
	tl.WindowEnd = at(windowEnd(evs, d.old.Addr(), eventAt))
	old := d.old.Stats()
	tl.OldServed, tl.NewServed = old.Served, d.nw.Stats().Served
	tl.FailedDials = d.dials.Failed()
	if sc.moving {
		tl.OldLastUsed = at(old.LastServed)
		cs := summary(d.dials, d.old.Addr(), eventAt)
		tl.OldOpenAtEnd = cs.openAtEnd
		tl.OldAfterEvent = cs.usedSinceAt
		if cs.openAtEnd == 0 {
			tl.OldClosed = at(cs.lastClosed)
		}
		tl.ServerClosed = old.ClosedAtWindowEnd
		tl.RepliesLost = old.OwedAtClose
	}
	return tl
}

// firstEvent returns the first event of kind on endpoint (any endpoint when
// "") at or after since (if given).
func firstEvent(evs []mainttest.Event, endpoint, kind string, since ...time.Time) (mainttest.Event, bool) {
	for _, ev := range evs {
		if ev.Kind != kind || (endpoint != "" && ev.Endpoint != endpoint) {
			continue
		}
		if len(since) > 0 && ev.At.Before(since[0]) {
			continue
		}
		return ev, true
	}
	return mainttest.Event{}, false
}

// windowEnd is when the old node began closing what was left at the end of
// the MOVING window: it stops accepting first (StopAccepting), then closes
// the connections one by one and logs the end of the window last.
func windowEnd(evs []mainttest.Event, endpoint string, since time.Time) time.Time {
	var first time.Time
	for _, ev := range evs {
		if ev.Endpoint != endpoint || ev.At.Before(since) {
			continue
		}
		switch {
		case ev.Kind == mainttest.KindWindowEndClose,
			ev.Kind == mainttest.KindRefuse && strings.Contains(ev.Detail, "stop_accepting"),
			ev.Kind == mainttest.KindClose && strings.Contains(ev.Detail, "window_end"):
			if first.IsZero() || ev.At.Before(first) {
				first = ev.At
			}
		}
	}
	return first
}

// warm fills the pool: pool concurrent PINGs make the client dial its
// connections before the measurement starts.
func warm(ctx context.Context, rdb *redis.Client, pool int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	errs := make(chan error, pool)
	for range pool {
		go func() { errs <- rdb.Ping(ctx).Err() }()
	}
	var first error
	for range pool {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// effectiveRetries is go-redis's reading of Options.MaxRetries.
func effectiveRetries(n int) int {
	switch {
	case n == 0:
		return 3
	case n < 0:
		return -1
	}
	return n
}

func retriesLabel(n int) string {
	if n == 0 {
		return "3"
	}
	return fmt.Sprint(n)
}

// eventLog collects a Maint's events.
type eventLog struct {
	mu  sync.Mutex
	evs []maint.Event
}

func (l *eventLog) add(e maint.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventLog) all() []maint.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]maint.Event(nil), l.evs...)
}
