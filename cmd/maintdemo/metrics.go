package main

import (
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/maintkit/maint"
)

// --metrics: what each maint client recorded during its run, under the
// metric names maintotel records them with (the shared cross-client names
// and maint's own), read from the Maint's events and Stats; and the report
// of each handoff. The demo lives in the core module, which does not depend
// on OpenTelemetry: it prints what maintotel would record, not an OTel
// export.

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

// series is one metric's value for one attribute set.
type series struct {
	name, attrs string
}

// printMetrics prints every run's metrics and handoff reports.
func printMetrics(w io.Writer, runs []metricsRun) {
	for _, r := range runs {
		fmt.Fprintf(w, "\nmetrics of %s (as maintotel records them)\n", r.tag)
		sums := map[series]float64{}
		type hist struct {
			n        int
			sum, max time.Duration
		}
		hists := map[series]*hist{}
		observe := func(s series, d time.Duration) {
			h := hists[s]
			if h == nil {
				h = &hist{}
				hists[s] = h
			}
			h.n++
			h.sum += d
			if d > h.max {
				h.max = d
			}
		}
		var reports []*maint.HandoffReport
		for _, e := range r.events {
			node := nodeAttrs(e.Node)
			switch e.Kind {
			case maint.EventNotification:
				sums[series{"redis.client.maintenance.notifications", node + ",redis.client.connection.notification=" + e.Name}]++
			case maint.EventRelaxOn:
				sums[series{"redis.client.connection.relaxed_timeout", node}]++
			case maint.EventRelaxOff:
				sums[series{"redis.client.connection.relaxed_timeout", node}]--
			case maint.EventHandoff:
				sums[series{"redis.client.connection.handoff", node}]++
			case maint.EventRetire, maint.EventDrainCap:
				if e.Count == 0 {
					continue
				}
				what := "retired"
				if e.Kind == maint.EventDrainCap {
					what = "closed_at_cap"
				}
				sums[series{"redis.client.maint.connections", node + ",redis.client.maint.event=" + what}] += float64(e.Count)
			case maint.EventDoomed:
				sums[series{"redis.client.maint.connections", node + ",redis.client.maint.event=doomed"}]++
			case maint.EventMalformed:
				sums[series{"redis.client.maint.notifications.ignored", node + ",redis.client.maint.reason=malformed"}]++
			case maint.EventReplayed:
				sums[series{"redis.client.maint.notifications.ignored", node + ",redis.client.maint.reason=replayed"}]++
			case maint.EventUnsupported:
				sums[series{"redis.client.maint.handshake.refusals", node}]++
			case maint.EventHeld:
				sums[series{"redis.client.maint.commands.held", node}] += float64(e.Count)
				observe(series{"redis.client.maint.hold.duration", node}, e.Duration)
			case maint.EventHandoffReport:
				if e.Report != nil {
					reports = append(reports, e.Report)
					observe(series{"redis.client.maint.handoff.duration", node}, e.Report.Duration)
					if e.Report.Failed > 0 {
						sums[series{"redis.client.maint.commands.failed", node}] += float64(e.Report.Failed)
					}
					if e.Report.Duration > e.Report.Window {
						sums[series{"redis.client.maint.handoff.overruns", node}]++
					}
					if e.Report.LeftForServer > 0 {
						sums[series{"redis.client.maint.connections", node + ",redis.client.maint.event=left_for_server"}] += float64(e.Report.LeftForServer)
					}
				}
			}
		}
		var lines []string
		for s, v := range sums {
			l := fmt.Sprintf("  %-45s %-95s %6.0f", s.name, "{"+s.attrs+"}", v)
			if s.name == "redis.client.connection.relaxed_timeout" && v > 0 {
				l += "  (still relaxed when the run ended: the tail had not elapsed)"
			}
			lines = append(lines, l)
		}
		for s, h := range hists {
			lines = append(lines, fmt.Sprintf("  %-45s %-95s count %d, mean %v, max %v", s.name, "{"+s.attrs+"}",
				h.n, (h.sum/time.Duration(h.n)).Round(time.Microsecond), h.max.Round(time.Microsecond)))
		}
		sort.Strings(lines)
		if len(lines) == 0 {
			fmt.Fprintln(w, "  (nothing recorded)")
		}
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		st := r.stats
		fmt.Fprintf(w, "  stats: notifications %d, malformed %d, replayed %d, handoffs %d, retired %d, closed at cap %d, doomed %d, held %d (timed out %d), relaxations %d, refusals %d\n",
			st.Notifications, st.Malformed, st.Replayed, st.Handoffs, st.Retired, st.ClosedAtCap, st.Doomed, st.Held, st.HeldTimeouts, st.Relaxations, st.Unsupported)
		for _, rep := range reports {
			fmt.Fprintln(w, "  "+formatReport(rep))
		}
	}
}

// nodeAttrs are the node's server.address and server.port attributes.
func nodeAttrs(node string) string {
	host, port, err := net.SplitHostPort(node)
	if err != nil {
		return "server.address=" + node
	}
	return "server.address=" + host + ",server.port=" + port
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
