package maintotel_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/maintotel"
	"github.com/maintkit/maint/mainttest"
)

// errorPath is one client under maint, instrumented with a manual reader.
type errorPath struct {
	*env
	m      *maint.Maint
	rdb    *redis.Client
	reader *sdkmetric.ManualReader
	ev     *events
}

// newErrorPath builds a client of pool size pool on the database's address
// (read timeout rt, no go-redis retries), instrumented.
func newErrorPath(t *testing.T, pool int, rt time.Duration, opts ...maint.Option) *errorPath {
	t.Helper()
	p := &errorPath{env: newEnv(t), ev: newEvents()}
	p.m = maint.New(append([]maint.Option{maint.WithLogf(func(string, ...any) {})}, opts...)...)
	p.rdb = p.m.NewClient(&redis.Options{Addr: p.addr, Protocol: 3, PoolSize: pool, MaxRetries: -1,
		Dialer: p.emu.Dialer(), ReadTimeout: rt, WriteTimeout: rt})
	t.Cleanup(func() {
		_ = p.rdb.Close()
		_ = p.m.Close()
	})
	p.reader = instrument(t, p.m)
	t.Cleanup(p.m.Observe(p.ev.add))
	if err := p.rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return p
}

// instrument records m's metrics into a manual reader until the test
// ends.
func instrument(t *testing.T, m *maint.Maint) *sdkmetric.ManualReader {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	stop, err := maintotel.Instrument(m, maintotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return reader
}

// onlyPoint returns the one point of the int64 sum name, failing unless
// there is exactly one.
func onlyPoint(t *testing.T, r *sdkmetric.ManualReader, name string) metricdata.DataPoint[int64] {
	t.Helper()
	m, ok := collect(t, r)[name]
	if !ok {
		t.Fatalf("no %s recorded", name)
	}
	s := m.Data.(metricdata.Sum[int64])
	if len(s.DataPoints) != 1 {
		t.Fatalf("%s: %d points, want 1: %+v", name, len(s.DataPoints), s.DataPoints)
	}
	return s.DataPoints[0]
}

// wantError checks redis.client.errors' one point: value 1, internal or
// not, type, category, and the spec's other required attributes.
func wantError(t *testing.T, r *sdkmetric.ManualReader, internal bool, typ, category string) {
	t.Helper()
	wantErrors(t, r, 1, internal, typ, category)
}

// wantErrors is wantError for a point of value n.
func wantErrors(t *testing.T, r *sdkmetric.ManualReader, n int64, internal bool, typ, category string) {
	t.Helper()
	p := onlyPoint(t, r, maintotel.MetricErrors)
	want := []attribute.KeyValue{
		attribute.String(maintotel.AttrErrorType, typ),
		attribute.String(maintotel.AttrErrorCategory, category),
		attribute.Bool(maintotel.AttrErrorInternal, internal),
		attribute.Int(maintotel.AttrRetryAttempts, 0),
		attribute.String(maintotel.AttrDBSystem, "redis"),
		attribute.String(maintotel.AttrLibrary, maintotel.Library()),
	}
	if p.Value != n || !has(p.Attributes, want...) {
		t.Errorf("%s point: %d %v\nwant %d with %v", maintotel.MetricErrors, p.Value, p.Attributes.ToSlice(), n, want)
	}
}

// A read that times out on a relaxed node: the application sees a
// *maint.TimeoutError; redis.client.errors records maint.TimeoutError,
// network, not internal.
func TestErrorPathTimeoutUnderMaintenance(t *testing.T) {
	p := newErrorPath(t, 1, 100*time.Millisecond, maint.WithRelaxedTimeout(300*time.Millisecond))
	p.old.Migrating(0, "1")
	p.ev.wait(t, p.rdb, maint.EventRelaxOn, 1)
	p.old.SetCommandLatency("ECHO", 2*time.Second)
	err := p.rdb.Echo(context.Background(), "x").Err()
	var te *maint.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("the application's error: %v (%T), want a *maint.TimeoutError", err, err)
	}
	wantError(t, p.reader, false, "maint.TimeoutError", maintotel.CategoryNetwork)
}

// heldCommand starts a null-endpoint MOVING whose DNS moves long after the
// window and waits until maint holds new commands.
//
// Its traffic (which makes a connection read the MOVING) runs under a
// context it cancels once the hold is seen: a PING that enters the hook
// after the hold began is held as the test's own command is, and with no
// deadline of its own it would wait out the whole hold budget. Those PINGs
// fail with their context, and redis.client.errors records them.
func heldCommand(t *testing.T, p *errorPath) {
	t.Helper()
	p.old.Moving(mainttest.Moving{Window: time.Second, To: p.new, Null: true, StopAccepting: true,
		DNSHost: host, DNSLag: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	traffic := make(chan struct{})
	go func() {
		defer close(traffic)
		for ctx.Err() == nil {
			pingAllUntil(ctx, p.rdb)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for p.ev.count(maint.EventHold) == 0 && time.Now().Before(deadline) {
		select {
		case <-p.ev.more:
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	<-traffic
	if p.ev.count(maint.EventHold) == 0 {
		t.Fatal("timed out waiting for the hold")
	}
}

// errorsOfType returns the point of redis.client.errors whose error.type is
// typ, and whether there is one.
func errorsOfType(t *testing.T, r *sdkmetric.ManualReader, typ string) (metricdata.DataPoint[int64], bool) {
	t.Helper()
	m, ok := collect(t, r)[maintotel.MetricErrors]
	if !ok {
		return metricdata.DataPoint[int64]{}, false
	}
	for _, pt := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if has(pt.Attributes, attribute.String(maintotel.AttrErrorType, typ)) {
			return pt, true
		}
	}
	return metricdata.DataPoint[int64]{}, false
}

// A command held for a replacement until its context ends: the
// application sees maint.ErrHeld wrapping context.DeadlineExceeded; the
// point is maint.ErrHeld, other, not internal, one more than before it.
func TestErrorPathHeldUntilItsContextEnds(t *testing.T) {
	p := newErrorPath(t, 2, time.Second, maint.WithHoldBudget(time.Minute))
	heldCommand(t, p)
	before, _ := errorsOfType(t, p.reader, "maint.ErrHeld")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.rdb.Ping(ctx).Err()
	if !errors.Is(err, maint.ErrHeld) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the application's error: %v, want maint.ErrHeld and the deadline", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the held command returned after %v, its context ended after 100ms", took)
	}
	pt, ok := errorsOfType(t, p.reader, "maint.ErrHeld")
	want := []attribute.KeyValue{
		attribute.String(maintotel.AttrErrorCategory, maintotel.CategoryOther),
		attribute.Bool(maintotel.AttrErrorInternal, false),
		attribute.Int(maintotel.AttrRetryAttempts, 0),
		attribute.String(maintotel.AttrDBSystem, "redis"),
		attribute.String(maintotel.AttrLibrary, maintotel.Library()),
	}
	if !ok || pt.Value != before.Value+1 || !has(pt.Attributes, want...) {
		t.Errorf("maint.ErrHeld point: %d %v (before the command: %d)\nwant %d with %v",
			pt.Value, pt.Attributes.ToSlice(), before.Value, before.Value+1, want)
	}
}

// A blocking command in flight on a retired connection when the drain cap
// passes is left open (the cap closes only connections that owe nothing):
// the BLPOP returns the value pushed through the new endpoint, no error is
// recorded for the application (no redis.client.errors point), and the
// connections the cap did close, idle ones, are recorded with reason error,
// type maint.ErrDrainCap, category network.
func TestErrorPathDrainCap(t *testing.T) {
	p := newErrorPath(t, 2, 3*time.Second)
	ctx := context.Background()
	res := make(chan *redis.StringSliceCmd, 1)
	go func() { res <- p.rdb.BLPop(ctx, 0, "q") }()
	deadline := time.Now().Add(10 * time.Second)
	for p.old.Stats().Pending < 1 {
		if time.Now().After(deadline) {
			t.Fatal("BLPOP never in flight")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.old.Moving(mainttest.Moving{Window: 3 * time.Second, To: p.new})
	// The blocked connection reads the MOVING only with its reply; the
	// other connection of the pool reads it now.
	p.ev.wait(t, p.rdb, maint.EventDrainCap, 1)
	pusher := redis.NewClient(&redis.Options{Addr: p.new.Addr(), Dialer: p.emu.Dialer()})
	defer pusher.Close()
	if err := pusher.RPush(ctx, "q", "v").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case cmd := <-res:
		if err := cmd.Err(); err != nil {
			t.Fatalf("the application's error: %v, want the value pushed after the cap", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the BLPOP never returned")
	}
	if m, ok := collect(t, p.reader)[maintotel.MetricErrors]; ok {
		for _, pt := range m.Data.(metricdata.Sum[int64]).DataPoints {
			if has(pt.Attributes, attribute.Bool(maintotel.AttrErrorInternal, false)) {
				t.Errorf("an error recorded for the application: %v", pt.Attributes.ToSlice())
			}
		}
	}
	capped := int64(p.m.Stats().ClosedAtCap)
	var got int64
	if m, ok := collect(t, p.reader)[maintotel.MetricConnectionClosed]; ok {
		for _, pt := range m.Data.(metricdata.Sum[int64]).DataPoints {
			if has(pt.Attributes, attribute.String(maintotel.AttrCloseReason, maint.CloseError),
				attribute.String(maintotel.AttrErrorType, "maint.ErrDrainCap"),
				attribute.String(maintotel.AttrErrorCategory, maintotel.CategoryNetwork),
				attribute.String(maintotel.AttrPoolName, p.addr)) {
				got += pt.Value
			}
		}
	}
	if got != capped {
		t.Errorf("closed with reason error at the cap: %d, want the %d the cap closed", got, capped)
	}
}

// An endpoint that refuses the opt-in: the application sees no error; the
// point is internal, category server, type and status code ERR.
func TestErrorPathRefusedOptIn(t *testing.T) {
	e := newEnv(t)
	e.old.SetUnsupported(true)
	m := maint.New(maint.WithLogf(func(string, ...any) {}))
	rdb := m.NewClient(&redis.Options{Addr: e.addr, Protocol: 3, PoolSize: 1, Dialer: e.emu.Dialer()})
	defer func() {
		_ = rdb.Close()
		_ = m.Close()
	}()
	reader := instrument(t, m)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the application's error: %v, want none", err)
	}
	wantError(t, reader, true, "ERR", maintotel.CategoryServer)
	if p := onlyPoint(t, reader, maintotel.MetricErrors); !has(p.Attributes, attribute.String(maintotel.AttrResponseStatus, "ERR")) {
		t.Errorf("no status code: %v", p.Attributes.ToSlice())
	}
}

// A transient refusal of the opt-in (the endpoint is loading): the
// application sees no error; the point is internal, category server, type
// LOADING.
func TestErrorPathTransientHandshakeError(t *testing.T) {
	e := newEnv(t)
	e.old.SetHandshake(mainttest.Handshake{Answer: mainttest.AnswerError, Error: "LOADING Redis is loading the dataset in memory", Times: 1})
	m := maint.New(maint.WithLogf(func(string, ...any) {}))
	rdb := m.NewClient(&redis.Options{Addr: e.addr, Protocol: 3, PoolSize: 1, Dialer: e.emu.Dialer()})
	defer func() {
		_ = rdb.Close()
		_ = m.Close()
	}()
	reader := instrument(t, m)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the application's error: %v, want none", err)
	}
	wantError(t, reader, true, "LOADING", maintotel.CategoryServer)
}

// A successor the policy refuses: maint treats the MOVING as a null
// endpoint and no command fails; the point is internal,
// maint.ErrSuccessorRejected, other.
func TestErrorPathSuccessorRefused(t *testing.T) {
	p := newErrorPath(t, 2, time.Second, maint.WithAllowSuccessor(func(string) bool { return false }))
	p.old.Moving(mainttest.Moving{Window: time.Second, To: p.new, DNSHost: host})
	p.ev.wait(t, p.rdb, maint.EventSuccessorRefused, 1)
	if err := p.rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the application's error: %v, want none", err)
	}
	// One per connection's copy of the MOVING that named it.
	wantErrors(t, p.reader, int64(p.m.Stats().RefusedSuccessors), true, "maint.ErrSuccessorRejected", maintotel.CategoryOther)
}

// The mapping itself, for every error maint returns or handles and for
// the errors around them.
func TestErrorAttributes(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	cases := []struct {
		err      error
		typ, cat string
	}{
		{&maint.TimeoutError{Node: "n:1", Err: timeout}, "maint.TimeoutError", maintotel.CategoryNetwork},
		{fmt.Errorf("%w (%w)", maint.ErrDrainCap, net.ErrClosed), "maint.ErrDrainCap", maintotel.CategoryNetwork},
		{maint.ErrRetired, "maint.ErrRetired", maintotel.CategoryNetwork},
		{fmt.Errorf("%w on n:1: %w", maint.ErrHeld, context.DeadlineExceeded), "maint.ErrHeld", maintotel.CategoryOther},
		{maint.ErrClosed, "maint.ErrClosed", maintotel.CategoryOther},
		{fmt.Errorf("%w: s for n: %w", maint.ErrSuccessorRejected, x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}),
			"maint.ErrSuccessorRejected", maintotel.CategoryTLS},
		{fmt.Errorf("%w: refused by policy", maint.ErrSuccessorRejected), "maint.ErrSuccessorRejected", maintotel.CategoryOther},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), "WRONGTYPE", maintotel.CategoryServer},
		{redisError("MOVED 3999 127.0.0.1:6381"), "MOVED", maintotel.CategoryServer},
		{redisError("NOAUTH Authentication required."), "NOAUTH", maintotel.CategoryAuth},
		{timeout, "*net.OpError", maintotel.CategoryNetwork},
		{errors.New("something"), "*errors.errorString", maintotel.CategoryOther},
	}
	for _, c := range cases {
		typ, cat := maintotel.ErrorAttributes(c.err)
		if typ != c.typ || cat != c.cat {
			t.Errorf("ErrorAttributes(%v) = %q, %q; want %q, %q", c.err, typ, cat, c.typ, c.cat)
		}
	}
	if typ, cat := maintotel.ErrorAttributes(nil); typ != "" || cat != "" {
		t.Errorf("nil: %q, %q", typ, cat)
	}
}

// redisError is a Redis error reply, as go-redis returns one.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}
