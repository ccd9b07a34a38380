package maint_test

// Contract tests of go-redis's ClusterClient: what maint's cluster handling
// (cluster.go) relies on in go-redis v9.23.0 and v9.24.0. maint routes
// nothing: it makes go-redis's slot map right at an SMIGRATED by answering
// the slot-map load of go-redis's reload (CLUSTER SHARDS or SLOTS) from a
// node client's hook, and lets go-redis route, follow MOVED and ASK, run
// hooks and retry.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// slotMapHook is on every node client of a contract test's ClusterClient:
// it counts the slot-map loads go-redis sends (CLUSTER SHARDS from v9.24
// on, CLUSTER SLOTS before: both are counted in sent and replied), and
// answers them itself with serve's map when set (what maint does after an
// SMIGRATED).
type slotMapHook struct {
	sent, served atomic.Int64
	replied      atomic.Int64 // loads sent and answered (next returned)
	slots        atomic.Int64 // of sent, the CLUSTER SLOTS
	shards       atomic.Int64 // of sent, the CLUSTER SHARDS
	serve        atomic.Pointer[servedMap]
	block        atomic.Pointer[chan struct{}] // when set, a reload waits on it
	// refuseShards answers CLUSTER SHARDS with an error, as a server or
	// an ACL without the command does.
	refuseShards atomic.Bool
}

// servedMap is a slot map in both forms a node hook may be asked for.
type servedMap struct {
	slots  []redis.ClusterSlot
	shards []redis.ClusterShard
}

func (h *slotMapHook) hook() redis.Hook {
	return funcHook{process: func(next redis.ProcessHook) redis.ProcessHook {
		return func(ctx context.Context, cmd redis.Cmder) error {
			switch cmd.(type) {
			case *redis.ClusterSlotsCmd, *redis.ClusterShardsCmd:
			default:
				return next(ctx, cmd)
			}
			if b := h.block.Load(); b != nil {
				<-*b
			}
			if sc, ok := cmd.(*redis.ClusterShardsCmd); ok && h.refuseShards.Load() {
				h.shards.Add(1)
				sc.SetErr(errors.New("ERR unknown subcommand 'shards'"))
				return sc.Err()
			}
			if m := h.serve.Load(); m != nil {
				h.served.Add(1)
				switch c := cmd.(type) {
				case *redis.ClusterSlotsCmd:
					c.SetVal(m.slots)
				case *redis.ClusterShardsCmd:
					c.SetVal(m.shards)
				}
				return nil
			}
			h.sent.Add(1)
			if _, ok := cmd.(*redis.ClusterShardsCmd); ok {
				h.shards.Add(1)
			} else {
				h.slots.Add(1)
			}
			err := next(ctx, cmd)
			h.replied.Add(1)
			return err
		}
	}}
}

// emuCluster is a 3-node emulated cluster and a ClusterClient without maint.
type emuCluster struct {
	emu *mainttest.Emulator
	cl  *mainttest.Cluster
	cc  *redis.ClusterClient
	h   *slotMapHook
}

func newEmuCluster(t *testing.T, mod func(*redis.ClusterOptions)) *emuCluster {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3, MinRetryBackoff: time.Second, MaxRetryBackoff: time.Second}
	if mod != nil {
		mod(opt)
	}
	ec := &emuCluster{emu: emu, cl: cl, h: &slotMapHook{}}
	ec.cc = redis.NewClusterClient(opt)
	ec.cc.OnNewNode(func(c *redis.Client) { c.AddHook(ec.h.hook()) })
	t.Cleanup(func() { _ = ec.cc.Close() })
	require.NoError(t, ec.cc.Ping(context.Background()).Err())
	return ec
}

// moved sums the MOVED replies the nodes sent.
func (ec *emuCluster) moved() int64 {
	var n int64
	for _, ep := range ec.cl.Nodes() {
		n += ep.Stats().Cluster.Moved
	}
	return n
}

// slotMap is the emulated cluster's map now, in both forms.
func (ec *emuCluster) slotMap(t *testing.T) *servedMap {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: ec.cl.Addrs()[0], Dialer: ec.emu.Dialer(), Protocol: 3})
	defer c.Close()
	slots, err := c.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	shards, err := c.ClusterShards(context.Background()).Result()
	require.NoError(t, err)
	return &servedMap{slots: slots, shards: shards}
}

// keyOn returns a key (with prefix) whose slot ep owns.
func (ec *emuCluster) keyOn(ep *mainttest.Endpoint, prefix string) string {
	for i := 0; ; i++ {
		k := prefix + strconv.Itoa(i)
		if ec.cl.OwnerOf(k) == ep {
			return k
		}
	}
}

// go-redis loads its slot map with a command sent through a node client,
// whose hooks see it: the first load, and the reload ReloadState asks for.
// From v9.24.0 on it is a *redis.ClusterShardsCmd, with a
// *redis.ClusterSlotsCmd through the same hooks when the node refuses
// CLUSTER SHARDS; before, a *redis.ClusterSlotsCmd only. That is where
// maint keeps the slot map and answers the reload an SMIGRATED asks for
// (cluster.go load). Checked on v9.23.0 and v9.24.0.
func TestContractClusterReloadThroughNodeHook(t *testing.T) {
	ec := newEmuCluster(t, nil)
	shardsFirst := goRedisAtLeast(9, 24)
	require.Positive(t, ec.h.sent.Load(), "the first slot map no longer comes through a node client's hooks")
	if shardsFirst {
		require.Positive(t, ec.h.shards.Load(), "go-redis %s no longer loads its first slot map with CLUSTER SHARDS", redis.Version())
		assert.Zero(t, ec.h.slots.Load(), "go-redis %s sent CLUSTER SLOTS although the node answered CLUSTER SHARDS", redis.Version())
	} else {
		require.Positive(t, ec.h.slots.Load(), "go-redis %s no longer loads its first slot map with CLUSTER SLOTS", redis.Version())
		assert.Zero(t, ec.h.shards.Load(), "go-redis %s loads its slot map with CLUSTER SHARDS: maint answers it (cluster.go asLoad), update this test's release line", redis.Version())
	}
	n := ec.h.sent.Load()
	ec.cc.ReloadState(context.Background())
	require.Eventually(t, func() bool { return ec.h.sent.Load() > n }, 5*time.Second, 5*time.Millisecond,
		"ReloadState no longer reloads through a node client's hooks")
	if !shardsFirst {
		return
	}
	// A node that refuses CLUSTER SHARDS: CLUSTER SLOTS follows, through
	// the same hooks.
	time.Sleep(250 * time.Millisecond) // past the reload's cooldown
	ec.h.refuseShards.Store(true)
	slots := ec.h.slots.Load()
	ec.cc.ReloadState(context.Background())
	require.Eventually(t, func() bool { return ec.h.slots.Load() > slots }, 5*time.Second, 5*time.Millisecond,
		"a refused CLUSTER SHARDS is no longer followed by a CLUSTER SLOTS through the node client's hooks")
}

// A node client's hook that answers go-redis's slot-map load itself (the
// reply set, next not called; CLUSTER SHARDS from v9.24.0 on, CLUSTER SLOTS
// before) gives go-redis its slot map: no load reaches a node, and
// commands go straight to the owners it names, with no MOVED. That is the
// reload at no round trip maint serves after an SMIGRATED. Checked on
// v9.23.0 and v9.24.0.
func TestContractClusterNodeHookServesSlotMap(t *testing.T) {
	ec := newEmuCluster(t, nil)
	ctx := context.Background()
	n0, n1 := ec.cl.Nodes()[0], ec.cl.Nodes()[1]
	k := ec.keyOn(n0, "k")
	require.NoError(t, ec.cl.SetOwner(strconv.Itoa(mainttest.KeySlot(k)), n1)) // no notification
	ec.h.serve.Store(ec.slotMap(t))
	maps := n0.Stats().Cluster.SlotMaps + n1.Stats().Cluster.SlotMaps + ec.cl.Nodes()[2].Stats().Cluster.SlotMaps
	time.Sleep(250 * time.Millisecond) // past the first load's cooldown
	ec.cc.ReloadState(ctx)
	require.Eventually(t, func() bool { return ec.h.served.Load() > 0 }, 5*time.Second, time.Millisecond)
	// The reply is installed just after the hook returns.
	require.Eventually(t, func() bool {
		c, err := ec.cc.MasterForKey(ctx, k)
		return err == nil && c.Options().Addr == n1.Addr()
	}, 5*time.Second, time.Millisecond, "go-redis does not route by the slot map a node hook answered")
	moved := ec.moved()
	require.NoError(t, ec.cc.Incr(ctx, k).Err())
	assert.Equal(t, moved, ec.moved(), "a MOVED: go-redis did not route by the map served")
	assert.Equal(t, maps, n0.Stats().Cluster.SlotMaps+n1.Stats().Cluster.SlotMaps+ec.cl.Nodes()[2].Stats().Cluster.SlotMaps,
		"a slot-map load reached a node")
}

// ReloadState is lazy: it returns at once and go-redis reloads on a
// goroutine of its own. A request while a reload runs is folded into it (no
// reload after it: the running one may have read the old map); a request in
// the 200 ms cooldown after a reload brings one more. maint asks for the
// reload as it reads the SMIGRATED (from the goroutine reading the
// connection: it must not block), and a CLUSTER SLOTS already in flight
// then gets the SMIGRATED's moves done on its reply (cluster.go hand); it
// serves its map for serveFor (1 s), past the cooldown. Checked on v9.23.0
// and v9.24.0 (whose concurrent reloads share one load).
func TestContractClusterLazyReload(t *testing.T) {
	ec := newEmuCluster(t, nil)
	time.Sleep(250 * time.Millisecond) // past the first load's cooldown
	block := make(chan struct{})
	ec.h.block.Store(&block)
	n := ec.h.sent.Load()
	start := time.Now()
	ec.cc.ReloadState(context.Background())
	assert.Less(t, time.Since(start), 100*time.Millisecond, "ReloadState waited for the reload")
	time.Sleep(20 * time.Millisecond)
	ec.cc.ReloadState(context.Background()) // during the blocked reload
	ec.cc.ReloadState(context.Background())
	ec.h.block.Store(nil)
	close(block)
	require.Eventually(t, func() bool { return ec.h.sent.Load() == n+1 }, 5*time.Second, time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	assert.EqualValues(t, n+1, ec.h.sent.Load(), "requests during a reload now bring a reload after it: maint's in-flight handling may be simplified")
	// A request within the cooldown after a reload: one more.
	ec.cc.ReloadState(context.Background())
	// Just after that reload completed, within its cooldown: its reply in,
	// not only sent, or the request is folded into the reload still running.
	require.Eventually(t, func() bool { return ec.h.replied.Load() == n+2 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	ec.cc.ReloadState(context.Background())
	require.Eventually(t, func() bool { return ec.h.sent.Load() == n+3 }, 5*time.Second, 5*time.Millisecond,
		"a reload asked just after one completed no longer reloads again")
}

// go-redis follows a MOVED at once (no retry backoff) for a command, a
// pipeline (in the order written), a transaction (whole, on the new owner)
// and Watch (the whole function again), and reloads its slot map. That is
// what commands racing maint's reload meet: one round trip, never a
// failure. With MaxRedirects -1 a MOVED is go-redis's own error. Checked on
// v9.23.0 and v9.24.0.
func TestContractClusterFollowsMoved(t *testing.T) {
	ec := newEmuCluster(t, nil)
	ctx := context.Background()
	n0, n1 := ec.cl.Nodes()[0], ec.cl.Nodes()[1]
	move := func(k string) {
		t.Helper()
		require.NoError(t, ec.cl.SetOwner(strconv.Itoa(mainttest.KeySlot(k)), n1))
	}
	sent := ec.h.sent.Load()

	k := ec.keyOn(n0, "c")
	move(k)
	start := time.Now()
	require.NoError(t, ec.cc.Incr(ctx, k).Err(), "a command meeting MOVED")
	assert.Less(t, time.Since(start), 500*time.Millisecond, "go-redis waited a retry backoff before following a MOVED")
	require.Eventually(t, func() bool { return ec.h.sent.Load() > sent }, 5*time.Second, time.Millisecond,
		"go-redis no longer reloads its slot map on a MOVED")

	s := ec.keyOn(n0, "{s}")
	move(s)
	cmds, err := ec.cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XGroupCreateMkStream(ctx, s, "g", "$")
		p.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"f", "v"}})
		return nil
	})
	require.NoError(t, err, "a pipeline meeting MOVED")
	require.Len(t, cmds, 2)
	got, err := ec.cc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{s, ">"}, Count: 10, Block: -1}).Result()
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Len(t, got[0].Messages, 1, "the pipeline ran out of order after the MOVED: the group started after the entry")

	tag := ec.keyOn(n0, "{t")
	tag = "{" + tag + "}"
	move(tag)
	txc, err := ec.cc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, tag+"a")
		p.Incr(ctx, tag+"b")
		return nil
	})
	require.NoError(t, err, "a transaction meeting MOVED")
	assert.EqualValues(t, 1, txc[1].(*redis.IntCmd).Val())

	w := "{" + ec.keyOn(n0, "w") + "}"
	move(w)
	runs := 0
	err = ec.cc.Watch(ctx, func(tx *redis.Tx) error {
		runs++
		n, err := tx.Get(ctx, w).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, w, n+1, 0)
			return nil
		})
		return err
	}, w)
	require.NoError(t, err, "Watch meeting MOVED")
	assert.Equal(t, 1, runs, "the WATCH met the MOVED before the function ran: it ran once, whole, on the new owner")
	v, err := ec.cc.Get(ctx, w).Int()
	require.NoError(t, err)
	assert.Equal(t, 1, v)

	// MaxRedirects -1: no redirect followed, go-redis's own MOVED error.
	nr := newEmuCluster(t, func(o *redis.ClusterOptions) { o.MaxRedirects = -1 })
	k2 := nr.keyOn(nr.cl.Nodes()[0], "r")
	require.NoError(t, nr.cl.SetOwner(strconv.Itoa(mainttest.KeySlot(k2)), nr.cl.Nodes()[1]))
	err = nr.cc.Incr(ctx, k2).Err()
	_, isMoved := redis.IsMovedError(err)
	assert.True(t, isMoved, "with MaxRedirects -1 a MOVED is the command's error: %v", err)
}

// go-redis routes XGROUP by its stream (argument 2), not by its
// subcommand: what maint must never second-guess.
func TestContractClusterRoutesXGroupByStream(t *testing.T) {
	ec := newEmuCluster(t, nil)
	ctx := context.Background()
	s := ec.keyOn(ec.cl.Nodes()[2], "x")
	if ec.cl.OwnerOf("create") == ec.cl.Nodes()[2] {
		s = ec.keyOn(ec.cl.Nodes()[1], "x")
	}
	moved := ec.moved()
	require.NoError(t, ec.cc.XGroupCreateMkStream(ctx, s, "g", "$").Err())
	require.NoError(t, ec.cc.XGroupDestroy(ctx, s, "g").Err())
	assert.Equal(t, moved, ec.moved(), "go-redis no longer routes XGROUP by its stream")
}

// go-redis names the nodes of a slot map read from origin by their address
// in the reply, except a loopback address read from a non-loopback origin,
// which takes the origin's host (traffic here still goes to loopback only:
// the Dialer sends every address to one miniredis). maint names nodes as
// go-redis does (GoRedisAddr). With ClusterOptions.ClusterSlots the origin
// is empty: go-redis names a loopback node ":port", not the address its
// MOVEDs give: one reason maint does not serve its map through
// ClusterSlots (docs/design.md).
func TestContractClusterAddressRewrite(t *testing.T) {
	mr := miniredis.RunT(t)
	_, port, _ := net.SplitHostPort(mr.Addr())
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, mr.Addr())
	}
	names := func(opt *redis.ClusterOptions) []string {
		var mu sync.Mutex
		var out []string
		opt.Dialer, opt.Protocol = dial, 3
		cc := redis.NewClusterClient(opt)
		defer cc.Close()
		cc.OnNewNode(func(c *redis.Client) {
			mu.Lock()
			out = append(out, c.Options().Addr)
			mu.Unlock()
		})
		require.NoError(t, cc.Set(context.Background(), "k", "v", 0).Err())
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), out...)
	}
	origin := "10.255.255.1:" + port
	got := names(&redis.ClusterOptions{Addrs: []string{origin}})
	assert.Contains(t, got, origin, "go-redis no longer rewrites a loopback node read from a non-loopback origin")
	assert.Equal(t, origin, maint.GoRedisAddr(mr.Addr(), origin))
	got = names(&redis.ClusterOptions{Addrs: []string{mr.Addr()}})
	assert.NotContains(t, got, ":"+port)
	assert.Equal(t, mr.Addr(), maint.GoRedisAddr(mr.Addr(), mr.Addr()), "a loopback origin keeps the reply's addresses")
	got = names(&redis.ClusterOptions{Addrs: []string{mr.Addr()}, ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: mr.Addr()}}}}, nil
	}})
	assert.Contains(t, got, ":"+port, "with ClusterSlots go-redis no longer names a loopback node \":port\"")
}

// go-redis's ClusterClient runs again, in its next attempt, a node's
// pipeline batch that got no connection (a pool timeout): it re-queues the
// batch inside the node client's pipeline hook chain, before next returns
// (processPipelineNode), so the node client's hooks see the timeout and
// then, at the next attempt, the batch again. A node client's hook that ran
// the batch again itself would run its writes twice: maint's pipeline hook
// leaves that rerun to go-redis on a cluster node client, even while a node
// is relaxed, when it gives a standalone client's pool timeout more turns
// (docs/guarantees.md M11). Both columns: the INCR runs once and succeeds,
// and the node's pipeline hook sees two calls.
func TestContractClusterRequeuesABatchThatGotNoConnection(t *testing.T) {
	for _, withMaint := range []bool{false, true} {
		t.Run(map[bool]string{false: "go-redis", true: "maint"}[withMaint], func(t *testing.T) {
			emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
			require.NoError(t, err)
			t.Cleanup(func() { _ = emu.Close() })
			cl, err := emu.NewCluster(mainttest.ClusterConfig{})
			require.NoError(t, err)
			var held atomic.Pointer[redis.Conn]
			var calls, timeouts atomic.Int64
			watch := funcHook{pipeline: func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
				return func(ctx context.Context, cmds []redis.Cmder) error {
					err := next(ctx, cmds)
					if _, ok := cmds[0].(*redis.IntCmd); !ok {
						return err
					}
					calls.Add(1)
					if errors.Is(err, redis.ErrPoolTimeout) {
						timeouts.Add(1)
						if c := held.Swap(nil); c != nil {
							_ = c.Close() // the next attempt gets the connection
						}
					}
					return err
				}
			}}
			opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3,
				PoolSize: 1, PoolTimeout: 100 * time.Millisecond, MaxRedirects: 3,
				MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond,
				NewClient: func(o *redis.Options) *redis.Client {
					o.PipelinePoolSize = -1 // pipelines on the main pool, whose only connection is held
					c := redis.NewClient(o)
					c.AddHook(watch) // inside maint's hooks on the maint route
					return c
				}}
			var cc *redis.ClusterClient
			relaxed := make(chan struct{}, 1)
			if withMaint {
				g := maint.NewGroup(maint.WithLogf(t.Logf), maint.WithOnEvent(func(e maint.Event) {
					if e.Kind == maint.EventRelaxOn {
						select {
						case relaxed <- struct{}{}:
						default:
						}
					}
				}))
				t.Cleanup(func() { _ = g.Close() })
				cc = g.NewClusterClient(opt)
			} else {
				cc = redis.NewClusterClient(opt)
			}
			t.Cleanup(func() { _ = cc.Close() })
			ctx := context.Background()
			const key = "requeued"
			node, err := cc.MasterForKey(ctx, key)
			require.NoError(t, err)
			conn := node.Conn() // the node's only connection, held
			t.Cleanup(func() { _ = conn.Close() })
			require.NoError(t, conn.Ping(ctx).Err(), "the connection dialled and opted in")
			if withMaint {
				// The node relaxed: maint would give a standalone client's
				// pool timeout more turns now.
				cl.OwnerOf(key).Migrating(0, `["1"]`)
				require.NoError(t, conn.Ping(ctx).Err(), "the held connection reads the MIGRATING")
				select {
				case <-relaxed:
				case <-time.After(10 * time.Second):
					t.Fatal("the node was never relaxed")
				}
			}
			held.Store(conn)
			var incr *redis.IntCmd
			_, err = cc.Pipelined(ctx, func(p redis.Pipeliner) error {
				incr = p.Incr(ctx, key)
				return nil
			})
			require.NoError(t, err, "the batch ran at go-redis's next attempt")
			assert.EqualValues(t, 1, incr.Val())
			assert.EqualValues(t, 1, timeouts.Load(), "the first attempt got no connection")
			assert.EqualValues(t, 2, calls.Load(), "the node's pipeline hook saw the timeout, then the batch again")
			got, err := cc.Get(ctx, key).Int()
			require.NoError(t, err)
			assert.Equal(t, 1, got, "the INCR ran once")
		})
	}
}

// go-redis v9.23's ClusterClient.Watch reports success without running the
// function when MOVED or ASK replies use up MaxRedirects: each redirect
// sets err to the nil of looking the next node up, and the loop ends on it.
// An application reads nil and believes its transaction committed. maint
// cannot see Watch (it is not a hook), so it can neither cause nor mend
// this; TestRealClusterReshard counts such phantom successes apart from the
// acknowledged writes, for it met them under load during real reshards
// (a WATCH redirected back and forth while a slot changes hands). If this
// test fails, go-redis has fixed it: drop the phantom accounting there.
func TestContractClusterWatchSucceedsWithoutRunningWhenRedirectsRunOut(t *testing.T) {
	ec := newEmuCluster(t, func(o *redis.ClusterOptions) { o.MaxRedirects = 2; o.MinRetryBackoff, o.MaxRetryBackoff = -1, -1 })
	ctx := context.Background()
	n0, n1 := ec.cl.Nodes()[0], ec.cl.Nodes()[1]
	w := ec.keyOn(n0, "w")
	var watches atomic.Int64
	// Every WATCH meets a MOVED: a slot that changes hands faster than
	// go-redis follows it.
	ec.cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		c.AddHook(funcHook{process: func(next redis.ProcessHook) redis.ProcessHook {
			return func(ctx context.Context, cmd redis.Cmder) error {
				if cmd.Name() == "watch" {
					watches.Add(1)
					err := errors.New("MOVED " + strconv.Itoa(mainttest.KeySlot(w)) + " " + n1.Addr())
					cmd.SetErr(err)
					return err
				}
				return next(ctx, cmd)
			}
		}})
		return nil
	})
	runs := 0
	err := ec.cc.Watch(ctx, func(tx *redis.Tx) error {
		runs++
		return nil
	}, w)
	assert.EqualValues(t, 3, watches.Load(), "one WATCH per attempt, MaxRedirects+1 attempts")
	assert.NoError(t, err, "go-redis now returns the redirect when MaxRedirects runs out: drop the phantom accounting of TestRealClusterReshard")
	assert.Zero(t, runs, "the function never ran")
}
