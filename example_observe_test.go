package maint_test

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint"
)

// Structured logs: every record has a stable message and stable keys
// (node, seq, kind, window, successor, count, duration); a few records at
// Info per handoff, none per command or connection above Debug. Here only
// Warn and above, as JSON, to stderr.
func ExampleWithLogger() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := maint.New(maint.WithLogger(log))
	defer m.Close()
	rdb := m.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
}

// An option maint cannot honour panics when it is made, with a message
// that names it, as go-redis does for invalid options: here a negative
// cap on relaxation, which would otherwise have been taken for the
// default.
func ExampleOption() {
	defer func() { fmt.Println(recover()) }()
	maint.New(maint.WithRelaxCap(-5 * time.Second))
	// Output:
	// maint: WithRelaxCap(-5s): must not be negative; 0 means the default (60s)
}

// Ship each handoff's report anywhere: one event per handoff, after it ended.
func ExampleMaint_Observe() {
	m := maint.New()
	rdb := m.NewClient(&redis.Options{Addr: "127.0.0.1:6379", Protocol: 3})
	cancel := m.Observe(func(e maint.Event) {
		if e.Kind != maint.EventHandoffReport {
			return
		}
		r := e.Report
		fmt.Printf("handoff of %s: %v, %d commands held (longest %v), %d failed\n",
			r.Node, r.Duration, r.Held, r.LongestHold, r.Failed)
	})
	// ... the application runs ...
	cancel()
	_ = rdb.Close()
	_ = m.Close()
	// Output:
}
