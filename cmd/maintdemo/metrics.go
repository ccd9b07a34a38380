package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/maintkit/maint"
)

// --metrics: what each maint client recorded during its run, under the
// metric names maintotel records them with (the cross-client spec's names
// and maint's own), read from the Maint's events (promexport.go's mapping)
// and Stats; and the report of each handoff. The demo lives in the core
// module, which does not depend on OpenTelemetry: it prints what maintotel
// would record, not an OTel export.

// metricsRun is what one maint run recorded.
type metricsRun struct {
	tag    string
	stats  maint.Stats
	events []maint.Event
}

// recordMetrics keeps what a maint run recorded, for printMetrics.
func (rn *runner) recordMetrics(tag string, st maint.Stats, evs []maint.Event) {
	rn.metrics = append(rn.metrics, metricsRun{tag: tag, stats: st, events: evs})
}

// printMetrics prints every run's metrics (the mapping of promexport.go,
// which --metrics-addr serves) and handoff reports.
func printMetrics(w io.Writer, runs []metricsRun) {
	for _, r := range runs {
		fmt.Fprintf(w, "\nmetrics of %s (as maintotel records them)\n", r.tag)
		l := newLiveMetrics()
		var reports []*maint.HandoffReport
		for _, e := range r.events {
			l.observe(e)
			if e.Kind == maint.EventHandoffReport && e.Report != nil {
				reports = append(reports, e.Report)
			}
		}
		var lines []string
		for k, s := range l.sums {
			ln := fmt.Sprintf("  %-45s %-95s %6.0f", k.name, "{"+k.attrs+"}", s.v)
			if k.name == "redis.client.connection.relaxed_timeout" && s.v > 0 {
				ln += "  (still relaxed when the run ended: the tail had not elapsed)"
			}
			lines = append(lines, ln)
		}
		for k, h := range l.hists {
			mean := time.Duration(h.sum / float64(h.n) * float64(time.Second))
			lines = append(lines, fmt.Sprintf("  %-45s %-95s count %d, mean %v", k.name, "{"+k.attrs+"}",
				h.n, mean.Round(time.Microsecond)))
		}
		sort.Strings(lines)
		if len(lines) == 0 {
			fmt.Fprintln(w, "  (nothing recorded)")
		}
		for _, ln := range lines {
			fmt.Fprintln(w, ln)
		}
		st := r.stats
		fmt.Fprintf(w, "  stats: notifications %d, malformed %d, replayed %d, handoffs %d, retired %d, closed at cap %d, doomed %d, held %d (timed out %d), relaxations %d, refusals %d\n",
			st.Notifications, st.Malformed, st.Replayed, st.Handoffs, st.Retired, st.ClosedAtCap, st.Doomed, st.Held, st.HeldTimeouts, st.Relaxations, st.Unsupported)
		for _, rep := range reports {
			fmt.Fprintln(w, "  "+formatReport(rep))
		}
	}
}

// formatReport is one line telling a handoff's story, times from the MOVING.
func formatReport(r *maint.HandoffReport) string {
	since := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return "+" + t.Sub(r.MovingAt).Round(time.Millisecond).String()
	}
	succ := r.Successor
	if succ == "" {
		succ = "null"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "handoff report: node %s seq %d successor %s window %v: replacement %s, old node last used %s, ended %s; ",
		r.Node, r.Seq, succ, r.Window, since(r.ReplacementAt), since(r.OldLastUsedAt), since(r.EndedAt))
	fmt.Fprintf(&b, "held %d (longest %v); retired %d, closed at cap %d, left for the server %d, doomed %d; failed by maint %d; took %v",
		r.Held, r.LongestHold.Round(time.Millisecond), r.Retired, r.ClosedAtCap, r.LeftForServer, r.Doomed, r.Failed, r.Duration.Round(time.Millisecond))
	if r.Superseded {
		b.WriteString(" (superseded)")
	}
	return b.String()
}
