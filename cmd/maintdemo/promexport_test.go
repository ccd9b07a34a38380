package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// --metrics-addr serves /metrics while the demo runs: scraped during a
// named MOVING, it shows the series the dashboard's Smart Client Handoffs
// and Connection Closures panels read (one handoff for the pool, its
// retired connections closed as healthcheck_failed), with job="maintdemo"
// for exported_job; it stops with the demo.
func TestMetricsAddrServesWhileRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("plays a scenario")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"--scenario", "named", "--clients", "maint", "--window", "1s", "--before", "500ms",
			"--goroutines", "4", "--rate", "400", "--pool", "4", "--json",
			"--metrics-addr", addr, "--metrics-linger", "0"}, io.Discard, errf)
	}()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	want := []string{
		`redis_client_connection_handoff_total{job="maintdemo",db_client_connection_pool_name="redis.test:`,
		`redis_client_connection_closed_total{job="maintdemo",db_client_connection_pool_name="redis.test:`,
		`redis_client_connection_close_reason="healthcheck_failed"`,
		`redis_client_maintenance_notifications_total{job="maintdemo"`,
		`# TYPE redis_client_maint_handoff_duration_seconds histogram`,
	}
	var body []byte
	seen := false
	for !seen {
		select {
		case code := <-done:
			t.Fatalf("the demo ended (exit %d) before /metrics showed %q; last body:\n%s", code, want, body)
		default:
		}
		if resp, err := client.Get("http://" + addr + "/metrics"); err == nil {
			body, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			seen = true
			for _, w := range want {
				seen = seen && bytes.Contains(body, []byte(w))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, ln := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(ln, "redis_client_connection_handoff_total") && !strings.HasSuffix(ln, "} 1") {
			t.Errorf("one handoff per MOVING: %s", ln)
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, err := client.Get("http://" + addr + "/metrics"); err == nil {
		t.Errorf("/metrics still served after the demo ended (--metrics-linger 0)")
	}
}
