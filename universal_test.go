package maint_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// UniversalClient in every shape redis.NewUniversalClient builds, through
// Group.NewUniversalClient, against emulated deployments: one address (a
// *redis.Client), several addresses and IsClusterMode (a ClusterClient, on
// mainttest's emulated cluster), MasterName (a FailoverClient, through the
// emulated Discovery Service). Each serves commands; every data connection
// opts in (the endpoints count the handshakes), a notification pushed on
// each data node reaches a Maint of the group, and the Discovery Service
// never receives the handshake.
//
// Not covered: MasterName with RouteByLatency, RouteRandomly or
// IsClusterMode, go-redis's FailoverClusterClient. go-redis v9.23.0
// rewrites loopback node addresses there to ":port" (so it reaches only
// nodes on 127.0.0.1, not the emulator's 127.0.0.2 and up) and its Close
// leaves its sentinel client's goroutines running (goleak fails the
// package); see TestUniversalFailoverClusterShapeUnsupportedByGoRedis.
func TestUniversalShapes(t *testing.T) {
	for _, shape := range []string{"OneAddress", "SeveralAddresses", "IsClusterMode", "MasterName"} {
		t.Run(shape, func(t *testing.T) {
			emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
			require.NoError(t, err)
			t.Cleanup(func() { _ = emu.Close() })
			opt := &redis.UniversalOptions{Protocol: 3, PoolSize: 4, MaxRetries: -1}
			var data []*mainttest.Endpoint
			var ds *mainttest.Sentinel
			switch shape {
			case "OneAddress":
				ep, err := emu.AddEndpoint("127.0.0.2:0")
				require.NoError(t, err)
				data = []*mainttest.Endpoint{ep}
				opt.Addrs = []string{ep.Addr()}
			case "SeveralAddresses", "IsClusterMode":
				cl, err := emu.NewCluster(mainttest.ClusterConfig{})
				require.NoError(t, err)
				data = cl.Nodes()
				opt.Addrs = cl.Addrs()
				if shape == "IsClusterMode" {
					opt.Addrs = opt.Addrs[:1]
					opt.IsClusterMode = true
				}
			case "MasterName":
				ep, err := emu.AddEndpoint("127.0.0.2:0")
				require.NoError(t, err)
				data = []*mainttest.Endpoint{ep}
				ds, err = emu.AddSentinel("127.0.0.9:0", "db", ep)
				require.NoError(t, err)
				opt.MasterName = "db"
				opt.Addrs = []string{ds.Addr()}
			}
			ev := &eventLog{}
			g := maint.NewGroup(maint.WithLogf(t.Logf), maint.WithOnEvent(ev.add))
			rdb := g.NewUniversalClient(opt)
			t.Cleanup(func() {
				_ = rdb.Close()
				_ = g.Close()
			})
			want := map[string]string{"OneAddress": "*redis.Client", "MasterName": "*redis.Client",
				"SeveralAddresses": "*redis.ClusterClient", "IsClusterMode": "*redis.ClusterClient"}[shape]
			require.Equal(t, want, fmt.Sprintf("%T", rdb))

			ctx := context.Background()
			serve := func() {
				t.Helper()
				for i := 0; i < 64; i++ { // keys in every third of the slots
					key := fmt.Sprintf("u:%d", i)
					require.NoError(t, rdb.Set(ctx, key, i, 0).Err())
					require.NoError(t, rdb.Get(ctx, key).Err())
				}
			}
			serve()
			for _, ep := range data {
				st := ep.Stats()
				assert.NotZero(t, st.Served, "%s served commands", ep.Addr())
				assert.NotZero(t, st.OptedIn, "%s: connections opted in", ep.Addr())
				assert.Equal(t, st.Handshakes, st.OptedIn, "%s: every handshake it read opted a connection in", ep.Addr())
				assert.Equal(t, st.Opened, st.OptedIn, "%s: every connection opted in", ep.Addr())
			}
			// Watched: a MIGRATING on each data node reaches a Maint.
			for i, ep := range data {
				ep.Migrating(0, `["1"]`)
				waitFor(t, "the MIGRATING of "+ep.Addr()+" read", 10*time.Second, func() bool {
					serve()
					return g.Stats().Relaxations >= uint64(i+1)
				})
				ep.Migrated(`["1"]`)
			}
			if ds != nil {
				assert.Zero(t, ds.Stats().Handshakes, "the Discovery Service received the handshake")
				assert.NotZero(t, ds.Stats().MasterQueries)
			}
			wantMaints := len(data)
			assert.Len(t, g.Maints(), wantMaints, "one Maint per data node client")
			t.Logf("maint %+v", g.Stats())
		})
	}
}

// MasterName with RouteByLatency, RouteRandomly or IsClusterMode makes
// redis.NewUniversalClient build go-redis's FailoverClusterClient, which
// v9.23.0 cannot run against loopback addresses other than 127.0.0.1 (it
// rewrites the master's and replicas' "127.0.0.x:port" to ":port") and
// whose Close leaks its sentinel client (no onClose hook for it: its
// pub/sub goroutines outlive Close and fail the package's goleak check).
// Unsupported by go-redis, so skipped unless MAINTTEST_GOREDIS_LEAKS is set
// (as mainttest's TestGoRedisFailoverClusterClient). Run alone with it, the
// master on 127.0.0.1: maint's Group instruments the ClusterClient it is
// (Group.NewUniversalClient → Instrument), commands are served and the
// Discovery Service never receives the handshake, but the data node's
// connections do not opt in either (pinned below).
func TestUniversalFailoverClusterShapeUnsupportedByGoRedis(t *testing.T) {
	if os.Getenv("MAINTTEST_GOREDIS_LEAKS") == "" {
		t.Skip("go-redis v9.23.0's FailoverClusterClient rewrites loopback node addresses to \":port\" and leaks its sentinel client on Close; set MAINTTEST_GOREDIS_LEAKS=1 and run it alone")
	}
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	ep, err := emu.AddEndpoint("127.0.0.1:0")
	require.NoError(t, err)
	ds, err := emu.AddSentinel("127.0.0.9:0", "db", ep)
	require.NoError(t, err)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	rdb := g.NewUniversalClient(&redis.UniversalOptions{MasterName: "db", Addrs: []string{ds.Addr()},
		RouteRandomly: true, Protocol: 3, MaxRetries: -1})
	t.Cleanup(func() {
		_ = rdb.Close()
		_ = g.Close()
	})
	_, ok := rdb.(*redis.ClusterClient)
	require.True(t, ok, "%T", rdb)
	require.NoError(t, rdb.Set(context.Background(), "k", "v", 0).Err())
	st := ep.Stats()
	t.Logf("master %+v; maint %+v; %d Maints", st, g.Stats(), len(g.Maints()))
	assert.Len(t, g.Maints(), 1, "the master's node client has a Maint")
	// Known gap, pinned: the node clients are instrumented through AddHook,
	// which leaves the opt-in to go-redis's handshake, and go-redis forces
	// its handler off for failover clients: no data connection opts in.
	assert.Zero(t, st.OptedIn, "the master's connections opted in: the gap is closed, update docs/guarantees.md")
	assert.Zero(t, ds.Stats().Handshakes, "the Discovery Service received the handshake")
}

// The Universal route, one address: a *redis.Client whose connections are
// all opted in.
func TestUniversalOneAddress(t *testing.T) {
	e := newEnv(t)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	rdb := g.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{e.old.Addr()}, Protocol: 3, MinIdleConns: 2, PoolSize: 2})
	defer rdb.Close()
	c, ok := rdb.(*redis.Client)
	require.True(t, ok, "%T", rdb)
	waitFor(t, "MinIdleConns dialled", 10*time.Second, func() bool { return e.old.Stats().Opened >= 2 })
	useConns(t, c, 2)
	allOptedIn(t, e.old, 2)
	assert.Len(t, g.Maints(), 1)
}

// The Universal route, several addresses and cluster mode: a ClusterClient
// whose node clients each get a Maint before their first connection. (The
// emulated cluster comes from elsewhere: only the wiring is asserted.)
func TestUniversalClusterShapes(t *testing.T) {
	for _, shape := range []string{"several", "IsClusterMode"} {
		t.Run(shape, func(t *testing.T) {
			e := newEnv(t)
			opt := &redis.UniversalOptions{Addrs: []string{e.old.Addr(), e.new.Addr()}, Protocol: 3, MaxRetries: -1}
			if shape == "IsClusterMode" {
				opt.Addrs = opt.Addrs[:1]
				opt.IsClusterMode = true
			}
			g := maint.NewGroup(maint.WithLogf(t.Logf))
			defer g.Close()
			rdb := g.NewUniversalClient(opt)
			defer rdb.Close()
			_, ok := rdb.(*redis.ClusterClient)
			require.True(t, ok, "%T", rdb)
			_ = rdb.Ping(context.Background()).Err() // the emulator is no cluster: CLUSTER SLOTS fails
			waitFor(t, "node Maints", 5*time.Second, func() bool { return len(g.Maints()) > 0 })
			// go-redis picks a seed at random: either endpoint's connection.
			waitFor(t, "the seed node's connection opted in", 5*time.Second, func() bool {
				return e.old.Stats().OptedIn+e.new.Stats().OptedIn > 0
			})
		})
	}
}

// The Universal route with MasterName: a failover client whose data-node
// connections (MinIdleConns ones included, dialled while the client is
// being built) are opted in, and whose sentinel connections never receive
// the handshake.
func TestUniversalMasterName(t *testing.T) {
	e := newEnv(t)
	s := newFakeSentinel(t, e.old.Addr())
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	rdb := g.NewUniversalClient(&redis.UniversalOptions{
		MasterName: "db", Addrs: []string{s.addr()}, Protocol: 3, MinIdleConns: 2, PoolSize: 2, MaxRetries: -1,
	})
	defer rdb.Close()
	waitFor(t, "MinIdleConns dialled", 10*time.Second, func() bool { return e.old.Stats().Opened >= 2 })
	useConns(t, rdb.(*redis.Client), 2)
	allOptedIn(t, e.old, 2)
	for _, c := range s.commands() {
		assert.False(t, strings.HasPrefix(c, "client maint_notifications"), "the sentinel got %q", c)
	}
	assert.NotEmpty(t, s.commands())
	assert.Len(t, g.Maints(), 1)
}
