package maint

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Maint handles maintenance notifications for the go-redis clients it is
// installed on: one client, or several (the node clients of a
// ClusterClient, the shards of a Ring, clients of several databases), each
// connection judged by the address it dials and the node it reached. It is
// a redis.Hook: rdb.AddHook(m) is the whole integration for an existing
// client. It is safe for concurrent use by multiple goroutines.
type Maint struct {
	// Each concern keeps its state in a type of its own file, composed
	// below, which only that file's code touches; the Maint's own fields
	// (the settings, the counters, its context and whether it has stepped
	// aside) are read by all.

	s settings
	c counters

	ctx    context.Context // done when Close is called
	cancel context.CancelFunc
	wg     sync.WaitGroup // background goroutines: handoff drivers, probes, drains

	mu     sync.Mutex // guards closed: nothing of the Maint starts after Close (goBackground, checkRelaxOwned)
	closed bool
	// stopped is set by Close: the Maint steps aside, and its connections
	// stop stripping notifications and relaxing deadlines.
	stopped atomic.Bool
	// shut is set when Close has returned: what it emits has been emitted.
	shut atomic.Bool
	// hooked is set once go-redis has taken the process hooks (AddHook):
	// only then can commands be held before they take a connection.
	hooked atomic.Bool

	reg       registry       // targets, nodes and their connections (registry.go)
	ho        handoffs       // MOVINGs: handoffs in progress, holds, MOVINGs seen (moving.go)
	relaxSpan relaxSpan      // the latest end of any relaxation, for poolRetry (relax.go)
	obs       observers      // subscribers to the events (observe.go)
	hs        handshakes     // each endpoint's answer to the opt-in (handshake.go)
	mis       misuseWatch    // misuse detection, options claimed (misuse.go)
	deferred  deferredCloses // failover closes waiting for owed replies (failover_close.go)
	emptied   emptiedNode    // a cluster node client's node left with no slot (cluster.go)
	place     placement      // where the hook was added: a client that dials or not (placement.go)
	rel       releases       // asking go-redis to let a connection go (release.go)
}

var _ redis.Hook = (*Maint)(nil)

// New returns a Maint with the given options applied over the defaults.
// New() with no options is the right choice for most applications. It
// panics, naming the option, on a value maint cannot honour (see Option).
func New(opts ...Option) *Maint {
	cfg := configOf("New", opts)
	m := &Maint{s: cfg.settings()}
	m.hs.init(m.s.handshakeRetry)
	m.ctx, m.cancel = context.WithCancel(context.Background())
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
		if st := m.place.state.Load(); st != placeOK { // one load once the place is known
			m.notePlace(st)
		}
		if cs := m.s.cluster; cs != nil {
			if lc, ok := asLoad(cmd); ok && !isOwnRead(ctx) && fromReload(ctx) {
				// Before any hold: a map served needs no connection.
				return cs.load(ctx, m, lc, func(ctx context.Context, cmd redis.Cmder) error {
					if err := m.waitTurn(ctx); err != nil {
						cmd.SetErr(err)
						return err
					}
					return next(ctx, cmd)
				})
			}
		}
		if m.ho.holding() { // waitTurn, written out: one load per command, inlined
			if err := m.waitHolds(ctx); err != nil {
				cmd.SetErr(err)
				m.noteErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		if err == nil {
			return nil // every command while nothing fails: no more checks
		}
		if errors.Is(err, redis.ErrPoolTimeout) {
			err = m.poolRetry(ctx, func() error { return next(ctx, cmd) }, err)
		}
		if err != nil && m.runsAgain(err, cmd) {
			err = m.rerunNotWritten(ctx, func() error {
				if err := m.waitTurn(ctx); err != nil {
					cmd.SetErr(err)
					return err
				}
				return next(ctx, cmd)
			}, err)
			if e, ok := m.notRun(ctx, err); ok {
				cmd.SetErr(e)
				err = e
			}
		}
		if err != nil {
			if cs := m.s.cluster; cs != nil {
				if s := cs.serve.Load(); s != nil {
					cs.checkMoved(m, s, err)
				}
			}
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
	m.hooked.Store(true)
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if m.ho.holding() { // waitTurn, written out: one load per pipeline, inlined
			if err := m.waitHolds(ctx); err != nil {
				setErrs(cmds, err)
				m.noteErr(err)
				return err
			}
		}
		err := next(ctx, cmds)
		// A cluster node's pipeline is run again by go-redis's ClusterClient
		// itself: inside next, before it returns, it queues the commands of
		// a batch that failed before or while being written for its next
		// attempt (processPipelineNode, processPipelineNodeConn). Running
		// them again here as well ran them twice (final 3 of an INCR
		// acknowledged once, cmd/maintdemo's TestReshardMaint, 3 plays in 6
		// beside a CI run): maint leaves the rerun to go-redis there.
		if err != nil && m.s.cluster == nil && errors.Is(err, redis.ErrPoolTimeout) {
			err = m.poolRetry(ctx, func() error { return next(ctx, cmds) }, err)
		}
		if err != nil && m.s.cluster == nil && m.runsAgain(err, cmds...) {
			err = m.rerunNotWritten(ctx, func() error {
				if err := m.waitTurn(ctx); err != nil {
					setErrs(cmds, err)
					return err
				}
				setErrs(cmds, nil)
				return m.txNotWritten(cmds, next(ctx, cmds))
			}, m.txNotWritten(cmds, err))
			if e, ok := m.notRun(ctx, err); ok {
				setErrs(cmds, e)
				err = e
			}
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

// swapIn replaces the copy-on-write list in p by one without drop and with
// add (each ignored when nil), or by nil when that leaves it empty. Writers
// hold the list's own lock; readers only load the pointer.
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
	needOptions("Configure", opt)
	configure(m, opt)
}

// NewClient is Configure, redis.NewClient and AddHook in one call.
func (m *Maint) NewClient(opt *redis.Options) *redis.Client {
	needOptions("NewClient", opt)
	m.Configure(opt)
	rdb := redis.NewClient(opt)
	rdb.AddHook(m)
	m.rel.register(rdb)
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
	m.ho.releaseAll()
	m.endRelaxReports()
	m.deferred.shutAll()
	m.wg.Wait()
	m.dropSpares()
	m.shut.Store(true)
	return nil
}

// isClosed reports whether a call of Close has returned.
func (m *Maint) isClosed() bool { return m.shut.Load() }

// goBackground runs f on a goroutine owned by m, unless m is closed.
func (m *Maint) goBackground(f func()) bool {
	if !m.enter() {
		return false
	}
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// enter counts work about to run in m's wait group, unless m is closed:
// Close waits for it (the caller calls m.wg.Done when it ends), and nothing
// starts once Close has begun.
func (m *Maint) enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}
