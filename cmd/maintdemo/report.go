package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// report is the demo's JSON output: the settings, every run of every
// scenario, and maint's total of failed commands.
type report struct {
	Settings    settingsJSON      `json:"settings"`
	Scenarios   []*scenarioReport `json:"scenarios"`
	MaintFailed int64             `json:"maint_failed"`
	// MaintNotStarted counts maint's commands not started for lack of a
	// free goroutine (--goroutines in flight).
	MaintNotStarted int64 `json:"maint_not_started"`
	MaintRuns       int   `json:"maint_runs"`
	// Reshard is the reshard scenario's runs (a ClusterClient), when played.
	Reshard *reshardReport `json:"reshard,omitempty"`
}

// settingsJSON is the JSON form of the settings.
type settingsJSON struct {
	Goroutines  int     `json:"goroutines"` // most commands in flight
	Rate        int     `json:"rate"`
	Pool        int     `json:"pool"`
	Window      float64 `json:"window"`
	Before      float64 `json:"before"`
	ReadTimeout float64 `json:"read_timeout"`
	PoolTimeout float64 `json:"pool_timeout"` // 0: go-redis's default
	MaintRoute  string  `json:"maint_route"`
	Backend     string  `json:"backend"`
	GoRedis     string  `json:"go_redis"`
}

// scenarioReport holds the runs of one scenario: for each client, MaxRetries
// -1 then go-redis's default.
type scenarioReport struct {
	Name    string       `json:"name"`
	Summary string       `json:"summary"`
	Runs    []*runResult `json:"runs"`

	sc *scenario
}

func newReport(s *settings) *report {
	backend := s.redis
	if backend == "" {
		backend = "embedded miniredis"
	}
	return &report{Settings: settingsJSON{
		Goroutines: s.goroutines, Rate: s.rate, Pool: s.pool,
		Window: s.window.Seconds(), Before: s.before.Seconds(), ReadTimeout: s.readTimeout.Seconds(), PoolTimeout: s.poolTimeout.Seconds(),
		MaintRoute: s.maintRoute,
		Backend:    backend, GoRedis: goRedisVersion(),
	}}
}

func (r *report) add(sr *scenarioReport) {
	r.Scenarios = append(r.Scenarios, sr)
	for _, run := range sr.Runs {
		if run.kind == clientMaint {
			r.MaintFailed += run.Failed
			r.MaintNotStarted += run.NotStarted
			r.MaintRuns++
		}
	}
}

// goRedisVersion is the go-redis module version the demo was built with.
func goRedisVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/redis/go-redis/v9" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func printHeader(w io.Writer, s *settings) {
	rep := newReport(s)
	fmt.Fprintf(w, "maintdemo: %s open loop (at most %d in flight), pool %d, ReadTimeout %v, window %v; backend %s; go-redis %s\n",
		rateText(s.rate), s.goroutines, s.pool, s.readTimeout, s.window, rep.Settings.Backend, rep.Settings.GoRedis)
	if reshardOnly(s) {
		fmt.Fprintln(w, reshardCluster(s))
		return
	}
	fmt.Fprintf(w, "Each client runs alone against a fresh emulated database (old node 127.0.0.2, new node 127.0.0.3,\n"+
		"host %q in the emulator's DNS), once with MaxRetries -1 and once with go-redis's default (3).\n", host)
}

func rateText(rate int) string {
	return fmt.Sprintf("%d ops/s", rate)
}

// column is one client's two runs in a scenario.
type column struct {
	kind       clientKind
	noRetry    *runResult // MaxRetries -1
	defRetries *runResult // go-redis's default
}

func columns(sr *scenarioReport) []column {
	var cols []column
	for _, r := range sr.Runs {
		if len(cols) == 0 || cols[len(cols)-1].kind != r.kind {
			cols = append(cols, column{kind: r.kind})
		}
		c := &cols[len(cols)-1]
		if r.MaxRetries < 0 {
			c.noRetry = r
		} else {
			c.defRetries = r
		}
	}
	return cols
}

func printScenario(w io.Writer, s *settings, sr *scenarioReport) {
	cols := columns(sr)
	var maintCol *column
	for i := range cols {
		if cols[i].kind == clientMaint {
			maintCol = &cols[i]
		}
	}
	t := &table{}
	head := []string{""}
	for _, c := range cols {
		head = append(head, c.kind.title())
	}
	t.row(head...)
	perRun := func(label string, pick func(c column) *runResult, f func(r *runResult) string) {
		cells := []string{label}
		for _, c := range cols {
			if r := pick(c); r != nil {
				cells = append(cells, f(r))
			} else {
				cells = append(cells, "-")
			}
		}
		t.row(cells...)
	}
	noRetry := func(c column) *runResult { return c.noRetry }
	def := func(c column) *runResult { return c.defRetries }
	count := func(n int64) string { return fmt.Sprint(n) }

	perRun("failed commands, MaxRetries -1", noRetry, func(r *runResult) string { return count(r.Failed) })
	perRun("failed commands, MaxRetries 3", def, func(r *runResult) string { return count(r.Failed) })
	if notStarted(sr) {
		perRun(fmt.Sprintf("not started (%d in flight), MaxRetries -1", s.goroutines), noRetry, func(r *runResult) string { return count(r.NotStarted) })
		perRun(fmt.Sprintf("not started (%d in flight), MaxRetries 3", s.goroutines), def, func(r *runResult) string { return count(r.NotStarted) })
	}
	perRun("commands served, MaxRetries 3", def, func(r *runResult) string { return count(r.OK) })
	t.blank()
	t.row("timeline (MaxRetries 3 run), s from the start of load")
	sec := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("+%.3f", *v)
	}
	sc := sr.sc
	if sc.moving {
		perRun("  MOVING sent", def, func(r *runResult) string { return sec(r.Timeline.Event) })
		if hasDNS(sr) {
			perRun("  DNS names the new node", def, func(r *runResult) string { return sec(r.Timeline.DNSMoved) })
		}
		perRun("  old node last served a command", def, func(r *runResult) string { return sec(r.Timeline.OldLastUsed) })
		perRun("  client closed its last old connection", def, func(r *runResult) string {
			if r.Timeline.OldOpenAtEnd > 0 {
				return fmt.Sprintf("%d open", r.Timeline.OldOpenAtEnd)
			}
			return sec(r.Timeline.OldClosed)
		})
		perRun("  window ends: old node closes the rest", def, func(r *runResult) string { return sec(r.Timeline.WindowEnd) })
		perRun("  connections the server had to close", def, func(r *runResult) string { return fmt.Sprint(r.Timeline.ServerClosed) })
		perRun("  replies lost when it closed them", def, func(r *runResult) string { return count(r.Timeline.RepliesLost) })
		perRun("  conns to the old node opened after MOVING", def, func(r *runResult) string { return fmt.Sprint(r.Timeline.OldAfterEvent) })
		perRun("  dials that failed", def, func(r *runResult) string { return count(r.Timeline.FailedDials) })
	} else {
		perRun("  MIGRATING sent", def, func(r *runResult) string { return sec(r.Timeline.Event) })
		perRun("  replies slow from", def, func(r *runResult) string { return sec(r.Timeline.SlowFrom) })
		perRun("  MIGRATED sent", def, func(r *runResult) string { return sec(r.Timeline.Completion) })
	}
	if sc.blocking {
		perRun("  BLPOP q 0 (sent at +"+fmt.Sprintf("%.1f", (s.before-blockingLead).Seconds())+", q pushed at +"+
			fmt.Sprintf("%.1f", (s.before+s.window+blockingPushAfter).Seconds())+")", def, blockingCell)
		perRun("  same, MaxRetries -1", noRetry, blockingCell)
	}
	t.blank()
	var during string
	if r := cols[0].defRetries; r != nil && r.Timeline.Event != nil {
		during = fmt.Sprintf(" (+%.1f to +%.1f)", *r.Timeline.Event, r.Timeline.DuringEnd)
	}
	t.row("latency of successful commands from their scheduled start, ms (MaxRetries 3 run); (×n) = n times maint's")
	perRun("  commands measured before / during", def, func(r *runResult) string {
		return fmt.Sprintf("%d / %d", r.Before.Count, r.During.Count)
	})
	perRun("  started late by the generator, p99 before / during", def, func(r *runResult) string {
		return fmtMs(r.Before.LagP99) + " / " + fmtMs(r.During.LagP99)
	})
	for _, phase := range []string{"before", "during"} {
		for _, q := range []string{"p50", "p99", "max"} {
			label := "  " + phase + " the event " + q
			if phase == "during" {
				label = "  during" + during + " " + q
			}
			cells := []string{label}
			for _, c := range cols {
				cells = append(cells, latencyCell(c.defRetries, maintCol, phase, q))
			}
			t.row(cells...)
		}
	}
	fmt.Fprintf(w, "\n== %s: %s\n\n", sr.Name, sr.Summary)
	t.write(w)
	if maintCol != nil {
		if r := maintCol.defRetries; r != nil && r.Maint != nil && r.Maint.Held > 0 {
			fmt.Fprintf(w, "\nmaint held %d commands (MaxRetries 3 run) until a connection to another node could be had,\n"+
				"instead of failing them: they are the slow ones in its \"during\" latency.\n", r.Maint.Held)
		}
	}
	for _, c := range cols {
		for _, r := range []*runResult{c.noRetry, c.defRetries} {
			if r != nil && max(r.Before.LagP99, r.During.LagP99) > busyLag {
				fmt.Fprintf(w, "\n%s, MaxRetries %d: the generator started 1%% of the commands %sms late or more: the machine was busy.\n",
					c.kind.title(), r.MaxRetries, fmtMs(max(r.Before.LagP99, r.During.LagP99)))
			}
		}
	}
	if sc.print != nil {
		sc.print(w, sr)
	}
	printErrors(w, cols)
}

// notStarted reports whether any run of sr left a command unstarted.
func notStarted(sr *scenarioReport) bool {
	for _, r := range sr.Runs {
		if r.NotStarted > 0 {
			return true
		}
	}
	return false
}

func hasDNS(sr *scenarioReport) bool {
	for _, r := range sr.Runs {
		if r.Timeline.DNSMoved != nil {
			return true
		}
	}
	return false
}

func blockingCell(r *runResult) string {
	b := r.Blocking
	if b == nil {
		return "-"
	}
	switch {
	case b.Value != "" && b.DoneAt != nil:
		return fmt.Sprintf("got it +%.2f", *b.DoneAt)
	case b.DoneAt != nil:
		return fmt.Sprintf("FAILED +%.2f", *b.DoneAt)
	}
	return "FAILED (still waiting)"
}

func pickLatency(r *runResult, phase, q string) (float64, bool) {
	if r == nil {
		return 0, false
	}
	l := r.Before
	if phase == "during" {
		l = r.During
	}
	if l.Count == 0 {
		return 0, false
	}
	switch q {
	case "p50":
		return l.P50, true
	case "p99":
		return l.P99, true
	}
	return l.Max, true
}

func latencyCell(r *runResult, maintCol *column, phase, q string) string {
	v, ok := pickLatency(r, phase, q)
	if !ok {
		return "-"
	}
	cell := fmtMs(v)
	if maintCol == nil || r.kind == clientMaint {
		return cell
	}
	if m, ok := pickLatency(maintCol.defRetries, phase, q); ok && m > 0 {
		cell += " (×" + fmtRatio(v/m) + ")"
	}
	return cell
}

func fmtMs(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtRatio(r float64) string {
	if r < 10 {
		return fmt.Sprintf("%.1f", r)
	}
	return fmt.Sprintf("%.0f", r)
}

// printErrors lists the most frequent errors of each client's runs.
func printErrors(w io.Writer, cols []column) {
	first := true
	for _, c := range cols {
		for _, r := range []*runResult{c.noRetry, c.defRetries} {
			if r == nil || len(r.Errors) == 0 {
				continue
			}
			if first {
				fmt.Fprintln(w, "\nerrors")
				first = false
			}
			for i, e := range r.Errors {
				if i == 3 {
					fmt.Fprintf(w, "  %-17s MaxRetries %2d  ... %d more kinds\n", c.kind.title(), r.MaxRetries, len(r.Errors)-i)
					break
				}
				fmt.Fprintf(w, "  %-17s MaxRetries %2d  %6d × %s\n", c.kind.title(), r.MaxRetries, e.Count, clip(e.Error, 90))
			}
		}
	}
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func printSummary(w io.Writer, rep *report) {
	if rep.MaintRuns == 0 {
		return
	}
	notStarted := ""
	if rep.MaintNotStarted > 0 {
		notStarted = fmt.Sprintf(" and did not start %d", rep.MaintNotStarted)
	}
	fmt.Fprintf(w, "\nmaint failed %d %s%s in %d runs (%d %s × MaxRetries -1 and 3).\n",
		rep.MaintFailed, plural(rep.MaintFailed, "command", "commands"), notStarted, rep.MaintRuns,
		len(rep.Scenarios), plural(int64(len(rep.Scenarios)), "scenario", "scenarios"))
}

// table lays out rows: the first column left-aligned, the others right-aligned.
// A row with one cell is a section title.
type table struct {
	rows [][]string
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }
func (t *table) blank()              { t.rows = append(t.rows, nil) }

func (t *table) write(w io.Writer) {
	var widths []int
	for _, r := range t.rows {
		if len(r) < 2 {
			continue
		}
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, r := range t.rows {
		if len(r) < 2 {
			fmt.Fprintln(w, strings.Join(r, ""))
			continue
		}
		var b strings.Builder
		for i, c := range r {
			pad := widths[i] - len([]rune(c))
			if i == 0 {
				b.WriteString(c + strings.Repeat(" ", pad))
				continue
			}
			b.WriteString("   " + strings.Repeat(" ", pad) + c)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
