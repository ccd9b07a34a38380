package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaults(t *testing.T) {
	s, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.scenarios) != 1 || s.scenarios[0].name != "null-dns-late" {
		t.Errorf("default scenarios: %v", s.scenarios)
	}
	if len(s.clients) != 3 || s.window != 2*time.Second || s.goroutines != 4096 || s.rate != 2000 || s.pool != 16 {
		t.Errorf("defaults: %+v", s)
	}
	// The default run must stay well under a minute: six runs.
	if per := s.runLength(s.scenarios[0]); 6*per > 30*time.Second {
		t.Errorf("default run takes %v", 6*per)
	}
}

func TestParseFlagsAll(t *testing.T) {
	s, err := parseFlags([]string{"--scenario", "all", "--clients", "maint,none"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.scenarios) != len(scenarios) {
		t.Errorf("all: %d scenarios", len(s.scenarios))
	}
	if len(s.clients) != 2 || s.clients[0] != clientMaint || s.clients[1] != clientNone {
		t.Errorf("clients: %v", s.clients)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--scenario", "nope"},
		{"--clients", "jedis"},
		{"--window", "1500ms"},
		{"--window", "0s"},
		{"--goroutines", "0"},
		{"--pool", "0"},
		{"--rate", "-1"},
		{"--rate", "0"},
		{"--before", "100ms"},
		{"--duration", "2s"},
		{"--maint-route", "sideways"},
		{"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	if _, err := parseFlags([]string{"--help"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

func TestLatencyStats(t *testing.T) {
	var ns []int64
	for i := int64(1); i <= 100; i++ {
		ns = append(ns, i*1e6)
	}
	l := latencyStats(ns)
	if l.Count != 100 || l.P50 != 50 || l.P99 != 99 || l.Max != 100 {
		t.Errorf("got %+v", l)
	}
	if l := latencyStats([]int64{3e6}); l.P50 != 3 || l.P99 != 3 || l.Max != 3 {
		t.Errorf("one sample: %+v", l)
	}
	if l := latencyStats(nil); l.Count != 0 {
		t.Errorf("none: %+v", l)
	}
}

func TestNormalizeError(t *testing.T) {
	got := normalizeError(errors.New("read tcp 127.0.0.1:50312->127.0.0.2:6379: i/o timeout"))
	if got != "read tcp 127.0.0.2:6379: i/o timeout" {
		t.Errorf("got %q", got)
	}
	var e errorCounts
	for range 3 {
		e.add("a")
	}
	e.add("b")
	for i := range maxErrorKinds + 2 {
		e.add(strings.Repeat("x", i+2))
	}
	l := e.list()
	if l[0].Error != "a" || l[0].Count != 3 || l[len(l)-1].Error != "(other errors)" || l[len(l)-1].Count != 4 {
		t.Errorf("got %+v", l)
	}
}

// TestDemoRuns plays a short named-successor scenario for maint and checks
// the JSON report's shape (not maint's result: CI's demo run checks that).
func TestDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("plays a scenario")
	}
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	var out bytes.Buffer
	code := run([]string{"--scenario", "named", "--clients", "maint", "--window", "1s", "--before", "500ms",
		"--goroutines", "4", "--rate", "400", "--pool", "4", "--json"}, &out, errf)
	if code != 0 {
		t.Fatalf("exit %d; output:\n%s", code, out.String())
	}
	var rep struct {
		Scenarios []struct {
			Name string
			Runs []struct {
				Client     string
				MaxRetries int `json:"max_retries"`
				OK         int64
				Timeline   struct {
					Event     *float64
					WindowEnd *float64 `json:"window_end"`
				}
			}
		}
		MaintRuns int `json:"maint_runs"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v; output:\n%s", err, out.String())
	}
	if len(rep.Scenarios) != 1 || len(rep.Scenarios[0].Runs) != 2 || rep.MaintRuns != 2 {
		t.Fatalf("report: %s", out.String())
	}
	for _, r := range rep.Scenarios[0].Runs {
		if r.Client != "maint" || r.OK == 0 || r.Timeline.Event == nil || r.Timeline.WindowEnd == nil {
			t.Errorf("run: %+v", r)
		}
	}
	if rep.Scenarios[0].Runs[0].MaxRetries != -1 || rep.Scenarios[0].Runs[1].MaxRetries != 3 {
		t.Errorf("retries: %+v", rep.Scenarios[0].Runs)
	}
}

// TestTextReport renders a scenario from a fixed result.
func TestTextReport(t *testing.T) {
	s, err := parseFlags([]string{"--scenario", "blocking"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	one := 1.0
	sr := &scenarioReport{Name: "blocking", Summary: "test", sc: s.scenarios[0]}
	for _, k := range allClients {
		for _, retries := range []int{-1, 3} {
			sr.Runs = append(sr.Runs, &runResult{kind: k, Client: k.String(), MaxRetries: retries, OK: 10,
				Failed: int64(2 - int(k)), Timeline: timeline{Event: &one, DuringEnd: 3.5},
				Before:   latency{Count: 1, P50: 1, P99: 2, Max: 3},
				During:   latency{Count: 1, P50: 2, P99: 20, Max: 30},
				Blocking: &blockingCall{DoneAt: &one, Value: "job"}})
		}
	}
	var b bytes.Buffer
	printScenario(&b, s, sr)
	out := b.String()
	for _, want := range []string{"no handler", "go-redis built-in", "maint", "failed commands, MaxRetries -1",
		"20.0 (×1.0)", "during (+1.0 to +3.5) p99", "got it +1.00", "MOVING sent"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestParseFlagsSoak(t *testing.T) {
	s, err := parseFlags([]string{"--scenario", "soak", "--clients", "maint", "--seed", "9"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !s.soak || s.seed != 9 || s.rate != soakRate || s.poolTimeout != soakPoolTimeout ||
		s.soakLength() != soakDuration || s.maxRetries != 3 || len(s.clients) != 1 {
		t.Errorf("soak defaults: %+v", s)
	}
	s, err = parseFlags([]string{"--scenario", "soak", "--rate", "500", "--pool-timeout", "3s", "--duration", "10s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.rate != 500 || s.poolTimeout != 3*time.Second || s.soakLength() != 10*time.Second {
		t.Errorf("soak flags: %+v", s)
	}
	s, err = parseFlags(nil, io.Discard)
	if err != nil || s.soak || s.poolTimeout != 0 {
		t.Errorf("scenarios keep go-redis's pool timeout: %+v, %v", s, err)
	}
	for _, args := range [][]string{
		{"--scenario", "soak,named"},
		{"--scenario", "named,soak"},
		{"--scenario", "soak", "--duration", "2s"},
		{"--pool-timeout", "-1s"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
