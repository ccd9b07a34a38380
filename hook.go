package maint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Maint handles maintenance notifications for one go-redis client. It is a
// redis.Hook: rdb.AddHook(m) is the whole integration for an existing client.
// It is safe for concurrent use by multiple goroutines.
type Maint struct {
	s settings
	c counters

	ctx    context.Context // done when Close is called
	cancel context.CancelFunc
	wg     sync.WaitGroup // background goroutines: handoff drivers

	mu      sync.Mutex // guards the following
	closed  bool
	targets map[string]*target
	nodes   map[string]*node

	gen atomic.Uint64 // generations of MOVINGs: a later one supersedes
	// stopped is set by Close: the Maint steps aside, and its connections
	// stop stripping notifications and relaxing deadlines.
	stopped atomic.Bool
	// holds is non-nil while commands must wait for a replacement: one hold
	// per node whose window is ending with no replacement to be had. It is
	// replaced, never changed in place (copy on write, under mu). The process
	// hooks load it once per command: the whole cost of the hook when no
	// maintenance is going on.
	holds atomic.Pointer[[]*hold]
	// runs are the handoffs in progress, one per retiring node, copied on
	// write under mu: every new connection is judged against all of them.
	runs atomic.Pointer[[]*run]
	// seen remembers the MOVINGs acted on, by sequence id (ids are per
	// database), so that a copy or a late copy changes nothing. Guarded by
	// mu; bounded (see seen.go).
	seen seenMovings
	// relaxedUntil is the latest end (mono) of any node's relaxation,
	// never lowered early: while it lasts, a command that timed out waiting
	// for a pool connection is given another turn (see poolRetry).
	relaxedUntil atomic.Int64
	// registered counts registrations, to sweep idle nodes now and then.
	registered uint64
	// obs are the observers of the Maint's events (observe.go), copied on
	// write under mu.
	obs atomic.Pointer[[]*observer]
	// pools maps a node's key to its pool's name, for events (outcomes.go).
	pools sync.Map
	// hs is what each endpoint answered to the opt-in (handshake.go).
	// Guarded by mu, bounded.
	hs map[string]*hsState
	// configs are the options Configure claimed (see misuse.go).
	configs []*maintnotifications.Config
	// deferred are the failover connections whose close go-redis asked for
	// and that wait for owed replies (failover_close.go): Close ends the
	// wait. Guarded by mu.
	deferred map[*failoverConn]struct{}

	// Misuse detection (misuse.go).
	sawCheck        atomic.Bool   // a pool health check reached a connection
	uncheckedWrites atomic.Uint64 // writes past the handshake before any health check
	misuseOnce      sync.Once
	// hooked is set once go-redis has taken the process hooks (AddHook):
	// only then can commands be held before they take a connection.
	hooked atomic.Bool

	// Cluster (cluster.go). emptied is when this node, left with no slot,
	// stops retiring its connections (mono; 0: never emptied); draining is
	// set while they are being closed.
	emptied  atomic.Int64
	draining atomic.Bool
}

var _ redis.Hook = (*Maint)(nil)

// New returns a Maint with the given options applied over the defaults.
// New() with no options is the right choice for most applications.
func New(opts ...Option) *Maint {
	var cfg Config
	for _, o := range opts {
		o(&cfg)
	}
	m := &Maint{
		s:       cfg.settings(),
		targets: make(map[string]*target),
		nodes:   make(map[string]*node),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	switch m.s.endpoint {
	case "", "internal-ip", "internal-fqdn", "external-ip", "external-fqdn", "none":
	default:
		m.warn("unknown EndpointType, using auto", "endpoint_type", m.s.endpoint)
		m.s.endpoint = ""
	}
	return m
}

// DialHook wraps every connection the client makes (pool, pub/sub, pipeline
// pool) so that its maintenance notifications are read and acted on, and
// routes new connections to a named successor during a MOVING window.
func (m *Maint) DialHook(next redis.DialHook) redis.DialHook {
	return m.dialVia(next)
}

// ProcessHook makes a command wait, bounded by its context and the hold
// budget, while no connection can serve it; otherwise it costs one atomic
// load.
func (m *Maint) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	m.hooked.Store(true)
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cs := m.s.cluster; cs != nil {
			if sc, ok := cmd.(*redis.ClusterSlotsCmd); ok {
				// Before any hold: a map served needs no connection.
				return cs.clusterSlots(ctx, m, sc, func(ctx context.Context, cmd redis.Cmder) error {
					if m.holds.Load() != nil {
						if err := m.waitHolds(ctx); err != nil {
							cmd.SetErr(err)
							return err
						}
					}
					return next(ctx, cmd)
				})
			}
		}
		if m.holds.Load() != nil {
			if err := m.waitHolds(ctx); err != nil {
				cmd.SetErr(err)
				m.noteErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		if err != nil && errors.Is(err, redis.ErrPoolTimeout) {
			err = m.poolRetry(ctx, func() error { return next(ctx, cmd) }, err)
		}
		if err != nil && m.notWrittenErr(err) {
			err = m.rerunNotWritten(ctx, func() error { return next(ctx, cmd) }, err)
		}
		if err != nil {
			if cs := m.s.cluster; cs != nil {
				if s := cs.serve.Load(); s != nil {
					cs.checkMoved(m, s, err)
				}
			}
		}
		if err != nil {
			m.noteErr(err) // outcomes.go
		}
		return err
	}
}

// poolRetry gives a command that timed out waiting for a pool connection
// more turns while some node is relaxed: relaxation keeps connections busy
// with slow replies for longer than go-redis's PoolTimeout (ReadTimeout +
// 1s by default) expects, and the command was never written, so another
// turn cannot run it twice. Bounded by the command's context and the
// relaxed timeout.
func (m *Maint) poolRetry(ctx context.Context, again func() error, err error) error {
	if m.s.relaxed <= 0 {
		return err
	}
	deadline := time.Now().Add(m.s.relaxed)
	for errors.Is(err, redis.ErrPoolTimeout) && m.anyRelaxed() && ctx.Err() == nil && time.Now().Before(deadline) && !m.stopped.Load() {
		m.c.poolRetries.Add(1)
		err = again()
	}
	return err
}

// ProcessPipelineHook is ProcessHook for pipelines and transactions: the
// whole pipeline waits, so nothing is split across nodes.
func (m *Maint) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if m.holds.Load() != nil {
			if err := m.waitHolds(ctx); err != nil {
				for _, cmd := range cmds {
					cmd.SetErr(err)
				}
				m.noteErr(err)
				return err
			}
		}
		err := next(ctx, cmds)
		if err != nil && errors.Is(err, redis.ErrPoolTimeout) {
			err = m.poolRetry(ctx, func() error { return next(ctx, cmds) }, err)
		}
		if err != nil && m.notWrittenErr(err) {
			err = m.rerunNotWritten(ctx, func() error {
				clearErrs(cmds)
				return m.txNotWritten(cmds, next(ctx, cmds))
			}, m.txNotWritten(cmds, err))
		}
		if err != nil {
			m.noteErr(err)
		}
		if cs := m.s.cluster; cs != nil && cs.serve.Load() != nil {
			cs.checkMovedCmds(m, cmds)
		}
		return err
	}
}

// hold is one node's period during which commands wait.
type hold struct {
	node     string
	released chan struct{}
	once     sync.Once
	until    time.Time // the hold budget's end, a bound for waiters
	tally    holdTally // the commands that waited on it (report.go)
}

func (h *hold) release() { h.once.Do(func() { close(h.released) }) }

// addHold puts h in force.
func (m *Maint) addHold(h *hold) {
	m.mu.Lock()
	defer m.mu.Unlock()
	swapIn(&m.holds, nil, h)
}

// releaseHold ends h, and h only: another node's hold stays in force.
func (m *Maint) releaseHold(h *hold) {
	m.mu.Lock()
	swapIn(&m.holds, h, nil)
	m.mu.Unlock()
	h.release()
}

// swapIn replaces the copy-on-write list in p by one without drop and with
// add (each ignored when nil), or by nil when that leaves it empty. Writers
// hold Maint.mu; readers only load the pointer.
func swapIn[T comparable](p *atomic.Pointer[[]T], drop, add T) {
	var none T
	var out []T
	if cur := p.Load(); cur != nil {
		for _, x := range *cur {
			if x != drop {
				out = append(out, x)
			}
		}
	}
	if add != none {
		out = append(out, add)
	}
	if len(out) == 0 {
		p.Store(nil)
	} else {
		p.Store(&out)
	}
}

// waitHolds makes a command wait until no hold is in force, each hold
// bounded by its own budget, all by ctx.
func (m *Maint) waitHolds(ctx context.Context) error {
	counted := false
	for {
		hs := m.holds.Load()
		if hs == nil {
			return nil
		}
		var h *hold
		now := time.Now()
		for _, x := range *hs {
			select {
			case <-x.released:
				continue
			default:
			}
			if now.Before(x.until) {
				h = x
				break
			}
		}
		if h == nil {
			return nil // every hold's budget is spent: let the command try
		}
		if !counted {
			counted = true
			m.c.held.Add(1)
		}
		if err := m.waitHold(ctx, h); err != nil {
			return err
		}
		if m.ctx.Err() != nil {
			return nil
		}
	}
}

// waitHold waits for one hold, bounded by its budget and ctx.
func (m *Maint) waitHold(ctx context.Context, h *hold) error {
	d := time.Until(h.until)
	if d <= 0 {
		return nil
	}
	start := time.Now()
	h.tally.start()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.released:
		m.heldDone(h, start, "released")
		return nil
	case <-t.C:
		m.heldDone(h, start, "budget")
		return nil // the budget is spent: let the command try
	case <-m.ctx.Done():
		m.heldDone(h, start, "closed")
		return nil // closed: step aside
	case <-ctx.Done():
		m.c.heldTimeouts.Add(1)
		m.heldDone(h, start, "timeout")
		return fmt.Errorf("%w on %s: %w", ErrHeld, h.node, ctx.Err())
	}
}

// heldDone counts a command that stopped waiting on h, for the handoff's
// report: atomics only, nothing per command beyond.
func (m *Maint) heldDone(h *hold, start time.Time, why string) {
	h.tally.note(time.Since(start), why == "timeout")
}

// Configure prepares options for a new client: it turns go-redis's built-in
// maintnotifications handler off, routes dials through the Maint (so the
// Maint sees every connection even before AddHook), and opts each
// connection in with the handshake written behind go-redis's HELLO, in the
// same flight (HandshakeRequired also checks the answer in an OnConnect
// chained after any the options had). An endpoint that refuses the
// handshake for lack of support is remembered for HandshakeRetry: the next
// connections skip it, at the cost of one handshake and one log line.
//
// Add the Maint as a hook as well (rdb.AddHook(m), or use NewClient) so that
// commands can wait for a replacement without taking a pool turn.
func (m *Maint) Configure(opt *redis.Options) {
	configure(m, opt)
}

// NewClient is Configure, redis.NewClient and AddHook in one call.
func (m *Maint) NewClient(opt *redis.Options) *redis.Client {
	m.Configure(opt)
	rdb := redis.NewClient(opt)
	rdb.AddHook(m)
	return rdb
}

// Stats returns the Maint's counters.
func (m *Maint) Stats() Stats { return m.c.snapshot() }

// Close stops every goroutine of the Maint and releases held commands. The
// client's connections are left to the client; after Close the Maint steps
// aside, and connections keep working as plain connections. Close is
// idempotent and returns promptly.
func (m *Maint) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.stopped.Store(true)
	m.cancel()
	m.unclaim()
	if cs := m.s.cluster; cs != nil {
		cs.leave(m)
	}
	if hs := m.holds.Swap(nil); hs != nil {
		for _, h := range *hs {
			h.release()
		}
	}
	m.endRelaxReports()
	m.mu.Lock()
	deferred := m.deferred
	m.deferred = nil
	m.mu.Unlock()
	for f := range deferred {
		f.shut()
	}
	m.wg.Wait()
	m.dropSpares()
	return nil
}

// goBackground runs f on a goroutine owned by m, unless m is closed.
func (m *Maint) goBackground(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// emit logs e, and hands it to Config.OnEvent and to every observer.
func (m *Maint) emit(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if e.Pool == "" && e.Node != "" {
		e.Pool = m.poolOf(e.Node)
	}
	m.logEvent(e)
	if f := m.s.onEvent; f != nil {
		f(e)
	}
	if os := m.obs.Load(); os != nil {
		for _, o := range *os {
			o.f(e)
		}
	}
}

// remoteString is the connection's remote address, or "" when unreadable.
func remoteString(c net.Conn) (s string) {
	defer func() {
		if recover() != nil {
			s = ""
		}
	}()
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}
