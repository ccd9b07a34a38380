package maintotel_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/maintotel"
	"github.com/maintkit/maint/mainttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const host = "redis.test"

// env is one emulated database with an old and a new node on the same port.
type env struct {
	emu      *mainttest.Emulator
	old, new *mainttest.Endpoint
	addr     string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	var old, nw *mainttest.Endpoint
	for i := 0; i < 20 && nw == nil; i++ {
		if old, err = emu.AddEndpoint("127.0.0.2:0"); err != nil {
			t.Fatal(err)
		}
		nw, err = emu.AddEndpoint("127.0.0.3:" + old.Port())
	}
	if err != nil {
		t.Fatal(err)
	}
	emu.DNS().Set(host, old.IP())
	return &env{emu: emu, old: old, new: nw, addr: net.JoinHostPort(host, old.Port())}
}

// warm makes sure the client's connections are open and opted in, so
// that each gets its copy of what the endpoint sends next: the pool's four
// are open now (OptedIn also counts those closed since).
func (e *env) warm(t *testing.T, rdb *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for st := e.old.Stats(); st.OpenOptedIn < 4; st = e.old.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("connections open and opted in: %d of %d open", st.OpenOptedIn, st.Open)
		}
		pingAll(rdb)
	}
}

// pingAll sends PINGs on every connection of the pool at once: a slow
// DEBUG SLEEP-free way to use them all is to hold them concurrently.
func pingAll(rdb *redis.Client) { pingAllUntil(context.Background(), rdb) }

// pingAllUntil is pingAll under ctx.
func pingAllUntil(ctx context.Context, rdb *redis.Client) {
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = rdb.Do(ctx, "PING").Err()
		}()
	}
	wg.Wait()
}

func (e *env) options() *redis.Options {
	return &redis.Options{
		Addr: e.addr, Protocol: 3, PoolSize: 4, MinIdleConns: 4, MaxRetries: -1,
		Dialer: e.emu.Dialer(), ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
	}
}

// events collects a Maint's events and lets a test wait for one.
type events struct {
	mu   sync.Mutex
	evs  []maint.Event
	more chan struct{}
}

func newEvents() *events { return &events{more: make(chan struct{}, 1)} }

func (l *events) add(e maint.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
}

// dump logs the events seen, for a failure's story.
func (l *events) dump(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		t.Logf("%s %v %s count=%d %s %v", e.At.Format("15:04:05.000000"), e.Kind, e.Node, e.Count, e.Detail, e.Err)
	}
}

// count is the number of events of kind k seen.
func (l *events) count(k maint.EventKind) int {
	return l.total(k, func(maint.Event) int { return 1 })
}

// sum adds up the counts of the events of kind k.
func (l *events) sum(k maint.EventKind) int {
	return l.total(k, func(e maint.Event) int { return e.Count })
}

// total adds up what each event of kind k is worth.
func (l *events) total(k maint.EventKind, worth func(maint.Event) int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.evs {
		if e.Kind == k {
			n += worth(e)
		}
	}
	return n
}

// wait keeps every connection of rdb busy with PINGs (so that each reads
// its copy of a push) until n events of kind k have been seen.
func (l *events) wait(t *testing.T, rdb *redis.Client, k maint.EventKind, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for l.count(k) < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d %v events", n, k)
		}
		pingAll(rdb)
		select {
		case <-l.more:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// collect reads every metric the reader holds, by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != maintotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumOf returns the int64 sum's points whose attributes include want.
func sumOf(t *testing.T, ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) (total int64, points int) {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: data %T, want an int64 sum", name, m.Data)
	}
	for _, p := range s.DataPoints {
		if has(p.Attributes, want...) {
			total += p.Value
			points++
		}
	}
	return total, points
}

func has(set attribute.Set, want ...attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// The shared metrics and maint's own after a MIGRATING and a MOVING: names,
// units, attributes; the relaxed gauge back at 0 after MIGRATED and the
// tail; one handoff per MOVING, not one per connection.
func TestMetricsThroughMigratingAndMoving(t *testing.T) {
	e := newEnv(t)
	ev := newEvents()
	m := maint.New(maint.WithRelaxedTail(200*time.Millisecond), maint.WithLogf(func(string, ...any) {}))
	rdb := m.NewClient(e.options())
	defer func() {
		_ = rdb.Close()
		_ = m.Close()
	}()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	stop, err := maintotel.Instrument(m, maintotel.WithMeterProvider(mp),
		maintotel.WithAttributes(attribute.String("service.name", "test")))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Observed after maintotel: an event seen here has been recorded.
	defer m.Observe(ev.add)()

	oldNode := []attribute.KeyValue{
		attribute.String(maintotel.AttrDBSystem, "redis"),
		attribute.String(maintotel.AttrServerAddr, e.old.IP()),
		attribute.Int(maintotel.AttrServerPort, atoi(t, e.old.Port())),
		attribute.String(maintotel.AttrLibrary, maintotel.Library()),
		attribute.String("service.name", "test"),
	}
	// The spec's pool metrics: the pool (the configured address), no server.
	pooled := []attribute.KeyValue{
		attribute.String(maintotel.AttrDBSystem, "redis"),
		attribute.String(maintotel.AttrLibrary, maintotel.Library()),
		attribute.String(maintotel.AttrPoolName, e.addr),
		attribute.String("service.name", "test"),
	}
	relaxedBy := append([]attribute.KeyValue{attribute.String(maintotel.AttrNotification, "MIGRATING")}, pooled...)

	// MIGRATING: the node is relaxed; the gauge reads 1.
	e.warm(t, rdb)
	e.old.Migrating(0, "1")
	ev.wait(t, rdb, maint.EventRelaxOn, 1)
	ms := collect(t, reader)
	if v, _ := sumOf(t, ms, maintotel.MetricRelaxedTimeout, relaxedBy...); v != 1 {
		t.Errorf("relaxed gauge during MIGRATING = %d, want 1", v)
	}
	if s := ms[maintotel.MetricRelaxedTimeout].Data.(metricdata.Sum[int64]); s.IsMonotonic {
		t.Errorf("relaxed gauge is monotonic; want an up-down counter")
	} else if _, ok := s.DataPoints[0].Attributes.Value(maintotel.AttrServerAddr); ok {
		t.Errorf("relaxed gauge carries %s: a pool's series must not change with its node", maintotel.AttrServerAddr)
	}

	// MIGRATED and the tail: back at 0.
	e.old.Migrated("1")
	ev.wait(t, rdb, maint.EventRelaxOff, 1)
	ms = collect(t, reader)
	if v, n := sumOf(t, ms, maintotel.MetricRelaxedTimeout, relaxedBy...); v != 0 || n != 1 {
		t.Errorf("relaxed gauge after MIGRATED and the tail = %d over %d points, want 0 over 1", v, n)
	}

	// A MOVING read by every connection: one handoff.
	e.warm(t, rdb)
	e.old.Moving(mainttest.Moving{Window: time.Second, To: e.new, DNSHost: host})
	ev.wait(t, rdb, maint.EventHandoffReport, 1)
	ms = collect(t, reader)

	moving := append([]attribute.KeyValue{attribute.String(maintotel.AttrNotification, "MOVING")}, oldNode...)
	if v, _ := sumOf(t, ms, maintotel.MetricNotifications, moving...); v < 1 {
		t.Errorf("MOVING notifications = %d", v)
	}
	migrating := append([]attribute.KeyValue{attribute.String(maintotel.AttrNotification, "MIGRATING")}, oldNode...)
	if v, _ := sumOf(t, ms, maintotel.MetricNotifications, migrating...); v < 1 {
		t.Errorf("MIGRATING notifications = %d", v)
	}
	if v, n := sumOf(t, ms, maintotel.MetricHandoff, pooled...); v != 1 || n != 1 {
		t.Errorf("handoffs = %d over %d points, want 1: one per MOVING, not per connection", v, n)
	}
	// Several connections were handed off, and one handoff counted; the
	// metric counts what maint retired.
	if v, _ := sumOf(t, ms, maintotel.MetricConnections, append(oldNode, attribute.String(maintotel.AttrEvent, "retired"))...); v < 2 || v != int64(ev.sum(maint.EventRetire)) {
		t.Errorf("connections retired = %d, want the pool's (several) and what the events count (%d)", v, ev.sum(maint.EventRetire))
		ev.dump(t)
		t.Logf("old node %+v, new node %+v", e.old.Stats(), e.new.Stats())
	}
	if v, _ := sumOf(t, ms, maintotel.MetricRelaxedTimeout); v != 0 {
		t.Errorf("relaxed gauge after the MOVING = %d, want 0", v)
	}

	hm := ms[maintotel.MetricHandoffDuration]
	h, ok := hm.Data.(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) != 1 || h.DataPoints[0].Count != 1 {
		t.Fatalf("handoff duration: %+v", hm.Data)
	}
	if !has(h.DataPoints[0].Attributes, append(oldNode, attribute.String(maintotel.AttrEndpoint, "named"))...) {
		t.Errorf("handoff duration attributes: %v", h.DataPoints[0].Attributes)
	}
	if s := h.DataPoints[0].Sum; s <= 0 || s > 1 {
		t.Errorf("handoff duration = %vs, want within the 1s window", s)
	}
	if _, ok := ms[maintotel.MetricHandoffOverruns]; ok {
		t.Errorf("a handoff within its window counted as an overrun")
	}

	units := map[string]string{
		maintotel.MetricNotifications:   "{notification}",
		maintotel.MetricRelaxedTimeout:  "{relaxation}",
		maintotel.MetricHandoff:         "1",
		maintotel.MetricHandoffDuration: "s",
		maintotel.MetricConnections:     "{connection}",
	}
	for name, unit := range units {
		if got := ms[name].Unit; got != unit {
			t.Errorf("%s: unit %q, want %q", name, got, unit)
		}
	}
	if s := ms[maintotel.MetricHandoff].Data.(metricdata.Sum[int64]); !s.IsMonotonic {
		t.Errorf("%s is not a counter", maintotel.MetricHandoff)
	}
}

// A Group is observed, Maints installed after Instrument included; stop
// takes back a relaxation still counted, so the gauge reads 0.
func TestGroupAndStop(t *testing.T) {
	e := newEnv(t)
	// No idle connections dialled by NewClient: those dialled before
	// Instrument are not watched, and could be all the pool has.
	opt := e.options()
	opt.MinIdleConns = 0
	rdb := redis.NewClient(opt)
	g, err := maint.Instrument(rdb, maint.WithRelaxedTail(time.Hour), maint.WithLogf(func(string, ...any) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = rdb.Close()
		_ = g.Close()
	}()
	// Observers hear an event in the order they subscribed. ev, behind
	// the recorder, is waited on: the recorder has recorded what ev has
	// heard. early, ahead of it, tells that the recorder had heard no
	// relax-off when a collection was made: early had heard none after it.
	early := newEvents()
	defer g.Observe(early.add)()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	stop, err := maintotel.Instrument(g, maintotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvents()
	defer g.Observe(ev.add)()
	e.warm(t, rdb)
	// A tail lasts no longer than the operation was seen open (the hour
	// asked for is a bound), so each MIGRATING is left open for a while
	// before its MIGRATED; where the machine stalls for longer than that
	// between the MIGRATED and the collection, the tail has ended and the
	// next round leaves the operation open twice as long.
	open := 250 * time.Millisecond
	for round := 1; ; round++ {
		e.old.Migrating(0, "1")
		ev.wait(t, rdb, maint.EventRelaxOn, round)
		if v, _ := sumOf(t, collect(t, reader), maintotel.MetricRelaxedTimeout); v != 1 {
			t.Fatalf("round %d: relaxed gauge while migrating = %d, want 1", round, v)
		}
		time.Sleep(open) // the operation's age, which the tail will last
		e.old.Migrated("1")
		ev.wait(t, rdb, maint.EventRelaxEnd, round)
		v, _ := sumOf(t, collect(t, reader), maintotel.MetricRelaxedTimeout)
		if early.count(maint.EventRelaxOff) < round {
			if v != 1 {
				t.Errorf("relaxed gauge in the tail = %d, want 1", v)
			}
			break
		}
		if round == 4 {
			t.Fatalf("the tail ended before the gauge was read in %d rounds, the last %v long", round, open)
		}
		t.Logf("round %d: the tail (%v) ended before the gauge was read", round, open)
		open *= 2
	}
	stop()
	stop() // idempotent
	if v, _ := sumOf(t, collect(t, reader), maintotel.MetricRelaxedTimeout); v != 0 {
		t.Errorf("relaxed gauge after stop = %d, want 0", v)
	}
	// Closing the Maint reports the relaxation's end to the observers left.
	_ = g.Close()
	if on, off := ev.count(maint.EventRelaxOn), ev.count(maint.EventRelaxOff); off != on {
		t.Errorf("relax-off events after Close = %d, want one per relax-on (%d)", off, on)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("port %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// A null-endpoint MOVING whose DNS moves after the window: the commands
// held are counted once, with the longest wait, when the handoff ends; none
// failed; the handoff's endpoint attribute says null.
func TestHeldCommands(t *testing.T) {
	e := newEnv(t)
	m := maint.New(maint.WithLogf(func(string, ...any) {}))
	rdb := m.NewClient(e.options())
	defer func() {
		_ = rdb.Close()
		_ = m.Close()
	}()
	reader := instrument(t, m)
	ev := newEvents()
	defer m.Observe(ev.add)()
	e.warm(t, rdb)
	window := time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, StopAccepting: true,
		DNSHost: host, DNSLag: window + 300*time.Millisecond})
	ev.wait(t, rdb, maint.EventHandoffReport, 1)
	ms := collect(t, reader)
	held, _ := sumOf(t, ms, maintotel.MetricCommandsHeld)
	if held < 1 {
		t.Errorf("commands held = %d, want the PINGs sent while DNS lagged", held)
	}
	if ms[maintotel.MetricCommandsHeld].Unit != "{command}" {
		t.Errorf("unit %q", ms[maintotel.MetricCommandsHeld].Unit)
	}
	hd, ok := ms[maintotel.MetricHoldDuration].Data.(metricdata.Histogram[float64])
	if !ok || len(hd.DataPoints) != 1 || hd.DataPoints[0].Count != 1 {
		t.Fatalf("hold duration: %+v", ms[maintotel.MetricHoldDuration].Data)
	}
	if s := hd.DataPoints[0].Sum; s <= 0 || s > 10 {
		t.Errorf("longest hold = %vs", s)
	}
	if _, ok := ms[maintotel.MetricCommandsFailed]; ok {
		t.Errorf("commands failed recorded: %+v", ms[maintotel.MetricCommandsFailed].Data)
	}
	h := ms[maintotel.MetricHandoffDuration].Data.(metricdata.Histogram[float64])
	if len(h.DataPoints) != 1 || !has(h.DataPoints[0].Attributes, attribute.String(maintotel.AttrEndpoint, "null")) {
		t.Errorf("handoff duration points: %+v", h.DataPoints)
	}
}
