package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint"
)

// --metrics-addr: the maint clients' metrics in the Prometheus text format
// at /metrics while the demo runs, under the names and labels the
// OpenTelemetry Prometheus exporter gives maintotel's (the names of the
// Redis cross-client spec: redis_client_connection_relaxed_timeout,
// redis_client_connection_handoff_total, redis_client_connection_closed_total,
// redis_client_errors_total, ...), so that a Prometheus and the official
// Redis client dashboard pointed at the demo watch its maintenances. Every
// series carries job="maintdemo", as an OpenTelemetry collector's exporter
// sets job from the service name: the scraping Prometheus files it under
// exported_job, the label the dashboard selects on.
//
// Why not OpenTelemetry itself: the demo is in maint's core module, which
// does not depend on OpenTelemetry (maintotel is a module of its own for
// that reason). The mapping below follows maintotel's (maintotel.go): one
// measurement per event, the same names, kinds, units and attributes; the
// text --metrics prints is built from it too.

// demoJob is the job label of every series.
const demoJob = "maintdemo"

// liveMetrics accumulates the measurements of maint events, from any
// number of clients, for /metrics and --metrics.
type liveMetrics struct {
	// pool, when set, names every series' pool (maintotel.WithPoolName):
	// /metrics files every run under one pool, as an application's client
	// is one pool for its whole life, so that rate() sees the second run's
	// handoff as an increase; --metrics prints each run's own.
	pool    string
	mu      sync.Mutex
	sums    map[promKey]*promSum
	hists   map[promKey]*promHist
	relaxBy map[string]promKey // per node: the relaxed series its +1 went to
}

func newLiveMetrics() *liveMetrics {
	return &liveMetrics{sums: map[promKey]*promSum{}, hists: map[promKey]*promHist{}, relaxBy: map[string]promKey{}}
}

// demoPool is the pool name of every series /metrics serves.
const demoPool = "maintdemo"

// newServedMetrics is the liveMetrics of /metrics: one pool, whose
// handoff and closed counters start at 0, so that the dashboard's rate()
// sees the first handoff too.
func newServedMetrics() *liveMetrics {
	l := newLiveMetrics()
	l.pool = demoPool
	e := maint.Event{Pool: demoPool}
	l.add("redis.client.connection.handoff", l.poolKV(e), 0)
	l.add("redis.client.connection.closed", l.poolKV(e, "redis.client.connection.close.reason", maint.CloseHealthcheckFailed), 0)
	return l
}

// promKey is one series: a metric's OpenTelemetry name and its attributes,
// rendered in a canonical order.
type promKey struct{ name, attrs string }

type promSum struct {
	monotonic bool
	v         float64
}

type promHist struct {
	bounds []float64
	counts []uint64 // per bound, then +Inf
	sum    float64
	n      uint64
}

// Histogram bounds, as maintotel's.
var (
	handoffBounds = []float64{0.1, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300}
	holdBounds    = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// attrs renders attribute pairs (key, value, key, value...) sorted by key.
func attrs(kv ...string) string {
	type pair struct{ k, v string }
	ps := make([]pair, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		ps = append(ps, pair{kv[i], kv[i+1]})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].k < ps[j].k })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.k + "=" + strconv.Quote(p.v))
	}
	return b.String()
}

// nodeKV are the common attributes of a node's measurements; poolKV those
// of the spec's pool metrics, which carry no server (maintotel.go).
func (l *liveMetrics) nodeKV(e maint.Event, extra ...string) string {
	kv := []string{"db.system.name", "redis", "redis.client.library", library(), "db.client.connection.pool.name", l.poolOf(e)}
	if host, port, err := net.SplitHostPort(e.Node); err == nil {
		kv = append(kv, "server.address", host)
		if port != "6379" {
			kv = append(kv, "server.port", port)
		}
	} else if e.Node != "" {
		kv = append(kv, "server.address", e.Node)
	}
	return attrs(append(kv, extra...)...)
}

func (l *liveMetrics) poolKV(e maint.Event, extra ...string) string {
	return attrs(append([]string{"db.system.name", "redis", "redis.client.library", library(),
		"db.client.connection.pool.name", l.poolOf(e)}, extra...)...)
}

func (l *liveMetrics) poolOf(e maint.Event) string {
	if l.pool != "" {
		return l.pool
	}
	if e.Pool != "" {
		return e.Pool
	}
	return e.Node
}

func (l *liveMetrics) add(name, attrs string, v float64) {
	l.addSum(true, name, attrs, v)
}

func (l *liveMetrics) addSum(monotonic bool, name, attrs string, v float64) {
	k := promKey{name, attrs}
	s := l.sums[k]
	if s == nil {
		s = &promSum{monotonic: monotonic}
		l.sums[k] = s
	}
	s.v += v
}

func (l *liveMetrics) record(name, attrs string, bounds []float64, d time.Duration) {
	k := promKey{name, attrs}
	h := l.hists[k]
	if h == nil {
		h = &promHist{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
		l.hists[k] = h
	}
	v := d.Seconds()
	i := sort.SearchFloat64s(bounds, v) // the first bound >= v
	h.counts[i]++
	h.sum += v
	h.n++
}

// observe records one event, as maintotel does.
func (l *liveMetrics) observe(e maint.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	conns := func(what string, n int) {
		if n > 0 {
			l.add("redis.client.maint.connections", l.nodeKV(e, "redis.client.maint.event", what), float64(n))
		}
	}
	switch e.Kind {
	case maint.EventNotification:
		l.add("redis.client.maintenance.notifications", l.nodeKV(e, "redis.client.connection.notification", e.Name), 1)
	case maint.EventMalformed, maint.EventReplayed:
		why := "malformed"
		if e.Kind == maint.EventReplayed {
			why = "replayed"
		}
		l.add("redis.client.maint.notifications.ignored", l.nodeKV(e, "redis.client.maint.reason", why), 1)
	case maint.EventHandoff:
		l.add("redis.client.connection.handoff", l.poolKV(e), 1)
	case maint.EventRelaxOn:
		k := promKey{"redis.client.connection.relaxed_timeout", l.poolKV(e, "redis.client.connection.notification", e.Name)}
		l.relaxBy[e.Node] = k
		l.addSum(false, k.name, k.attrs, 1)
	case maint.EventRelaxOff:
		if k, ok := l.relaxBy[e.Node]; ok {
			delete(l.relaxBy, e.Node)
			l.addSum(false, k.name, k.attrs, -1)
		}
	case maint.EventRetire:
		conns("retired", e.Count)
	case maint.EventDrainCap:
		conns("closed_at_cap", e.Count)
	case maint.EventDoomed:
		conns("doomed", 1)
		l.add("redis.client.connection.closed", l.poolKV(e, "redis.client.connection.close.reason", maint.CloseHealthcheckFailed), 1)
	case maint.EventConnClosed:
		kv := []string{"redis.client.connection.close.reason", e.Detail}
		if e.Detail == maint.CloseError && e.Err != nil {
			typ, cat := errorAttrs(e.Err)
			kv = append(kv, "error.type", typ, "redis.client.errors.category", cat)
		}
		l.add("redis.client.connection.closed", l.poolKV(e, kv...), float64(max(e.Count, 1)))
	case maint.EventError:
		typ, cat := errorAttrs(e.Err)
		l.addError(e, typ, cat, e.Internal)
	case maint.EventUnsupported:
		l.add("redis.client.maint.handshake.refusals", l.nodeKV(e), 1)
		code := "ERR"
		if f := strings.Fields(e.Detail); len(f) > 0 && strings.ToUpper(f[0]) == f[0] {
			code = f[0]
		}
		l.addError(e, code, "server", true, "db.response.status_code", code)
	case maint.EventSuccessorRefused:
		l.addError(e, "maint.ErrSuccessorRejected", "other", true)
	case maint.EventHeld:
		l.add("redis.client.maint.commands.held", l.nodeKV(e), float64(e.Count))
		l.record("redis.client.maint.hold.duration", l.nodeKV(e), holdBounds, e.Duration)
	case maint.EventHandoffReport:
		if rep := e.Report; rep != nil {
			if rep.Failed > 0 {
				l.add("redis.client.maint.commands.failed", l.nodeKV(e), float64(rep.Failed))
			}
			how := "named"
			if rep.Successor == "" {
				how = "null"
			}
			l.record("redis.client.maint.handoff.duration", l.nodeKV(e, "redis.client.maint.endpoint", how), handoffBounds, rep.Duration)
			if rep.Duration > rep.Window {
				l.add("redis.client.maint.handoff.overruns", l.nodeKV(e, "redis.client.maint.endpoint", how), 1)
			}
			conns("left_for_server", rep.LeftForServer)
		}
	}
}

func (l *liveMetrics) addError(e maint.Event, typ, cat string, internal bool, extra ...string) {
	kv := append([]string{"error.type", typ, "redis.client.errors.category", cat,
		"redis.client.errors.internal", strconv.FormatBool(internal), "redis.client.operation.retry_attempts", "0"}, extra...)
	l.add("redis.client.errors", l.nodeKV(e, kv...), 1)
}

// errorAttrs is maintotel.ErrorAttributes for the errors maint reports.
func errorAttrs(err error) (typ, category string) {
	var te *maint.TimeoutError
	switch {
	case errors.As(err, &te):
		return "maint.TimeoutError", "network"
	case errors.Is(err, maint.ErrDrainCap):
		return "maint.ErrDrainCap", "network"
	case errors.Is(err, maint.ErrRetired):
		return "maint.ErrRetired", "network"
	case errors.Is(err, maint.ErrHeld):
		return "maint.ErrHeld", "other"
	case errors.Is(err, maint.ErrClosed):
		return "maint.ErrClosed", "other"
	case errors.Is(err, maint.ErrSuccessorRejected):
		return "maint.ErrSuccessorRejected", "other"
	}
	var rerr redis.Error
	if errors.As(err, &rerr) { // a server's reply maint handled: its status code
		if f := strings.Fields(rerr.Error()); len(f) > 0 {
			return f[0], "server"
		}
	}
	return fmt.Sprintf("%T", err), "other"
}

// promName is the Prometheus name the OpenTelemetry exporter gives the
// metric: dots to underscores, the unit's suffix, _total on counters.
func promName(name string, counter, seconds bool) string {
	n := strings.ReplaceAll(name, ".", "_")
	if seconds {
		n += "_seconds"
	}
	if counter {
		n += "_total"
	}
	return n
}

// promLabels turns rendered attributes into Prometheus labels, job first.
func promLabels(attrs string, extra ...string) string {
	var b strings.Builder
	b.WriteString(`job="` + demoJob + `"`)
	for _, kv := range splitAttrs(attrs) {
		b.WriteString("," + strings.ReplaceAll(kv[0], ".", "_") + "=" + kv[1])
	}
	for i := 0; i+1 < len(extra); i += 2 {
		b.WriteString("," + extra[i] + "=" + strconv.Quote(extra[i+1]))
	}
	return b.String()
}

// splitAttrs splits rendered attributes into key and quoted value.
func splitAttrs(s string) [][2]string {
	var out [][2]string
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			break
		}
		key := s[:eq]
		v, err := strconv.QuotedPrefix(s[eq+1:])
		if err != nil {
			break
		}
		out = append(out, [2]string{key, v})
		s = strings.TrimPrefix(s[eq+1+len(v):], ",")
	}
	return out
}

// writeProm writes every series in the Prometheus text format, one
// family at a time, in a stable order.
func (l *liveMetrics) writeProm(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type family struct {
		typ   string
		lines []string
	}
	fams := map[string]*family{}
	get := func(n, typ string) *family {
		f := fams[n]
		if f == nil {
			f = &family{typ: typ}
			fams[n] = f
		}
		return f
	}
	for k, s := range l.sums {
		typ := "gauge"
		if s.monotonic {
			typ = "counter"
		}
		n := promName(k.name, s.monotonic, false)
		f := get(n, typ)
		f.lines = append(f.lines, fmt.Sprintf("%s{%s} %g", n, promLabels(k.attrs), s.v))
	}
	hkeys := make([]promKey, 0, len(l.hists))
	for k := range l.hists {
		hkeys = append(hkeys, k)
	}
	sort.Slice(hkeys, func(i, j int) bool { return hkeys[i].attrs < hkeys[j].attrs })
	for _, k := range hkeys {
		h := l.hists[k]
		n := promName(k.name, false, true)
		f := get(n, "histogram")
		var cum uint64
		for i, b := range h.bounds {
			cum += h.counts[i]
			f.lines = append(f.lines, fmt.Sprintf("%s_bucket{%s} %d", n, promLabels(k.attrs, "le", strconv.FormatFloat(b, 'g', -1, 64)), cum))
		}
		f.lines = append(f.lines, fmt.Sprintf("%s_bucket{%s} %d", n, promLabels(k.attrs, "le", "+Inf"), h.n),
			fmt.Sprintf("%s_sum{%s} %g", n, promLabels(k.attrs), h.sum),
			fmt.Sprintf("%s_count{%s} %d", n, promLabels(k.attrs), h.n))
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := fams[n]
		if f.typ != "histogram" {
			sort.Strings(f.lines)
		}
		fmt.Fprintf(w, "# TYPE %s %s\n", n, f.typ)
		for _, ln := range f.lines {
			fmt.Fprintln(w, ln)
		}
	}
}

// library is the redis.client.library attribute, as maintotel's.
func library() string { return "go-redis:v" + redis.Version() }

// metricsServer serves /metrics until closed.
type metricsServer struct {
	srv  *http.Server
	done chan struct{}
	addr string
}

// serveMetrics listens on addr (a loopback address, for the demo) and
// serves l at /metrics.
func serveMetrics(addr string, l *liveMetrics) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		l.writeProm(w)
	})
	ms := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{}), addr: ln.Addr().String()}
	go func() {
		defer close(ms.done)
		_ = ms.srv.Serve(ln)
	}()
	return ms, nil
}

// close stops serving, after linger (ended early by ctx).
func (ms *metricsServer) close(ctx context.Context, linger time.Duration) {
	if linger > 0 {
		t := time.NewTimer(linger)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = ms.srv.Shutdown(sctx)
	<-ms.done
}
