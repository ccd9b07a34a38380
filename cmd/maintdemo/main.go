package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// settings are the demo's flags, validated.
type settings struct {
	scenarios   []*scenario
	clients     []clientKind
	goroutines  int
	rate        int
	pool        int
	window      time.Duration
	before      time.Duration
	duration    time.Duration // 0: long enough for the scenario
	readTimeout time.Duration
	poolTimeout time.Duration // 0: go-redis's default, ReadTimeout + 1s
	redis       string
	maintRoute  string
	json        bool
	check       bool
	verbose     bool
	cpuProfile  string // --cpuprofile: where to write a CPU profile of the whole run
	metrics     bool   // --metrics: print what each maint client recorded (metrics.go)
	// --metrics-addr: serve the maint clients' metrics at /metrics while
	// the demo runs (promexport.go), and for metricsLinger after.
	metricsAddr   string
	metricsLinger time.Duration
	live          *liveMetrics // nil without --metrics-addr

	// The soak (--scenario soak) instead of the scenarios.
	soak       bool
	seed       uint64
	maxRetries int // --max-retries: go-redis's MaxRetries in the soak; <= 0: none
}

// afterSpan is how long a run goes on after the disturbance, by default.
const afterSpan = 500 * time.Millisecond

// soakLength is how long the load of one client's soak lasts.
func (s *settings) soakLength() time.Duration {
	if s.duration > 0 {
		return s.duration
	}
	return soakDuration
}

// runLength is how long the load of one run of sc lasts.
func (s *settings) runLength(sc *scenario) time.Duration {
	if s.duration > 0 {
		return s.duration
	}
	return s.before + sc.span(s) + afterSpan
}

func parseFlags(args []string, stderr io.Writer) (*settings, error) {
	fs := flag.NewFlagSet("maintdemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		s         settings
		scenarioF string
		clientsF  string
	)
	fs.StringVar(&scenarioF, "scenario", "null-dns-late", "scenarios to run, comma-separated: named, null-dns-early, null-dns-late, migrating, blocking, reshard (ClusterClient), failover (FailoverClient), or all; or soak alone (a seeded random sequence of events with verified writes)")
	fs.StringVar(&clientsF, "clients", "all", "clients to compare, comma-separated: none (no handler), builtin (go-redis's handler), maint, or all")
	fs.IntVar(&s.goroutines, "goroutines", 4096, "most commands in flight at once, each on its own goroutine; a command due when this many are in flight is not started (and counted so)")
	fs.IntVar(&s.rate, "rate", 2000, "commands per second, scheduled open loop: each starts on time whatever is in flight")
	fs.IntVar(&s.pool, "pool", 16, "client pool size (redis.Options.PoolSize)")
	fs.DurationVar(&s.window, "window", 2*time.Second, "MOVING window, or how long the migration is slow; whole seconds")
	fs.DurationVar(&s.before, "before", time.Second, "steady load before the event")
	fs.DurationVar(&s.duration, "duration", 0, "load per run in all; 0 means long enough for the scenario plus 0.5s (soak: 20s per client)")
	fs.Uint64Var(&s.seed, "seed", 1, "soak: the seed of the sequence of events")
	fs.IntVar(&s.maxRetries, "max-retries", 3, "soak: MaxRetries of every client; 0 or -1 for none")
	fs.DurationVar(&s.readTimeout, "read-timeout", time.Second, "ReadTimeout and WriteTimeout of every client")
	fs.DurationVar(&s.poolTimeout, "pool-timeout", 0, "PoolTimeout of every client; 0 means go-redis's default (ReadTimeout + 1s), in the soak 10s")
	fs.StringVar(&s.redis, "redis", "", "address of a Redis server to use as the backend (default: an embedded miniredis)")
	fs.StringVar(&s.maintRoute, "maint-route", routeAddHook, "how maint is installed: addhook (rdb.AddHook(maint.New()) on a default client) or configure (m.NewClient(opt))")
	fs.BoolVar(&s.json, "json", false, "print one JSON object instead of the tables")
	fs.BoolVar(&s.check, "check", false, "exit with status 1 if maint failed any command (soak: or lost, duplicated or mixed up a write; reshard: or ran a write twice or lost one)")
	fs.BoolVar(&s.verbose, "verbose", false, "log go-redis, maint and emulator events to stderr")
	fs.BoolVar(&s.metrics, "metrics", false, "print the metrics each maint client recorded during its run, under maintotel's names, and each handoff's report (to stderr with --json; not with the soak)")
	fs.StringVar(&s.metricsAddr, "metrics-addr", "", "serve the maint clients' metrics in the Prometheus text format at http://ADDR/metrics while the demo runs (e.g. 127.0.0.1:9464), under the names the OpenTelemetry Prometheus exporter gives maintotel's: point a Prometheus and the official Redis client dashboard at it")
	fs.DurationVar(&s.metricsLinger, "metrics-linger", 30*time.Second, "with --metrics-addr: how long /metrics stays up after the runs (an interrupt ends it)")
	fs.StringVar(&s.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (to see what delays the load generator)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: maintdemo [flags]\n\n"+
			"Runs steady load through go-redis with no handler, with go-redis's built-in\n"+
			"maintnotifications handler and with maint, in turn, through the same emulated\n"+
			"Redis Enterprise maintenance, and prints the results side by side.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var err error
	if strings.TrimSpace(scenarioF) == "soak" {
		s.soak = true
	} else if s.scenarios, err = parseScenarios(scenarioF); err != nil {
		return nil, err
	}
	if s.clients, err = parseClients(clientsF); err != nil {
		return nil, err
	}
	switch {
	case s.goroutines < 1:
		return nil, errors.New("--goroutines must be at least 1")
	case s.pool < 1:
		return nil, errors.New("--pool must be at least 1")
	case s.rate < 1:
		return nil, errors.New("--rate must be at least 1 (the load is open loop: commands are scheduled at this rate)")
	case s.window < time.Second || s.window%time.Second != 0:
		// The wire carries whole seconds: a client told "2" must not see the
		// close at 1.5s.
		return nil, errors.New("--window must be a whole number of seconds, at least 1s")
	case s.before < blockingLead+100*time.Millisecond:
		return nil, fmt.Errorf("--before must be at least %v", blockingLead+100*time.Millisecond)
	case s.maintRoute != routeAddHook && s.maintRoute != routeConfigure:
		return nil, fmt.Errorf("--maint-route must be %s or %s", routeAddHook, routeConfigure)
	case s.readTimeout <= 0:
		return nil, errors.New("--read-timeout must be positive")
	case s.poolTimeout < 0:
		return nil, errors.New("--pool-timeout must not be negative")
	}
	if s.soak {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["rate"] {
			s.rate = soakRate
		}
		if !set["pool-timeout"] {
			s.poolTimeout = soakPoolTimeout
		}
	}
	if s.soak && s.duration != 0 && s.duration < minSoakDuration {
		return nil, fmt.Errorf("--duration %v is too short for the soak: it needs at least %v", s.duration, minSoakDuration)
	}
	if s.duration > 0 {
		for _, sc := range s.scenarios {
			if need := s.before + sc.span(&s); s.duration < need {
				return nil, fmt.Errorf("--duration %v is too short for %s: it needs at least %v", s.duration, sc.name, need)
			}
		}
	}
	return &s, nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status: 0, 1 when --check
// found maint failing a command, 2 for bad flags or an emulator that could
// not start.
func run(args []string, stdout io.Writer, stderr *os.File) int {
	s, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "maintdemo:", err)
		return 2
	}
	if s.cpuProfile != "" {
		f, err := os.Create(s.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "maintdemo:", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	vlog := log.New(io.Discard, "", 0)
	if s.verbose {
		vlog = log.New(stderr, "", log.Lmicroseconds)
	}
	// go-redis logs handoffs and pool errors to stderr; keep the report
	// readable unless --verbose asks for them.
	redis.SetLogger(redisLogger{vlog})
	if s.metricsAddr != "" {
		s.live = newServedMetrics()
		ms, err := serveMetrics(s.metricsAddr, s.live)
		if err != nil {
			fmt.Fprintln(stderr, "maintdemo:", err)
			return 2
		}
		fmt.Fprintf(stderr, "maintdemo: serving metrics at http://%s/metrics\n", ms.addr)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		defer func() {
			if s.metricsLinger > 0 {
				fmt.Fprintf(stderr, "maintdemo: metrics stay at http://%s/metrics for %v (interrupt to end)\n", ms.addr, s.metricsLinger)
			}
			ms.close(ctx, s.metricsLinger)
		}()
	}
	rn := &runner{s: s, logf: vlog.Printf, prog: newProgress(stderr)}
	if s.soak {
		return rn.runSoak(stdout, stderr)
	}

	rep := newReport(s)
	if !s.json {
		printHeader(stdout, s)
	}
	for _, sc := range s.scenarios {
		if sc.alone != nil {
			if err := sc.alone(rn, rep, stdout); err != nil {
				fmt.Fprintln(stderr, "maintdemo:", err)
				return 2
			}
			continue
		}
		sr := &scenarioReport{Name: sc.name, Summary: sc.summary, sc: sc}
		for _, k := range s.clients {
			for _, retries := range []int{-1, 0} {
				r, err := rn.run(sc, k, retries)
				if err != nil {
					fmt.Fprintln(stderr, "maintdemo:", err)
					return 2
				}
				sr.Runs = append(sr.Runs, r)
			}
		}
		rep.add(sr)
		if !s.json {
			printScenario(stdout, s, sr)
		}
	}
	if s.json {
		if err := writeJSON(stdout, rep); err != nil {
			fmt.Fprintln(stderr, "maintdemo:", err)
			return 2
		}
	} else {
		printSummary(stdout, rep)
	}
	if s.metrics {
		out := stdout
		if s.json {
			out = stderr // stdout holds the one JSON object
		}
		printMetrics(out, rn.metrics)
	}
	if s.check {
		if why := checkFailures(rep, s); len(why) > 0 {
			fmt.Fprintf(stderr, "maintdemo: check failed: maint failed %d commands and did not start %d\n", rep.MaintFailed, rep.MaintNotStarted)
			for _, line := range why {
				fmt.Fprintln(stderr, "  "+line)
			}
			return 1
		}
	}
	if s.check && rep.Reshard != nil && rep.Reshard.MaintWritesWrong > 0 {
		fmt.Fprintf(stderr, "maintdemo: check failed: in the reshard maint ran twice or lost %d writes\n", rep.Reshard.MaintWritesWrong)
		return 1
	}
	if s.check && rep.Reshard != nil && (rep.Reshard.MaintHandoffOff > 0 || rep.Reshard.MaintRemovedClosed > 0) {
		fmt.Fprintf(stderr, "maintdemo: check failed: in the reshard maint's SMIGRATED handoff was not in force in %d runs (go-redis %s), and the removed node closed %d of maint's connections\n",
			rep.Reshard.MaintHandoffOff, redis.Version(), rep.Reshard.MaintRemovedClosed)
		return 1
	}
	return 0
}

// checkFailures lists what --check holds against maint's runs, one line
// each: every failed command, and every command not started, except in a
// scenario whose replies are slower than ReadTimeout on purpose (saturates):
// there the commands maint keeps alive fill --goroutines, and those due
// meanwhile are the generator's limit, not a failure of maint's.
func checkFailures(rep *report, s *settings) []string {
	var why []string
	for _, sr := range rep.Scenarios {
		for _, r := range sr.Runs {
			if r.kind != clientMaint {
				continue
			}
			if r.NotStarted > 0 && (sr.sc == nil || !sr.sc.saturates) {
				why = append(why, fmt.Sprintf("%s, MaxRetries %d: %d not started (%d in flight)", sr.Name, r.MaxRetries, r.NotStarted, s.goroutines))
			}
			if r.Failed == 0 {
				continue
			}
			for _, e := range r.Errors {
				why = append(why, fmt.Sprintf("%s, MaxRetries %d: %d × %s", sr.Name, r.MaxRetries, e.Count, e.Error))
			}
			if len(r.Errors) == 0 {
				why = append(why, fmt.Sprintf("%s, MaxRetries %d: %d failed", sr.Name, r.MaxRetries, r.Failed))
			}
		}
	}
	if rep.Reshard != nil {
		for _, r := range rep.Reshard.Runs {
			if r.client.kind != clientMaint || r.Failed+r.NotStarted == 0 {
				continue
			}
			why = append(why, fmt.Sprintf("reshard, MaxRetries %d: %d failed, %d not started", r.MaxRetries, r.Failed, r.NotStarted))
			for _, e := range r.Errors {
				why = append(why, fmt.Sprintf("reshard, MaxRetries %d: %d × %s", r.MaxRetries, e.Count, e.Error))
			}
		}
	}
	return why
}

// redisLogger sends go-redis's log lines to the verbose log.
type redisLogger struct{ l *log.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Printf("go-redis: "+format, v...)
}

// writeJSON prints v as the one indented JSON object of --json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
