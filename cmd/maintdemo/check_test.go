package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// checkArgs is a short run of the scenarios the check test plays: a MOVING
// and a MIGRATING whose replies are slower than ReadTimeout, maint only,
// with few goroutines so that the migrating scenario saturates them (its
// commands not started must not fail the check).
var checkArgs = []string{"--scenario", "named,migrating", "--clients", "maint", "--window", "1s",
	"--before", "500ms", "--goroutines", "64", "--rate", "100", "--pool", "4", "--check"}

// TestCheckJudgesEachScenario: --check passes on this (healthy) build,
// although the migrating scenario leaves commands unstarted by design, and
// fails on a build of maint broken on purpose (the maintbroken tag: no
// timeout is relaxed at a MIGRATING), naming the migrating scenario's
// timeouts.
func TestCheckJudgesEachScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("plays two scenarios and builds the demo")
	}
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	var out, errb bytes.Buffer
	if code := run(checkArgs, &out, errf); code != 0 {
		msg, _ := os.ReadFile(errf.Name())
		t.Fatalf("healthy build: exit %d; stderr:\n%s\nstdout:\n%s", code, msg, out.String())
	}
	if !strings.Contains(out.String(), "not started") {
		t.Errorf("healthy build: the migrating scenario saturated no goroutine, the test does not prove the check ignores it:\n%s", out.String())
	}

	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		t.Skipf("no go tool to build the broken demo: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "maintdemo-broken")
	build := exec.Command(goTool, "build", "-tags", "maintbroken", "-o", bin, ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags maintbroken: %v\n%s", err, b)
	}
	out.Reset()
	errb.Reset()
	cmd := exec.Command(bin, checkArgs...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("broken build: %v, want exit status 1; stderr:\n%s", err, errb.String())
	}
	if msg := errb.String(); !strings.Contains(msg, "check failed") || !strings.Contains(msg, "migrating, MaxRetries") ||
		!strings.Contains(msg, "i/o timeout") {
		t.Errorf("broken build: the check does not name the migrating scenario's timeouts:\n%s", msg)
	}
}
