package conformance_test

// node-redis's standalone scenario files beyond the two ported in
// standalone_test.go (timeout-during-notifications, connection-handoff):
// push-notification.e2e.ts, pn-failover.e2e.ts, configuration.e2e.ts and
// to-failover.e2e.ts. The README's table says what each is held to.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// seqsOf returns, per push name, the distinct sequence ids of the
// notifications of those names the client received: a notification copied
// to several connections, or replayed to a new one, is one notification.
func seqsOf(pushes []push, kinds []string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, k := range kinds {
		out[k] = map[string]bool{}
	}
	for _, p := range pushes {
		if m, ok := out[p.kind]; ok && len(p.args) > 0 {
			m[p.args[0]] = true
		}
	}
	return out
}

// waitReceived waits until the client received a notification of each
// kind, at most d.
func waitReceived(ctx context.Context, s *subject, kinds []string, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && ctx.Err() == nil; {
		seqs := seqsOf(s.received(), kinds)
		all := true
		for _, k := range kinds {
			all = all && len(seqs[k]) > 0
		}
		if all {
			return
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

// pinger is a PING every 100 ms on the client, its errors ignored: a
// pooled go-redis client reads a push only when it uses the connection
// that carries it (a node-redis client reads it as it arrives), so the
// scenarios that count what the client received keep its connection in
// use. The peers' scenarios that ignore the client's errors ignore these.
func pinger(ctx context.Context, s *subject) *traffic {
	return startTraffic(ctx, 1, 100*time.Millisecond, func(ctx context.Context, _, _ int) error {
		_ = s.rdb.Ping(ctx).Err()
		return nil
	})
}

// notificationsCase is one "should (NOT) receive ..." scenario of
// node-redis's push-notification.e2e.ts and pn-failover.e2e.ts, and
// configuration.e2e.ts's connectionHandshakeIncludesEnablingNotifications:
// a client (one connection, as node-redis's, with a PING every 100 ms)
// through run, then a count of the notifications of kinds it read.
type notificationsCase struct {
	kinds []string
	run   func(ctx context.Context, w *world) error
	optIn string // params.optIn
	// exactly: each kind exactly once (node-redis's strictEqual 1); else
	// at least once (its assert.ok). want0: none of them.
	exactly, want0 bool
	// serverOff runs the scenario with the database's notifications
	// turned off (update_cluster_config client_maint_notifications
	// false), on again after it.
	serverOff bool
}

func (nc notificationsCase) check(ctx context.Context, t *testing.T, w *world, col column) error {
	if nc.serverOff {
		if err := w.clusterNotifications(ctx, false); err != nil {
			return err
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := w.clusterNotifications(ctx, true); err != nil {
				t.Errorf("turning the database's notifications on again: %v", err)
			}
		})
	}
	s := w.client(t, col, params{timeout: 5 * time.Second, relaxed: 10 * time.Second, pool: 1, optIn: nc.optIn, pushes: true})
	// node-redis's createTestClient connects (and FLUSHALLs) before the
	// action: the connection must be had, the opt-in refused or not.
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	tr := pinger(ctx, s)
	fiErr := nc.run(ctx, w)
	if nc.want0 || col == colNone {
		// Nothing to wait for (no handler never opts in): a notification
		// would be read by the next PING, 100 ms on.
		sleepCtx(ctx, 300*time.Millisecond)
	} else {
		// The last one may be read by the next PING: wait until each kind
		// was received, or 10 s.
		waitReceived(ctx, s, nc.kinds, 10*time.Second)
	}
	_ = tr.stop("pings")
	if fiErr != nil {
		return fiErr
	}
	seqs := seqsOf(s.received(), nc.kinds)
	var errs []error
	for _, k := range nc.kinds {
		n := len(seqs[k])
		switch {
		case nc.want0 && n != 0:
			errs = append(errs, fmt.Errorf("read %d %s notifications, want none", n, k))
		case nc.want0:
		case nc.exactly && n != 1:
			errs = append(errs, fmt.Errorf("read %d %s notifications, want exactly 1", n, k))
		case n == 0:
			errs = append(errs, fmt.Errorf("read no %s notification", k))
		}
	}
	if nc.want0 { // nor did any reach the client's connections unseen by maint
		for _, p := range s.dials.Pushes() {
			if slices.Contains(nc.kinds, p.kind) {
				errs = append(errs, fmt.Errorf("a %s reached the client's connection to %s", p.kind, p.conn.Remote))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// clusterNotifications is node-redis's update_cluster_config action
// turning the database's maintenance notifications off or on.
func (w *world) clusterNotifications(ctx context.Context, on bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_, err := w.fi.Run(ctx, "update_cluster_config",
		map[string]any{"config": map[string]any{"client_maint_notifications": on}}, 300*time.Millisecond)
	return err
}

func (w *world) failover(ctx context.Context) error { return w.action(ctx, "failover", nil) }

var (
	migrateKinds  = []string{"MOVING", "MIGRATING", "MIGRATED"}
	failoverKinds = []string{"FAILING_OVER", "FAILED_OVER"}
)

// pushNotificationCases are the three describes of push-notification.e2e.ts
// and pn-failover.e2e.ts for one action.
func pushNotificationCases(test string, kinds []string, run func(ctx context.Context, w *world) error) []tcase {
	what := strings.Join(kinds, ", ")
	mk := func(name, criterion, mayPass string, nc notificationsCase) tcase {
		nc.kinds, nc.run = kinds, run
		return tcase{name, func(t *testing.T) {
			scenario{name: test + "/" + name, criterion: criterion, controlsMayPass: mayPass, check: nc.check}.run(t)
		}}
	}
	return []tcase{
		mk("enabled", "opted in (auto), 1 connection: exactly one each of "+what+" received", "",
			notificationsCase{exactly: true}),
		mk("disabled_client", "the client's opt-in off: none of "+what+" received",
			"every column has its opt-in off (maint: HandshakeOff, go-redis: ModeDisabled): a configuration check",
			notificationsCase{optIn: "off", want0: true}),
		mk("disabled_server", "the database's notifications off: the client connects (auto), receives none of "+what,
			"",
			notificationsCase{want0: true, serverOff: true}),
	}
}

// TestNodeRedisPushNotification ports node-redis's push-notification.e2e.ts
// (migrateAndBindAction): "Push Notifications Enabled" (a client in auto
// mode receives exactly one MOVING, one MIGRATING and one MIGRATED),
// "Disabled - Client" (maintNotifications disabled: none) and "Disabled -
// Server" (update_cluster_config client_maint_notifications false, then a
// client in auto mode: none). Counted from the client's own connections
// (distinct sequence ids) on the controls, from maint's
// EventNotification events (the client's own account, as node-redis's
// diagnostics channel is) on maint's columns. The server-disabled case
// holds every column to connecting too (node-redis's createTestClient
// awaits connect): go-redis's ModeEnabled fails a connection whose opt-in
// is refused.
func TestNodeRedisPushNotification(t *testing.T) {
	parallelTop(t)
	runCases(t, pushNotificationCases("TestNodeRedisPushNotification", migrateKinds,
		func(ctx context.Context, w *world) error { return w.migrateAndBind(ctx) }))
}

// TestNodeRedisPushNotificationFailover ports node-redis's
// pn-failover.e2e.ts: the same three cases with a failover action and
// FAILING_OVER, FAILED_OVER.
func TestNodeRedisPushNotificationFailover(t *testing.T) {
	parallelTop(t)
	runCases(t, pushNotificationCases("TestNodeRedisPushNotificationFailover", failoverKinds,
		func(ctx context.Context, w *world) error { return w.failover(ctx) }))
}

// TestNodeRedisConnectionHandshakeIncludesEnablingNotifications ports
// configuration.e2e.ts's "connectionHandshakeIncludesEnablingNotifications":
// a client with maintNotifications "enabled" (go-redis ModeEnabled, maint
// HandshakeRequired) receives MOVING, MIGRATING and MIGRATED through
// migrateAndBindAction. Its "disabledDontReceiveNotifications" is
// push-notification's Disabled - Client case, ported there.
func TestNodeRedisConnectionHandshakeIncludesEnablingNotifications(t *testing.T) {
	parallelTop(t)
	nc := notificationsCase{kinds: migrateKinds, optIn: "required",
		run: func(ctx context.Context, w *world) error { return w.migrateAndBind(ctx) }}
	scenario{
		name:      "TestNodeRedisConnectionHandshakeIncludesEnablingNotifications",
		criterion: "opt-in required: MOVING, MIGRATING, MIGRATED each received",
		check:     nc.check,
	}.run(t)
}

// TestNodeRedisClientHandshakeWithEndpointType ports configuration.e2e.ts's
// "clientHandshakeWithEndpointType" for auto, external-ip, external-fqdn
// and none (short mode: the last three, auto resolving to one of them):
// after migrateAndBindAction the client's connection address is the one
// the MOVING named (node-redis compares its options' host with the push's
// endpoint), a different host from the configured one; for none it stays
// the configured one. Here: the MOVING the client read has the form its
// handshake asked for (an IP, a host name, null), and every connection the
// client dialled from the MOVING to the window's end dialled that address
// (for none, the configured address), at least one of them. The client
// PINGs every 100 ms, its errors ignored as node-redis's are.
func TestNodeRedisClientHandshakeWithEndpointType(t *testing.T) {
	parallelTop(t)
	types := []string{"auto", "external-ip", "external-fqdn", "none"}
	if !full() {
		types = types[1:]
	}
	var cases []tcase
	for _, typ := range types {
		cases = append(cases, tcase{typ, func(t *testing.T) {
			scenario{
				name:      "TestNodeRedisClientHandshakeWithEndpointType/" + typ,
				criterion: "the MOVING received has the asked form; every dial until the window's end goes to its address (none: the configured one)",
				check: func(ctx context.Context, t *testing.T, w *world, col column) error {
					return endpointTypeCheck(ctx, t, w, col, typ)
				},
			}.run(t)
		}})
	}
	runCases(t, cases)
}

func endpointTypeCheck(ctx context.Context, t *testing.T, w *world, col column, typ string) error {
	ept := typ
	if ept == "auto" {
		ept = ""
	}
	s := w.client(t, col, params{timeout: 5 * time.Second, relaxed: 10 * time.Second, endpointType: ept, pool: 1, pushes: true})
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	tr := pinger(ctx, s)
	fiErr := w.migrateAndBind(ctx)
	_ = tr.stop("pings")
	if fiErr != nil {
		return fiErr
	}
	var mv *push
	for _, p := range s.received() {
		if p.kind == "MOVING" {
			mv = &p
			break
		}
	}
	if mv == nil {
		return errors.New("the client read no MOVING")
	}
	endpoint := ""
	if len(mv.args) >= 3 {
		endpoint = mv.args[2]
	}
	host, _, splitErr := net.SplitHostPort(endpoint)
	isIP := splitErr == nil && net.ParseIP(host) != nil
	switch {
	case typ == "none" && endpoint != "":
		return fmt.Errorf("asked for none, the MOVING named %q", endpoint)
	case typ != "none" && splitErr != nil:
		return fmt.Errorf("asked for %s, the MOVING named %q", typ, endpoint)
	case typ == "external-ip" && !isIP, typ == "external-fqdn" && isIP:
		return fmt.Errorf("asked for %s, the MOVING named %q", typ, endpoint)
	}
	want := endpoint
	if typ == "none" {
		want = w.addr
	} else if endpoint == w.addr {
		return fmt.Errorf("the MOVING named the configured address %s", w.addr)
	}
	end := mv.at.Add(w.windowOf(*mv))
	var asked []string
	for _, c := range s.dials.Conns() {
		if c.Dialed.Before(mv.at) || !c.Dialed.Before(end) {
			continue
		}
		asked = append(asked, c.Asked)
	}
	if len(asked) == 0 {
		return fmt.Errorf("no connection dialled from the MOVING (%q) to the window's end", endpoint)
	}
	for _, a := range asked {
		if a != want {
			sort.Strings(asked)
			return fmt.Errorf("MOVING named %q: the client dialled %v, want only %s", endpoint, asked, want)
		}
	}
	return nil
}

// connectShortTimeouts makes the first connection of a client whose
// timeouts are tens of milliseconds (node-redis's 50, Lettuce's 30): its
// dial and handshake (HELLO, the opt-in) get them too,
// which a loaded machine running the race detector misses now and then,
// before any maintenance. Connecting is not what the timeout scenarios
// measure, so a plain timeout there is tried again, up to 20 times; any
// other error, or one naming maintenance, is returned.
func connectShortTimeouts(ctx context.Context, s *subject) error {
	var err error
	for range 20 {
		if err = s.rdb.Ping(ctx).Err(); err == nil || !isTimeout(err) || isMaintTimeout(err) {
			return err
		}
	}
	return fmt.Errorf("connecting, 20 times: %w", err)
}

// TestNodeRedisTimeoutsRelaxedDuringFailingOver ports to-failover.e2e.ts's
// "should relax command timeout on FAILING_OVER": command timeout 50 ms,
// relaxed 2000 ms; a command sent as the FAILING_OVER arrives, whose reply
// never comes, times out within ±20% of 2000 ms (node-redis: [2000, 2400))
// with the error of a timeout during maintenance (maint:
// *maint.TimeoutError; go-redis has none, its column is held to the
// duration). Before the failover the normal timeout is checked, as in the
// MIGRATING port. The command is sent once the client's handler has handled
// the FAILING_OVER, as node-redis sends it from its handler.
func TestNodeRedisTimeoutsRelaxedDuringFailingOver(t *testing.T) {
	parallelTop(t)
	nodeRedisRelaxedAt("TestNodeRedisTimeoutsRelaxedDuringFailingOver", (*world).failover, "FAILING_OVER").run(t)
}

// TestNodeRedisTimeoutsUnrelaxedAfterFailedOver ports to-failover.e2e.ts's
// "should unrelax command timeout after FAILED_OVER": once the failover
// action has completed, a stalled command times out within ±20% of the
// normal 50 ms with a plain timeout error. As in the MIGRATED port, maint
// keeps relaxation RelaxedTail (2 x relaxed) after a completion, or as long
// as it saw the operation open if shorter, so every column is measured
// twice the relaxed timeout after the action, with a PING every 100 ms
// until then so that the client reads the notifications as they arrive.
func TestNodeRedisTimeoutsUnrelaxedAfterFailedOver(t *testing.T) {
	parallelTop(t)
	scenario{
		name:            "TestNodeRedisTimeoutsUnrelaxedAfterFailedOver",
		criterion:       "2x relaxed after the failover: 50 ms ±20% (short: 4x), a plain timeout error",
		controlsMayPass: "no handler never relaxes; the relaxing half is TestNodeRedisTimeoutsRelaxedDuringFailingOver",
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			s := w.client(t, col, params{timeout: nodeRedisNormal, relaxed: nodeRedisRelaxed, pool: 10})
			if err := connectShortTimeouts(ctx, s); err != nil {
				return err
			}
			// As in TestNodeRedisTimeoutsUnrelaxedAfterMigratedAndMoving: a
			// plain timeout of a PING on a busy machine is not what is
			// measured; an error naming maintenance, or any other, is.
			tr := startTraffic(ctx, 1, 100*time.Millisecond, func(ctx context.Context, _, _ int) error {
				if err := s.rdb.Ping(ctx).Err(); err != nil && (!isTimeout(err) || isMaintTimeout(err)) {
					return err
				}
				return nil
			})
			if err := w.failover(ctx); err != nil {
				return errors.Join(err, tr.stop("pings"))
			}
			sleepCtx(ctx, 2*nodeRedisRelaxed)
			if err := tr.stop("pings"); err != nil {
				return fmt.Errorf("during the failover: %w", err)
			}
			if err := normalTimeout(ctx, s); err != nil {
				return fmt.Errorf("after the failover: %w", err)
			}
			return nil
		},
	}.run(t)
}
