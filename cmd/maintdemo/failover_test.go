package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
)

// TestFailoverScenarioCheck plays the failover scenario for maint, short,
// with --check: it must exit 0 (no failed command), and its report must
// show no write run twice or lost, no handshake sent to the Discovery
// Service, data connections opted in, and go-redis's built-in handler
// forced off.
func TestFailoverScenarioCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("plays a scenario")
	}
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	var out bytes.Buffer
	code := run([]string{"--scenario", "failover", "--clients", "maint", "--maint-route", "configure", "--window", "1s",
		"--before", "500ms", "--goroutines", "4096", "--rate", "400", "--pool", "8", "--json", "--check"}, &out, errf)
	if code != 0 {
		stderr, _ := os.ReadFile(errf.Name())
		t.Fatalf("exit %d; stderr:\n%s\noutput:\n%s", code, stderr, out.String())
	}
	var rep struct {
		Scenarios []struct {
			Name string
			Runs []struct {
				MaxRetries int `json:"max_retries"`
				OK, Failed int64
				Failover   *failoverStats
			}
		}
		MaintFailed int64 `json:"maint_failed"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v; output:\n%s", err, out.String())
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Name != "failover" || len(rep.Scenarios[0].Runs) != 2 {
		t.Fatalf("report: %s", out.String())
	}
	for _, r := range rep.Scenarios[0].Runs {
		fs := r.Failover
		switch {
		case r.OK == 0 || r.Failed != 0 || fs == nil:
			t.Errorf("MaxRetries %d: ok %d failed %d failover %+v", r.MaxRetries, r.OK, r.Failed, fs)
		case fs.Duplicated != 0 || fs.Lost != 0 || fs.MixedUp != 0:
			t.Errorf("MaxRetries %d: verified writes: %+v", r.MaxRetries, fs)
		case fs.SentinelHandshakes != 0 || fs.OptedIn == 0 || fs.BuiltinMode != "disabled" || len(fs.Events) != 2:
			t.Errorf("MaxRetries %d: %+v", r.MaxRetries, fs)
		}
	}
}

// TestFailoverTextReport renders the failover scenario's rows from fixed
// results.
func TestFailoverTextReport(t *testing.T) {
	s, err := parseFlags([]string{"--scenario", "failover"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.scenarios) != 1 || s.scenarios[0] != failoverScenario {
		t.Fatalf("scenarios: %v", s.scenarios)
	}
	one, after := 1.0, 105.0
	sr := &scenarioReport{Name: "failover", Summary: "test", sc: failoverScenario}
	for _, k := range allClients {
		for _, retries := range []int{-1, 3} {
			fs := &failoverStats{BuiltinMode: "disabled", Duplicated: int64(2 - int(k)), SentinelHandshakes: 0, OptedIn: 7 * int(k),
				Events: []failoverEvent{{Name: "MOVING", QueriesRetiring: 100}, {Name: "failover", QueriesRetiring: 3, LastServedAfter: &after}}}
			sr.Runs = append(sr.Runs, &runResult{kind: k, Client: k.String(), MaxRetries: retries, OK: 10,
				Timeline: timeline{Event: &one, DuringEnd: 6.5}, Failover: fs})
		}
	}
	var b bytes.Buffer
	printScenario(&b, s, sr)
	out := b.String()
	for _, want := range []string{"failover client (Discovery Service)", "go-redis built-in handler mode (forced)", "disabled",
		"writes run twice (verified), MaxRetries 3", "MOVING: queries naming the retiring master, MaxRetries -1",
		"failover: its last command, ms after the switch", "+105", "handshakes sent to the Discovery Service"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
