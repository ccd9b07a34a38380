package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// traffic is a load: workers running an operation in a loop until stopped.
type traffic struct {
	ops    atomic.Int64
	errs   errorsOf
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startTraffic(ctx context.Context, workers int, pace time.Duration, op func(ctx context.Context, worker, i int) error) *traffic {
	ctx, cancel := context.WithCancel(ctx)
	tr := &traffic{cancel: cancel}
	for w := 0; w < workers; w++ {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				err := op(ctx, w, i)
				if ctx.Err() != nil {
					return
				}
				tr.ops.Add(1)
				if err != nil && !errors.Is(err, redis.Nil) {
					tr.errs.add(err)
				}
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		}()
	}
	return tr
}

func (tr *traffic) stop(what string) error {
	tr.cancel()
	tr.wg.Wait()
	return tr.errs.err(what, tr.ops.Load())
}

// redisPyWorker is redis-py's execute_commands: SET key value, GET key.
func redisPyWorker(rdb *redis.Client) func(ctx context.Context, _, _ int) error {
	return func(ctx context.Context, _, _ int) error {
		if err := rdb.Set(ctx, "key", "value", 0).Err(); err != nil {
			return err
		}
		return rdb.Get(ctx, "key").Err()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// async runs the fault injector's action on a goroutine; the returned
// function waits for it.
func async(fn func() error) func() error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return func() error { return <-ch }
}

// windowOf is the window of a MOVING: the emulated one exactly, a real
// one as announced.
func (w *world) windowOf(p push) time.Duration {
	if w.emu != nil {
		return w.ph.movingTTL
	}
	return p.window()
}

// standaloneEffects are redis-py's TopologyChangeStandaloneEffects.
var standaloneEffects = []string{"data_movement_no_conn_drop", "data_movement_conn_drop", "conn_drop", "dns_resolution_change"}

// TestRedisPyStandaloneCommandExecutionDuringMaintenance ports redis-py's
// test_command_execution_during_maintenance: 10 threads of SET key value +
// GET key, 1 s socket timeout, retries disabled, relaxed timeout 30 s; the
// effect is triggered 3 s in and the threads run 60 s; every effect for
// every endpoint type (external-fqdn, external-ip, none). Pass: 0 errors.
// Short mode runs every effect, each with one of the endpoint types (all
// three covered), for 3 s.
func TestRedisPyStandaloneCommandExecutionDuringMaintenance(t *testing.T) {
	parallelTop(t)
	var cases []tcase
	types := []string{"external-fqdn", "external-ip", "none"}
	for i, effect := range standaloneEffects {
		for j, typ := range types {
			if !full() && j != i%len(types) {
				continue
			}
			name := effect + "/" + typ
			cases = append(cases, tcase{name, func(t *testing.T) {
				scenario{
					name:      "TestRedisPyStandaloneCommandExecutionDuringMaintenance/" + name,
					criterion: "10 threads SET+GET, 1 s timeout, no retries, through the effect: 0 errors",
					check: func(ctx context.Context, t *testing.T, w *world, col column) error {
						s := w.client(t, col, params{timeout: time.Second, relaxed: 30 * time.Second, endpointType: typ, pool: 10})
						start := time.Now()
						tr := startTraffic(ctx, 10, w.ph.pace, redisPyWorker(s.rdb))
						sleepCtx(ctx, w.ph.warmup)
						fiErr := w.effect(ctx, effect)
						sleepCtx(ctx, max(w.ph.run-time.Since(start), time.Second))
						err := tr.stop("commands")
						if fiErr != nil {
							return fiErr
						}
						return err
					},
				}.run(t)
			}})
		}
	}
	runCases(t, cases)
}

// TestRedisPyStandaloneOldConnectionShutdownDuringMoving ports redis-py's
// test_old_connection_shutdown_during_moving (data_movement_conn_drop,
// external-ip, 10 threads of SET+GET until the MOVING): redis-py asserts
// that right after the MOVING every pooled connection is either
// disconnected or connected to the new address, and no thread failed.
// maint drains the commands in flight on a connection before retiring it,
// so it is held to the same end a little later: 0 errors, and 90% into the
// window no connection of the client is open to the old node any more (the
// server has closed nothing yet).
func TestRedisPyStandaloneOldConnectionShutdownDuringMoving(t *testing.T) {
	parallelTop(t)
	scenario{
		name:      "TestRedisPyStandaloneOldConnectionShutdownDuringMoving",
		criterion: "0 errors; at 90% of the MOVING window no connection open to the old node",
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			s := w.client(t, col, params{timeout: time.Second, relaxed: 30 * time.Second, endpointType: "external-ip", pool: 10})
			o := w.observe(t)
			if err := s.rdb.Ping(ctx).Err(); err != nil {
				return err
			}
			old := s.dials.Conns()[0].Remote
			tr := startTraffic(ctx, 10, w.ph.pace, redisPyWorker(s.rdb))
			since := time.Now()
			wait := async(func() error { return w.effect(ctx, "data_movement_conn_drop") })
			mv, err := o.wait(ctx, "MOVING", since)
			if err != nil {
				_ = tr.stop("commands")
				return errors.Join(err, wait())
			}
			window := w.windowOf(mv)
			sleepCtx(ctx, time.Until(mv.at.Add(window*9/10)))
			open := 0
			for _, c := range s.dials.Conns() {
				if c.Remote == old && !c.IsClosed() {
					open++
				}
			}
			err = tr.stop("commands")
			if fiErr := wait(); fiErr != nil {
				return fiErr
			}
			if open > 0 {
				return errors.Join(fmt.Errorf("%d connections still open to the old node %s at 90%% of the window", open, old), err)
			}
			return err
		},
	}.run(t)
}

// TestRedisPyStandaloneNewConnectionsReceiveNotifications ports redis-py's
// test_new_connections_receive_notifications_no_conn_drop: a connection
// opened while a MIGRATING is open receives it (the service replays it) and
// is in maintenance from its first command: redis-py checks its socket
// timeout is the relaxed one. Here the whole client is created during the
// MIGRATING and a command whose reply never comes must time out at the
// relaxed timeout (±20%): 30 s, 3 s in short mode; socket timeout 1 s.
func TestRedisPyStandaloneNewConnectionsReceiveNotifications(t *testing.T) {
	parallelTop(t)
	newConnectionsScenario(0).run(t)
}

// TestRedisPyStandaloneNewConnectionsReceiveNotificationsOpenedLate is the
// same scenario with the client created 400 ms after the MIGRATING is
// seen, as on a machine so loaded that the test's goroutines wait that long
// for a CPU: still well inside the MIGRATING, so the criterion is the same.
// Emulated short mode only: that timeline is the one such a delay reaches
// into.
func TestRedisPyStandaloneNewConnectionsReceiveNotificationsOpenedLate(t *testing.T) {
	if real || full() {
		t.Skip("the emulated short timeline only")
	}
	parallelTop(t)
	newConnectionsScenario(400 * time.Millisecond).run(t)
}

// newConnectionsScenario is the scenario above, its client created late
// after the MIGRATING is seen.
func newConnectionsScenario(late time.Duration) scenario {
	relaxed := 30 * time.Second
	if !full() {
		relaxed = 3 * time.Second
	}
	name := "TestRedisPyStandaloneNewConnectionsReceiveNotifications"
	if late > 0 {
		name += fmt.Sprintf("/opened_%v_late", late)
	}
	return scenario{
		name:      name,
		criterion: fmt.Sprintf("client opened during MIGRATING: a stalled command times out at the relaxed %v ±20%%", relaxed),
		// Nothing can relax the new client's handshake: it has not opted in
		// yet, and its Maint knows of no maintenance. The emulated node's
		// slowdown while it migrates (1.5 s against the 1 s socket timeout,
		// from the lead time on: 300 ms after the MIGRATING in short mode)
		// would time out the HELLO of a client a busy machine creates that
		// late, before it opts in. The stall is the tap's, not the node's,
		// so this world has no slowdown.
		world: func(t *testing.T) *world {
			return newWorld(t, false, func(p *phases) { p.latency = 0 })
		},
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			o := w.observe(t)
			since := time.Now()
			wait := async(func() error { return w.effect(ctx, "data_movement_no_conn_drop") })
			if _, err := o.wait(ctx, "MIGRATING", since); err != nil {
				return errors.Join(err, wait())
			}
			sleepCtx(ctx, late)
			s := w.client(t, col, params{timeout: time.Second, relaxed: relaxed, pool: 10})
			d, err := s.stall(ctx)
			fiErr := wait()
			if fiErr != nil {
				return fiErr
			}
			if err := within(d, err, relaxed, "relaxed"); err != nil {
				return err
			}
			// d includes the handshake: a plain timeout after a slow one
			// is no relaxed timeout.
			if col.maint() && !isMaintTimeout(err) {
				return fmt.Errorf("after %v, not a maintenance timeout: %v", d.Round(time.Millisecond), err)
			}
			return nil
		},
	}
}

// within checks a stalled command's outcome: a timeout after d within ±20%
// of want.
func within(d time.Duration, err error, want time.Duration, what string) error {
	if err == nil || !isTimeout(err) {
		return fmt.Errorf("stalled command: want a timeout, got %v after %v", err, d.Round(time.Millisecond))
	}
	lo, hi := want*8/10, want*12/10
	if d < lo || d >= hi {
		return fmt.Errorf("timed out after %v, want the %s %v ±20%% [%v, %v)", d.Round(time.Millisecond), what, want, lo, hi)
	}
	return nil
}

// normalTimeout runs three stalled commands and checks the quickest, the
// one least delayed by a busy machine, against node-redis's bound for the
// normal timeout, ±20% (at most 1.2 x timeout), with an error that does
// not claim maintenance. Short mode, meant for shared CI machines where a
// 50 ms timer can fire 20 ms late, takes 4 x timeout as the upper bound:
// still far from the relaxed 2 s the criterion tells it apart from.
func normalTimeout(ctx context.Context, s *subject) error {
	best := time.Duration(1<<63 - 1)
	for range 3 {
		d, err := s.stall(ctx)
		if err == nil || !isTimeout(err) {
			return fmt.Errorf("stalled command: want a timeout, got %v", err)
		}
		if isMaintTimeout(err) {
			return fmt.Errorf("a timeout outside maintenance names maintenance (after %v): %v", d.Round(time.Millisecond), err)
		}
		best = min(best, d)
	}
	lo, hi := s.p.timeout*8/10, s.p.timeout*12/10
	if !full() {
		hi = 4 * s.p.timeout
	}
	if best < lo || best >= hi {
		return fmt.Errorf("quickest of 3 timed out after %v, want the normal %v within [%v, %v)", best.Round(time.Millisecond), s.p.timeout, lo, hi)
	}
	return nil
}

// node-redis's timeout parameters.
const (
	nodeRedisNormal  = 50 * time.Millisecond
	nodeRedisRelaxed = 2 * time.Second
)

// TestNodeRedisTimeoutsRelaxedDuringMigratingAndMoving ports node-redis's
// "should relax command timeout on MOVING, MIGRATING": command timeout
// 50 ms, relaxed 2000 ms. A command whose reply never comes times out in
// [50, 60) ms before maintenance with a plain timeout error; one sent as
// MIGRATING arrives, and one sent as MOVING arrives (during node-redis's
// migrateAndBindAction), time out within ±20% of 2000 ms, with the error
// of a timeout during maintenance (maint: *maint.TimeoutError; go-redis
// has no such error, its column is held to the duration). Before
// maintenance the quickest of three stalls is measured.
func TestNodeRedisTimeoutsRelaxedDuringMigratingAndMoving(t *testing.T) {
	parallelTop(t)
	nodeRedisRelaxedAt("TestNodeRedisTimeoutsRelaxedDuringMigratingAndMoving",
		(*world).migrateAndBind, "MIGRATING", "MOVING").run(t)
}

// nodeRedisRelaxedAt is node-redis's relaxed-timeout scenario through an
// action: command timeout 50 ms, relaxed 2000 ms; before the action the
// normal timeout (the quickest of three stalls, a plain error); then, for
// each of kinds at once, a command sent once the client's handler has
// handled that notification (awaitHandled: node-redis sends it from its
// handler), whose reply never comes, times out within ±20% of 2000 ms, on
// maint's columns with a *maint.TimeoutError.
func nodeRedisRelaxedAt(name string, action func(*world, context.Context) error, kinds ...string) scenario {
	return scenario{
		name:      name,
		criterion: "50 ms timeout: 50 ms +20% before (short: 4x); at " + strings.Join(kinds, " and at ") + " 2 s ±20%, a maintenance error",
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			s := w.client(t, col, params{timeout: nodeRedisNormal, relaxed: nodeRedisRelaxed, pool: 10, pushes: true})
			if err := connectShortTimeouts(ctx, s); err != nil {
				return err
			}
			if err := normalTimeout(ctx, s); err != nil {
				return fmt.Errorf("before maintenance: %w", err)
			}
			o := w.observe(t)
			since := time.Now()
			wait := async(func() error { return action(w, ctx) })
			errs := make([]error, len(kinds))
			var wg sync.WaitGroup
			for i, kind := range kinds {
				wg.Go(func() {
					err := func() error {
						if _, err := o.wait(ctx, kind, since); err != nil {
							return err
						}
						s.awaitHandled(ctx, kind, since)
						d, serr := s.stall(ctx)
						if err := within(d, serr, nodeRedisRelaxed, "relaxed"); err != nil {
							return err
						}
						if col.maint() && !isMaintTimeout(serr) {
							return fmt.Errorf("not a maintenance timeout: %v", serr)
						}
						return nil
					}()
					if err != nil {
						errs[i] = fmt.Errorf("at %s: %w", kind, err)
					}
				})
			}
			wg.Wait()
			return errors.Join(append(errs, wait())...)
		},
	}
}

// TestNodeRedisTimeoutsUnrelaxedAfterMigratedAndMoving ports node-redis's
// "should unrelax command timeout after MIGRATED and MOVING": after the
// migrate action, and after the bind action, a stalled command times out
// within ±20% of the normal 50 ms with a plain timeout error. node-redis
// ends relaxation at MIGRATED; maint keeps it after a completion for up to
// RelaxedTail (twice the relaxed timeout, SE.Redis's default; no longer
// than the operation was seen open) and after a MOVING until its handoff
// ends, so every column is measured twice the relaxed timeout after each
// action. The client PINGs every 100 ms until then, so that it reads each
// notification as it arrives, as node-redis does.
func TestNodeRedisTimeoutsUnrelaxedAfterMigratedAndMoving(t *testing.T) {
	parallelTop(t)
	scenario{
		name:            "TestNodeRedisTimeoutsUnrelaxedAfterMigratedAndMoving",
		criterion:       "2x relaxed after migrate, and after bind: 50 ms ±20% (short: 4x), a plain timeout error",
		controlsMayPass: "no handler never relaxes; the relaxing half is TestNodeRedisTimeoutsRelaxedDuringMigratingAndMoving",
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			s := w.client(t, col, params{timeout: nodeRedisNormal, relaxed: nodeRedisRelaxed, pool: 10})
			if err := s.rdb.Ping(ctx).Err(); err != nil {
				return err
			}
			for _, typ := range []string{"migrate", "bind"} {
				// node-redis reads a push as it arrives; a pooled go-redis
				// client reads it when it uses the connection, so the
				// client PINGs every 100 ms until the measurement (as in
				// the handoff scenario): an idle client would read the
				// completion only with the measured command, and its tail
				// would start there.
				// Once relaxation is over (a completion's tail lasts no
				// longer than the operation was seen open, a MOVING's ends
				// with its handoff) the PINGs run with the 50 ms timeout,
				// which a busy machine misses now and then: such a plain
				// timeout is not what this scenario measures (the stalled
				// commands are); an error that names maintenance, or any
				// other error, still fails it.
				tr := startTraffic(ctx, 1, 100*time.Millisecond, func(ctx context.Context, _, _ int) error {
					if err := s.rdb.Ping(ctx).Err(); err != nil && (!isTimeout(err) || isMaintTimeout(err)) {
						return err
					}
					return nil
				})
				if err := w.action(ctx, typ, nil); err != nil {
					return errors.Join(err, tr.stop("pings"))
				}
				sleepCtx(ctx, 2*nodeRedisRelaxed)
				if err := tr.stop("pings"); err != nil {
					return fmt.Errorf("during %s: %w", typ, err)
				}
				if err := normalTimeout(ctx, s); err != nil {
					return fmt.Errorf("after %s: %w", typ, err)
				}
			}
			return nil
		},
	}.run(t)
}

// maxNullProbes is what maint is held to for a null endpoint beyond
// node-redis's one new connection: it learns the move only by dialling the
// configured address (a custom Dialer resolves it), so up to four probes
// before the last call land on the retiring node (guarantee P2) and write
// nothing; the probe that finds the new node is the one new connection
// (P3).
const maxNullProbes = 4

// TestNodeRedisConnectionHandoffOneNewConnection ports node-redis's
// "should establish new connection and resume traffic afterwards" and
// "should shut down old connection" (migrateAndBindAction, one connection
// in use): exactly one new connection per handoff, the old one closed by
// the client, and SET/GET with the value read back afterwards, for each
// endpoint type (default, external-ip, external-fqdn, auto, none; short
// mode: external-ip, external-fqdn, none). A node-redis client reads a
// push as it arrives; a pooled go-redis client reads it when it uses the
// connection, so the connection carries a PING every 100 ms. The new
// connection must be dialled, and the old one closed, before the window's
// end (when the server would close it); dials are counted from the MOVING
// to 3 s after the window. For a null endpoint maint is held to exactly one
// new connection to the new node, plus at most maxNullProbes probes of the
// retiring node that write nothing.
func TestNodeRedisConnectionHandoffOneNewConnection(t *testing.T) {
	parallelTop(t)
	var cases []tcase
	types := []string{"", "external-ip", "external-fqdn", "auto", "none"}
	if !full() {
		types = []string{"external-ip", "external-fqdn", "none"}
	}
	for _, typ := range types {
		name := typ
		if name == "" {
			name = "default"
		}
		cases = append(cases, tcase{name, func(t *testing.T) {
			scenario{
				name:      "TestNodeRedisConnectionHandoffOneNewConnection/" + name,
				criterion: "1 connection in use: exactly 1 new connection, dialled and the old one closed before the window's end; SET/GET after",
				check: func(ctx context.Context, t *testing.T, w *world, col column) error {
					ept := typ
					if ept == "auto" {
						ept = ""
					}
					s := w.client(t, col, params{timeout: 5 * time.Second, relaxed: 10 * time.Second, endpointType: ept, pool: 1})
					if err := s.rdb.Ping(ctx).Err(); err != nil {
						return err
					}
					before := len(s.dials.Conns())
					first := s.dials.Conns()[0]
					o := w.observe(t)
					tr := startTraffic(ctx, 1, 100*time.Millisecond, func(ctx context.Context, _, _ int) error { return s.rdb.Ping(ctx).Err() })
					since := time.Now()
					fiErr := w.migrateAndBind(ctx)
					mv, err := o.wait(ctx, "MOVING", since)
					if fiErr != nil || err != nil {
						_ = tr.stop("pings")
						return errors.Join(fiErr, err)
					}
					end := mv.at.Add(w.windowOf(mv))
					sleepCtx(ctx, time.Until(end.Add(3*time.Second)))
					trErr := tr.stop("pings")
					var errs []error
					var landed []time.Time
					probes, probesBad := 0, false // a null endpoint's DNS probes of the retiring node
					for _, c := range s.dials.Conns()[before:] {
						if c.Dialed.Before(mv.at.Add(-100 * time.Millisecond)) {
							continue
						}
						if typ == "none" && col.maint() && c.Remote == first.Remote {
							probes++
							probesBad = probesBad || c.Written() != 0
							continue
						}
						landed = append(landed, c.Dialed)
					}
					what := func() string {
						var what []string
						for _, c := range s.dials.Conns()[before:] {
							what = append(what, fmt.Sprintf("%s at %+v wrote %d", c.Remote, c.Dialed.Sub(mv.at).Round(time.Millisecond), c.Written()))
						}
						return strings.Join(what, ", ")
					}
					switch {
					case probes > maxNullProbes || probesBad:
						errs = append(errs, fmt.Errorf("%d connections to the retiring node after a null MOVING, want at most %d probes that write nothing (%s)", probes, maxNullProbes, what()))
					case len(landed) != 1:
						errs = append(errs, fmt.Errorf("%d new connections after the MOVING, want exactly 1 (%s)", len(landed), what()))
					case !landed[0].Before(end):
						errs = append(errs, fmt.Errorf("the new connection was dialled %v after the window's end", landed[0].Sub(end).Round(time.Millisecond)))
					}
					if !first.IsClosed() || !first.Closed().Before(end) {
						errs = append(errs, errors.New("the old connection was not closed by the client before the window's end"))
					}
					v := strconv.FormatInt(time.Now().UnixNano(), 10)
					if err := s.rdb.Set(ctx, "key", v, 0).Err(); err != nil {
						errs = append(errs, fmt.Errorf("SET after: %w", err))
					} else if got, err := s.rdb.Get(ctx, "key").Result(); err != nil || got != v {
						errs = append(errs, fmt.Errorf("GET after: %q, %v", got, err))
					}
					return errors.Join(append(errs, trErr)...)
				},
			}.run(t)
		}})
	}
	runCases(t, cases)
}

// TestLettuceTrafficResumesAfterRebind ports Lettuce's
// trafficResumesAfterMovingTest: asynchronous GET/SET 50:50 over 100 keys at
// about 1000 per second; more than 1000 successful operations before the
// rebind, more than 1000 more after it (migrate, then bind), more than 1000
// more after the reconnection; the failure rate must be exactly 0.
// Lettuce's default command timeout (60 s) and relaxed timeout (10 s).
func TestLettuceTrafficResumesAfterRebind(t *testing.T) {
	parallelTop(t)
	scenario{
		name:      "TestLettuceTrafficResumesAfterRebind",
		criterion: "3 phases of >1000 async GET/SET around a rebind: failure rate exactly 0",
		// Lettuce's 60 s timeout hides the slow phase from every client: the
		// controls fail only when the bind's close meets a command in flight,
		// by chance (5 of 16 680 in one full-length run, 0 in the next).
		controlsMayPass: "not doing worse than go-redis alone: with a 60 s timeout only a close under a command in flight fails one, by chance",
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			s := w.client(t, col, params{timeout: 60 * time.Second, relaxed: 10 * time.Second, endpointType: "external-ip", pool: 10})
			var ok, failed atomic.Int64
			var errs errorsOf
			gctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			sem := make(chan struct{}, 64) // async commands in flight at most
			wg.Add(1)
			go func() { // the generator: ten commands every 10 ms, none awaited
				defer wg.Done()
				for n := 1; gctx.Err() == nil; n++ {
					select {
					case sem <- struct{}{}:
					case <-gctx.Done():
						return
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() { <-sem }()
						key := "traffic-key-" + strconv.Itoa(n%100)
						var err error
						if n%2 == 0 {
							err = s.rdb.Set(ctx, key, "value-"+strconv.Itoa(n), 0).Err()
						} else {
							err = s.rdb.Get(ctx, key).Err()
						}
						if err != nil && !errors.Is(err, redis.Nil) {
							failed.Add(1)
							errs.add(err)
							return
						}
						ok.Add(1)
					}()
					if n%10 == 0 {
						time.Sleep(10 * time.Millisecond)
					}
				}
			}()
			until := func(n int64) error {
				for ok.Load() <= n {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					time.Sleep(10 * time.Millisecond)
				}
				return nil
			}
			phaseErr := until(1000)
			fiErr := w.migrateAndBind(ctx)
			if phaseErr == nil {
				phaseErr = until(ok.Load() + 1000)
			}
			if phaseErr == nil {
				phaseErr = until(ok.Load() + 1000)
			}
			stop()
			wg.Wait()
			if err := errors.Join(phaseErr, fiErr); err != nil {
				return err
			}
			return errs.err("operations", ok.Load()+failed.Load())
		},
	}.run(t)
}

// lettuceBlpop is Lettuce's "Combined BLPOP timeout unblock during MOVING":
// at MIGRATED a BLPOP with a 60 s timeout starts; pushDelay after the MOVING
// a second connection LPUSHes the value; the BLPOP must return it.
func lettuceBlpop(pushDelay func(window time.Duration) time.Duration) func(ctx context.Context, t *testing.T, w *world, col column) error {
	return func(ctx context.Context, t *testing.T, w *world, col column) error {
		const key = "blpop-unblock-test-queue"
		s := w.client(t, col, params{timeout: time.Second, relaxed: 10 * time.Second, endpointType: "external-ip", pool: 10})
		second := w.plain(t)
		if err := second.Del(ctx, key).Err(); err != nil {
			return err
		}
		o := w.observe(t)
		since := time.Now()
		wait := async(func() error { return w.migrateAndBind(ctx) })
		if _, err := o.wait(ctx, "MIGRATED", since); err != nil {
			return errors.Join(err, wait())
		}
		type popped struct {
			v   []string
			err error
		}
		res := make(chan popped, 1)
		go func() {
			v, err := s.rdb.BLPop(ctx, 60*time.Second, key).Result()
			res <- popped{v, err}
		}()
		mv, err := o.wait(ctx, "MOVING", since)
		if err != nil {
			return errors.Join(err, wait())
		}
		sleepCtx(ctx, time.Until(mv.at.Add(pushDelay(w.windowOf(mv)))))
		pushErr := second.LPush(ctx, key, "unblock-value").Err()
		var r popped
		select {
		case r = <-res:
		case <-time.After(2 * time.Minute):
			r.err = errors.New("BLPOP never returned")
		}
		fiErr := wait()
		switch {
		case pushErr != nil || fiErr != nil:
			return errors.Join(pushErr, fiErr)
		case r.err != nil:
			return fmt.Errorf("BLPOP: %w", r.err)
		case len(r.v) != 2 || r.v[1] != "unblock-value":
			return fmt.Errorf("BLPOP returned %q", r.v)
		}
		return nil
	}
}

// TestLettuceBlpopUnblockedDuringMoving ports the Lettuce scenario as it
// is: the push is sent as the MOVING arrives.
func TestLettuceBlpopUnblockedDuringMoving(t *testing.T) {
	parallelTop(t)
	scenario{
		name:            "TestLettuceBlpopUnblockedDuringMoving",
		criterion:       "BLPOP started at MIGRATED, LPUSH from a second connection at MOVING: BLPOP returns the value",
		controlsMayPass: "not doing worse than go-redis alone: the push lands before anything closes",
		check:           lettuceBlpop(func(time.Duration) time.Duration { return 0 }),
	}.run(t)
}

// TestLettuceBlpopDuringRebindPushedLate is the same BLPOP with the push
// sent 6 s into the MOVING window (an 8 s window on the emulator; half of a
// real one, at least 6 s): the server keeps the old connection until the
// window's end, so the push still unblocks the BLPOP there, as it does for
// go-redis alone; a client cutting blocked commands earlier fails.
func TestLettuceBlpopDuringRebindPushedLate(t *testing.T) {
	parallelTop(t)
	scenario{
		name:            "TestLettuceBlpopDuringRebindPushedLate",
		criterion:       "as above, LPUSH 6 s into the window: BLPOP returns the value",
		controlsMayPass: "not doing worse than go-redis alone: the server keeps the blocked connection until the window's end",
		world: func(t *testing.T) *world {
			return newWorld(t, false, func(p *phases) { p.movingTTL = 8 * time.Second })
		},
		check: lettuceBlpop(func(window time.Duration) time.Duration {
			return min(max(window/2, 6*time.Second), window-time.Second)
		}),
	}.run(t)
}

// goRedisRunner is go-redis's e2e CommandRunner: every 100 ms a burst of
// 40 concurrent SETs (twice its floor of 20 connections) of fresh keys
// with a minute's TTL, the next burst after the last returned.
func goRedisRunner(ctx context.Context, rdb *redis.Client) *traffic {
	var counter atomic.Int64
	return startTraffic(ctx, 1, 100*time.Millisecond, func(ctx context.Context, _, _ int) error {
		c := counter.Add(1)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := fmt.Sprintf("timeout-test-key-%d-%d", c, i)
				if err := rdb.Set(ctx, k, "timeout-test-value", time.Minute).Err(); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return first
	})
}

// handoffBeforeClose waits for a MOVING and checks that 90% into its
// window the client has no connection open to the node it started on: go-
// redis's e2e "every handoff succeeded", seen from the client's sockets.
func handoffBeforeClose(ctx context.Context, w *world, s *subject, o *observer, since time.Time, old string) error {
	mv, err := o.wait(ctx, "MOVING", since)
	if err != nil {
		return err
	}
	sleepCtx(ctx, time.Until(mv.at.Add(w.windowOf(mv)*9/10)))
	for _, c := range s.dials.Conns() {
		if c.Remote == old && !c.IsClosed() {
			return fmt.Errorf("a connection to the old node %s still open at 90%% of the window: no handoff", old)
		}
	}
	return nil
}

// goRedisSequence runs go-redis's push-notification scenario's actions in
// its order (failover, migrate, bind) under its command runner, and checks
// 0 errors and a handoff before the close.
func goRedisSequence(ctx context.Context, t *testing.T, w *world, s *subject) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return err
	}
	old := s.dials.Conns()[0].Remote
	o := w.observe(t)
	tr := goRedisRunner(ctx, s.rdb)
	var errs []error
	for _, typ := range []string{"failover", "migrate"} {
		errs = append(errs, w.action(ctx, typ, nil))
	}
	since := time.Now()
	wait := async(func() error { return w.action(ctx, "bind", nil) })
	errs = append(errs, handoffBeforeClose(ctx, w, s, o, since, old), wait())
	sleepCtx(ctx, time.Second) // go-redis observes traffic after the handoffs
	errs = append(errs, tr.stop("SETs"))
	return errors.Join(errs...)
}

// peakOpen is the most connections the clients had open at once, from
// their dials and closes: go-redis's e2e bounds its connection count by
// MaxActiveConns (twice it while handoffs overlap old and new ones).
func peakOpen(subjects ...*subject) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range subjects {
		for _, c := range s.dials.Conns() {
			edges = append(edges, edge{c.Dialed, 1})
			if c.IsClosed() {
				edges = append(edges, edge{c.Closed(), -1})
			}
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	open, peak := 0, 0
	for _, e := range edges {
		open += e.delta
		peak = max(peak, open)
	}
	return peak
}

// TestGoRedisE2EPushNotifications ports go-redis's
// TestPushNotifications: pool 10, MinIdleConns 5, MaxActiveConns 15,
// relaxed timeout 10 s, its command runner through failover, migrate and
// bind. Its thresholds: no timeout error, every handoff succeeded, at
// least MinIdleConns connections and at most twice MaxActiveConns open
// at once. maint is
// held to 0 errors of any kind (retries disabled).
func TestGoRedisE2EPushNotifications(t *testing.T) {
	parallelTop(t)
	scenario{
		name:      "TestGoRedisE2EPushNotifications",
		criterion: "failover, migrate, bind under the runner: 0 errors, handoff before the close, at least 5 connections, at most 30 open at once",
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			s := w.client(t, col, params{timeout: 3 * time.Second, relaxed: 10 * time.Second, endpointType: "external-ip",
				pool: 10, minIdle: 5, maxActive: 15})
			err := goRedisSequence(ctx, t, w, s)
			if n, peak := len(s.dials.Conns()), peakOpen(s); n < 5 || peak > 30 {
				err = errors.Join(err, fmt.Errorf("%d connections, at most %d open at once; want at least 5, at most 30 at once", n, peak))
			}
			return err
		},
	}.run(t)
}

// TestGoRedisE2ETimeoutConfigs ports go-redis's TestTimeoutConfigurations:
// the same sequence with pool 10, MinIdleConns 4, MaxActiveConns 15 for
// each relaxed timeout (Conservative 30 s, Aggressive 3 s, HighLatency
// 30 s; short mode: Aggressive). Thresholds: no timeout error, relaxed
// timeouts and handoffs seen; maint: 0 errors and a handoff before the
// close.
func TestGoRedisE2ETimeoutConfigs(t *testing.T) {
	parallelTop(t)
	var cases []tcase
	configs := []struct {
		name    string
		relaxed time.Duration
	}{{"Conservative", 30 * time.Second}, {"Aggressive", 3 * time.Second}, {"HighLatency", 30 * time.Second}}
	for _, c := range configs {
		if !full() && c.name != "Aggressive" {
			continue
		}
		cases = append(cases, goRedisCase("TestGoRedisE2ETimeoutConfigs/"+c.name, c.name,
			fmt.Sprintf("relaxed %v: failover, migrate, bind under the runner: 0 errors, handoff before the close", c.relaxed),
			params{timeout: 3 * time.Second, relaxed: c.relaxed, endpointType: "external-ip", pool: 10, minIdle: 4, maxActive: 15}))
	}
	runCases(t, cases)
}

// goRedisCase is one case of go-redis's sequence scenarios.
func goRedisCase(name, short, criterion string, p params) tcase {
	return tcase{short, func(t *testing.T) {
		scenario{name: name, criterion: criterion,
			check: func(ctx context.Context, t *testing.T, w *world, col column) error {
				return goRedisSequence(ctx, t, w, w.client(t, col, p))
			},
		}.run(t)
	}}
}

// TestGoRedisE2EEndpointTypes ports go-redis's TestEndpointTypes: relaxed
// 8 s, pool 10, the sequence for each endpoint type (ExternalIP,
// ExternalFQDN, None); it checks the MOVING's address has the type's form
// (an IP, an FQDN in the database's domain, null) and the traffic
// continues. Here: 0 errors and a handoff before the close, for each
// type the client asks for (the MOVING's form is the server's part, which
// mainttest's own tests check).
func TestGoRedisE2EEndpointTypes(t *testing.T) {
	parallelTop(t)
	var cases []tcase
	for _, typ := range []string{"external-ip", "external-fqdn", "none"} {
		cases = append(cases, goRedisCase("TestGoRedisE2EEndpointTypes/"+typ, typ,
			"failover, migrate, bind under the runner: 0 errors, handoff before the close",
			params{timeout: 3 * time.Second, relaxed: 8 * time.Second, endpointType: typ, pool: 10, minIdle: 4, maxActive: 15}))
	}
	runCases(t, cases)
}

// TestGoRedisE2EStress ports go-redis's TestStressPushNotifications: 4
// clients (pool 10, MaxActiveConns 15) under the command runner while the
// actions run; its thresholds: at least 1000 operations, an error rate of
// at most 20%, at most 4 x 15 connections (here: open at once). maint is held to 0
// errors.
func TestGoRedisE2EStress(t *testing.T) {
	parallelTop(t)
	scenario{
		name:      "TestGoRedisE2EStress",
		criterion: "4 clients through failover, migrate, bind: >=1000 ops, <=60 connections open at once, 0 errors (go-redis: <=20%)",
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			var subjects []*subject
			var runners []*traffic
			for range 4 {
				s := w.client(t, col, params{timeout: 3 * time.Second, relaxed: 10 * time.Second, endpointType: "external-ip",
					pool: 10, minIdle: 4, maxActive: 15})
				subjects = append(subjects, s)
				runners = append(runners, goRedisRunner(ctx, s.rdb))
			}
			var errs []error
			for _, typ := range []string{"failover", "migrate", "bind"} {
				errs = append(errs, w.action(ctx, typ, nil))
			}
			sleepCtx(ctx, time.Second)
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); { // a short run's floor
				var bursts int64
				for _, r := range runners {
					bursts += r.ops.Load()
				}
				if bursts*40 >= 1000 {
					break
				}
				sleepCtx(ctx, 100*time.Millisecond)
			}
			var ops int64
			for _, r := range runners {
				errs = append(errs, r.stop("bursts"))
				ops += r.ops.Load() * 40
			}
			conns := peakOpen(subjects...)
			if ops < 1000 {
				errs = append(errs, fmt.Errorf("%d operations, want >= 1000", ops))
			}
			if conns > 60 {
				errs = append(errs, fmt.Errorf("%d connections open at once, want <= 60", conns))
			}
			return errors.Join(errs...)
		},
	}.run(t)
}

// Lettuce's RelaxedTimeoutConfigurationTest parameters: a 30 ms command
// timeout, relaxed by 100 ms during maintenance (maint's and go-redis's
// relaxed timeout is the whole wait: 130 ms).
const (
	lettuceNormal  = 30 * time.Millisecond
	lettuceRelaxed = lettuceNormal + 100*time.Millisecond
)

// TestLettuceTimeoutRelaxedDuringFailover ports Lettuce's
// RelaxedTimeoutConfigurationTest.timeoutUnrelaxedOnFailedoverTest (shard
// failover): a command sent as FAILING_OVER arrives, whose reply never
// comes (Lettuce: a BLPOP on an empty list, here the tap's stall), times
// out relaxed, between the normal 30 ms and the relaxed 130 ms; after
// FAILED_OVER and a grace of 2 x 100 ms it times out at the normal 30 ms.
// The node-redis scenarios relax at MIGRATING and MOVING; this is the only
// one that relaxes at FAILING_OVER. maint is held to: at FAILING_OVER
// 130 ms -20% / +20% (short: +4 x 30 ms), a *maint.TimeoutError; measured
// 2 x relaxed + 1 s after the FAILED_OVER (maint keeps a tail after a
// completion, RelaxedTail; the client reads the completion with its next
// PING, every 100 ms), the quickest of 3 stalls at the normal timeout, a
// plain error. The emulated node is not slowed during the failover: the
// stall is the tap's, as Lettuce's is a BLPOP, and a 1.5 s slowdown would
// time out every other command at these timeouts.
func TestLettuceTimeoutRelaxedDuringFailover(t *testing.T) {
	parallelTop(t)
	scenario{
		name:      "TestLettuceTimeoutRelaxedDuringFailover",
		criterion: "30 ms timeout, relaxed 130 ms: at FAILING_OVER 130 ms ±20% (short: +120 ms), a maintenance error; after FAILED_OVER 30 ms, a plain error",
		world: func(t *testing.T) *world {
			return newWorld(t, false, func(p *phases) { p.latency = 0 })
		},
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			s := w.client(t, col, params{timeout: lettuceNormal, relaxed: lettuceRelaxed, endpointType: "external-ip", pool: 10, pushes: true})
			if err := connectShortTimeouts(ctx, s); err != nil {
				return err
			}
			o := w.observe(t)
			since := time.Now()
			wait := async(func() error { return w.action(ctx, "failover", nil) })
			if _, err := o.wait(ctx, "FAILING_OVER", since); err != nil {
				return errors.Join(err, wait())
			}
			s.awaitHandled(ctx, "FAILING_OVER", since)
			d, serr := s.stall(ctx)
			var errs []error
			hi := lettuceRelaxed * 12 / 10
			if !full() {
				hi = lettuceRelaxed + 4*lettuceNormal
			}
			switch lo := lettuceRelaxed * 8 / 10; {
			case serr == nil || !isTimeout(serr):
				errs = append(errs, fmt.Errorf("at FAILING_OVER: want a timeout, got %v after %v", serr, d.Round(time.Millisecond)))
			case d < lo || d >= hi:
				errs = append(errs, fmt.Errorf("at FAILING_OVER: timed out after %v, want the relaxed %v within [%v, %v)", d.Round(time.Millisecond), lettuceRelaxed, lo, hi))
			case col.maint() && !isMaintTimeout(serr):
				errs = append(errs, fmt.Errorf("at FAILING_OVER: not a maintenance timeout: %v", serr))
			}
			// Lettuce's connection reads a push as it arrives; a pooled
			// go-redis client when it uses the connection: PINGs every
			// 100 ms until the measurement. At a 30 ms timeout a busy
			// machine misses one now and then: a plain timeout of a PING
			// is not what is measured (the stalls are); an error naming
			// maintenance after the tail, or any other error, still fails.
			tr := startTraffic(ctx, 1, 100*time.Millisecond, func(ctx context.Context, _, _ int) error {
				if err := s.rdb.Ping(ctx).Err(); err != nil && !isTimeout(err) {
					return err
				}
				return nil
			})
			fo, err := o.wait(ctx, "FAILED_OVER", since)
			if err == nil {
				sleepCtx(ctx, time.Until(fo.at.Add(2*lettuceRelaxed+time.Second)))
			}
			errs = append(errs, err, tr.stop("pings"), wait())
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if err := normalTimeout(ctx, s); err != nil {
				return fmt.Errorf("after FAILED_OVER: %w", err)
			}
			return nil
		},
	}.run(t)
}

// nodeAddr is the address of the node the database's name leads to now:
// a client configured with it keeps dialling that node, as a client given
// a node's address (or one that resolved the name once) does.
func (w *world) nodeAddr(ctx context.Context) (string, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := w.dial(dctx, "tcp", w.addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.RemoteAddr().String(), nil
}

// onOldNode is the check of a client created while a bind is under way,
// configured with the address of the node the bind moves away from (the
// address its peer's first connection reached): trigger runs the action,
// the client is created when the observer sees at, and load runs on it
// from then on. 90% into the MOVING window the client has no connection
// open to the old node and at least one open elsewhere; 1 s after the
// window a PING succeeds; the load has 0 errors throughout.
func onOldNode(trigger func(ctx context.Context, w *world) error, at string, p params,
	load func(ctx context.Context, s *subject) *traffic) func(ctx context.Context, t *testing.T, w *world, col column) error {
	return func(ctx context.Context, t *testing.T, w *world, col column) error {
		old, err := w.nodeAddr(ctx)
		if err != nil {
			return err
		}
		o := w.observe(t)
		since := time.Now()
		wait := async(func() error { return trigger(ctx, w) })
		if _, err := o.wait(ctx, at, since); err != nil {
			return errors.Join(err, wait())
		}
		cp := p // shared by the columns, run at once
		cp.addr = old
		s := w.client(t, col, cp)
		tr := load(ctx, s)
		mv, err := o.wait(ctx, "MOVING", since)
		if err != nil {
			return errors.Join(err, tr.stop("commands"), wait())
		}
		window := w.windowOf(mv)
		sleepCtx(ctx, time.Until(mv.at.Add(window*9/10)))
		var errs []error
		onOld, elsewhere := 0, 0
		for _, c := range s.dials.Conns() {
			switch {
			case c.IsClosed():
			case c.Remote == old:
				onOld++
			default:
				elsewhere++
			}
		}
		if onOld > 0 || elsewhere == 0 {
			errs = append(errs, fmt.Errorf("at 90%% of the window %d connections open to the old node %s, %d elsewhere; want none, at least one",
				onOld, old, elsewhere))
		}
		sleepCtx(ctx, time.Until(mv.at.Add(window+time.Second)))
		errs = append(errs, tr.stop("commands"), wait())
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("PING after the window: %w", err))
		}
		return errors.Join(errs...)
	}
}

// TestRedisPyStandaloneNewConnectionsReceiveMoving ports redis-py's
// test_new_connections_receive_moving (data_movement_conn_drop,
// external-ip): once the MOVING has arrived, a new client configured with
// the old node's address gets the MOVING on its first connection's
// handshake (the server replays it, with the seconds left) and that
// connection is moved to the new address, relaxed. Here the client runs
// redis-py's 10 threads of SET+GET from its creation (1 s socket timeout,
// relaxed 30 s): 90% into the window it has no connection open to the old
// node and at least one elsewhere, a PING succeeds 1 s after the window,
// and no command failed. redis-py reads the connection's state; maint is
// held to where its connections are, and to the commands.
func TestRedisPyStandaloneNewConnectionsReceiveMoving(t *testing.T) {
	parallelTop(t)
	scenario{
		name:      "TestRedisPyStandaloneNewConnectionsReceiveMoving",
		criterion: "client created on the old node after the MOVING: at 90% of the window off the old node; 0 errors; PING after",
		check: onOldNode(func(ctx context.Context, w *world) error { return w.effect(ctx, "data_movement_conn_drop") }, "MOVING",
			params{timeout: time.Second, relaxed: 30 * time.Second, endpointType: "external-ip", pool: 10},
			func(ctx context.Context, s *subject) *traffic {
				return startTraffic(ctx, 10, s.w.ph.pace, redisPyWorker(s.rdb))
			}),
	}.run(t)
}

// TestLettuceNewConnectionDuringRebind ports Lettuce's
// MaintenanceNotificationConnectionTest.newConnectionDuringRebindAfterMovingTest
// (migrate and bind, external-ip): at MIGRATED, just before the MOVING, a
// second client connects to the address the first connection reached; it
// must receive the MOVING, and after the rebind both answer PING from the
// MOVING's endpoint. Here the client created at MIGRATED is the column's
// (default timeouts: 5 s, relaxed 10 s), PINGing every 100 ms as a Lettuce
// connection reads its pushes as they come: 90% into the window no
// connection open to the old node, at least one elsewhere; a PING 1 s after
// the window; no PING failed.
func TestLettuceNewConnectionDuringRebind(t *testing.T) {
	parallelTop(t)
	scenario{
		name:      "TestLettuceNewConnectionDuringRebind",
		criterion: "client created on the old node at MIGRATED: at 90% of the MOVING window off the old node; PINGs 0 errors; PING after",
		check: onOldNode(func(ctx context.Context, w *world) error { return w.migrateAndBind(ctx) }, "MIGRATED",
			params{timeout: 5 * time.Second, relaxed: 10 * time.Second, endpointType: "external-ip", pool: 10},
			func(ctx context.Context, s *subject) *traffic {
				return startTraffic(ctx, 1, 100*time.Millisecond, func(ctx context.Context, _, _ int) error { return s.rdb.Ping(ctx).Err() })
			}),
	}.run(t)
}
