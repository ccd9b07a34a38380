// Package maintotel records what maint sees and does during Redis
// Enterprise maintenance as OpenTelemetry metrics.
//
// It records the three metrics go-redis (extra/redisotel-native), redis-py
// and node-redis share, under the same names, units and attributes, so that
// one dashboard serves every client:
//
//	redis.client.maintenance.notifications  counter       {notification}  maintenance notifications read (one per connection's copy),
//	                                                                      attribute redis.client.connection.notification = the push name
//	redis.client.connection.relaxed_timeout counter (+/-) {relaxation}    nodes whose timeouts are relaxed now: +1 when a node's
//	                                                                      relaxation starts, -1 when it ends (back at 0 after the tail)
//	redis.client.connection.handoff         counter       {handoff}       handoffs started: one per MOVING, not one per connection
//
// and what only maint knows:
//
//	redis.client.maint.handoff.duration        histogram s             MOVING read to the last old connection closed
//	redis.client.maint.handoff.overruns        counter   {handoff}     handoffs that took longer than their MOVING's window
//	redis.client.maint.commands.held           counter   {command}     commands that waited for a replacement
//	redis.client.maint.hold.duration           histogram s             per handoff that held commands: the longest wait
//	redis.client.maint.commands.failed         counter   {command}     commands maint failed (held until their context ended)
//	redis.client.maint.connections             counter   {connection}  old connections retired, closed at the drain cap,
//	                                                                   left open for the server; new ones doomed
//	redis.client.maint.notifications.ignored   counter   {notification} notifications ignored: malformed, or replayed copies
//	redis.client.maint.handshake.refusals      counter   {refusal}     endpoints that refused the opt-in handshake
//
// Every measurement carries db.system.name = "redis", server.address and
// server.port (the node concerned) and redis.client.library; the maint
// metrics add one bounded attribute naming the kind of event
// (redis.client.maint.event, .endpoint or .reason, a handful of values each).
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

// Metric names, shared with the other Redis clients.
const (
	MetricNotifications  = "redis.client.maintenance.notifications"
	MetricRelaxedTimeout = "redis.client.connection.relaxed_timeout"
	MetricHandoff        = "redis.client.connection.handoff"
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

// Attribute keys.
const (
	AttrDBSystem     = "db.system.name"
	AttrServerAddr   = "server.address"
	AttrServerPort   = "server.port"
	AttrLibrary      = "redis.client.library"
	AttrNotification = "redis.client.connection.notification"
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
	mp      metric.MeterProvider
	library string
	attrs   []attribute.KeyValue
}

// WithMeterProvider sets the MeterProvider; the default is the global one
// (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithLibrary sets the redis.client.library attribute; the default is
// "go-redis:<version>+maint".
func WithLibrary(name string) Option { return func(c *config) { c.library = name } }

// WithAttributes adds attributes to every measurement (keep their
// cardinality bounded: a service name, a database name).
func WithAttributes(kv ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, kv...) }
}

// Library is the default value of the redis.client.library attribute.
func Library() string { return "go-redis:" + redis.Version() + "+maint" }

// recorder turns events into measurements.
type recorder struct {
	cfg config

	notifications metric.Int64Counter
	relaxed       metric.Int64UpDownCounter
	handoffs      metric.Int64Counter
	handoffTime   metric.Float64Histogram
	overruns      metric.Int64Counter
	held          metric.Int64Counter
	heldTime      metric.Float64Histogram
	failed        metric.Int64Counter
	conns         metric.Int64Counter
	ignored       metric.Int64Counter
	refusals      metric.Int64Counter

	mu      sync.Mutex
	base    map[string][]attribute.KeyValue // per node: the common attributes
	relaxOn map[string]int                  // per node: +1s recorded and not yet taken back
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
	r := &recorder{cfg: cfg, base: make(map[string][]attribute.KeyValue), relaxOn: make(map[string]int)}
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	r.notifications, err = m.Int64Counter(MetricNotifications,
		metric.WithDescription("Maintenance notifications read from the server, one per connection's copy"),
		metric.WithUnit("{notification}"))
	check(err)
	r.relaxed, err = m.Int64UpDownCounter(MetricRelaxedTimeout,
		metric.WithDescription("Nodes whose connection timeouts are relaxed now: up when relaxation starts, down when it ends"),
		metric.WithUnit("{relaxation}"))
	check(err)
	r.handoffs, err = m.Int64Counter(MetricHandoff,
		metric.WithDescription("Handoffs started: one per MOVING acted on, whatever the number of connections"),
		metric.WithUnit("{handoff}"))
	check(err)
	r.handoffTime, err = m.Float64Histogram(MetricHandoffDuration,
		metric.WithDescription("How long a handoff took: MOVING read to the last old connection closed"),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.1, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300))
	check(err)
	r.overruns, err = m.Int64Counter(MetricHandoffOverruns,
		metric.WithDescription("Handoffs that took longer than their MOVING's window"),
		metric.WithUnit("{handoff}"))
	check(err)
	r.held, err = m.Int64Counter(MetricCommandsHeld,
		metric.WithDescription("Commands that waited for a replacement node"),
		metric.WithUnit("{command}"))
	check(err)
	r.heldTime, err = m.Float64Histogram(MetricHoldDuration,
		metric.WithDescription("Per handoff that held commands: the longest time a command waited for a replacement node"),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	check(err)
	r.failed, err = m.Int64Counter(MetricCommandsFailed,
		metric.WithDescription("Commands maint failed: held until their context ended"),
		metric.WithUnit("{command}"))
	check(err)
	r.conns, err = m.Int64Counter(MetricConnections,
		metric.WithDescription("Connections a handoff retired, closed at the drain cap or left open for the server, and new ones doomed for landing on the retiring node"),
		metric.WithUnit("{connection}"))
	check(err)
	r.ignored, err = m.Int64Counter(MetricNotificationsIgnore,
		metric.WithDescription("Maintenance notifications ignored: malformed or absurd, or replayed copies that changed nothing"),
		metric.WithUnit("{notification}"))
	check(err)
	r.refusals, err = m.Int64Counter(MetricHandshakeRefusals,
		metric.WithDescription("Endpoints that refused the maintenance notifications opt-in handshake"),
		metric.WithUnit("{refusal}"))
	check(err)
	if len(errs) > 0 {
		return nil, fmt.Errorf("maintotel: creating instruments: %w", errs[0])
	}
	return r, nil
}

// attrsFor returns the common attributes of node, plus extra.
func (r *recorder) attrsFor(node string, extra ...attribute.KeyValue) metric.MeasurementOption {
	r.mu.Lock()
	base, ok := r.base[node]
	if !ok {
		base = make([]attribute.KeyValue, 0, 4+len(r.cfg.attrs))
		base = append(base, attribute.String(AttrDBSystem, "redis"), attribute.String(AttrLibrary, r.cfg.library))
		if host, port, err := net.SplitHostPort(node); err == nil {
			base = append(base, attribute.String(AttrServerAddr, host))
			if p, err := strconv.Atoi(port); err == nil {
				base = append(base, attribute.Int(AttrServerPort, p))
			}
		} else if node != "" {
			base = append(base, attribute.String(AttrServerAddr, node))
		}
		base = append(base, r.cfg.attrs...)
		if len(r.base) < maxNodes {
			r.base[node] = base
		}
	}
	r.mu.Unlock()
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
	switch e.Kind {
	case maint.EventNotification:
		r.notifications.Add(ctx, 1, r.attrsFor(e.Node, attribute.String(AttrNotification, e.Name)))
	case maint.EventMalformed:
		r.ignored.Add(ctx, 1, r.attrsFor(e.Node, attribute.String(AttrReason, "malformed")))
	case maint.EventReplayed:
		r.ignored.Add(ctx, 1, r.attrsFor(e.Node, attribute.String(AttrReason, "replayed")))
	case maint.EventHandoff:
		r.handoffs.Add(ctx, 1, r.attrsFor(e.Node))
	case maint.EventRelaxOn:
		r.mu.Lock()
		r.relaxOn[e.Node]++
		r.mu.Unlock()
		r.relaxed.Add(ctx, 1, r.attrsFor(e.Node))
	case maint.EventRelaxOff:
		r.mu.Lock()
		on := r.relaxOn[e.Node] > 0
		if on {
			if r.relaxOn[e.Node]--; r.relaxOn[e.Node] == 0 {
				delete(r.relaxOn, e.Node)
			}
		}
		r.mu.Unlock()
		if on { // an end whose start was recorded: never below 0
			r.relaxed.Add(ctx, -1, r.attrsFor(e.Node))
		}
	case maint.EventRetire:
		r.connections(ctx, e.Node, "retired", e.Count)
	case maint.EventDrainCap:
		r.connections(ctx, e.Node, "closed_at_cap", e.Count)
	case maint.EventDoomed:
		r.connections(ctx, e.Node, "doomed", 1)
	case maint.EventHeld:
		o := r.attrsFor(e.Node)
		r.held.Add(ctx, int64(e.Count), o)
		r.heldTime.Record(ctx, e.Duration.Seconds(), o)
	case maint.EventHandoffReport:
		if rep := e.Report; rep != nil {
			if rep.Failed > 0 {
				r.failed.Add(ctx, int64(rep.Failed), r.attrsFor(e.Node))
			}
			how := "named"
			if rep.Successor == "" {
				how = "null"
			}
			o := r.attrsFor(e.Node, attribute.String(AttrEndpoint, how))
			r.handoffTime.Record(ctx, rep.Duration.Seconds(), o)
			if rep.Duration > rep.Window {
				r.overruns.Add(ctx, 1, o)
			}
			r.connections(ctx, e.Node, "left_for_server", rep.LeftForServer)
		}
	case maint.EventUnsupported:
		r.refusals.Add(ctx, 1, r.attrsFor(e.Node))
	}
}

func (r *recorder) connections(ctx context.Context, node, what string, n int) {
	if n > 0 {
		r.conns.Add(ctx, int64(n), r.attrsFor(node, attribute.String(AttrEvent, what)))
	}
}

// takeBack takes back the relaxations recorded and not ended.
func (r *recorder) takeBack() {
	r.mu.Lock()
	on := r.relaxOn
	r.relaxOn = make(map[string]int)
	r.mu.Unlock()
	for node, n := range on {
		r.relaxed.Add(context.Background(), -int64(n), r.attrsFor(node))
	}
}
