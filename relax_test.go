package maint_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

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

// relaxUntilSeen sends a MIGRATING (or FAILING_OVER) on ep and runs
// commands until the gauge has gone up.
func relaxUntilSeen(t *testing.T, r *relaxedGauge, ep *mainttest.Endpoint, failing bool, ping func() error) {
	t.Helper()
	push := func() {
		if failing {
			ep.FailingOver(0, "1")
		} else {
			ep.Migrating(0, `["1"]`)
		}
	}
	// A server tells the connections opted in when it announces, and
	// replays no open MIGRATING or FAILING_OVER to later ones: a push that
	// went only to an idle connection the pool does not hand out (its
	// MinIdleConns still dialling, LIFO reuse) is read by nobody for as long
	// as the test waits. A connection that opted in after the push, told
	// nothing, gets a new one.
	optedIn := ep.Stats().OptedIn
	push()
	waitFor(t, "the node relaxed", 10*time.Second, func() bool {
		_ = ping()
		if r.on() > 0 {
			return true
		}
		if n := ep.Stats().OptedIn; n != optedIn {
			optedIn = n
			push()
		}
		return false
	})
}
