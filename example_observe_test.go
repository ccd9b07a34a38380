package maint_test

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint"
)

// Structured logs: every record has a stable message and stable keys. Here
// a configuration mistake maint corrects is logged at Warn (the time is
// dropped to keep the output stable).
func ExampleWithLogger() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	m := maint.New(maint.WithLogger(slog.New(h)), maint.WithEndpointType("internal"))
	defer m.Close()
	// Output:
	// level=WARN msg="maint: unknown EndpointType, using auto" endpoint_type=internal
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
