package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPlanIsSeeded: a seed always gives the same plan, and another seed
// another one.
func TestPlanIsSeeded(t *testing.T) {
	a := newPlan(7, soakNodes, time.Second, 29*time.Second)
	b := newPlan(7, soakNodes, time.Second, 29*time.Second)
	c := newPlan(8, soakNodes, time.Second, 29*time.Second)
	if !slices.Equal(a.Actions, b.Actions) || len(a.Actions) == 0 {
		t.Fatalf("seed 7 twice: %d and %d actions, or different", len(a.Actions), len(b.Actions))
	}
	if slices.Equal(a.Actions, c.Actions) {
		t.Fatal("seeds 7 and 8 gave the same plan")
	}
}

// TestPlanIsPlayable checks what the player and the clients rely on, over
// many seeds: actions in time order, every MOVING on the serving node naming
// another node that accepts connections and is not in a window of its own,
// DNS only ever naming the serving node, late copies re-sending an earlier
// notification of the same node, every episode within the time given, and
// every kind of episode drawn.
func TestPlanIsPlayable(t *testing.T) {
	kinds := map[string]bool{}
	for seed := uint64(1); seed <= 200; seed++ {
		until := 29 * time.Second
		pl := newPlan(seed, soakNodes, time.Second, until)
		cur := 0
		refusingFrom := make([]time.Duration, soakNodes) // when the node stops accepting; 0: it accepts
		windowEnd := make([]time.Duration, soakNodes)
		for i, a := range pl.Actions {
			if i > 0 && a.At < pl.Actions[i-1].At {
				t.Fatalf("seed %d: step %d at %v before step %d", seed, i+1, a.At, i)
			}
			switch a.Kind {
			case actAccept:
				refusingFrom[a.Node] = 0
			case actMoving:
				if a.Node != cur && !(pl.Episodes[a.Episode].Kind == epSuperseded) {
					t.Fatalf("seed %d: step %d: MOVING on %d while %d serves", seed, i+1, a.Node, cur)
				}
				if a.To == a.Node {
					t.Fatalf("seed %d: step %d: MOVING to itself", seed, i+1)
				}
				if r := refusingFrom[a.To]; r != 0 && r <= a.At {
					t.Fatalf("seed %d: step %d: successor %d refuses connections since %v", seed, i+1, a.To, r)
				}
				if windowEnd[a.To] > a.At-nodeRest {
					t.Fatalf("seed %d: step %d: successor %d is in a window until %v", seed, i+1, a.To, windowEnd[a.To])
				}
				end := a.At + a.Window + a.Jitter
				windowEnd[a.Node], refusingFrom[a.Node] = end, end
				cur = a.To
			case actDNS:
				if a.Node != cur {
					t.Fatalf("seed %d: step %d: DNS names %d while %d serves", seed, i+1, a.Node, cur)
				}
			case actLateCopy:
				of := pl.Actions[a.Of]
				if a.Of >= i || !of.notification() || of.Kind == actLateCopy || of.Node != a.Node {
					t.Fatalf("seed %d: step %d copies step %d (%s)", seed, i+1, a.Of+1, of)
				}
			}
		}
		for _, e := range pl.Episodes {
			kinds[e.Kind] = true
			if e.End > until {
				t.Fatalf("seed %d: episode %s ends at %v", seed, e.Kind, e.End)
			}
		}
	}
	for _, w := range episodeWeights {
		if !kinds[w.kind] {
			t.Errorf("no %s episode in 200 seeds", w.kind)
		}
	}
}

// TestVerifierCounter: replies in sequence pass; a jump that no failure
// explains is a duplicate, one a failure explains is not; a repeated or
// foreign reply is mixed up; the final value must lie between the
// acknowledged count and that plus the failed ones.
func TestVerifierCounter(t *testing.T) {
	v := newVerifier("t:", 0)
	b := v.base
	mustNil := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustNil(v.incr(b+1, nil))
	mustNil(v.incr(b+2, nil))
	_ = v.incr(0, errors.New("EOF")) // may have executed
	mustNil(v.incr(b+4, nil))        // explained by the failure
	if v.extra != 0 {
		t.Fatalf("explained jump flagged: extra %d", v.extra)
	}
	mustNil(v.incr(b+6, nil)) // nothing explains the skipped 5
	if v.extra != 1 {
		t.Fatalf("duplicate not found: extra %d", v.extra)
	}
	mustNil(v.incr(b+7, nil)) // in sequence after the duplicate: not counted again
	if v.extra != 1 {
		t.Fatalf("duplicate counted twice: extra %d", v.extra)
	}
	if err := v.incr(b+7, nil); !errors.Is(err, errMixedUp) || v.mixed != 1 {
		t.Fatalf("repeated reply: %v, mixed %d", err, v.mixed)
	}
	if err := v.incr(2*counterSpan+5, nil); !errors.Is(err, errMixedUp) || v.mixed != 2 {
		t.Fatalf("another counter's reply: %v, mixed %d", err, v.mixed)
	}
	if err := v.incr(0, errors.New("redis: can't parse int reply: \"+OK\"")); err == nil || v.mixed != 3 {
		t.Fatalf("a reply of another type: %v, mixed %d", err, v.mixed)
	}
	// Acknowledged: 1, 2, 4, 6, 7. Unknown: the EOF and the three mixed up.
	if v.acked != 5 || v.unknown != 4 {
		t.Fatalf("acked %d unknown %d", v.acked, v.unknown)
	}
	if c := v.final(b+7, true, "", false); c.lost != 0 || c.duplicated != 1 {
		t.Errorf("final +7: %+v, want the duplicate the replies showed", c)
	}
	if c := v.final(b+4, true, "", false); c.lost != 1 {
		t.Errorf("final +4 with 5 acknowledged: %+v, want 1 lost", c)
	}
	if c := v.final(b+12, true, "", false); c.duplicated != 3 {
		t.Errorf("final +12 with 5 acknowledged and 4 unknown: %+v, want 3 duplicated", c)
	}
	if c := v.final(0, false, "", false); c.lost != 5 {
		t.Errorf("final: counter gone: %+v, want 5 lost", c)
	}
}

// TestVerifierString: a GET must see the last acknowledged SET or a failed
// one; an older acknowledged value is lost, a foreign one mixed up.
func TestVerifierString(t *testing.T) {
	v := newVerifier("t:", 3)
	if err := v.get("", redis.Nil); err != nil || v.lostReads != 0 {
		t.Fatalf("nothing before any SET: %v, lost %d", err, v.lostReads)
	}
	set := func(res string, err error) error {
		v.sets++
		return v.set(v.sets, res, err)
	}
	if err := set("OK", nil); err != nil {
		t.Fatal(err)
	}
	if err := v.get(v.setValue(1), nil); err != nil || v.lostReads != 0 {
		t.Fatalf("the acknowledged value: %v, lost %d", err, v.lostReads)
	}
	_ = set("", errors.New("i/o timeout")) // SET 2 failed: it may land later
	if err := set("OK", nil); err != nil { // SET 3
		t.Fatal(err)
	}
	if err := v.get(v.setValue(2), nil); err != nil || v.lostReads != 0 {
		t.Fatalf("a failed SET's value: %v, lost %d", err, v.lostReads)
	}
	if err := v.get(v.setValue(1), nil); err != nil || v.lostReads != 1 {
		t.Fatalf("an older acknowledged value: %v, lost %d", err, v.lostReads)
	}
	if err := v.get("", redis.Nil); err != nil || v.lostReads != 2 {
		t.Fatalf("nothing after an acknowledged SET: %v, lost %d", err, v.lostReads)
	}
	if err := v.get("s4:1", nil); !errors.Is(err, errMixedUp) || v.mixed != 1 {
		t.Fatalf("another slot's value: %v, mixed %d", err, v.mixed)
	}
	if err := v.get("s3:9", nil); !errors.Is(err, errMixedUp) || v.mixed != 2 {
		t.Fatalf("a value never written: %v, mixed %d", err, v.mixed)
	}
	if err := set("QUEUED", nil); !errors.Is(err, errMixedUp) || v.mixed != 3 {
		t.Fatalf("SET answered with another reply: %v, mixed %d", err, v.mixed)
	}
	if c := v.final(v.base, true, v.setValue(3), true); c.lost != 2 {
		t.Errorf("final: the last acknowledged value: %+v (2 lost reads)", c)
	}
}

// TestSoakMaint plays a short seeded soak through maint and checks that it
// failed, lost, duplicated and mixed up nothing. Seed 5 from 0.5s to 4s is
// one superseded episode: a MOVING naming one successor, a newer MOVING of
// the same node naming another, a late copy of the first, a MOVING of the
// first successor to the second, and DNS following.
func TestSoakMaint(t *testing.T) {
	soakMaint(t, 5, epSuperseded)
}

// TestSoakMaintChained plays seed 16 from 0.5s to 4s: a MOVING of node A
// naming B, then, within A's window, a MOVING of B with a null endpoint
// while DNS still names A; DNS names the last node only after both windows.
//
// It failed on the core as of 018b16a: maint took DNS naming A, itself
// retiring, for B's replacement and, once A stopped accepting, failed ~50
// commands with "connection refused" (3300+ in a 20s soak of seed 2).
func TestSoakMaintChained(t *testing.T) {
	soakMaint(t, 16, epChained)
}

// soakMaint runs seed's soak from 0.5s to 5s through maint alone, checks
// that its one episode is of kind, and that maint failed, lost, duplicated
// and mixed up nothing.
func soakMaint(t *testing.T, seed int, kind string) {
	if testing.Short() {
		t.Skip("plays a soak")
	}
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	var out bytes.Buffer
	// A lower rate than the default: the race detector and a shared
	// machine must not make the generator itself the bottleneck.
	code := run([]string{"--scenario", "soak", "--clients", "maint", "--seed", strconv.Itoa(seed), "--duration", "5s",
		"--before", "500ms", "--rate", "400", "--json", "--check"}, &out, errf)
	var rep soakReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, %v; output:\n%s", code, err, out.String())
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Client != "maint" || len(rep.Episodes) != 1 || rep.Episodes[0].Kind != kind {
		t.Fatalf("report: %s", out.String())
	}
	r := rep.Runs[0]
	if r.Commands != 2000 || r.Keys == 0 || r.IncrAcked == 0 || r.Events == 0 {
		t.Errorf("commands %d, keys %d, INCRs %d, events %d", r.Commands, r.Keys, r.IncrAcked, r.Events)
	}
	if r.Failed+r.NotStarted+r.Unfinished+r.Lost+r.Duplicated+r.MixedUp != 0 || code != 0 {
		_, _ = errf.Seek(0, io.SeekStart)
		stderr, _ := io.ReadAll(errf)
		t.Errorf("exit %d: failed %d, not started %d, unfinished %d, lost %d, duplicated %d, mixed up %d\n"+
			"errors %+v\nanomalies %q\nplan %q\nstderr:\n%s",
			code, r.Failed, r.NotStarted, r.Unfinished, r.Lost, r.Duplicated, r.MixedUp, r.Errors, r.Anomalies, rep.Plan, stderr)
	}
}
