package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// --metrics-addr serves /metrics while the demo runs: scraped during a
// named MOVING, it shows the series the dashboard's Smart Client Handoffs
// and Connection Closures panels read (the pool's handoffs and its retired
// connections closed as healthcheck_failed, from 0), with job="maintdemo"
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
	// Every series is one pool, maintdemo; the handoff and closed counters
	// start at 0 and count up with the runs' MOVINGs.
	want := []string{
		`redis_client_maintenance_notifications_total{job="maintdemo",db_client_connection_pool_name="maintdemo"`,
		`redis_client_connection_close_reason="healthcheck_failed"`,
		`# TYPE redis_client_maint_handoff_duration_seconds histogram`,
	}
	handoff := `redis_client_connection_handoff_total{job="maintdemo",db_client_connection_pool_name="maintdemo",db_system_name="redis",redis_client_library="`
	closed := `redis_client_connection_closed_total{job="maintdemo",db_client_connection_pool_name="maintdemo",db_system_name="redis",redis_client_connection_close_reason="healthcheck_failed",`
	var body []byte
	first := true
	for seen := false; !seen; time.Sleep(50 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("the demo ended (exit %d) before /metrics showed a handoff; last body:\n%s", code, body)
		default:
		}
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		body, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		h, c := value(body, handoff), value(body, closed)
		if first {
			first = false
			if h < 0 || c < 0 {
				t.Errorf("the pool's handoff and closed counters do not start at 0:\n%s", body)
			}
		}
		seen = h >= 1 && c >= 1
		for _, w := range want {
			seen = seen && bytes.Contains(body, []byte(w))
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, err := client.Get("http://" + addr + "/metrics"); err == nil {
		t.Errorf("/metrics still served after the demo ended (--metrics-linger 0)")
	}
}

// value is the value of the series whose line starts with prefix, or -1.
func value(body []byte, prefix string) float64 {
	for _, ln := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(ln, prefix) {
			v, err := strconv.ParseFloat(ln[strings.LastIndexByte(ln, ' ')+1:], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}
