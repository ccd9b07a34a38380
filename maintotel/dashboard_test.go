package maintotel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/maintotel"
	"github.com/maintkit/maint/mainttest"
)

// The official Redis client dashboard's panels that show a maintenance
// (redis-developer/redis-client-observability, grafana/dashboards/
// redis-client-observability.json, commit 033fe86), verbatim.
const (
	panelRelaxed    = `sum by (db_client_connection_pool_name, redis_client_connection_notification) (redis_client_connection_relaxed_timeout{exported_job=~"$service_name",db_client_connection_pool_name=~"$pool_name"})`
	panelHandoffs   = `sum by (db_client_connection_pool_name) (rate(redis_client_connection_handoff_total{exported_job=~"$service_name",db_client_connection_pool_name=~"$pool_name"}[$__rate_interval]))`
	panelClosures   = `sum by (redis_client_connection_close_reason) (rate(redis_client_connection_closed_total{exported_job=~"$service_name"}[$__rate_interval]))`
	panelErrorRate  = `sum(rate(redis_client_errors_total{exported_job=~"$service_name"}[$__rate_interval])) OR on() vector(0)`
	panelErrorsType = `sum by (error_type, redis_client_errors_category) (rate(redis_client_errors_total{exported_job=~"$service_name"}[$__rate_interval]))`
	panelErrorsCat  = `sum by (redis_client_errors_category) (rate(redis_client_errors_total{exported_job=~"$service_name"}[$__rate_interval]))`
)

// job is the scrape job's name: the service the dashboard's $service_name
// selects.
const job = "maintotel-dashboard-test"

// dashboardQuery turns a panel's query into one this test's Prometheus can
// answer. The only label rewritten is exported_job, which an OpenTelemetry
// collector's Prometheus exporter sets from the service name and which this
// test's Prometheus, scraping the application's exporter directly, calls
// job. The Grafana variables get the values of the dashboard's "All"
// ($pool_name) and a window of many scrapes ($__rate_interval).
func dashboardQuery(q string) string {
	return strings.NewReplacer(
		`exported_job=~"$service_name"`, `job=~"`+job+`"`,
		`$pool_name`, `.+`,
		`$__rate_interval`, `1m`,
	).Replace(q)
}

// A maintenance on the real parts: maint under go-redis against the
// emulator, maintotel exporting through the OpenTelemetry Prometheus
// exporter, a real Prometheus server scraping it every second, and the
// dashboard's Smart Client Handoffs, Connection Closures and Error panels
// evaluated through Prometheus's HTTP API: a MIGRATING relaxes the pool (1)
// and MIGRATED brings it back to 0; two MOVINGs hand it off twice (rate > 0,
// 2 in all); the retired connections close as healthcheck_failed, as many
// as maint retired; an endpoint refusing the opt-in shows as internal
// server errors of type ERR, and nothing reaches the application; an
// SMIGRATING on the emulated cluster relaxes a node's pool and its
// SMIGRATED brings it back to 0.
func TestDashboardOnPrometheus(t *testing.T) {
	bin := prometheusBinary(t)

	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", job))))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	prom := startPrometheus(t, bin, job, strings.TrimPrefix(srv.URL, "http://"))

	// One database with an old and a new node; maint on the options route.
	e := newEnv(t)
	ev := newEvents()
	m := maint.New(maint.WithRelaxedTail(300*time.Millisecond), maint.WithLogf(func(string, ...any) {}))
	rdb := m.NewClient(e.options())
	defer func() {
		_ = rdb.Close()
		_ = m.Close()
	}()
	stop, err := maintotel.Instrument(m, maintotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	defer m.Observe(ev.add)()
	pool := e.addr // the client's configured address: redis.test:port

	// MIGRATING: the pool's relaxed series reads 1, then 0 after MIGRATED.
	e.warm(t, rdb)
	e.old.Migrating(0, "1")
	ev.wait(t, rdb, maint.EventRelaxOn, 1)
	prom.waitFor(t, "relaxed during MIGRATING", dashboardQuery(panelRelaxed),
		want(series{"db_client_connection_pool_name": pool, "redis_client_connection_notification": "MIGRATING"}, eq(1)))
	e.old.Migrated("1")
	ev.wait(t, rdb, maint.EventRelaxOff, 1)
	prom.waitFor(t, "relaxed after MIGRATED", dashboardQuery(panelRelaxed),
		want(series{"db_client_connection_pool_name": pool, "redis_client_connection_notification": "MIGRATING"}, eq(0)))

	// A MOVING to the new node; once Prometheus has the handoff and the
	// closures, a MOVING back: the second of each is what rate() sees.
	e.old.Moving(mainttest.Moving{Window: time.Second, To: e.new, DNSHost: host})
	ev.wait(t, rdb, maint.EventHandoffReport, 1)
	prom.waitFor(t, "first handoff scraped", `sum by (db_client_connection_pool_name) (redis_client_connection_handoff_total{job="`+job+`"})`,
		want(series{"db_client_connection_pool_name": pool}, eq(1)))
	prom.waitFor(t, "first closures scraped", `sum(redis_client_connection_closed_total{job="`+job+`"})`,
		want(series{}, atLeast(1)))
	for deadline := time.Now().Add(20 * time.Second); e.new.Stats().OpenOptedIn < 4; pingAll(rdb) {
		if time.Now().After(deadline) {
			t.Fatalf("connections open and opted in on the new node: %d", e.new.Stats().OpenOptedIn)
		}
	}
	e.new.Moving(mainttest.Moving{Window: time.Second, To: e.old, DNSHost: host})
	ev.wait(t, rdb, maint.EventHandoffReport, 2)
	prom.waitFor(t, "second handoff scraped", `sum by (db_client_connection_pool_name) (redis_client_connection_handoff_total{job="`+job+`"})`,
		want(series{"db_client_connection_pool_name": pool}, eq(2)))
	st := m.Stats()
	closed := float64(st.Retired + st.Doomed)
	prom.waitFor(t, "every retired connection's close scraped", `sum(redis_client_connection_closed_total{job="`+job+`"})`,
		want(series{}, eq(closed)))
	prom.waitFor(t, "Connection Handoffs Rate", dashboardQuery(panelHandoffs),
		want(series{"db_client_connection_pool_name": pool}, above(0)))
	prom.waitFor(t, "Connection Closures Rate", dashboardQuery(panelClosures),
		want(series{"redis_client_connection_close_reason": maint.CloseHealthcheckFailed}, above(0)))
	prom.waitFor(t, "relaxed after the MOVINGs", dashboardQuery(panelRelaxed),
		want(series{"db_client_connection_pool_name": pool, "redis_client_connection_notification": "MIGRATING"}, eq(0)))

	// An endpoint without maintenance notifications: its refusals are
	// errors maint handled (internal), category server, type ERR; asked on
	// every connection (no cooldown) so that the count grows after the
	// first scrape.
	refusing, err := e.emu.AddEndpoint("127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing.SetUnsupported(true)
	m2 := maint.New(maint.WithHandshakeRetry(-1), maint.WithLogf(func(string, ...any) {}))
	rdb2 := m2.NewClient(&redis.Options{Addr: refusing.Addr(), Protocol: 3, PoolSize: 4, Dialer: e.emu.Dialer()})
	defer func() {
		_ = rdb2.Close()
		_ = m2.Close()
	}()
	stop2, err := maintotel.Instrument(m2, maintotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if err := rdb2.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	internal := series{"error_type": "ERR", "redis_client_errors_category": maintotel.CategoryServer, "redis_client_errors_internal": "true"}
	prom.waitFor(t, "first refusal scraped", `sum by (error_type, redis_client_errors_category, redis_client_errors_internal) (redis_client_errors_total{job="`+job+`"})`,
		want(internal, eq(1)))
	for m2.Stats().Unsupported < 2 {
		pingAll(rdb2) // more connections, each refused
	}
	prom.waitFor(t, "every refusal scraped", `sum by (error_type, redis_client_errors_category, redis_client_errors_internal) (redis_client_errors_total{job="`+job+`"})`,
		want(internal, eq(float64(m2.Stats().Unsupported))))
	prom.waitFor(t, "Error Rate", dashboardQuery(panelErrorRate), want(series{}, above(0)))
	prom.waitFor(t, "Error Rate by Type", dashboardQuery(panelErrorsType),
		want(series{"error_type": "ERR", "redis_client_errors_category": maintotel.CategoryServer}, above(0)))
	prom.waitFor(t, "Error Rate by Category", dashboardQuery(panelErrorsCat),
		want(series{"redis_client_errors_category": maintotel.CategoryServer}, above(0)))
	if got := prom.query(t, `redis_client_errors_total{job="`+job+`",redis_client_errors_internal="false"}`); len(got) != 0 {
		t.Errorf("errors that reached the application: %v", got)
	}

	// The emulated cluster: an SMIGRATING relaxes the source node's pool,
	// its SMIGRATED brings it back to 0.
	cl, err := e.emu.NewCluster(mainttest.ClusterConfig{Addrs: []string{"127.0.0.5:0", "127.0.0.6:0", "127.0.0.7:0"}})
	if err != nil {
		t.Fatal(err)
	}
	g := maint.NewGroup(maint.WithRelaxedTail(300*time.Millisecond), maint.WithLogf(func(string, ...any) {}))
	cc := g.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: e.emu.Dialer(), Protocol: 3, PoolSize: 4})
	defer func() {
		_ = cc.Close()
		_ = g.Close()
	}()
	cev := newEvents()
	stop3, err := maintotel.Instrument(g, maintotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	defer g.Observe(cev.add)()
	nodes := cl.Nodes()
	key := "{user:48}.name" // slot 8002, on the second node
	ctx := context.Background()
	if err := cc.Set(ctx, key, "Ada", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MigrateSlots(mainttest.SlotMigration{From: nodes[1], To: nodes[2], Slots: "8000-8200",
		Duration: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	source := nodes[1].Addr()
	clusterRelaxed := series{"db_client_connection_pool_name": source, "redis_client_connection_notification": "SMIGRATING"}
	waitEvent(t, cev, func() { _ = cc.Get(ctx, key).Err() }, maint.EventRelaxOn)
	prom.waitFor(t, "relaxed during SMIGRATING", dashboardQuery(panelRelaxed), want(clusterRelaxed, eq(1)))
	waitEvent(t, cev, func() { _ = cc.Get(ctx, key).Err() }, maint.EventRelaxOff)
	prom.waitFor(t, "relaxed after SMIGRATED", dashboardQuery(panelRelaxed), want(clusterRelaxed, eq(0)))
	if v, err := cc.Get(ctx, key).Result(); err != nil || v != "Ada" {
		t.Errorf("GET after the migration = %q, %v", v, err)
	}
}

// waitEvent runs poke until an event of kind k has been seen.
func waitEvent(t *testing.T, l *events, poke func(), k maint.EventKind) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for l.count(k) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for a %v event", k)
		}
		poke()
		select {
		case <-l.more:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// prometheusBinary finds Prometheus (Debian's package installs
// /usr/bin/prometheus), or skips the test saying so.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	t.Skip("prometheus not installed (Debian: apt-get install prometheus): the dashboard queries are not evaluated")
	return ""
}

// promServer is a Prometheus server this test started.
type promServer struct {
	base string // http://127.0.0.1:port
}

// startPrometheus starts Prometheus on a free loopback port, in a
// temporary directory, scraping target every second as job, and stops it
// when the test ends.
func startPrometheus(t *testing.T, bin, job, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: ['%s']
`, job, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for attempt := 0; ; attempt++ {
		addr := freeLoopback(t)
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", attempt)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--config.file="+cfgPath,
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data-%d", attempt)),
			"--web.listen-address="+addr, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			_ = logf.Close()
		}
		p := &promServer{base: "http://" + addr}
		if err := p.ready(exited); err == nil {
			t.Cleanup(stop)
			return p
		} else if attempt == 2 {
			stop()
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("prometheus did not start: %v\n%s", err, log)
		}
		stop() // the port was taken meanwhile: another one
	}
}

// ready waits for Prometheus to answer /-/ready.
func (p *promServer) ready(exited <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		resp, err := httpClient.Get(p.base + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready after 30s")
}

// httpClient keeps no connection open, so that no goroutine outlives a
// test (goleak).
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// freeLoopback returns a loopback address with a port free now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// series is a result's labels (a subset, when matching).
type series map[string]string

// sample is one series of an instant query's result.
type sample struct {
	labels series
	value  float64
}

func (s sample) String() string {
	keys := make([]string, 0, len(s.labels))
	for k := range s.labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, s.labels[k])
	}
	fmt.Fprintf(&b, "} %g", s.value)
	return b.String()
}

// query evaluates q now through the HTTP API.
func (p *promServer) query(t *testing.T, q string) []sample {
	t.Helper()
	resp, err := httpClient.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Status != "success" {
		t.Fatalf("query %s: %s", q, body.Error)
	}
	if body.Data.ResultType != "vector" {
		t.Fatalf("query %s: result type %s", q, body.Data.ResultType)
	}
	out := make([]sample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %s: value %v", q, r.Value)
		}
		out = append(out, sample{labels: r.Metric, value: v})
	}
	return out
}

// check judges a query's result: "" when it is what the test wants.
type check func([]sample) string

// want is satisfied by exactly one series whose labels include labels,
// with a value ok accepts.
func want(labels series, ok func(float64) bool) check {
	return func(got []sample) string {
		var match []sample
		for _, s := range got {
			if has := func() bool {
				for k, v := range labels {
					if s.labels[k] != v {
						return false
					}
				}
				return true
			}(); has {
				match = append(match, s)
			}
		}
		switch {
		case len(match) != 1:
			return fmt.Sprintf("%d series with %v", len(match), labels)
		case !ok(match[0].value):
			return fmt.Sprintf("series %v", match[0])
		}
		return ""
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func atLeast(n float64) func(float64) bool {
	return func(v float64) bool { return v >= n }
}
func above(n float64) func(float64) bool { return func(v float64) bool { return v > n } }

// waitFor evaluates q until c accepts its result: scrapes come every
// second, so the series catch up with what maint did within a few.
func (p *promServer) waitFor(t *testing.T, what, q string, c check) []sample {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := p.query(t, q)
		why := c(got)
		if why == "" {
			t.Logf("%s: %s = %v", what, q, got)
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s\nwant: %s\ngot: %v", what, q, why, got)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// The demo's /metrics on the dashboard, unmodified: maintdemo
// --metrics-addr, built from this repository, scraped by a real Prometheus
// (job "demo-scrape": the series' own job="maintdemo" becomes exported_job),
// and the dashboard's queries with $service_name = maintdemo and no label
// rewritten: the MIGRATING run relaxes the pool (1, then 0), the named
// MOVING runs hand it off (rate > 0) and close its old connections as
// healthcheck_failed (rate > 0), and the error rate stays 0.
func TestDemoOnPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo")
	}
	bin := prometheusBinary(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the demo with")
	}
	dir := t.TempDir()
	demo := filepath.Join(dir, "maintdemo")
	build := exec.Command(goBin, "build", "-o", demo, "./cmd/maintdemo")
	build.Dir = ".." // the root module
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	addr := freeLoopback(t)
	prom := startPrometheus(t, bin, "demo-scrape", addr)
	logf, err := os.Create(filepath.Join(dir, "demo.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(demo, "--scenario", "migrating,named", "--clients", "maint", "--window", "2s",
		"--before", "2s", "--rate", "200", "--goroutines", "16", "--pool", "4",
		"--metrics-addr", addr, "--metrics-linger", "60s")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // ends the linger
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	unmodified := strings.NewReplacer(`$service_name`, `maintdemo`, `$pool_name`, `.+`, `$__rate_interval`, `1m`)
	pool := series{"db_client_connection_pool_name": "maintdemo", "redis_client_connection_notification": "MIGRATING"}
	prom.waitFor(t, "demo: relaxed during MIGRATING", unmodified.Replace(panelRelaxed), want(pool, eq(1)))
	prom.waitFor(t, "demo: relaxed after the MIGRATING run", unmodified.Replace(panelRelaxed), want(pool, eq(0)))
	prom.waitFor(t, "demo: Connection Handoffs Rate", unmodified.Replace(panelHandoffs),
		want(series{"db_client_connection_pool_name": "maintdemo"}, above(0)))
	prom.waitFor(t, "demo: Connection Closures Rate", unmodified.Replace(panelClosures),
		want(series{"redis_client_connection_close_reason": maint.CloseHealthcheckFailed}, above(0)))
	prom.waitFor(t, "demo: Error Rate", unmodified.Replace(panelErrorRate), want(series{}, eq(0)))
	select {
	case err := <-exited:
		log, _ := os.ReadFile(logf.Name())
		t.Fatalf("the demo ended early: %v\n%s", err, log)
	default:
	}
}
