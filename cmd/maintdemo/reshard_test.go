package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// TestReshardMaint plays the reshard for maint with --check: while the
// migrating source answers some writes past ReadTimeout (after they ran),
// maint fails no command, runs no write twice and loses none, at
// MaxRetries -1 and 3. The other clients' results depend on timing and are
// not asserted here.
//
// A play is void, and played again (three plays at most), when the machine
// was too busy for it to judge maint: every command failed or write run
// twice is matched by a command deadline met on the wire on a node maint
// had not relaxed (a reply later than ReadTimeout before the SMIGRATING was
// read: go-redis's ClusterClient retries a timed-out command, whatever
// MaxRetries says), none was met on a relaxed one and nothing was lost. A
// write maint itself ran twice meets no deadline, and a node maint never
// relaxed voids every play: both fail.
func TestReshardMaint(t *testing.T) {
	if testing.Short() {
		t.Skip("plays the reshard")
	}
	for play := 1; ; play++ {
		rep, out := playReshard(t)
		void, wrong := judgeReshard(t, rep)
		switch {
		case wrong == "":
			return
		case !void:
			t.Fatalf("%s\noutput:\n%s", wrong, out)
		case play == 3:
			t.Fatalf("%d plays void, the machine too busy to judge maint; the last: %s\noutput:\n%s", play, wrong, out)
		}
		t.Logf("play %d void (%s): played again", play, wrong)
	}
}

// playReshard plays the reshard for maint with --check once, and returns
// its report.
func playReshard(t *testing.T) (*reshardReport, string) {
	t.Helper()
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	var out bytes.Buffer
	code := run([]string{"--scenario", "reshard", "--clients", "maint", "--window", "1s", "--before", "500ms",
		"--rate", "1000", "--json", "--check"}, &out, errf)
	stderr, _ := os.ReadFile(errf.Name())
	var rep struct {
		Reshard *reshardReport
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Reshard == nil || len(rep.Reshard.Runs) != 2 {
		t.Fatalf("exit %d (%v); stderr:\n%s\noutput:\n%s", code, err, stderr, out.String())
	}
	if code != 0 && code != 1 { // 1: --check found something, judged below
		t.Fatalf("exit %d; stderr:\n%s\noutput:\n%s", code, stderr, out.String())
	}
	return rep.Reshard, out.String()
}

// judgeReshard returns what maint did wrong in the play ("" for nothing),
// and whether the play is void (see TestReshardMaint).
func judgeReshard(t *testing.T, rep *reshardReport) (void bool, wrong string) {
	t.Helper()
	var slow int64
	var wrongs []string
	void = true
	for i, r := range rep.Runs {
		if want := []int{-1, 3}[i]; r.Client != "maint" || r.MaxRetries != want {
			t.Fatalf("run %d: client %s MaxRetries %d, want maint %d", i, r.Client, r.MaxRetries, want)
		}
		slow += r.Slow
		if r.OK == 0 || r.Failed != 0 || r.NotStarted != 0 || r.Duplicated != 0 || r.Lost != 0 {
			wrongs = append(wrongs, fmt.Sprintf("maint, MaxRetries %d: ok %d failed %d not started %d run twice %d lost %d; "+
				"deadlines met on the wire %d on nodes not relaxed, %d on relaxed ones; errors %v",
				r.MaxRetries, r.OK, r.Failed, r.NotStarted, r.Duplicated, r.Lost, r.TimedOutUnrelaxed, r.TimedOutRelaxed, r.Errors))
			void = void && r.OK > 0 && r.NotStarted == 0 && r.Lost == 0 && r.TimedOutRelaxed == 0 &&
				r.Failed+r.Duplicated <= r.TimedOutUnrelaxed
		}
	}
	// The scenario must have slowed writes past ReadTimeout, or it proves
	// nothing.
	if slow == 0 {
		return false, "no slow write sent"
	}
	if len(wrongs) == 0 {
		return false, ""
	}
	return void, strings.Join(wrongs, "; ")
}

// TestReshardText renders the reshard's table and header from fixed runs:
// every row, the effective MaxRetries, the cluster in the header.
func TestReshardText(t *testing.T) {
	s, err := parseFlags([]string{"--scenario", "reshard"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rr := &reshardReport{Summary: reshardSummary}
	for i, c := range reshardClients {
		for _, retries := range []int{-1, 0} {
			rr.Runs = append(rr.Runs, &reshardRun{Client: c.name, client: c, MaxRetries: effectiveRetries(retries),
				Failed: int64(10 + i), Duplicated: int64(20 + i), Lost: int64(30 + i), Redirects: 40, SlotMaps: 2,
				RemovedClosed: 26, Slow: 5, Before: latency{P99: 1.5}, During: latency{P99: 1500}})
		}
	}
	var b bytes.Buffer
	printHeader(&b, s)
	printReshard(&b, rr)
	out := b.String()
	for _, want := range []string{"127.0.0.4", "1.5s late", "MaxRetries -1 / 3", "no handler", "built-in, defaults",
		"built-in, config set", "maint", "failed commands", "13 / 13", "writes run twice", "23 / 23",
		"acknowledged writes lost", "33 / 33", "MOVED/ASK", "slot-map round trips", "reloads answered by maint", "conns the removed node closed",
		"p99 before, ms", "p99 during, ms", "slow writes sent", "MaxRedirects"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "redis.test") || strings.Contains(out, "old node") {
		t.Errorf("a reshard-only header describes the standalone scenarios:\n%s", out)
	}
	s, err = parseFlags([]string{"--scenario", "all"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	printHeader(&b, s)
	if !strings.Contains(b.String(), "old node") {
		t.Errorf("the shared header lost the standalone scenarios' line:\n%s", b.String())
	}
}

// TestReshardJudgement: what TestReshardMaint holds against maint, and
// what makes a play void, on fixed runs.
func TestReshardJudgement(t *testing.T) {
	runs := func(tune func(r *reshardRun)) *reshardReport {
		rep := &reshardReport{}
		for _, mr := range []int{-1, 3} {
			r := &reshardRun{Client: "maint", MaxRetries: mr, OK: 4500, Slow: 3}
			if mr == 3 {
				tune(r)
			}
			rep.Runs = append(rep.Runs, r)
		}
		return rep
	}
	for _, c := range []struct {
		name      string
		tune      func(r *reshardRun)
		void, bad bool
	}{
		{"clean", func(r *reshardRun) {}, false, false},
		{"run twice with no deadline met", func(r *reshardRun) { r.Duplicated = 1 }, false, true},
		{"run twice, as many deadlines met unrelaxed", func(r *reshardRun) { r.Duplicated, r.TimedOutUnrelaxed = 2, 2 }, true, true},
		{"failed, a deadline met unrelaxed", func(r *reshardRun) { r.Failed, r.TimedOutUnrelaxed = 1, 1 }, true, true},
		{"more run twice than deadlines met", func(r *reshardRun) { r.Duplicated, r.TimedOutUnrelaxed = 3, 2 }, false, true},
		{"a deadline met while relaxed", func(r *reshardRun) { r.Duplicated, r.TimedOutUnrelaxed, r.TimedOutRelaxed = 1, 1, 1 }, false, true},
		{"lost", func(r *reshardRun) { r.Lost, r.TimedOutUnrelaxed = 1, 5 }, false, true},
		{"no slow write", func(r *reshardRun) { r.Slow = 0 }, false, true},
	} {
		rep := runs(c.tune)
		if c.name == "no slow write" {
			rep.Runs[0].Slow = 0
		}
		void, wrong := judgeReshard(t, rep)
		if void != c.void || (wrong != "") != c.bad {
			t.Errorf("%s: void %v, wrong %q; want void %v, wrong %v", c.name, void, wrong, c.void, c.bad)
		}
	}
}
