package maint_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// builtinWatch counts the notifications go-redis's built-in handler sees.
type builtinWatch struct{ seen atomic.Int64 }

func (b *builtinWatch) PreHook(_ context.Context, _ push.NotificationHandlerContext, _ string, n []interface{}) ([]interface{}, bool) {
	b.seen.Add(1)
	return n, true
}

func (b *builtinWatch) PostHook(context.Context, push.NotificationHandlerContext, string, []interface{}, error) {
}

func watchBuiltin(rdb *redis.Client) *builtinWatch {
	w := &builtinWatch{}
	if mgr := rdb.GetMaintNotificationsManager(); mgr != nil {
		mgr.AddNotificationHook(w)
	}
	return w
}

// steadyMoving runs scenario 1 or 2 of the issue: 32 goroutines on a pool of
// 16, as fast as they go, through a MOVING; it returns the load.
func steadyMoving(t *testing.T, r route, mv func(e *env) mainttest.Moving) {
	steadyMovingOn(t, "", r, mv)
}

func steadyMovingOn(t *testing.T, backend string, r route, mv func(e *env) mainttest.Moving) {
	e := newEnvOn(t, backend)
	rdb, m, ev := e.client(r, e.options(16))
	builtin := watchBuiltin(rdb)
	require.NoError(t, rdb.Ping(context.Background()).Err())

	l := startLoad(rdb, 32)
	waitFor(t, "load on the old node", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
	moving := mv(e)
	start := time.Now()
	e.old.Moving(moving)
	end := e.waitEvent(e.old, mainttest.KindWindowEndClose, moving.Window+10*time.Second)
	waitFor(t, "load on the new node", 10*time.Second, func() bool { return e.new.Stats().Served > 200 })
	l.stop()

	st := e.old.Stats()
	t.Logf("%s: ok=%d failed=%d; old node last served at +%v, window end at +%v; closed at window end %d, replies owed %d; maint %+v",
		r.name, l.ok.Load(), l.failed.Load(), st.LastServed.Sub(start).Round(time.Millisecond),
		end.At.Sub(start).Round(time.Millisecond), st.ClosedAtWindowEnd, st.OwedAtClose, m.Stats())
	t.Logf("events:\n%s", ev)
	assert.Zero(t, l.failed.Load(), "failed commands: %v", l.errs)
	assert.Zero(t, st.ClosedAtWindowEnd, "connections left on the old node for the server to close")
	assert.Zero(t, st.OwedAtClose, "replies owed when the old node closed")
	assert.True(t, st.LastServed.Before(end.At), "old node used until its close")
	assert.Zero(t, builtin.seen.Load(), "go-redis's built-in handler saw a notification")
	if mgr := rdb.GetMaintNotificationsManager(); mgr != nil {
		assert.Zero(t, mgr.GetActiveOperationCount(), "go-redis's built-in handler started a handoff")
	}
	assert.NotZero(t, m.Stats().Handoffs)
}

func namedSuccessor(e *env) mainttest.Moving {
	return mainttest.Moving{Window: 3 * time.Second, To: e.new, StopAccepting: true}
}

func nullDNSAt40(e *env) mainttest.Moving {
	return mainttest.Moving{Window: 3 * time.Second, To: e.new, Null: true, StopAccepting: true,
		DNSHost: host, DNSLag: 1200 * time.Millisecond}
}

// The MOVING scenarios end to end.
func TestMovingUnderSteadyLoad(t *testing.T) {
	for _, r := range routes {
		t.Run(r.name+"/NamedSuccessor", func(t *testing.T) { steadyMoving(t, r, namedSuccessor) })
		t.Run(r.name+"/NullEndpointDNSAt40", func(t *testing.T) { steadyMoving(t, r, nullDNSAt40) })
	}
}

// The real-server tier: the same scenarios with the emulator relaying to a
// real redis-server (MAINT_TEST_REDIS=host:port; .ci/run starts one).
func TestMovingAgainstRealRedis(t *testing.T) {
	addr := os.Getenv("MAINT_TEST_REDIS")
	if addr == "" {
		t.Skip("MAINT_TEST_REDIS not set")
	}
	t.Run("NamedSuccessor", func(t *testing.T) { steadyMovingOn(t, addr, routes[0], namedSuccessor) })
	t.Run("NullEndpointDNSAt40", func(t *testing.T) { steadyMovingOn(t, addr, routes[0], nullDNSAt40) })
}

// Scenario 3: DNS moves only after the window's end, within the hold budget:
// commands wait instead of failing on "connection refused".
func TestNullEndpointDNSAfterWindowEnd(t *testing.T) {
	e := newEnv(t)
	rdb, m, ev := e.client(routes[0], e.options(16))
	require.NoError(t, rdb.Ping(context.Background()).Err())
	l := startLoad(rdb, 32)
	waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
	window := 2 * time.Second
	start := time.Now()
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, StopAccepting: true,
		DNSHost: host, DNSLag: window + 500*time.Millisecond})
	e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
	waitFor(t, "load on the new node", 15*time.Second, func() bool { return e.new.Stats().Served > 200 })
	l.stop()
	st := e.old.Stats()
	t.Logf("ok=%d failed=%d held=%d; old last served +%v; closed at window end %d; events:\n%s",
		l.ok.Load(), l.failed.Load(), m.Stats().Held, st.LastServed.Sub(start), st.ClosedAtWindowEnd, ev)
	assert.Zero(t, l.failed.Load(), "failed: %v", l.errs)
	assert.Zero(t, st.ClosedAtWindowEnd)
	assert.NotZero(t, m.Stats().Held, "commands should have waited for DNS")
	_, released := ev.first(maint.EventRelease)
	assert.True(t, released)
}

// assertNoDoomedUse checks that no connection to addr dialled between since
// and until (zero: no end) ever carried a byte.
func assertNoDoomedUse(t *testing.T, d *mainttest.Recorder, addr string, since, until time.Time) int {
	t.Helper()
	landed := 0
	for _, c := range d.Conns() {
		if c.Remote == addr && c.Dialed.After(since) && (until.IsZero() || c.Dialed.Before(until)) {
			landed++
			assert.Zero(t, c.Written(), "a connection that landed back on %s carried bytes", addr)
		}
	}
	return landed
}

// Scenario 4a: a successor pin naming the retiring address is never used.
func TestSuccessorNamingRetiringNodeIsNeverUsed(t *testing.T) {
	e := newEnv(t)
	opt := e.options(4)
	opt.DialTimeout = 10 * time.Second
	rdb, m, ev := e.client(routes[0], opt)
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.old})
	// Commands read the MOVING and retire the node; the connection that read
	// it drains. The next command needs a new connection, and every dial lands
	// on the retiring node until the window is over.
	retiredAt := pingUntilRetired(t, rdb, ev).At
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, rdb.Set(cctx, "a", "b", 0).Err())
	done, ok := ev.first(maint.EventHandoffDone)
	require.True(t, ok)
	landed := assertNoDoomedUse(t, e.dials, e.old.Addr(), retiredAt, done.At)
	// The command went through only once the window was over, the pin expired
	// and the (same) node was no longer being retired.
	assert.NotZero(t, landed)
	t.Logf("landed back %d times; doomed %d; events:\n%s", landed, m.Stats().Doomed, ev)
	assert.NotZero(t, m.Stats().Doomed)
}

// Scenario 4b: stale DNS after the last call: a reconnect that lands back on
// the retiring node is discarded, and the subscriber that needed it gets a
// connection on the new node once DNS moves.
func TestStaleDNSReconnectIsNeverUsed(t *testing.T) {
	e := newEnv(t)
	rdb, m, ev := e.client(routes[0], e.options(4))
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, DNSHost: host, DNSLag: window + 700*time.Millisecond})
	// Light traffic reads the MOVING and keeps the client busy until the hold.
	l := startLoad(rdb, 1)
	var holdAt time.Time
	waitFor(t, "hold", 10*time.Second, func() bool {
		if ev, ok := ev.first(maint.EventHold); ok {
			holdAt = ev.At
			return true
		}
		return false
	})
	defer l.stop()
	// A new subscriber dials now: DNS still names the retiring node.
	ps := rdb.Subscribe(ctx, "news")
	defer ps.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := ps.Receive(rctx)
	require.NoError(t, err)
	landed := assertNoDoomedUse(t, e.dials, e.old.Addr(), holdAt, time.Time{})
	t.Logf("landed back %d times; maint %+v; events:\n%s", landed, m.Stats(), ev)
	assert.NotZero(t, landed, "the test should have made a dial land on the retiring node")
	assert.NotZero(t, m.Stats().Doomed)
}

// Scenario 4c: after the window's end the retiring node refuses new
// connections while DNS still names it. A dial then (a subscriber here; in
// a pool, a command that was past the hold, waiting for a connection) waits
// for the replacement instead of failing with "connection refused": go-redis
// counts such a failure, and PoolSize of them trip its pool's dial breaker,
// failing every command fast, the held ones once released
// (TestHeldBurstReleasedOntoASmallPool), until its next probe dial.
func TestDialRefusedByRetiringNodeWaitsForReplacement(t *testing.T) {
	e := newEnv(t)
	rdb, m, ev := e.client(routes[0], e.options(4))
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, StopAccepting: true,
		DNSHost: host, DNSLag: window + 700*time.Millisecond})
	l := startLoad(rdb, 1) // reads the MOVING and keeps the client busy until the hold
	defer l.stop()
	e.waitEvent(e.old, mainttest.KindRefuse, window+10*time.Second)
	_, released := ev.first(maint.EventRelease)
	require.False(t, released, "DNS still names the retiring node: commands are held")
	// A new subscriber dials now: DNS names the retiring node, which refuses.
	ps := rdb.Subscribe(ctx, "news")
	defer ps.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := ps.Receive(rctx)
	t.Logf("maint %+v; events:\n%s", m.Stats(), ev)
	require.NoError(t, err, "a dial refused by the retiring node waits for its replacement")
	assert.Contains(t, ev.String(), "refused by "+e.old.Addr(), "the test should have made the retiring node refuse a dial")
}

// Scenario 5: a mostly idle pool: every idle connection to the old node is
// retired before the window's end, including ones that never carried a
// command (MinIdleConns) and so never opted in. With AddHook alone the pool
// is warmed by a burst after AddHook: connections dialled before AddHook are
// beyond any hook's reach (docs/guarantees.md).
func TestIdlePoolRetiredBeforeWindowEnd(t *testing.T) {
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			opt := e.options(16)
			if r.name != "AddHook" {
				opt.MinIdleConns = 16
			}
			rdb, m, ev := e.client(r, opt)
			require.NoError(t, rdb.Ping(context.Background()).Err())
			if r.name == "AddHook" {
				burst := startLoad(rdb, 16)
				waitFor(t, "a warm pool", 10*time.Second, func() bool { return e.dials.OpenTo(e.old.Addr()) >= 16 })
				burst.stop()
			}
			waitFor(t, "idle connections", 10*time.Second, func() bool { return e.dials.OpenTo(e.old.Addr()) >= 16 })
			l := startLoad(rdb, 1)
			waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 50 })
			window := 3 * time.Second
			e.old.Moving(mainttest.Moving{Window: window, To: e.new})
			end := e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
			l.stop()
			st := e.old.Stats()
			t.Logf("ok=%d failed=%d closed at window end %d; maint %+v; events:\n%s", l.ok.Load(), l.failed.Load(), st.ClosedAtWindowEnd, m.Stats(), ev)
			assert.Zero(t, st.ClosedAtWindowEnd, "connections left for the server to close")
			for _, c := range e.dials.Conns() {
				if c.Remote == e.old.Addr() {
					assert.True(t, c.IsClosed() && c.Closed().Before(end.At), "connection to the old node not closed before the window's end")
				}
			}
			assert.Zero(t, l.failed.Load(), "failed: %v", l.errs)
		})
	}
}

// Scenario 6a: a subscriber keeps receiving after the handoff.
func TestSubscriberMovesAndKeepsReceiving(t *testing.T) {
	e := newEnv(t)
	rdb, _, ev := e.client(routes[0], e.options(4))
	ctx := context.Background()
	ps := rdb.Subscribe(ctx, "news")
	defer ps.Close()
	_, err := ps.Receive(ctx)
	require.NoError(t, err)
	ch := ps.Channel()

	// Publish through a plain client on the new node: what is published there
	// reaches only subscribers that moved (one backend, so also the old).
	pub := redis.NewClient(&redis.Options{Addr: e.new.Addr(), Protocol: 3})
	defer pub.Close()
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, StopAccepting: true})
	e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
	// After the old node closed, messages published now must still arrive.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case msg := <-ch:
			require.Equal(t, "after", msg.Payload)
			t.Logf("events:\n%s", ev)
			return
		case <-tick.C:
			require.NoError(t, pub.Publish(ctx, "news", "after").Err())
		case <-deadline:
			t.Fatalf("no message after the handoff; events:\n%s", ev)
		}
	}
}

// Scenario 6b: a pipeline and a MULTI/EXEC in flight at the MOVING complete,
// on the old node.
func TestPipelineAndTransactionInFlightComplete(t *testing.T) {
	e := newEnv(t)
	rdb, _, ev := e.client(routes[0], e.options(4))
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	e.old.SetCommandLatency("ECHO", 700*time.Millisecond)
	e.old.SetCommandLatency("EXEC", 700*time.Millisecond)

	type result struct {
		cmds []redis.Cmder
		err  error
	}
	pipe := make(chan result, 1)
	tx := make(chan result, 1)
	go func() {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "p", "1", 0)
			p.Echo(ctx, "slow")
			p.Get(ctx, "p")
			return nil
		})
		pipe <- result{cmds, err}
	}()
	go func() {
		cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "t", "1", 0)
			p.Incr(ctx, "t")
			return nil
		})
		tx <- result{cmds, err}
	}()
	waitFor(t, "both in flight", 5*time.Second, func() bool { return e.old.Stats().Served >= 3 })
	e.old.Moving(mainttest.Moving{Window: 2 * time.Second, To: e.new})
	p := <-pipe
	require.NoError(t, p.err, "events:\n%s", ev)
	assert.Equal(t, "slow", p.cmds[1].(*redis.StringCmd).Val())
	assert.Equal(t, "1", p.cmds[2].(*redis.StringCmd).Val())
	x := <-tx
	require.NoError(t, x.err)
	assert.Equal(t, int64(2), x.cmds[1].(*redis.IntCmd).Val())
}

// The built-in handler, left in auto mode on a default client, never acts:
// maint strips the notifications it would read.
func TestBuiltinHandlerSeesNothing(t *testing.T) {
	e := newEnv(t)
	opt := e.options(4)
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeEnabled}
	rdb, _, _ := e.client(routes[0], opt)
	w := watchBuiltin(rdb)
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	seq := e.old.Migrating(0, "[\"1\"]")
	_ = seq
	for i := 0; i < 20; i++ {
		require.NoError(t, rdb.Ping(ctx).Err())
	}
	e.old.Migrated("[\"1\"]")
	for i := 0; i < 20; i++ {
		require.NoError(t, rdb.Ping(ctx).Err())
	}
	assert.Zero(t, w.seen.Load())
}

// Instrument installs one Maint per shard of a Ring, on shards that exist
// already: a MOVING on one shard's node moves that shard, and the server
// closes none of its connections.
func TestInstrumentRing(t *testing.T) {
	e := newEnv(t)
	third, err := e.emu.AddEndpoint("127.0.0.4:0")
	require.NoError(t, err)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:    map[string]string{"a": e.old.Addr(), "b": e.new.Addr()},
		Protocol: 3, MaxRetries: -1,
	})
	g, err := maint.Instrument(ring, maint.WithLogf(t.Logf))
	require.NoError(t, err)
	defer g.Close()
	defer ring.Close()
	ctx := context.Background()
	require.NoError(t, ring.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	require.Len(t, g.Maints(), 2)

	e.old.Moving(mainttest.Moving{Window: 2 * time.Second, To: third})
	l := func() {
		for i := 0; i < 200; i++ {
			require.NoError(t, ring.Set(ctx, "key"+string(rune('a'+i%26)), i, 0).Err())
		}
	}
	waitFor(t, "the shard to move", 10*time.Second, func() bool { l(); return third.Stats().Served > 0 })
	e.waitEvent(e.old, mainttest.KindWindowEndClose, 10*time.Second)
	assert.Zero(t, e.old.Stats().ClosedAtWindowEnd)
	assert.EqualValues(t, 1, g.Stats().Handoffs)

	_, err = maint.Instrument(nil)
	assert.EqualError(t, err, "maint: Instrument: the client is nil")
}

// Servers replay the latest completion to every newly opted-in connection, a
// few milliseconds after +OK (protocol.md, section 3). The pool's health
// check then finds it on the idle connection: maint must read it there and
// keep the connection, not let the pool discard it, which would make every
// new connection one command long.
func TestReplayedCompletionDoesNotChurnThePool(t *testing.T) {
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			srv := newReplayServer(t, 3*time.Millisecond)
			rdb, m, _ := (&env{t: t}).client(r, &redis.Options{Addr: srv.addr, Protocol: 3, PoolSize: 1, MaxRetries: -1})
			ctx := context.Background()
			for i := 0; i < 30; i++ {
				require.NoError(t, rdb.Ping(ctx).Err())
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("connections accepted: %d; maint %+v", srv.accepted.Load(), m.Stats())
			assert.LessOrEqual(t, srv.accepted.Load(), int64(2))
			assert.NotZero(t, m.Stats().Notifications, "the replay was read")
		})
	}
}

// Two MOVINGs in a row, old -> new, then new -> third, on every route: the
// second is acted on for the address the client dials, so nothing is left
// on "new" for the server to close (the options route used to wrap each dial
// twice and pin the successor's address instead).
func TestChainedMovings(t *testing.T) {
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			third, err := e.emu.AddEndpoint("127.0.0.4:" + e.old.Port())
			if err != nil {
				third, err = e.emu.AddEndpoint("127.0.0.4:0")
			}
			require.NoError(t, err)
			rdb, m, ev := e.client(r, e.options(16))
			require.NoError(t, rdb.Ping(context.Background()).Err())
			l := startLoad(rdb, 8)
			waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 100 })
			e.old.Moving(mainttest.Moving{Window: 2 * time.Second, To: e.new, DNSHost: host, StopAccepting: true})
			waitFor(t, "load on new", 10*time.Second, func() bool { return e.new.Stats().Served > 100 })
			e.new.Moving(mainttest.Moving{Window: 3 * time.Second, To: third, StopAccepting: true})
			e.waitEvent(e.new, mainttest.KindWindowEndClose, 15*time.Second)
			waitFor(t, "load on third", 10*time.Second, func() bool { return third.Stats().Served > 100 })
			l.stop()
			t.Logf("ok=%d failed=%d; maint %+v", l.ok.Load(), l.failed.Load(), m.Stats())
			assert.Zero(t, l.failed.Load(), "failed: %v; events:\n%s", l.errs, ev)
			assert.Zero(t, e.old.Stats().ClosedAtWindowEnd)
			assert.Zero(t, e.new.Stats().ClosedAtWindowEnd)
		})
	}
}

// After a named-successor window the old node may refuse connections while
// DNS still names it: new connections keep going to the successor until DNS
// names another node, and the pin is dropped then.
func TestSuccessorPinOutlivesTheWindowUntilDNSMoves(t *testing.T) {
	e := newEnv(t)
	rdb, m, ev := e.client(routes[0], e.options(16))
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, StopAccepting: true})
	pingUntilRetired(t, rdb, ev)
	e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
	// Past the window, DNS still names the old node, which refuses: a burst
	// that needs new connections must still be served.
	l := startLoad(rdb, 32)
	waitFor(t, "the burst", 10*time.Second, func() bool { return l.ok.Load() > 2000 })
	l.stop()
	assert.Zero(t, l.failed.Load(), "failed: %v; events:\n%s", l.errs, ev)
	assert.Zero(t, e.old.Stats().ClosedAtWindowEnd)

	e.emu.DNS().Set(host, e.new.IP())
	// The pin is probed only while dials go through it (a pin no dial uses
	// costs nothing until its bound): a pool that keeps dialing, as a second
	// client on the same Maint does with each new connection, has it
	// dropped at the next probe.
	waitFor(t, "the pin to be dropped", 10*time.Second, func() bool {
		dialer := m.NewClient(e.options(1))
		require.NoError(t, dialer.Ping(ctx).Err())
		_ = dialer.Close()
		ev.mu.Lock()
		defer ev.mu.Unlock()
		for _, x := range ev.evs {
			if x.Detail == "successor pin dropped" {
				return true
			}
		}
		return false
	})
}

// A caller holding a connection between commands (Conn(), a WATCH
// transaction) looks idle; closing it at once would fail a command the
// server would have let finish. Its next commands run on the old node until
// the drain cap.
func TestHeldConnectionsFinishTheirWork(t *testing.T) {
	e := newEnv(t)
	rdb, _, ev := e.client(routes[0], e.options(8))
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "k", "1", 0).Err())

	held := rdb.Conn()
	defer held.Close()
	require.NoError(t, held.Ping(ctx).Err())

	watching := make(chan struct{})
	moved := make(chan struct{})
	txErr := make(chan error, 1)
	go func() {
		txErr <- rdb.Watch(ctx, func(tx *redis.Tx) error {
			v, err := tx.Get(ctx, "k").Int()
			if err != nil {
				return err
			}
			close(watching)
			<-moved // the MOVING is handled while the transaction holds its connection
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "k", v+1, 0)
				return nil
			})
			return err
		}, "k")
	}()
	<-watching

	// Another command reads the MOVING; the node is retired.
	e.old.Moving(mainttest.Moving{Window: 4 * time.Second, To: e.new})
	pingUntilRetired(t, rdb, ev)
	servedBefore := e.old.Stats().Served
	close(moved)
	require.NoError(t, <-txErr, "the WATCH transaction completes on the old node")
	require.NoError(t, held.Ping(ctx).Err(), "the held connection still serves")
	assert.Greater(t, e.old.Stats().Served, servedBefore, "both ran on the old node")
	v, err := rdb.Get(ctx, "k").Int()
	require.NoError(t, err)
	assert.Equal(t, 2, v)
}

// A MOVING that named a successor pins the target to it past its window
// (while DNS may still lead back). When that successor moves in turn, with
// a null endpoint and a zero window, the pin leads to a node that the
// server closes at once: from its retirement on no new connection goes
// there, before or after the handoff ends. (It used to be kept: the hold
// ended as soon as DNS moved, the handoff with it, and every connection the
// released commands dialled went through the pin to the retiring node,
// wrote its first command there and lost its reply at the server's close;
// with retries an INCR ran twice: the soak, seed 1, under load.)
func TestPinToAMovingNodeIsDroppedAtItsRetirement(t *testing.T) {
	var e *env
	var third *mainttest.Endpoint
	for i := 0; i < 10 && third == nil; i++ {
		e = newEnv(t)
		third, _ = e.emu.AddEndpoint("127.0.0.4:" + e.old.Port())
	}
	require.NotNil(t, third, "a third endpoint on the same port")
	rdb, _, ev := e.client(routes[0], e.options(8))
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())

	e.old.Moving(mainttest.Moving{Window: time.Second, To: e.new, StopAccepting: true})
	pingUntilRetired(t, rdb, ev)
	e.waitEvent(e.old, mainttest.KindWindowEndClose, 10*time.Second)
	e.emu.DNS().Set(host, e.new.IP()) // DNS follows; the pin to "new" stays
	require.NoError(t, rdb.Ping(ctx).Err())

	before := len(ev.all(maint.EventHandoffDone))
	e.new.Moving(mainttest.Moving{Window: 0, To: third, Null: true, CloseJitter: time.Second,
		DNSHost: host, DNSLag: 200 * time.Millisecond})
	waitFor(t, "the zero-window handoff to end", 10*time.Second, func() bool {
		_ = rdb.Ping(ctx).Err() // reads the MOVING, then waits in the hold
		return len(ev.all(maint.EventHandoffDone)) > before
	})
	opened := e.new.Stats().Opened
	// New connections now: every one of the pool's is retired.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			assert.NoError(t, rdb.Incr(ctx, fmt.Sprintf("pin:%d", i)).Err())
		}(i)
	}
	wg.Wait()
	assert.Equal(t, opened, e.new.Stats().Opened, "connections opened to the moving node after its handoff; events:\n%s", ev)
	assert.Positive(t, third.Stats().Served, "the commands ran on the node DNS names")
}

// A zero-window MOVING's handoff sees its replacement at once, but the
// server closes the old node's connections later (Redis Enterprise: seconds
// past a window's end). Until then a new connection that lands on the old
// node by another route (here DNS naming both nodes, dialled in turn) must
// carry no command: the close would cut it under its first one.
func TestLandingOnTheOldNodeBeforeItsLateCloseCarriesNoCommand(t *testing.T) {
	e := newEnv(t)
	const workers = 32
	rdb, _, ev := e.client(routes[0], e.options(workers))
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())

	dns := e.emu.DNS()
	dns.SetRoundRobin(true)
	e.old.Moving(mainttest.Moving{Window: 0, To: e.new, Null: true, CloseJitter: 800 * time.Millisecond})
	dns.Set(host, e.new.IP(), e.old.IP()) // both named: dials alternate
	waitFor(t, "a replacement", 5*time.Second, func() bool {
		_ = rdb.Ping(ctx).Err() // reads the MOVING
		_, ok := ev.first(maint.EventReplacement)
		return ok
	})
	served := e.old.Stats().Served

	// The load grows through the time to the close: a worker joins every
	// 25ms, and each new one makes the pool dial.
	stop := make(chan struct{})
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		e.waitEvent(e.old, mainttest.KindWindowEndClose, 10*time.Second)
	}()
	var ran atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < workers; i++ {
		select {
		case <-closed:
		case <-tick.C:
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := rdb.Incr(ctx, fmt.Sprintf("late:%d", i)).Err(); err != nil {
					t.Errorf("INCR: %v", err)
					return
				}
				ran.Add(1)
			}
		}(i)
	}
	<-closed
	close(stop)
	wg.Wait()

	assert.Equal(t, served, e.old.Stats().Served,
		"commands served on the old node between its handoff and its close; events:\n%s", ev)
	assert.Zero(t, e.old.Stats().OwedAtClose, "replies cut by the close")
	var sum int64
	for i := 0; i < workers; i++ {
		n, err := rdb.Get(ctx, fmt.Sprintf("late:%d", i)).Int64()
		if err == nil {
			sum += n
		}
	}
	assert.Equal(t, ran.Load(), sum, "every INCR ran once")
	assert.Positive(t, ran.Load())
}
