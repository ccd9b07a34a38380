package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// The failover scenario: go-redis's FailoverClient, which finds its master
// through a Discovery Service (Redis Enterprise's, or Redis Sentinel),
// under verified load (INCR, SET and GET checked against the backend at
// the end) through two events of the emulated Discovery Service:
//
//  1. a MOVING of the master with a null endpoint, the old node refusing
//     connections at the window's end, the service naming the successor
//     lateDNS after the window;
//  2. failoverGap later, a failover of that master to a third node:
//     FAILING_OVER now, every reply failoverLatency slower from then on,
//     the switch (+switch-master) failoverSwitch later,
//     the old master refusing connections and sending FAILED_OVER then, and
//     closing what is left failoverCloseOld after.
//
// go-redis forces its built-in handler off for failover clients
// (FailoverOptions has no MaintNotificationsConfig; clientOptions sets it
// disabled), so the "builtin" client is the same as "none": the report
// shows the mode go-redis left. maint is installed through its Group: the
// options route (g.NewFailoverClient) with --maint-route configure, on the
// existing client (g.Instrument) otherwise.

const (
	failoverGap      = time.Second
	failoverSwitch   = time.Second
	failoverCloseOld = 500 * time.Millisecond
	failoverPrefix   = "maintfailover:"
	// failoverLatency is the failing master's extra latency from
	// FAILING_OVER to the switch: every connection of the pool is busy
	// when go-redis closes them at the switch.
	failoverLatency = 200 * time.Millisecond
)

func init() { scenarios = append(scenarios, failoverScenario) }

var failoverScenario = &scenario{
	name: "failover",
	summary: "FailoverClient through the emulated Discovery Service: a MOVING of the master (null endpoint, " +
		"named 0.5s after the window), then a failover (FAILING_OVER, replies 200ms slow, switch 1s later, old master refuses and closes 0.5s after)",
	moving: true,
	span: func(s *settings) time.Duration {
		return failoverAt(s) + failoverSwitch + failoverCloseOld + 500*time.Millisecond
	},
	run:   (*runner).runFailover,
	print: printFailover,
}

// failoverAt is when the failover starts, from the MOVING.
func failoverAt(s *settings) time.Duration { return s.window + lateDNS + failoverGap }

// failoverStats is what the failover scenario adds to a run.
type failoverStats struct {
	// BuiltinMode is the mode of go-redis's built-in handler on the client,
	// as go-redis left it.
	BuiltinMode string `json:"builtin_mode"`
	// Verified writes, checked against the backend at the end.
	Duplicated int64 `json:"duplicated_writes"`
	Lost       int64 `json:"lost_writes"`
	MixedUp    int64 `json:"mixed_up_replies"`
	// Per event (MOVING, failover): the Discovery Service's answers naming
	// the retiring master between the event and the switch (each is a dial
	// that lands there), the connections the retiring master accepted in
	// that time, and how long after the switch it served its last command
	// (ms; negative: before the switch).
	Events []failoverEvent `json:"events"`
	// SentinelHandshakes counts the handshakes the Discovery Service
	// refused (maint never sends it one).
	SentinelHandshakes int64 `json:"sentinel_handshakes"`
	// OptedIn counts the data nodes' connections that opted in.
	OptedIn int `json:"data_conns_opted_in"`
}

type failoverEvent struct {
	Name             string   `json:"name"`
	QueriesRetiring  int      `json:"queries_naming_retiring_master"`
	AcceptedRetiring int      `json:"conns_accepted_by_retiring_master"`
	LastServedAfter  *float64 `json:"retiring_last_served_after_switch_ms,omitempty"`
	ServerClosed     int      `json:"server_closed"`
	RepliesLost      int64    `json:"replies_lost"`
}

// runFailover plays the failover scenario once for client k.
func (rn *runner) runFailover(sc *scenario, k clientKind, maxRetries int) (*runResult, error) {
	s := rn.s
	d, err := openDatabase(s, 3)
	if err != nil {
		return nil, err
	}
	defer d.close()
	a, b, c := d.nodes[0], d.nodes[1], d.nodes[2]
	b.SetMaintLatency(failoverLatency)
	ds, err := d.emu.AddSentinel("127.0.0.9:0", "db", a)
	if err != nil {
		return nil, fmt.Errorf("discovery service: %w", err)
	}
	tag := fmt.Sprintf("%s/%s/retries=%d", sc.name, k, maxRetries)
	ctx := context.Background()
	backend := redis.NewClient(&redis.Options{Addr: d.emu.BackendAddr(), Protocol: 2,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer backend.Close()
	verifiers := make([]*verifier, s.goroutines)
	for id := range verifiers {
		verifiers[id] = newVerifier(failoverPrefix, id)
	}
	if err := initKeys(ctx, backend, verifiers); err != nil {
		return nil, fmt.Errorf("%s: backend: %w", tag, err)
	}

	opt := &redis.FailoverOptions{
		MasterName: "db", SentinelAddrs: []string{ds.Addr()},
		Protocol: 3, PoolSize: s.pool, MaxRetries: maxRetries, Dialer: d.dials.Dial,
		ReadTimeout: s.readTimeout, WriteTimeout: s.readTimeout, PoolTimeout: s.poolTimeout,
	}
	var events eventLog
	var g *maint.Group
	var rdb *redis.Client
	if k == clientMaint {
		g = maint.NewGroup(maint.WithOnEvent(events.add),
			maint.WithLogf(func(format string, args ...any) { rn.logf("%s: maint: "+format, append([]any{tag}, args...)...) }))
		defer g.Close()
		if s.live != nil {
			g.Observe(s.live.observe) // --metrics-addr
		}
		if s.maintRoute == routeConfigure {
			rdb = g.NewFailoverClient(opt)
		} else {
			rdb = redis.NewFailoverClient(opt)
			if err := g.Instrument(rdb); err != nil {
				return nil, err
			}
		}
	} else {
		// none and builtin alike: go-redis gives a failover client no
		// way to enable its handler.
		rdb = redis.NewFailoverClient(opt)
	}
	defer rdb.Close()
	fs := &failoverStats{BuiltinMode: "nil"}
	if cfg := rdb.Options().MaintNotificationsConfig; cfg != nil {
		fs.BuiltinMode = string(cfg.Mode)
	}
	if err := warm(ctx, rdb, s.pool); err != nil {
		return nil, fmt.Errorf("%s: first commands: %w", tag, err)
	}

	span := sc.span(s)
	total := s.runLength(sc)
	start := time.Now()
	for _, v := range verifiers {
		v.start = start
	}
	l := startLoad(verifiedOp(rdb), s.rate, s.goroutines, start, start.Add(total),
		func(id int) any { return verifiers[id] })
	stopProgress := rn.prog.start(fmt.Sprintf("%-14s %-17s MaxRetries %2s", sc.name, k.title(), retriesLabel(maxRetries)), start, total, l)
	sleepUntil(start.Add(s.before))
	movingAt := time.Now()
	ds.Moving(mainttest.SentinelMoving{
		Moving:    mainttest.Moving{Window: s.window, To: b, Null: true, StopAccepting: true},
		NameAfter: s.window + lateDNS,
	})
	foAtCh := make(chan time.Time, 1)
	d.after(failoverAt(s), func() {
		foAtCh <- time.Now()
		ds.Failover(mainttest.Failover{To: c, SwitchAfter: failoverSwitch,
			RefuseOld: true, CloseOld: true, CloseOldAfter: failoverCloseOld})
	})
	l.wait(endGrace)
	stopProgress()
	var foAt time.Time
	select {
	case foAt = <-foAtCh:
	default: // the load ended first (--duration)
	}

	r := rn.result(k, maxRetries, l, d, sc, start, movingAt, span, total)
	if g != nil {
		r.Maint = rn.maintResult(tag, g.Stats(), &events)
	}

	// The verified writes.
	var used []*verifier
	for i, sl := range l.slots {
		if sl.n > 0 {
			used = append(used, verifiers[i])
		}
	}
	var vr soakRun
	if err := checkKeys(ctx, backend, used, &vr); err != nil {
		return nil, fmt.Errorf("%s: final read: %w", tag, err)
	}
	fs.Duplicated, fs.Lost, fs.MixedUp = vr.Duplicated, vr.Lost, vr.MixedUp
	for _, a := range vr.Anomalies {
		rn.logf("%s: %s", tag, a)
	}

	// The two events, as the emulator saw them.
	evs := d.emu.Events()
	switches := make([]time.Time, 0, 2)
	for _, ev := range evs {
		if ev.Kind == mainttest.KindSentinelSwitch {
			switches = append(switches, ev.At)
		}
	}
	for i, e := range []struct {
		name     string
		from     time.Time
		retiring *mainttest.Endpoint
	}{{"MOVING", movingAt, a}, {"failover", foAt, b}} {
		fe := failoverEvent{Name: e.name}
		var sw time.Time
		if i < len(switches) {
			sw = switches[i]
		}
		for _, ev := range evs {
			if e.from.IsZero() || ev.At.Before(e.from) || (!sw.IsZero() && !ev.At.Before(sw)) {
				continue
			}
			switch {
			case ev.Kind == mainttest.KindSentinelQuery && ev.Detail == e.retiring.Addr():
				fe.QueriesRetiring++
			case ev.Kind == mainttest.KindAccept && ev.Endpoint == e.retiring.Addr():
				fe.AcceptedRetiring++
			}
		}
		st := e.retiring.Stats()
		if !sw.IsZero() && !st.LastServed.IsZero() {
			v := float64(st.LastServed.Sub(sw).Microseconds()) / 1000
			fe.LastServedAfter = &v
		}
		fe.ServerClosed, fe.RepliesLost = st.ClosedAtWindowEnd, st.OwedAtClose
		fs.Events = append(fs.Events, fe)
	}
	fs.SentinelHandshakes = ds.Stats().Handshakes
	for _, n := range d.nodes {
		fs.OptedIn += n.Stats().OptedIn
	}
	r.Failover = fs
	if s.verbose {
		for _, ev := range evs {
			rn.logf("%s: emulator: %s", tag, ev)
		}
		for _, ev := range events.all() {
			rn.logf("%s: maint event: %s %s", tag, ev.At.Format("15:04:05.000000"), ev)
		}
	}
	return r, nil
}

// printFailover prints what the failover scenario adds to the table.
func printFailover(w io.Writer, sr *scenarioReport) {
	cols := columns(sr)
	t := &table{}
	head := []string{"failover client (Discovery Service)"}
	for _, c := range cols {
		head = append(head, c.kind.title())
	}
	t.row(head...)
	row := func(label string, f func(fs *failoverStats) string) {
		for _, pick := range []struct {
			suffix string
			r      func(c column) *runResult
		}{{", MaxRetries -1", func(c column) *runResult { return c.noRetry }}, {", MaxRetries 3", func(c column) *runResult { return c.defRetries }}} {
			cells := []string{label + pick.suffix}
			for _, c := range cols {
				if r := pick.r(c); r != nil && r.Failover != nil {
					cells = append(cells, f(r.Failover))
				} else {
					cells = append(cells, "-")
				}
			}
			t.row(cells...)
		}
	}
	cells := []string{"  go-redis built-in handler mode (forced)"}
	for _, c := range cols {
		if r := c.defRetries; r != nil && r.Failover != nil {
			cells = append(cells, r.Failover.BuiltinMode)
		} else {
			cells = append(cells, "-")
		}
	}
	t.row(cells...)
	row("  writes run twice (verified)", func(fs *failoverStats) string { return fmt.Sprint(fs.Duplicated) })
	row("  writes lost (verified)", func(fs *failoverStats) string { return fmt.Sprint(fs.Lost) })
	for i, name := range []string{"MOVING", "failover"} {
		ev := func(fs *failoverStats) *failoverEvent {
			if i < len(fs.Events) {
				return &fs.Events[i]
			}
			return nil
		}
		row("  "+name+": queries naming the retiring master", func(fs *failoverStats) string {
			if e := ev(fs); e != nil {
				return fmt.Sprint(e.QueriesRetiring)
			}
			return "-"
		})
		row("  "+name+": conns it accepted before the switch", func(fs *failoverStats) string {
			if e := ev(fs); e != nil {
				return fmt.Sprint(e.AcceptedRetiring)
			}
			return "-"
		})
		row("  "+name+": its last command, ms after the switch", func(fs *failoverStats) string {
			if e := ev(fs); e != nil && e.LastServedAfter != nil {
				return fmt.Sprintf("%+.0f", *e.LastServedAfter)
			}
			return "-"
		})
	}
	row("  failover: replies lost when the old master closed", func(fs *failoverStats) string {
		if len(fs.Events) > 1 {
			return fmt.Sprint(fs.Events[1].RepliesLost)
		}
		return "-"
	})
	row("  handshakes sent to the Discovery Service", func(fs *failoverStats) string { return fmt.Sprint(fs.SentinelHandshakes) })
	row("  data connections opted in", func(fs *failoverStats) string { return fmt.Sprint(fs.OptedIn) })
	fmt.Fprintln(w)
	t.write(w)
}
