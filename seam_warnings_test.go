package maint_test

// A seam maint relies on that does not behave at run time as maint expects
// is said once at Warn and counted, so that an operator can see which part
// of maint is not in force.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// go-redis's slot-map reload that never reaches maint's hooks on the node
// clients (here a hook of the application's, outside maint's, answers it
// from a client of its own, as go-redis's ClusterOptions.ClusterSlots or a
// release that loaded its topology another way would): each SMIGRATED's
// reload is counted in ReloadsUnseen, the first said at Warn, once;
// commands still succeed (go-redis follows the MOVEDs).
func TestClusterReloadNotThroughHooksIsSaid(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	direct := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0], Dialer: emu.Dialer(), Protocol: 3})
	defer direct.Close()
	answer := funcHook{process: func(next redis.ProcessHook) redis.ProcessHook {
		return func(ctx context.Context, cmd redis.Cmder) error {
			switch c := cmd.(type) {
			case *redis.ClusterShardsCmd:
				v, err := direct.ClusterShards(ctx).Result()
				c.SetVal(v)
				c.SetErr(err)
				return err
			case *redis.ClusterSlotsCmd:
				v, err := direct.ClusterSlots(ctx).Result()
				c.SetVal(v)
				c.SetErr(err)
				return err
			}
			return next(ctx, cmd)
		}
	}}
	opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(answer) // before maint's: outside it
			return c
		}}
	logs := &records{level: slog.LevelWarn}
	g := maint.NewGroup(maint.WithLogger(slog.New(logs)))
	defer g.Close()
	cc := g.NewClusterClient(opt)
	defer cc.Close()
	ctx := context.Background()
	require.NoError(t, cc.Ping(ctx).Err())
	n0, n1 := cl.Nodes()[0], cl.Nodes()[1]
	for i := range 10 {
		require.NoError(t, cc.Set(ctx, "k"+string(rune('a'+i)), "v", 0).Err())
	}

	unseen := func() uint64 {
		var n uint64
		for _, m := range g.Maints() {
			n = max(n, m.ClusterStats().ReloadsUnseen)
		}
		return n
	}
	said := func() int {
		n := 0
		for msg, c := range logs.byMessage() {
			if strings.Contains(msg, "did not pass through maint's node hooks") {
				n += c
			}
		}
		return n
	}
	for i, slots := range []string{"0-100", "101-200"} {
		_, err := cl.MigrateSlots(mainttest.SlotMigration{From: n0, To: n1, Slots: slots, Duration: 100 * time.Millisecond})
		require.NoError(t, err)
		waitFor(t, "the reload counted unseen", 20*time.Second, func() bool {
			// Commands read the SMIGRATED on the connections they use.
			for j := range 10 {
				_ = cc.Get(ctx, "k"+string(rune('a'+j))).Err()
			}
			return unseen() == uint64(i+1)
		})
	}
	assert.Equal(t, 1, said(), "said once")
	for i := range 10 {
		assert.NoError(t, cc.Get(ctx, "k"+string(rune('a'+i))).Err(), "go-redis follows the cluster")
	}
}

// A client whose connections open without the maintenance opt-in is told
// of nothing: maint is installed but off. It is said once at Warn and
// counted (Stats.NoOptIn), on every install route, for RESP2 and for a
// client with go-redis's notifications disabled on the hook-only route
// (as NewMultiDBClient leaves its members); a client that opts in says
// nothing.
func TestNoOptInIsSaid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		r     route
		tune  func(*redis.Options)
		saids int
	}{
		{"RESP2/AddHook", routes[0], func(o *redis.Options) { o.Protocol = 2 }, 1},
		{"RESP2/Options", routes[1], func(o *redis.Options) { o.Protocol = 2 }, 1},
		{"RESP2/ConfigureOnly", routes[2], func(o *redis.Options) { o.Protocol = 2 }, 1},
		{"NotificationsDisabled/AddHook", routes[0], func(o *redis.Options) { o.MaintNotificationsConfig = builtinOff() }, 1},
		{"OptedIn/AddHook", routes[0], nil, 0},
		{"OptedIn/Options", routes[1], nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			logs := &records{level: slog.LevelWarn}
			opt := e.options(4)
			if tc.tune != nil {
				tc.tune(opt)
			}
			rdb, m, _ := e.client(tc.r, opt, maint.WithLogger(slog.New(logs)))
			ctx := context.Background()
			var wg sync.WaitGroup
			for i := range 8 { // several connections
				wg.Add(1)
				go func() {
					defer wg.Done()
					assert.NoError(t, rdb.Set(ctx, fmt.Sprint("k", i), "v", 0).Err())
				}()
			}
			wg.Wait()
			n := 0
			for msg, k := range logs.byMessage() {
				if strings.Contains(msg, "without the maintenance opt-in") {
					n += k
					assert.Contains(t, msg, "RESP3")
				}
			}
			assert.Equal(t, tc.saids, n, "said: %v", logs.byMessage())
			if tc.saids > 0 {
				assert.NotZero(t, m.Stats().NoOptIn)
				assert.Zero(t, e.old.Stats().OptedIn, "no connection opted in")
			} else {
				assert.Zero(t, m.Stats().NoOptIn)
				assert.NotZero(t, e.old.Stats().OptedIn)
			}
		})
	}
}

// A RESP2 client of many nodes (a cluster, a ring) is said to be without
// the opt-in once, not once per node client: by the Group's options route
// and by Instrument.
func TestNoOptInIsSaidOncePerClient(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	a, err := emu.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)
	b, err := emu.AddEndpoint("127.0.0.3:0")
	require.NoError(t, err)
	copt := func() *redis.ClusterOptions {
		return &redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 2}
	}
	for _, tc := range []struct {
		name string
		make func(g *maint.Group) redis.UniversalClient
	}{
		{"Group.NewClusterClient", func(g *maint.Group) redis.UniversalClient { return g.NewClusterClient(copt()) }},
		{"Group.Instrument(ClusterClient)", func(g *maint.Group) redis.UniversalClient {
			cc := redis.NewClusterClient(copt())
			require.NoError(t, g.Instrument(cc))
			return cc
		}},
		{"Group.NewUniversalClient (cluster)", func(g *maint.Group) redis.UniversalClient {
			return g.NewUniversalClient(&redis.UniversalOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 2})
		}},
		{"Group.NewRing", func(g *maint.Group) redis.UniversalClient {
			return g.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}, Dialer: emu.Dialer(), Protocol: 2})
		}},
		{"Group.Instrument(Ring)", func(g *maint.Group) redis.UniversalClient {
			ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}, Dialer: emu.Dialer(), Protocol: 2})
			require.NoError(t, g.Instrument(ring))
			return ring
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &records{level: slog.LevelWarn}
			g := maint.NewGroup(maint.WithLogger(slog.New(logs)))
			defer g.Close()
			rdb := tc.make(g)
			defer rdb.Close()
			for i := range 40 { // keys on every node
				require.NoError(t, rdb.Set(context.Background(), fmt.Sprint("k", i), "v", 0).Err())
			}
			require.Greater(t, len(g.Maints()), 1, "a client of several node clients")
			n := 0
			for msg, k := range logs.byMessage() {
				if strings.Contains(msg, "without the maintenance opt-in") {
					n += k
				}
			}
			assert.Equal(t, 1, n, "said once for the client: %v", logs.byMessage())
			assert.NotZero(t, g.Stats().NoOptIn)
		})
	}
}

// A RESP2 failover client (Sentinel, the Discovery Service) is said to be
// without the opt-in once, by the Group's route and with AddHook alike.
func TestNoOptInIsSaidOnFailoverClient(t *testing.T) {
	for _, route := range []string{"Group.NewFailoverClient", "AddHook"} {
		t.Run(route, func(t *testing.T) {
			e := newEnv(t)
			ds := e.newDiscovery()
			opt := dsOptions(ds, -1)
			opt.Protocol = 2
			logs := &records{level: slog.LevelWarn}
			log := maint.WithLogger(slog.New(logs))
			var rdb *redis.Client
			var stats func() maint.Stats
			if route == "AddHook" {
				m := maint.New(log)
				defer m.Close()
				rdb = redis.NewFailoverClient(opt)
				rdb.AddHook(m)
				stats = m.Stats
			} else {
				g := maint.NewGroup(log)
				defer g.Close()
				rdb = g.NewFailoverClient(opt)
				stats = g.Stats
			}
			defer rdb.Close()
			for i := range 20 {
				require.NoError(t, rdb.Set(context.Background(), fmt.Sprint("k", i), "v", 0).Err())
			}
			n := 0
			for msg, k := range logs.byMessage() {
				if strings.Contains(msg, "without the maintenance opt-in") {
					n += k
				}
			}
			assert.Equal(t, 1, n, "said once: %v", logs.byMessage())
			assert.NotZero(t, stats().NoOptIn)
		})
	}
}
