package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/maintkit/maint/mainttest"
)

// scenario is one maintenance event, played the same way for every client.
type scenario struct {
	name    string
	summary string // one line, for the report

	// moving reports whether the event is a MOVING (the old node retires):
	// the timeline rows about the old node apply.
	moving bool
	// blocking adds a BLPOP in flight at the event.
	blocking bool
	// saturates reports whether the event's promise is that commands wait
	// rather than fail: every reply is slower than ReadTimeout, so a client
	// that keeps its commands alive fills --goroutines, and the commands due
	// then are the open-loop generator's saturation, not the client's
	// failure. --check does not count them (it counts every failed one).
	saturates bool

	// prepare sets up the endpoints before any client connects.
	prepare func(d *database, s *settings)
	// trigger starts the event now. Anything that happens later runs on the
	// emulator's timers or on d.after.
	trigger func(d *database, s *settings)
	// span is how long after the event the disturbance lasts: the "during"
	// latency interval ends there, and the run goes on a little longer.
	span func(s *settings) time.Duration
	// alone, when set, plays the scenario its own way (the reshard, on a
	// ClusterClient) instead of the runs above: it prints its table and
	// adds to rep itself.
	alone func(rn *runner, rep *report, stdout io.Writer) error
	// run and print, when set, replace the common run and add to its table (failover.go).
	run   func(rn *runner, sc *scenario, k clientKind, maxRetries int) (*runResult, error)
	print func(w io.Writer, sr *scenarioReport)
}

// shards is the shard list of MIGRATING and MIGRATED (its real content is
// unconfirmed; Jedis's tests use this form).
const shards = `["1"]`

var scenarios = []*scenario{
	{
		name:    "named",
		summary: "MOVING naming the successor; the old node stops accepting at the window's end",
		moving:  true,
		trigger: func(d *database, s *settings) {
			d.old.Moving(mainttest.Moving{Window: s.window, To: d.nw, StopAccepting: true})
		},
		span: func(s *settings) time.Duration { return s.window + 500*time.Millisecond },
	},
	{
		name:    "null-dns-early",
		summary: "MOVING with a null endpoint; DNS names the new node at 40% of the window",
		moving:  true,
		trigger: func(d *database, s *settings) {
			d.old.Moving(mainttest.Moving{Window: s.window, To: d.nw, Null: true, StopAccepting: true,
				DNSHost: host, DNSLag: s.window * 4 / 10})
		},
		span: func(s *settings) time.Duration { return s.window + 500*time.Millisecond },
	},
	{
		name:    "null-dns-late",
		summary: "MOVING with a null endpoint; DNS names the new node 0.5s after the window's end",
		moving:  true,
		trigger: func(d *database, s *settings) {
			d.old.Moving(mainttest.Moving{Window: s.window, To: d.nw, Null: true, StopAccepting: true,
				DNSHost: host, DNSLag: s.window + lateDNS})
		},
		span: func(s *settings) time.Duration { return s.window + lateDNS + 500*time.Millisecond },
	},
	{
		name: "migrating",
		summary: "MIGRATING (starts in 1s), then every reply slower than ReadTimeout " +
			"for the window, then MIGRATED",
		saturates: true,
		prepare: func(d *database, s *settings) {
			d.old.SetMaintLatency(migratingLatency(s))
		},
		trigger: func(d *database, s *settings) {
			d.old.Migrating(migratingStartsIn, shards)
			d.after(migratingStartsIn+s.window, func() { d.old.Migrated(shards) })
		},
		span: func(s *settings) time.Duration {
			return migratingStartsIn + s.window + migratingLatency(s) + 500*time.Millisecond
		},
	},
	{
		name:     "blocking",
		summary:  "BLPOP q 0 in flight at a MOVING naming the successor, DNS at 40%; q is pushed to after the window",
		moving:   true,
		blocking: true,
		trigger: func(d *database, s *settings) {
			d.old.Moving(mainttest.Moving{Window: s.window, To: d.nw, StopAccepting: true,
				DNSHost: host, DNSLag: s.window * 4 / 10})
		},
		span: func(s *settings) time.Duration { return s.window + blockingPushAfter + 500*time.Millisecond },
	},
	{
		name:    "reshard",
		summary: reshardSummary,
		span:    reshardSpan,
		alone:   runReshard,
	},
}

const (
	// lateDNS is how long after the window's end DNS moves in null-dns-late.
	lateDNS = 500 * time.Millisecond
	// migratingStartsIn is the "starts in" of the MIGRATING.
	migratingStartsIn = time.Second
	// blockingLead is how long before the MOVING the BLPOP is sent.
	blockingLead = 300 * time.Millisecond
	// blockingPushAfter is when, after the window's end, the list the BLPOP
	// waits on is pushed to.
	blockingPushAfter = 300 * time.Millisecond
)

// migratingLatency is the extra latency of every reply during the migration:
// beyond the clients' ReadTimeout, so a client that does not relax its
// timeouts fails.
func migratingLatency(s *settings) time.Duration { return s.readTimeout + 500*time.Millisecond }

// scenarioNames lists the scenario names.
func scenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.name
	}
	return names
}

// parseScenarios resolves a comma-separated list of names, or "all".
func parseScenarios(list string) ([]*scenario, error) {
	var out []*scenario
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			return scenarios, nil
		}
		found := false
		for _, sc := range scenarios {
			if sc.name == name {
				out = append(out, sc)
				found = true
			}
		}
		if !found {
			if name == "soak" {
				return nil, errors.New("soak runs alone: --scenario soak")
			}
			return nil, fmt.Errorf("unknown scenario %q (choose from %s, or all; or soak alone)", name, strings.Join(scenarioNames(), ", "))
		}
	}
	return out, nil
}
