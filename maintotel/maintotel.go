// Package maintotel records what maint sees and does during Redis
// Enterprise maintenance as OpenTelemetry metrics, to the Redis
// cross-client observability spec (v0.2: redis/docs
// data/client_obs_metrics.json), so that the official Redis client
// dashboard (redis-developer/redis-client-observability) shows maint's
// handoffs, closures and errors.
//
// The spec's metrics, under its names, kinds, units and attributes:
//
//	redis.client.maintenance.notifications  Counter       {notification} maintenance notifications read (one per connection's copy),
//	                                                                     attribute redis.client.connection.notification = the push name
//	redis.client.connection.relaxed_timeout UpDownCounter {relaxation}   nodes whose timeouts are relaxed now: +1 when a node's relaxation
//	                                                                     starts, -1 when it ends (back at 0 after the tail); pool name and
//	                                                                     the notification that started it
//	redis.client.connection.handoff         Counter       1              handoffs started: one per MOVING acted on, not one per connection
//	redis.client.connection.closed          Counter       {connection}   connections maint took out of circulation, when they close, by
//	                                                                     redis.client.connection.close.reason (healthcheck_failed, error,
//	                                                                     server_close) and, for error, error.type and its category
//	redis.client.errors                     Counter       {error}        errors maint returned to the application (internal=false) or
//	                                                                     handled itself (internal=true: a refused opt-in, refused or
//	                                                                     answered with LOADING..., a refused successor), by error.type
//	                                                                     and redis.client.errors.category
//
// and what only maint knows, under redis.client.maint., a prefix the spec
// does not use:
//
//	redis.client.maint.handoff.duration        Histogram s              MOVING read to the last old connection closed
//	redis.client.maint.handoff.overruns        Counter   {handoff}      handoffs that took longer than their MOVING's window
//	redis.client.maint.commands.held           Counter   {command}      commands that waited for a replacement
//	redis.client.maint.hold.duration           Histogram s              per handoff that held commands: the longest wait
//	redis.client.maint.commands.failed         Counter   {command}      commands maint failed (held until their context ended)
//	redis.client.maint.connections             Counter   {connection}   old connections retired, closed at the drain cap,
//	                                                                    left open for the server; new ones doomed
//	redis.client.maint.notifications.ignored   Counter   {notification} notifications ignored: malformed, or replayed copies
//	redis.client.maint.handshake.refusals      Counter   {refusal}      endpoints that refused the opt-in handshake
//
// Every measurement carries db.system.name = "redis", redis.client.library
// ("go-redis:v<version>", the library whose connections these are; the
// instrumentation scope says maintotel recorded them) and
// db.client.connection.pool.name: by default the address the client was
// configured with (redis.Options.Addr; a cluster's node clients have their
// node's), the default of go-redis's redisotel module, or the node's address
// when maint no longer knows it; WithPoolName sets one name instead. The
// spec's pool metrics (relaxed_timeout, handoff, closed) carry nothing else
// of where, so that a pool stays one series when a handoff moves it to
// another node; the others carry server.address and server.port of the node
// concerned (the port only when it is not 6379). The maint metrics add one
// bounded attribute naming the kind of event (redis.client.maint.event,
// .endpoint or .reason, a handful of values each). The spec's required
// redis.client.operation.retry_attempts is 0: maint does not see go-redis's
// retries. ErrorAttributes maps maint's errors to error.type and
// redis.client.errors.category.
//
// Held commands are counted when their handoff ends (maint.EventHeld, one
// per handoff): maint emits no event per command, since the release of a
// hold is when held commands most need their turn.
//
// maintotel is a module of its own, so that maint's core does not depend on
// OpenTelemetry. It attaches through maint's public event stream
// (Maint.Observe, Group.Observe).
package maintotel

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/maintkit/maint"
)

// Metric names of the cross-client spec.
const (
	MetricNotifications    = "redis.client.maintenance.notifications"
	MetricRelaxedTimeout   = "redis.client.connection.relaxed_timeout"
	MetricHandoff          = "redis.client.connection.handoff"
	MetricConnectionClosed = "redis.client.connection.closed"
	MetricErrors           = "redis.client.errors"
)

// Metric names of what only maint records.
const (
	MetricHandoffDuration     = "redis.client.maint.handoff.duration"
	MetricHandoffOverruns     = "redis.client.maint.handoff.overruns"
	MetricCommandsHeld        = "redis.client.maint.commands.held"
	MetricHoldDuration        = "redis.client.maint.hold.duration"
	MetricCommandsFailed      = "redis.client.maint.commands.failed"
	MetricConnections         = "redis.client.maint.connections"
	MetricNotificationsIgnore = "redis.client.maint.notifications.ignored"
	MetricHandshakeRefusals   = "redis.client.maint.handshake.refusals"
)

// Attribute keys of the spec.
const (
	AttrDBSystem       = "db.system.name"
	AttrServerAddr     = "server.address"
	AttrServerPort     = "server.port"
	AttrLibrary        = "redis.client.library"
	AttrNotification   = "redis.client.connection.notification"
	AttrPoolName       = "db.client.connection.pool.name"
	AttrCloseReason    = "redis.client.connection.close.reason"
	AttrErrorType      = "error.type"
	AttrErrorCategory  = "redis.client.errors.category"
	AttrErrorInternal  = "redis.client.errors.internal"
	AttrRetryAttempts  = "redis.client.operation.retry_attempts"
	AttrResponseStatus = "db.response.status_code"
)

// Attribute keys of maint's own metrics.
const (
	// AttrEvent names what happened to connections: retired,
	// closed_at_cap, left_for_server, doomed.
	AttrEvent = "redis.client.maint.event"
	// AttrEndpoint says whether a handoff's MOVING named its successor:
	// named, null.
	AttrEndpoint = "redis.client.maint.endpoint"
	// AttrReason says why a notification was ignored: malformed, replayed.
	AttrReason = "redis.client.maint.reason"
)

// ScopeName is the instrumentation scope maintotel's meter is named after.
const ScopeName = "github.com/maintkit/maint/maintotel"

// defaultPort is Redis's port: server.port is recorded only for others.
const defaultPort = 6379

// Source is what Instrument observes: a *maint.Maint or a *maint.Group
// (whose Maints installed later, a cluster's new nodes, are observed too).
type Source interface {
	Observe(f func(maint.Event)) (cancel func())
}

var (
	_ Source = (*maint.Maint)(nil)
	_ Source = (*maint.Group)(nil)
)

// Option changes how Instrument records.
type Option func(*config)

type config struct {
	mp       metric.MeterProvider
	library  string
	poolName string
	attrs    []attribute.KeyValue
	noClosed bool // WithoutConnectionClosed
}

// WithMeterProvider sets the MeterProvider; the default is the global one
// (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithLibrary sets the redis.client.library attribute; the default is
// Library().
func WithLibrary(name string) Option { return func(c *config) { c.library = name } }

// WithPoolName sets the db.client.connection.pool.name attribute of every
// measurement (as redisotel.WithPoolName does for go-redis's own
// metrics); the default is the address the client was configured with
// (maint.Event.Pool).
func WithPoolName(name string) Option { return func(c *config) { c.poolName = name } }

// WithAttributes adds attributes to every measurement (keep their
// cardinality bounded: a service name, a database name).
func WithAttributes(kv ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, kv...) }
}

// WithoutConnectionClosed leaves redis.client.connection.closed out, for
// a client whose go-redis OTelRecorder (Options.OTelRecorder, go-redis
// v9.24) records it already: go-redis counts every socket its pool closes,
// those maint retired included (reason "stale"), so with both the retired
// sockets are counted twice. Every other series is maint's alone.
func WithoutConnectionClosed() Option { return func(c *config) { c.noClosed = true } }

// Library is the default value of the redis.client.library attribute, in
// the spec's form <name>:<version>: "go-redis:v9.23.0".
func Library() string { return "go-redis:v" + redis.Version() }

// recorder turns events into measurements.
type recorder struct {
	cfg config

	notifications metric.Int64Counter
	relaxed       metric.Int64UpDownCounter
	handoffs      metric.Int64Counter
	closed        metric.Int64Counter
	errs          metric.Int64Counter
	handoffTime   metric.Float64Histogram
	overruns      metric.Int64Counter
	held          metric.Int64Counter
	heldTime      metric.Float64Histogram
	failed        metric.Int64Counter
	conns         metric.Int64Counter
	ignored       metric.Int64Counter
	refusals      metric.Int64Counter

	mu      sync.Mutex
	base    map[where][]attribute.KeyValue // per node and pool: the common attributes
	relaxOn map[relaxKey]int               // per node, pool and notification: +1s recorded and not yet taken back
	relaxBy map[string]relaxKey            // per node: what its recorded relaxation carries
}

// where is a node and the pool of its connections.
type where struct{ node, pool string }

type relaxKey struct {
	where
	name string
}

// Instrument records src's maintenance as metrics until stop is called.
// stop unsubscribes and takes back what the relaxed-timeout gauge still
// counts, so that it reads 0 for this source. It returns an error iff an
// instrument cannot be created.
func Instrument(src Source, opts ...Option) (stop func(), err error) {
	cfg := config{library: Library()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	r, err := newRecorder(cfg)
	if err != nil {
		return nil, err
	}
	cancel := src.Observe(r.record)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			r.takeBack()
		})
	}, nil
}

func newRecorder(cfg config) (*recorder, error) {
	m := cfg.mp.Meter(ScopeName)
	r := &recorder{cfg: cfg, base: make(map[where][]attribute.KeyValue),
		relaxOn: make(map[relaxKey]int), relaxBy: make(map[string]relaxKey)}
	var errs []error
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		if err != nil {
			errs = append(errs, err)
		}
		return c
	}
	histogram := func(name, desc string, bounds ...float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(bounds...))
		if err != nil {
			errs = append(errs, err)
		}
		return h
	}
	r.notifications = counter(MetricNotifications,
		"Maintenance notifications read from the server, one per connection's copy", "{notification}")
	var err error
	r.relaxed, err = m.Int64UpDownCounter(MetricRelaxedTimeout,
		metric.WithDescription("Nodes whose connection timeouts are relaxed now: up when relaxation starts, down when it ends"),
		metric.WithUnit("{relaxation}"))
	if err != nil {
		errs = append(errs, err)
	}
	r.handoffs = counter(MetricHandoff,
		"Handoffs started: one per MOVING acted on, whatever the number of connections", "1")
	r.closed = counter(MetricConnectionClosed,
		"Connections maint took out of circulation, closed, by reason", "{connection}")
	r.errs = counter(MetricErrors,
		"Errors maint returned to the application or handled itself", "{error}")
	r.handoffTime = histogram(MetricHandoffDuration,
		"How long a handoff took: MOVING read to the last old connection closed",
		0.1, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300)
	r.overruns = counter(MetricHandoffOverruns, "Handoffs that took longer than their MOVING's window", "{handoff}")
	r.held = counter(MetricCommandsHeld, "Commands that waited for a replacement node", "{command}")
	r.heldTime = histogram(MetricHoldDuration,
		"Per handoff that held commands: the longest time a command waited for a replacement node",
		0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
	r.failed = counter(MetricCommandsFailed, "Commands maint failed: held until their context ended", "{command}")
	r.conns = counter(MetricConnections,
		"Connections a handoff retired, closed at the drain cap or left open for the server, and new ones doomed for landing on the retiring node",
		"{connection}")
	r.ignored = counter(MetricNotificationsIgnore,
		"Maintenance notifications ignored: malformed or absurd, or replayed copies that changed nothing", "{notification}")
	r.refusals = counter(MetricHandshakeRefusals,
		"Endpoints that refused the maintenance notifications opt-in handshake", "{refusal}")
	if len(errs) > 0 {
		return nil, fmt.Errorf("maintotel: creating instruments: %w", errs[0])
	}
	return r, nil
}

// nodeAttrs are the common attributes of w's measurements: system,
// library, server address and port (unless pooled: the spec's pool
// metrics have none, so that a pool's series stays one series when a
// handoff moves it to another node), pool name, and the configured ones.
func (r *recorder) nodeAttrs(w where, pooled bool) []attribute.KeyValue {
	pool := r.poolName(w)
	key := w
	if pooled {
		key = where{node: "\x00pooled", pool: pool}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if base, ok := r.base[key]; ok {
		return base
	}
	node := w.node
	base := make([]attribute.KeyValue, 0, 5+len(r.cfg.attrs))
	base = append(base, attribute.String(AttrDBSystem, "redis"), attribute.String(AttrLibrary, r.cfg.library))
	if !pooled {
		base = appendServer(base, node)
	}
	if pool != "" {
		base = append(base, attribute.String(AttrPoolName, pool))
	}
	base = append(base, r.cfg.attrs...)
	if len(r.base) < maxNodes {
		r.base[key] = base
	}
	return base
}

// appendServer appends server.address and server.port of node.
func appendServer(base []attribute.KeyValue, node string) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(node)
	if err != nil {
		if node != "" {
			base = append(base, attribute.String(AttrServerAddr, node))
		}
		return base
	}
	base = append(base, attribute.String(AttrServerAddr, host))
	if p, err := strconv.Atoi(port); err == nil && p != defaultPort {
		base = append(base, attribute.Int(AttrServerPort, p))
	}
	return base
}

// poolName is the pool name of w's measurements: the one configured, or
// the client's address the event names, or the node's.
func (r *recorder) poolName(w where) string {
	switch {
	case r.cfg.poolName != "":
		return r.cfg.poolName
	case w.pool != "":
		return w.pool
	}
	return w.node
}

// attrsFor returns the common attributes of w, plus extra.
func (r *recorder) attrsFor(w where, extra ...attribute.KeyValue) metric.MeasurementOption {
	return r.withBase(r.nodeAttrs(w, false), extra)
}

// poolAttrs returns the common attributes of w's pool, plus extra: those
// of the spec's pool metrics (relaxed_timeout, handoff, closed).
func (r *recorder) poolAttrs(w where, extra ...attribute.KeyValue) metric.MeasurementOption {
	return r.withBase(r.nodeAttrs(w, true), extra)
}

func (r *recorder) withBase(base, extra []attribute.KeyValue) metric.MeasurementOption {
	if len(extra) == 0 {
		return metric.WithAttributes(base...)
	}
	return metric.WithAttributes(append(append(make([]attribute.KeyValue, 0, len(base)+len(extra)), base...), extra...)...)
}

// maxNodes bounds the attribute sets cached.
const maxNodes = 1024

// record turns one event into measurements.
func (r *recorder) record(e maint.Event) {
	ctx := context.Background()
	at := where{e.Node, e.Pool}
	switch e.Kind {
	case maint.EventNotification:
		r.notifications.Add(ctx, 1, r.attrsFor(at, attribute.String(AttrNotification, e.Name)))
	case maint.EventMalformed:
		r.ignored.Add(ctx, 1, r.attrsFor(at, attribute.String(AttrReason, "malformed")))
	case maint.EventReplayed:
		r.ignored.Add(ctx, 1, r.attrsFor(at, attribute.String(AttrReason, "replayed")))
	case maint.EventHandoff:
		r.handoffs.Add(ctx, 1, r.poolAttrs(at))
	case maint.EventRelaxOn:
		k := relaxKey{at, e.Name}
		r.mu.Lock()
		r.relaxOn[k]++
		r.relaxBy[e.Node] = k
		r.mu.Unlock()
		r.relaxed.Add(ctx, 1, r.poolAttrs(at, attribute.String(AttrNotification, e.Name)))
	case maint.EventRelaxOff:
		r.mu.Lock()
		k, on := r.relaxBy[e.Node]
		if on {
			if r.relaxOn[k]--; r.relaxOn[k] <= 0 {
				delete(r.relaxOn, k)
				delete(r.relaxBy, e.Node)
			}
		}
		r.mu.Unlock()
		if on { // an end whose start was recorded: never below 0
			r.relaxed.Add(ctx, -1, r.poolAttrs(k.where, attribute.String(AttrNotification, k.name)))
		}
	case maint.EventRetire:
		r.connections(ctx, at, "retired", e.Count)
	case maint.EventDrainCap:
		r.connections(ctx, at, "closed_at_cap", e.Count)
	case maint.EventDoomed:
		r.connections(ctx, at, "doomed", 1)
		// A new connection that landed on the retiring node failed maint's
		// check and was closed at once.
		if !r.cfg.noClosed {
			r.closed.Add(ctx, 1, r.poolAttrs(at, attribute.String(AttrCloseReason, maint.CloseHealthcheckFailed)))
		}
	case maint.EventConnClosed:
		if r.cfg.noClosed {
			break
		}
		extra := []attribute.KeyValue{attribute.String(AttrCloseReason, e.Detail)}
		if e.Detail == maint.CloseError && e.Err != nil {
			typ, cat := ErrorAttributes(e.Err)
			extra = append(extra, attribute.String(AttrErrorType, typ), attribute.String(AttrErrorCategory, cat))
		}
		r.closed.Add(ctx, int64(max(e.Count, 1)), r.poolAttrs(at, extra...))
	case maint.EventError:
		typ, cat := ErrorAttributes(e.Err)
		r.recordError(ctx, at, typ, cat, e.Internal, "")
	case maint.EventUnsupported:
		r.refusals.Add(ctx, 1, r.attrsFor(at))
		// The server's refusal of the opt-in, which maint handled: the
		// connection carries on without notifications.
		code := StatusCode(e.Detail)
		r.recordError(ctx, at, code, CategoryServer, true, code)
	case maint.EventSuccessorRefused:
		// The policy refused the successor a MOVING named; maint treats the
		// MOVING as a null endpoint.
		typ, cat := ErrorAttributes(maint.ErrSuccessorRejected)
		r.recordError(ctx, at, typ, cat, true, "")
	case maint.EventHeld:
		o := r.attrsFor(at)
		r.held.Add(ctx, int64(e.Count), o)
		r.heldTime.Record(ctx, e.Duration.Seconds(), o)
	case maint.EventHandoffReport:
		if rep := e.Report; rep != nil {
			if rep.Failed > 0 {
				r.failed.Add(ctx, int64(rep.Failed), r.attrsFor(at))
			}
			how := "named"
			if rep.Successor == "" {
				how = "null"
			}
			o := r.attrsFor(at, attribute.String(AttrEndpoint, how))
			r.handoffTime.Record(ctx, rep.Duration.Seconds(), o)
			if rep.Duration > rep.Window {
				r.overruns.Add(ctx, 1, o)
			}
			r.connections(ctx, at, "left_for_server", rep.LeftForServer)
		}
	}
}

// recordError adds one point to redis.client.errors.
func (r *recorder) recordError(ctx context.Context, at where, typ, cat string, internal bool, status string) {
	extra := []attribute.KeyValue{
		attribute.String(AttrErrorType, typ),
		attribute.String(AttrErrorCategory, cat),
		attribute.Bool(AttrErrorInternal, internal),
		attribute.Int(AttrRetryAttempts, 0),
	}
	if status != "" {
		extra = append(extra, attribute.String(AttrResponseStatus, status))
	}
	r.errs.Add(ctx, 1, r.attrsFor(at, extra...))
}

func (r *recorder) connections(ctx context.Context, at where, what string, n int) {
	if n > 0 {
		r.conns.Add(ctx, int64(n), r.attrsFor(at, attribute.String(AttrEvent, what)))
	}
}

// takeBack takes back the relaxations recorded and not ended.
func (r *recorder) takeBack() {
	r.mu.Lock()
	on := r.relaxOn
	r.relaxOn = make(map[relaxKey]int)
	r.relaxBy = make(map[string]relaxKey)
	r.mu.Unlock()
	for k, n := range on {
		r.relaxed.Add(context.Background(), -int64(n), r.poolAttrs(k.where, attribute.String(AttrNotification, k.name)))
	}
}
