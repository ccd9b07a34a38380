package maint_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// While a node is relaxed, its connections stay busy with slow replies for
// longer than go-redis's PoolTimeout expects: a command that timed out
// waiting for a pool connection (it was never written) gets more turns,
// bounded by its context and the relaxed timeout, instead of failing.
func TestPoolTimeoutDuringRelaxationIsRetried(t *testing.T) {
	e := newEnv(t)
	opt := e.options(2)
	opt.ReadTimeout = 300 * time.Millisecond
	opt.PoolTimeout = 200 * time.Millisecond
	rdb, m, _ := e.client(routes[0], opt, maint.WithRelaxedTimeout(3*time.Second))
	ctx := context.Background()
	assert.NoError(t, rdb.Ping(ctx).Err())
	e.old.SetMaintLatency(600 * time.Millisecond)
	e.old.Migrating(0, `["1"]`)
	waitFor(t, "relaxation", 10*time.Second, func() bool {
		_ = rdb.Ping(ctx).Err() // reads the MIGRATING
		return m.Stats().Relaxations > 0
	})
	var wg sync.WaitGroup
	var failed atomic.Int64
	errs := sync.Map{}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rdb.Ping(ctx).Err(); err != nil {
				failed.Add(1)
				errs.Store(err.Error(), true)
			}
		}()
	}
	wg.Wait()
	var es []string
	errs.Range(func(k, _ any) bool { es = append(es, k.(string)); return true })
	assert.Zero(t, failed.Load(), "failed: %v", es)
	assert.NotZero(t, m.Stats().PoolRetries, "some commands waited more than one pool timeout")
}

// Relaxation covers a slow server during MIGRATING; after
// MIGRATED and the tail, the configured timeout is back.
func TestRelaxationDuringMigrating(t *testing.T) {
	e := newEnv(t)
	ev := &eventLog{}
	const tail = 300 * time.Millisecond
	m := newMaint(t, ev, maint.WithRelaxedTimeout(3*time.Second), maint.WithRelaxedTail(tail))
	rdb := e.directClient(e.old, m, 500*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	e.old.SetCommandLatency("ECHO", 1500*time.Millisecond)

	err := rdb.Echo(ctx, "x").Err()
	require.True(t, isTimeout(err), "a 1.5s command must time out before maintenance: %v", err)
	require.NoError(t, rdb.Ping(ctx).Err()) // a new connection: the timeout closed the old one

	e.old.Migrating(0, shards)
	require.NoError(t, rdb.Ping(ctx).Err())
	for i := 0; i < 2; i++ {
		require.NoError(t, rdb.Echo(ctx, "x").Err(), "during MIGRATING; events:\n%s", ev)
	}

	e.old.Migrated(shards)
	var end maint.Event
	waitFor(t, "relax-end", 5*time.Second, func() bool {
		require.NoError(t, rdb.Ping(ctx).Err())
		var ok bool
		end, ok = ev.first(maint.EventRelaxEnd)
		return ok
	})
	waitFor(t, "the tail to pass", 5*time.Second, func() bool { return time.Since(end.At) > tail+50*time.Millisecond })
	err = rdb.Echo(ctx, "x").Err()
	assert.True(t, isTimeout(err), "after MIGRATED and the tail a 1.5s command must time out again: %v", err)
}

// Relaxation is a floor. An infinite block stays
// infinite, and a longer configured timeout is not shortened.
func TestRelaxationIsAFloor(t *testing.T) {
	e := newEnv(t)
	ev := &eventLog{}
	m := newMaint(t, ev, maint.WithRelaxedTimeout(500*time.Millisecond))
	ctx := context.Background()

	t.Run("BLPOP 0 outlives twice the relaxed timeout", func(t *testing.T) {
		rdb := e.directClient(e.old, m, 3*time.Second)
		require.NoError(t, rdb.Ping(ctx).Err())
		e.old.Migrating(0, shards)
		require.NoError(t, rdb.Ping(ctx).Err()) // reads the MIGRATING
		_, ok := ev.first(maint.EventRelax)
		require.True(t, ok)
		res := make(chan error, 1)
		go func() { res <- rdb.BLPop(ctx, 0, "q").Err() }()
		pusher := redis.NewClient(&redis.Options{Addr: e.new.Addr()})
		defer pusher.Close()
		time.Sleep(1200 * time.Millisecond) // the BLPOP must still be blocked after 2x the relaxed timeout
		require.NoError(t, pusher.RPush(ctx, "q", "v").Err())
		select {
		case err := <-res:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("BLPOP never returned")
		}
	})

	t.Run("a 10s ReadTimeout is not shortened", func(t *testing.T) {
		m2 := newMaint(t, ev, maint.WithRelaxedTimeout(time.Second))
		rdb := e.directClient(e.new, m2, 10*time.Second)
		require.NoError(t, rdb.Ping(ctx).Err())
		e.new.Migrating(0, shards)
		require.NoError(t, rdb.Ping(ctx).Err())
		e.new.SetCommandLatency("ECHO", 2*time.Second)
		defer e.new.SetCommandLatency("ECHO", 0)
		require.NoError(t, rdb.Echo(ctx, "x").Err())
	})
}

// Relaxation on node A leaves node B's timeouts alone, even
// with one Maint for both.
func TestRelaxationIsPerNode(t *testing.T) {
	e := newEnv(t)
	ev := &eventLog{}
	m := newMaint(t, ev, maint.WithRelaxedTimeout(3*time.Second))
	a := e.directClient(e.old, m, 500*time.Millisecond)
	b := e.directClient(e.new, m, 500*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, a.Ping(ctx).Err())
	require.NoError(t, b.Ping(ctx).Err())
	e.old.SetCommandLatency("ECHO", 1500*time.Millisecond)
	e.new.SetCommandLatency("ECHO", 1500*time.Millisecond)
	e.old.Migrating(0, shards)
	require.NoError(t, a.Ping(ctx).Err())
	require.NoError(t, a.Echo(ctx, "x").Err(), "node A is migrating: relaxed")
	err := b.Echo(ctx, "x").Err()
	assert.True(t, isTimeout(err), "node B is not migrating: %v", err)
}

// The server replays the latest MIGRATED to every newly
// opted-in connection; the replay relaxes nothing.
func TestReplayedCompletionDoesNotRelax(t *testing.T) {
	e := newEnv(t)
	e.old.Migrating(0, shards)
	e.old.Migrated(shards)
	ev := &eventLog{}
	m := newMaint(t, ev, maint.WithRelaxedTimeout(3*time.Second))
	rdb := e.directClient(e.old, m, 500*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	e.waitEvent(e.old, mainttest.KindReplay, 5*time.Second)
	waitFor(t, "the replay to be read", 5*time.Second, func() bool {
		require.NoError(t, rdb.Ping(ctx).Err())
		return m.Stats().Notifications > 0
	})
	e.old.SetCommandLatency("ECHO", 1500*time.Millisecond)
	err := rdb.Echo(ctx, "x").Err()
	assert.True(t, isTimeout(err), "a replayed completion must not relax: %v", err)
	assert.Zero(t, m.Stats().Relaxations)
}

// Short timeouts, relaxation off, steady load, a MOVING
// whose DNS lags the window: held work is not failed by its own timeout.
// The timeouts are short against the hold (the DNS lags the window by 1.5 s,
// the timeouts are 600 ms) but not so short that a starved test machine fails
// commands that no maintenance touched.
func TestShortTimeoutsRelaxationOffKeepsHeldWork(t *testing.T) {
	e := newEnv(t)
	opt := e.options(8)
	opt.ReadTimeout = 600 * time.Millisecond
	opt.WriteTimeout = 600 * time.Millisecond
	rdb, m, ev := e.client(routes[0], opt, maint.WithRelaxedTimeout(-1))
	require.NoError(t, rdb.Ping(context.Background()).Err())
	l := startLoad(rdb, 16)
	waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, StopAccepting: true,
		DNSHost: host, DNSLag: window + 1500*time.Millisecond})
	e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
	waitFor(t, "load on the new node", 10*time.Second, func() bool { return e.new.Stats().Served > 200 })
	l.stop()
	t.Logf("ok=%d failed=%d; maint %+v", l.ok.Load(), l.failed.Load(), m.Stats())
	assert.Zero(t, l.failed.Load(), "failed: %v; events:\n%s", l.errs, ev)
	assert.NotZero(t, m.Stats().Held)
	held, ok := ev.first(maint.EventHeld)
	require.True(t, ok, "no held event; events:\n%s", ev)
	assert.Greater(t, held.Duration, opt.ReadTimeout, "the longest hold outlasted the read timeout, and nothing failed")
}

// Short timeouts are relaxed too, and the error names the relaxation only
// when one was applied: node-redis's criterion, a timeout during maintenance
// within ±20% of the relaxed timeout and a maintenance error; after it, back
// to the normal timeout and a plain error. A 50 ms ReadTimeout, on both
// install routes.
func TestShortTimeoutIsRelaxed(t *testing.T) {
	const (
		readTimeout = 50 * time.Millisecond
		relaxed     = time.Second
		tail        = 200 * time.Millisecond
	)
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			opt := e.options(1)
			opt.ReadTimeout, opt.WriteTimeout = readTimeout, readTimeout
			rdb, _, ev := e.client(r, opt, maint.WithRelaxedTimeout(relaxed), maint.WithRelaxedTail(tail))
			ctx := context.Background()
			// A starved machine may time a PING out at 50 ms: the PINGs only
			// carry the notifications, their errors are not the point.
			waitFor(t, "a first command", 10*time.Second, func() bool { return rdb.Ping(ctx).Err() == nil })
			e.old.Migrating(0, shards)
			waitFor(t, "the relaxation", 10*time.Second, func() bool {
				_ = rdb.Ping(ctx).Err()
				_, ok := ev.first(maint.EventRelax)
				return ok
			})
			e.old.SetCommandLatency("ECHO", 3*time.Second)
			start := time.Now()
			err := rdb.Echo(ctx, "x").Err()
			took := time.Since(start)
			t.Logf("during maintenance: %v after %v", err, took)
			require.True(t, isTimeout(err), "during maintenance: %v", err)
			var te *maint.TimeoutError
			assert.True(t, errors.As(err, &te), "a maintenance error: %v", err)
			assert.Contains(t, err.Error(), "relaxed to at least 1s")
			assert.GreaterOrEqual(t, took, relaxed*8/10, "not relaxed: timed out after %v", took)
			assert.Less(t, took, 3*relaxed, "timed out after %v", took)

			e.old.SetCommandLatency("ECHO", 0)
			e.old.Migrated(shards)
			var end maint.Event
			waitFor(t, "relax-end", 10*time.Second, func() bool {
				_ = rdb.Ping(ctx).Err()
				var ok bool
				end, ok = ev.first(maint.EventRelaxEnd)
				return ok
			})
			waitFor(t, "relaxation off", 10*time.Second, func() bool { _, ok := ev.first(maint.EventRelaxOff); return ok })
			require.Greater(t, time.Since(end.At), tail)
			e.old.SetCommandLatency("ECHO", 3*time.Second)
			start = time.Now()
			err = rdb.Echo(ctx, "x").Err()
			took = time.Since(start)
			t.Logf("after maintenance: %v after %v", err, took)
			require.True(t, isTimeout(err), "after maintenance: %v", err)
			assert.False(t, errors.As(err, &te), "a plain error after maintenance: %v", err)
			assert.GreaterOrEqual(t, took, readTimeout*8/10)
			assert.Less(t, took, relaxed/2, "still relaxed after the tail: timed out after %v", took)
		})
	}
}

// relaxedGauge follows a Group's observer events as a relaxed-timeout
// gauge does (maintotel's redis.client.connection.relaxed_timeout): +1 at
// RelaxOn, -1 at RelaxOff, per node.
type relaxedGauge struct {
	mu     sync.Mutex
	byNode map[string]int
	ons    int
}

func observeRelaxed(g *maint.Group) *relaxedGauge {
	r := &relaxedGauge{byNode: map[string]int{}}
	g.Observe(func(e maint.Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		switch e.Kind {
		case maint.EventRelaxOn:
			r.byNode[e.Node]++
			r.ons++
		case maint.EventRelaxOff:
			r.byNode[e.Node]--
		}
	})
	return r
}

func (r *relaxedGauge) on() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ons
}

// zero reports whether every node's gauge is back at 0.
func (r *relaxedGauge) zero() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.byNode {
		if v != 0 {
			return false
		}
	}
	return true
}

func (r *relaxedGauge) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.byNode)
}

// relaxUntilSeen sends a MIGRATING (or FAILING_OVER) on ep and runs
// commands until the gauge has gone up.
func relaxUntilSeen(t *testing.T, r *relaxedGauge, ep *mainttest.Endpoint, failing bool, ping func() error) {
	t.Helper()
	if failing {
		ep.FailingOver(0, "1")
	} else {
		ep.Migrating(0, `["1"]`)
	}
	waitFor(t, "the node relaxed", 10*time.Second, func() bool {
		_ = ping()
		return r.on() > 0
	})
}

// Every kind of client relaxed by a maintenance and then closed, the
// client first or the group first, leaves the relaxed gauge at 0.
func TestRelaxedGaugeBackToZeroAtClose(t *testing.T) {
	ctx := context.Background()
	type built struct {
		close func() error
		ping  func() error
		ep    *mainttest.Endpoint
		fail  bool
	}
	kinds := map[string]func(t *testing.T, g *maint.Group) built{
		"Client": func(t *testing.T, g *maint.Group) built {
			e := newEnv(t)
			rdb := g.NewClient(e.options(4))
			return built{rdb.Close, func() error { return rdb.Ping(ctx).Err() }, e.old, false}
		},
		"FailoverClient": func(t *testing.T, g *maint.Group) built {
			e := newEnv(t)
			rdb := g.NewFailoverClient(dsOptions(e.newDiscovery(), -1))
			return built{rdb.Close, func() error { return rdb.Ping(ctx).Err() }, e.old, true}
		},
		"Ring": func(t *testing.T, g *maint.Group) built {
			e := newEnv(t)
			rng := g.NewRing(ringOptions(map[string]string{"a": e.old.Addr()}))
			return built{rng.Close, func() error { return rng.Ping(ctx).Err() }, e.old, false}
		},
		"ClusterClient": func(t *testing.T, g *maint.Group) built {
			emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
			require.NoError(t, err)
			t.Cleanup(func() { _ = emu.Close() })
			cl, err := emu.NewCluster(mainttest.ClusterConfig{})
			require.NoError(t, err)
			cc := g.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3, PoolSize: 4})
			ping := func() error {
				return cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
			}
			return built{cc.Close, ping, cl.Nodes()[0], false}
		},
	}
	for name, build := range kinds {
		for _, groupFirst := range []bool{false, true} {
			order := "ClientFirst"
			if groupFirst {
				order = "GroupFirst"
			}
			t.Run(name+"/"+order, func(t *testing.T) {
				g := maint.NewGroup(maint.WithLogf(t.Logf))
				r := observeRelaxed(g)
				b := build(t, g)
				require.NoError(t, b.ping())
				relaxUntilSeen(t, r, b.ep, b.fail, b.ping)
				if groupFirst {
					require.NoError(t, g.Close())
					_ = b.close()
				} else {
					_ = b.close()
					require.NoError(t, g.Close())
				}
				assert.True(t, r.zero(), "relaxed gauge per node after close: %s", r)
			})
		}
	}
}

// A Ring shard that SetAddrs drops while a MIGRATING relaxes it: the
// Group forgets its Maint, and the gauge goes back to 0 before the Ring
// or the Group is closed.
func TestRelaxedGaugeBackToZeroWhenRingDropsTheShard(t *testing.T) {
	e := newEnv(t)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	r := observeRelaxed(g)
	rng := g.NewRing(ringOptions(map[string]string{"a": e.old.Addr(), "b": e.new.Addr()}))
	defer rng.Close()
	ctx := context.Background()
	ping := func() error {
		return rng.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
	}
	require.NoError(t, ping())
	relaxUntilSeen(t, r, e.old, false, ping)
	require.False(t, r.zero())
	rng.SetAddrs(map[string]string{"b": e.new.Addr()})
	waitFor(t, "the dropped shard's Maint forgotten", 20*time.Second, func() bool { return len(g.Maints()) == 1 })
	assert.True(t, r.zero(), "relaxed gauge per node once the shard is forgotten: %s", r)
}
