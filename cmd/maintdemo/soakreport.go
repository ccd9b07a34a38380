package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// soakReport is the soak's JSON output.
type soakReport struct {
	Settings   settingsJSON `json:"settings"`
	Seed       uint64       `json:"seed"`
	Duration   float64      `json:"duration"` // seconds of load per client
	MaxRetries int          `json:"max_retries"`
	Nodes      []string     `json:"nodes"`
	// Plan is the sequence of events every client went through, one line
	// per step; Episodes groups them.
	Plan     []string   `json:"plan"`
	Episodes []episode  `json:"episodes"`
	Runs     []*soakRun `json:"runs"`
	// MaintBad counts what maint's run failed, left unstarted or
	// unfinished, lost, duplicated or mixed up; --check fails when it is
	// not zero.
	MaintBad int64 `json:"maint_bad"`
}

// busyLag is the generator lag (p99) past which a run's report says the
// machine was busy: the process did not get the CPU when its timers fired.
const busyLag = 100.0 // ms

// runSoak plays one seeded plan for every client in turn and reports.
func (rn *runner) runSoak(stdout, stderr io.Writer) int {
	s := rn.s
	total := s.soakLength()
	pl := newPlan(s.seed, soakNodes, s.before, total-planTail)
	rep := &soakReport{Settings: newReport(s).Settings, Seed: s.seed, Duration: total.Seconds(),
		MaxRetries: effectiveRetries(soakRetries(s.maxRetries))}
	for i := range soakNodes {
		rep.Nodes = append(rep.Nodes, nodeName(i))
	}
	for _, a := range pl.Actions {
		rep.Plan = append(rep.Plan, a.String())
	}
	rep.Episodes = pl.Episodes
	for i, a := range pl.Actions {
		rn.logf("soak/seed=%d: plan step %d: %s", s.seed, i+1, a)
	}
	for _, k := range s.clients {
		r, err := rn.soak(pl, k)
		if err != nil {
			fmt.Fprintln(stderr, "maintdemo:", err)
			return 2
		}
		rep.Runs = append(rep.Runs, r)
		if k == clientMaint {
			rep.MaintBad += r.bad()
		}
	}
	if s.json {
		if err := writeJSON(stdout, rep); err != nil {
			fmt.Fprintln(stderr, "maintdemo:", err)
			return 2
		}
	} else {
		printSoak(stdout, s, rep)
	}
	if s.check && rep.MaintBad > 0 {
		fmt.Fprintf(stderr, "maintdemo: check failed: soak seed %d: maint failed, lost, duplicated or mixed up %d\n", s.seed, rep.MaintBad)
		for _, r := range rep.Runs {
			if r.kind != clientMaint {
				continue
			}
			fmt.Fprintf(stderr, "  failed %d, not started %d, unfinished %d, lost %d, duplicated %d, mixed up %d\n",
				r.Failed, r.NotStarted, r.Unfinished, r.Lost, r.Duplicated, r.MixedUp)
			for _, e := range r.Errors {
				fmt.Fprintf(stderr, "  %d × %s\n", e.Count, e.Error)
			}
			for _, a := range r.Anomalies {
				fmt.Fprintf(stderr, "  %s\n", a)
			}
		}
		return 1
	}
	return 0
}

// episodeMix counts the episodes by kind, in the generator's order.
func episodeMix(eps []episode) string {
	counts := map[string]int{}
	for _, e := range eps {
		counts[e.Kind]++
	}
	var parts []string
	for _, w := range episodeWeights {
		if n := counts[w.kind]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", w.kind, n))
		}
	}
	return strings.Join(parts, ", ")
}

func printSoak(w io.Writer, s *settings, rep *soakReport) {
	fmt.Fprintf(w, "maintdemo soak: seed %d, %v of load per client, %s open loop (at most %d in flight), pool %d, "+
		"ReadTimeout %v, MaxRetries %d; backend %s; go-redis %s\n",
		rep.Seed, s.soakLength(), rateText(s.rate), s.goroutines, s.pool, s.readTimeout, rep.MaxRetries,
		rep.Settings.Backend, rep.Settings.GoRedis)
	fmt.Fprintf(w, "Nodes %s on one port, host %q in the emulator's DNS; slow replies (MIGRATING, FAILING_OVER) take ReadTimeout + 0.5s.\n",
		strings.Join(rep.Nodes, ", "), host)
	fmt.Fprintf(w, "Each client runs alone against a fresh emulator through the same %d episodes: %s.\n\n",
		len(rep.Episodes), episodeMix(rep.Episodes))
	for i, line := range rep.Plan {
		fmt.Fprintf(w, "  %2d %s\n", i+1, line)
	}

	t := &table{}
	head := []string{""}
	for _, r := range rep.Runs {
		head = append(head, r.kind.title())
	}
	t.row(head...)
	row := func(label string, f func(r *soakRun) string) {
		cells := []string{label}
		for _, r := range rep.Runs {
			cells = append(cells, f(r))
		}
		t.row(cells...)
	}
	n := func(v int64) string { return fmt.Sprint(v) }
	row("commands scheduled", func(r *soakRun) string { return n(r.Commands) })
	row("failed", func(r *soakRun) string { return n(r.Failed) })
	if slices.ContainsFunc(rep.Runs, func(r *soakRun) bool { return r.NotStarted > 0 }) {
		row(fmt.Sprintf("not started (%d in flight)", s.goroutines), func(r *soakRun) string { return n(r.NotStarted) })
	}
	if slices.ContainsFunc(rep.Runs, func(r *soakRun) bool { return r.Unfinished > 0 }) {
		row("unfinished at the end", func(r *soakRun) string { return n(r.Unfinished) })
	}
	row("lost writes", func(r *soakRun) string { return n(r.Lost) })
	row("duplicated writes", func(r *soakRun) string { return n(r.Duplicated) })
	row("mixed-up replies", func(r *soakRun) string { return n(r.MixedUp) })
	row("INCRs acknowledged / failed", func(r *soakRun) string { return n(r.IncrAcked) + " / " + n(r.IncrUnknown) })
	row("connections the server closed at windows' ends", func(r *soakRun) string { return fmt.Sprint(r.ServerClosed) })
	row("replies lost when it closed them", func(r *soakRun) string { return n(r.RepliesLost) })
	row("dials that failed", func(r *soakRun) string { return n(r.FailedDials) })
	row("events played", func(r *soakRun) string { return fmt.Sprint(r.Events) })
	row("latency p50 / p99 / max, ms", func(r *soakRun) string {
		return fmtMs(r.Latency.P50) + " / " + fmtMs(r.Latency.P99) + " / " + fmtMs(r.Latency.Max)
	})
	fmt.Fprintln(w)
	t.write(w)

	first := true
	for _, r := range rep.Runs {
		for i, e := range r.Errors {
			if first {
				fmt.Fprintln(w, "\nerrors")
				first = false
			}
			if i == 4 {
				fmt.Fprintf(w, "  %-17s ... %d more kinds\n", r.kind.title(), len(r.Errors)-i)
				break
			}
			fmt.Fprintf(w, "  %-17s %6d × %s\n", r.kind.title(), e.Count, clip(e.Error, 100))
		}
	}
	first = true
	for _, r := range rep.Runs {
		for i, a := range r.Anomalies {
			if first {
				fmt.Fprintln(w, "\nwrites and replies that do not add up (first few)")
				first = false
			}
			if i == 5 {
				fmt.Fprintf(w, "  %-17s ... %d more\n", r.kind.title(), r.AnomalyCount-i)
				break
			}
			fmt.Fprintf(w, "  %-17s %s\n", r.kind.title(), a)
		}
	}
	for _, r := range rep.Runs {
		if r.Latency.LagP99 > busyLag {
			fmt.Fprintf(w, "\n%s: the generator started 1%% of the commands %sms late or more: the machine was busy,\n"+
				"and what timers decide (drain caps, timeouts) may differ from a quiet run.\n", r.kind.title(), fmtMs(r.Latency.LagP99))
		}
	}
	for _, r := range rep.Runs {
		if r.kind == clientMaint {
			fmt.Fprintf(w, "\nmaint: %d failed, %d lost, %d duplicated, %d mixed up (seed %d).\n",
				r.Failed+r.NotStarted+r.Unfinished, r.Lost, r.Duplicated, r.MixedUp, rep.Seed)
		}
	}
}
