//go:build goredis_v9_24

package maintotel_test

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/maintotel"
	"github.com/maintkit/maint/mainttest"
)

// countingRecorder is a per-client go-redis OTelRecorder (v9.24's
// Options.OTelRecorder) that counts what go-redis asks it to record, by the
// spec's metric name each method records (go-redis's own redisotel
// implementation of the interface records them under those names).
type countingRecorder struct {
	mu     sync.Mutex
	counts map[string]int
	closed []string // RecordConnectionClosed's reasons
	errors []string // RecordError's type/status/internal
}

func newCountingRecorder() *countingRecorder {
	return &countingRecorder{counts: map[string]int{}}
}

func (r *countingRecorder) add(name string) {
	r.mu.Lock()
	r.counts[name]++
	r.mu.Unlock()
}

func (r *countingRecorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[name]
}

func (r *countingRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b []string
	for k, v := range r.counts {
		b = append(b, k+"="+strconv.Itoa(v))
	}
	sort.Strings(b)
	return strings.Join(b, " ") + "; closed by reason " + strings.Join(r.closed, ",") + "; errors " + strings.Join(r.errors, ",")
}

func (r *countingRecorder) RecordOperationDuration(context.Context, time.Duration, redis.Cmder, int, error, redis.ConnInfo, int) {
	r.add("db.client.operation.duration")
}

func (r *countingRecorder) RecordPipelineOperationDuration(context.Context, time.Duration, string, int, int, error, redis.ConnInfo, int) {
	r.add("db.client.operation.duration")
}

func (r *countingRecorder) RecordConnectionCreateTime(context.Context, time.Duration, redis.ConnInfo) {
	r.add("db.client.connection.create_time")
}

func (r *countingRecorder) RecordConnectionRelaxedTimeout(context.Context, int, redis.ConnInfo, string, string) {
	r.add(maintotel.MetricRelaxedTimeout)
}

func (r *countingRecorder) RecordConnectionHandoff(context.Context, redis.ConnInfo, string) {
	r.add(maintotel.MetricHandoff)
}

func (r *countingRecorder) RecordError(_ context.Context, errorType string, _ redis.ConnInfo, statusCode string, internal bool, _ int) {
	r.mu.Lock()
	r.counts[maintotel.MetricErrors]++
	r.errors = append(r.errors, errorType+"/"+statusCode+"/"+strconv.FormatBool(internal))
	r.mu.Unlock()
}

func (r *countingRecorder) RecordMaintenanceNotification(context.Context, redis.ConnInfo, string) {
	r.add(maintotel.MetricNotifications)
}

func (r *countingRecorder) RecordConnectionWaitTime(context.Context, time.Duration, redis.ConnInfo) {
	r.add("db.client.connection.wait_time")
}

func (r *countingRecorder) RecordConnectionClosed(_ context.Context, _ redis.ConnInfo, reason string, _ error) {
	r.mu.Lock()
	r.counts[maintotel.MetricConnectionClosed]++
	r.closed = append(r.closed, reason)
	r.mu.Unlock()
}

func (r *countingRecorder) RecordPubSubMessage(context.Context, redis.ConnInfo, string, string, bool) {
	r.add("redis.client.pubsub.messages")
}

func (r *countingRecorder) RecordStreamLag(context.Context, time.Duration, redis.ConnInfo, string, string, string) {
	r.add("redis.client.stream.lag")
}

var _ redis.OTelRecorder = (*countingRecorder)(nil)

// The per-client OTelRecorder beside maintotel, through a MIGRATING,
// MIGRATED and a MOVING with a named successor that maint handles (options
// route): the spec's maintenance metrics (maintenance.notifications,
// connection.relaxed_timeout, connection.handoff) are recorded by maintotel,
// once per handoff for the handoff, and never by go-redis's recorder: maint
// takes the pushes off the wire before go-redis reads them, so go-redis's
// built-in handler, which records them, never sees one. The recorder is live
// all along (it records the commands' durations). The spec's
// connection.closed, a pool metric both record, is counted twice for the
// sockets maint retired; WithoutConnectionClosed, or an OTel View, drops
// maintotel's copy.
func TestPerClientOTelRecorderRecordsNoMaintenanceMetric(t *testing.T) {
	e := newEnv(t)
	ev := newEvents()
	rec := newCountingRecorder()
	m := maint.New(maint.WithRelaxedTail(200*time.Millisecond), maint.WithLogf(func(string, ...any) {}))
	opt := e.options()
	opt.OTelRecorder = rec
	rdb := m.NewClient(opt)
	defer func() {
		_ = rdb.Close()
		_ = m.Close()
	}()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	stop, err := maintotel.Instrument(m, maintotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	dropped := sdkmetric.NewManualReader()
	mp2 := sdkmetric.NewMeterProvider(sdkmetric.WithReader(dropped), sdkmetric.WithView(dropClosedView))
	defer func() { _ = mp2.Shutdown(context.Background()) }()
	stop2, err := maintotel.Instrument(m, maintotel.WithMeterProvider(mp2))
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	without := sdkmetric.NewManualReader()
	mp3 := sdkmetric.NewMeterProvider(sdkmetric.WithReader(without))
	defer func() { _ = mp3.Shutdown(context.Background()) }()
	stop3, err := maintotel.Instrument(m, maintotel.WithMeterProvider(mp3), maintotel.WithoutConnectionClosed())
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	defer m.Observe(ev.add)()

	e.warm(t, rdb)
	e.old.Migrating(0, "1")
	ev.wait(t, rdb, maint.EventRelaxOn, 1)
	e.old.Migrated("1")
	ev.wait(t, rdb, maint.EventRelaxOff, 1)
	e.warm(t, rdb)
	e.old.Moving(mainttest.Moving{Window: time.Second, To: e.new, DNSHost: host})
	ev.wait(t, rdb, maint.EventHandoffReport, 1)
	for i := 0; i < 20; i++ {
		if err := rdb.Incr(context.Background(), "after").Err(); err != nil {
			t.Fatal(err)
		}
	}
	ms := collect(t, reader)
	t.Logf("go-redis's recorder: %s", rec)
	ev.dump(t)

	if v, _ := sumOf(t, ms, maintotel.MetricNotifications); v < 3 {
		t.Errorf("maintotel's %s = %d, want the MIGRATING, MIGRATED and MOVING", maintotel.MetricNotifications, v)
	}
	if v, n := sumOf(t, ms, maintotel.MetricHandoff); v != 1 || n != 1 {
		t.Errorf("maintotel's %s = %d over %d points, want 1", maintotel.MetricHandoff, v, n)
	}
	if _, n := sumOf(t, ms, maintotel.MetricRelaxedTimeout); n == 0 {
		t.Errorf("maintotel recorded no %s", maintotel.MetricRelaxedTimeout)
	}
	for _, name := range []string{maintotel.MetricNotifications, maintotel.MetricRelaxedTimeout, maintotel.MetricHandoff} {
		if n := rec.count(name); n != 0 {
			t.Errorf("go-redis's per-client recorder recorded %s %d times as well: counted twice", name, n)
		}
	}
	if rec.count("db.client.operation.duration") < 20 {
		t.Errorf("go-redis's per-client recorder is not live: %s", rec)
	}

	// redis.client.connection.closed ("closed TCP sockets") is counted
	// twice for the sockets maint retired: maintotel records their closes
	// (healthcheck_failed here), and go-redis's recorder records every
	// socket its pool closes, those included (go-redis's reason: stale).
	// The pool's 4 connections were retired and closed; both counted 4.
	mine, _ := sumOf(t, ms, maintotel.MetricConnectionClosed)
	if mine == 0 || int64(rec.count(maintotel.MetricConnectionClosed)) < mine {
		t.Errorf("%s: maintotel %d, go-redis's recorder %d: want go-redis's to count every socket maintotel counts", maintotel.MetricConnectionClosed, mine, rec.count(maintotel.MetricConnectionClosed))
	}
	t.Logf("%s: maintotel %d, go-redis's recorder %d (the same sockets)", maintotel.MetricConnectionClosed, mine, rec.count(maintotel.MetricConnectionClosed))

	// With go-redis's recorder on, a View drops maintotel's copy; the
	// maintenance metrics stay.
	ms = collect(t, dropped)
	if _, ok := ms[maintotel.MetricConnectionClosed]; ok {
		t.Errorf("the View did not drop maintotel's %s", maintotel.MetricConnectionClosed)
	}
	if v, n := sumOf(t, ms, maintotel.MetricHandoff); v != 1 || n != 1 {
		t.Errorf("with the View, maintotel's %s = %d over %d points, want 1", maintotel.MetricHandoff, v, n)
	}
	// WithoutConnectionClosed does the same without a View.
	ms = collect(t, without)
	if _, ok := ms[maintotel.MetricConnectionClosed]; ok {
		t.Errorf("WithoutConnectionClosed: maintotel recorded %s", maintotel.MetricConnectionClosed)
	}
	if v, n := sumOf(t, ms, maintotel.MetricHandoff); v != 1 || n != 1 {
		t.Errorf("WithoutConnectionClosed: maintotel's %s = %d over %d points, want 1", maintotel.MetricHandoff, v, n)
	}
}

// dropClosedView is the View that drops maintotel's
// redis.client.connection.closed, for an application whose go-redis
// OTelRecorder counts every closed socket already.
var dropClosedView = sdkmetric.NewView(
	sdkmetric.Instrument{Name: maintotel.MetricConnectionClosed, Scope: instrumentation.Scope{Name: maintotel.ScopeName}},
	sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}},
)
