package main

import (
	"bytes"
	"encoding/json"
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
func TestReshardMaint(t *testing.T) {
	if testing.Short() {
		t.Skip("plays the reshard")
	}
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	var out bytes.Buffer
	code := run([]string{"--scenario", "reshard", "--clients", "maint", "--window", "1s", "--before", "500ms",
		"--rate", "1000", "--json", "--check"}, &out, errf)
	stderr, _ := os.ReadFile(errf.Name())
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s\noutput:\n%s", code, stderr, out.String())
	}
	var rep struct {
		Reshard *reshardReport
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v; output:\n%s", err, out.String())
	}
	if rep.Reshard == nil || len(rep.Reshard.Runs) != 2 {
		t.Fatalf("report: %s", out.String())
	}
	var slow int64
	for i, r := range rep.Reshard.Runs {
		if want := []int{-1, 3}[i]; r.Client != "maint" || r.MaxRetries != want {
			t.Errorf("run %d: client %s MaxRetries %d, want maint %d", i, r.Client, r.MaxRetries, want)
		}
		if r.OK == 0 || r.Failed != 0 || r.NotStarted != 0 || r.Duplicated != 0 || r.Lost != 0 {
			t.Errorf("maint, MaxRetries %d: ok %d failed %d not started %d run twice %d lost %d; errors %v",
				r.MaxRetries, r.OK, r.Failed, r.NotStarted, r.Duplicated, r.Lost, r.Errors)
		}
		slow += r.Slow
	}
	// The scenario must have slowed writes past ReadTimeout, or it proves
	// nothing.
	if slow == 0 {
		t.Errorf("no slow write sent: %s", out.String())
	}
	if rep.Reshard.MaintWritesWrong != 0 {
		t.Errorf("maint_writes_wrong %d", rep.Reshard.MaintWritesWrong)
	}
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
