package maint_test

// Sharded subscribers follow their slot in every way a slot moves, once,
// by the cluster's word (docs/guarantees.md C5): two ClusterClients on one
// set of options, the first one closed, a move to a node that owned no
// slot, an SMIGRATED go-redis's own reload had already shown, triplets
// naming the nodes in another form than go-redis does, and a late
// SMIGRATED the cluster does not confirm. Each is the proof of
// clusterpubsub_test.go (16 channels over 8 slots, an SPUBLISH on every
// channel every 50 ms, 10 consecutive messages exact on every channel from
// 1 s after the move), with go-redis alone as the control, and at most one
// close per moved subscriber.

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
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

// moveCase is one way a slot moves: how the cluster is changed, once the
// subscribers are up (sub is the subscribing client).
type moveCase struct {
	push bool // the source pushes sunsubscribe to the subscribers it drops
	// prepare changes the cluster before the clients start, and returns
	// the source whose slots the subscribers of the moving slots are on.
	prepare func(t *testing.T, emu *mainttest.Emulator, cl *mainttest.Cluster) (src *mainttest.Endpoint)
	// migrate moves slots (half of src's: src keeps slots, so that no
	// retirement of an emptied node moves its subscribers instead).
	migrate func(ctx context.Context, t *testing.T, emu *mainttest.Emulator, cl *mainttest.Cluster, src *mainttest.Endpoint, slots string, sub *redis.ClusterClient) error
}

// halfOf returns the first half of src's slots, as a slot list, and
// whether a slot is in it.
func halfOf(cl *mainttest.Cluster, src *mainttest.Endpoint) (string, func(int) bool) {
	rs := cl.Slots(src)
	lo, hi := rs[0].Start, rs[0].Start+(rs[0].End-rs[0].Start)/2
	return fmt.Sprintf("%d-%d", lo, hi), func(s int) bool { return s >= lo && s <= hi }
}

// migrate moves slots of src to dst with SMIGRATING and SMIGRATED, the
// triplets named by name (nil: as CLUSTER SLOTS names the nodes).
func migrate(ctx context.Context, emu *mainttest.Emulator, cl *mainttest.Cluster, src, dst *mainttest.Endpoint, slots string, name func(*mainttest.Endpoint) string) error {
	_, err := cl.MigrateSlots(mainttest.SlotMigration{From: src, To: dst, Slots: slots,
		Duration: 100 * time.Millisecond, TripletAddr: name})
	if err != nil {
		return err
	}
	_, err = emu.WaitEvent(ctx, mainttest.IsKind(src, mainttest.KindSMigrated))
	return err
}

// subRoute makes the subscribing ClusterClient of a maint run, and the
// Group the run's counters are read from.
type subRoute struct {
	name string
	mk   func(t *testing.T, g *maint.Group, opt *redis.ClusterOptions) *redis.ClusterClient
}

// oneClient: one ClusterClient, for commands and pub/sub.
var oneClient = subRoute{"one client", func(t *testing.T, g *maint.Group, opt *redis.ClusterOptions) *redis.ClusterClient {
	return g.NewClusterClient(opt)
}}

// secondClient: a ClusterClient for commands, used first, then a second one
// on the same options for pub/sub (options route).
var secondClient = subRoute{"second client on the same options", func(t *testing.T, g *maint.Group, opt *redis.ClusterOptions) *redis.ClusterClient {
	first := g.NewClusterClient(opt)
	t.Cleanup(func() { _ = first.Close() })
	require.NoError(t, first.Ping(context.Background()).Err())
	return g.NewClusterClient(opt)
}}

// secondInstrumented: the same, the second one made by go-redis on the
// configured options and then instrumented.
var secondInstrumented = subRoute{"second client instrumented", func(t *testing.T, g *maint.Group, opt *redis.ClusterOptions) *redis.ClusterClient {
	first := g.NewClusterClient(opt)
	t.Cleanup(func() { _ = first.Close() })
	require.NoError(t, first.Ping(context.Background()).Err())
	cc := redis.NewClusterClient(opt)
	require.NoError(t, g.Instrument(cc))
	return cc
}}

// firstClosed: the first client is closed (not collected) before the
// second one is made.
var firstClosed = subRoute{"first client closed", func(t *testing.T, g *maint.Group, opt *redis.ClusterOptions) *redis.ClusterClient {
	first := g.NewClusterClient(opt)
	require.NoError(t, first.Ping(context.Background()).Err())
	require.NoError(t, first.Close())
	t.Cleanup(func() { runtime.KeepAlive(first) })
	return g.NewClusterClient(opt)
}}

// runMoveCase runs the proof for mc: go-redis alone, then maint by each
// route, each on a cluster of its own.
func runMoveCase(t *testing.T, mc moveCase, routes ...subRoute) {
	var runs []*spResult
	var setup *spSetup
	run := func(name string, isMaint bool, mk func(opt *redis.ClusterOptions) (*redis.ClusterClient, func())) {
		emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
		require.NoError(t, err)
		defer emu.Close()
		cl, err := emu.NewCluster(mainttest.ClusterConfig{})
		require.NoError(t, err)
		cl.SetShardUnsubscribePush(mc.push)
		src := cl.Nodes()[0]
		if mc.prepare != nil {
			src = mc.prepare(t, emu, cl)
		}
		slots, in := halfOf(cl, src)
		groups, moving := spChannels("mv", in, spSlots/3+1)
		var sub *redis.ClusterClient
		setup = &spSetup{addrs: cl.Addrs(), dialer: emu.Dialer(), groups: groups, moving: moving,
			migrate: func(ctx context.Context) error { return mc.migrate(ctx, t, emu, cl, src, slots, sub) }}
		r := shardedPubSubRun(t, name, setup, func(opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
			cc, done := mk(opt)
			sub = cc
			return cc, done
		})
		r.maint = isMaint
		runs = append(runs, r)
	}
	run("no handler", false, spNoMaint)
	for _, rt := range routes {
		run("maint ("+rt.name+")", true, routeRun(t, rt, func() *spSetup { return setup }))
	}
	spCheck(t, setup, runs)
}

// routeRun makes rt's subscribing client on a Group of its own and, at
// the run's end, logs the Group's counters and asserts at most one close
// per subscriber of a moving slot, those of the run's setup.
func routeRun(t *testing.T, rt subRoute, setupOf func() *spSetup) spClient {
	return func(opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
		g := maint.NewGroup()
		cc := rt.mk(t, g, opt)
		return cc, func() {
			setup, movedSubs := setupOf(), 0
			for _, gr := range setup.groups {
				if setup.moving[gr[0]] {
					movedSubs++
				}
			}
			followed, _, _, _ := maint.ShardStats(g, opt)
			st := maint.ClusterStatsOf(g, opt)
			t.Logf("maint (%s): followed=%d of %d moved subscribers; SMIGRATED=%d stale=%d unapplied=%d confirm reads=%d",
				rt.name, followed, movedSubs, st.SMigrated, st.Stale, st.Unapplied, st.ConfirmReads)
			assert.LessOrEqual(t, followed, uint64(movedSubs), "maint (%s): more than one close per moved subscriber", rt.name)
			_ = g.Close()
		}
	}
}

// TestShardedFollowOnTwoClientsOfOneOptions: the subscribers of a second
// ClusterClient on the same options follow by their own client's slot map,
// also when the first one is closed.
func TestShardedFollowOnTwoClientsOfOneOptions(t *testing.T) {
	for _, push := range []bool{true, false} {
		t.Run(fmt.Sprintf("push=%v", push), func(t *testing.T) {
			runMoveCase(t, moveCase{push: push,
				migrate: func(ctx context.Context, t *testing.T, emu *mainttest.Emulator, cl *mainttest.Cluster, src *mainttest.Endpoint, slots string, _ *redis.ClusterClient) error {
					return migrate(ctx, emu, cl, src, cl.Nodes()[1], slots, nil)
				}}, secondClient, secondInstrumented, firstClosed)
		})
	}
}

// TestShardedFollowToANodeWithNoSlotYet: the slots move to a node added
// with no slot (scale-out): a node no CLUSTER SLOTS reply names until the
// move, the SMIGRATED unapplied where the map maint keeps came from CLUSTER
// SLOTS. The source drops its subscribers silently.
func TestShardedFollowToANodeWithNoSlotYet(t *testing.T) {
	var added *mainttest.Endpoint
	runMoveCase(t, moveCase{
		prepare: func(t *testing.T, emu *mainttest.Emulator, cl *mainttest.Cluster) *mainttest.Endpoint {
			var err error
			added, err = cl.AddNode("127.0.0.9:0")
			require.NoError(t, err)
			return cl.Nodes()[0]
		},
		migrate: func(ctx context.Context, t *testing.T, emu *mainttest.Emulator, cl *mainttest.Cluster, src *mainttest.Endpoint, slots string, _ *redis.ClusterClient) error {
			return migrate(ctx, emu, cl, src, added, slots, nil)
		}}, oneClient, secondClient)
}

// TestShardedFollowWhenGoRedisReloadedFirst: go-redis reloaded its map on a
// MOVED before maint read the SMIGRATED (the stale branch).
func TestShardedFollowWhenGoRedisReloadedFirst(t *testing.T) {
	runMoveCase(t, moveCase{
		migrate: func(ctx context.Context, t *testing.T, emu *mainttest.Emulator, cl *mainttest.Cluster, src *mainttest.Endpoint, slots string, sub *redis.ClusterClient) error {
			dst := cl.Nodes()[1]
			_, in := halfOf(cl, src)
			var key string
			for i := 0; ; i++ {
				if key = "k" + strconv.Itoa(i); in(mainttest.KeySlot(key)) {
					break
				}
			}
			if err := cl.SetOwner(slots, dst); err != nil {
				return err
			}
			// A command of the subscriber's client meets MOVED: go-redis
			// follows it and reloads its map from the cluster.
			_ = sub.Get(ctx, key).Err()
			require.Eventually(t, func() bool { return ownerBy(t, sub, key) == dst.Addr() }, 5*time.Second, time.Millisecond)
			src.SMigrated(mainttest.SlotMove{Src: src.Addr(), Dst: dst.Addr(), Slots: slots})
			_, err := emu.WaitEvent(ctx, mainttest.IsKind(src, mainttest.KindSMigrated))
			return err
		}}, oneClient, secondClient)
}

// TestShardedFollowWithTripletsInAnotherForm: the SMIGRATED's triplets
// name the nodes by host name, go-redis by the IPs CLUSTER SLOTS gives:
// maint cannot apply it to its map, and the subscribers still follow, by
// the cluster's map.
func TestShardedFollowWithTripletsInAnotherForm(t *testing.T) {
	byName := func(ep *mainttest.Endpoint) string {
		return "node-" + strings.ReplaceAll(ep.IP(), ".", "-") + ".cluster.test:" + ep.Port()
	}
	runMoveCase(t, moveCase{
		migrate: func(ctx context.Context, t *testing.T, emu *mainttest.Emulator, cl *mainttest.Cluster, src *mainttest.Endpoint, slots string, _ *redis.ClusterClient) error {
			return migrate(ctx, emu, cl, src, cl.Nodes()[1], slots, byName)
		}}, oneClient, secondClient)
}

// TestShardedLateSMigratedMovesNothing: an SMIGRATED for slots that are
// still (or again) at their source, a late copy whose sequence id was
// forgotten: maint applies it to the map it serves, but the cluster's map
// does not confirm the move, so no subscriber moves, every channel keeps
// delivering, and the served map stops being served.
func TestShardedLateSMigratedMovesNothing(t *testing.T) {
	for _, rt := range []subRoute{oneClient, secondClient} {
		t.Run(rt.name, func(t *testing.T) {
			emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
			require.NoError(t, err)
			defer emu.Close()
			cl, err := emu.NewCluster(mainttest.ClusterConfig{})
			require.NoError(t, err)
			cl.SetShardUnsubscribePush(false)
			a, b := cl.Nodes()[0], cl.Nodes()[1]
			groups, moving := spChannels("late", func(s int) bool { return cl.Owner(s) == a }, spSlots/3+1)
			setup := &spSetup{addrs: cl.Addrs(), dialer: emu.Dialer(), groups: groups, moving: moving,
				migrate: func(ctx context.Context) error {
					a.SMigrated(mainttest.SlotMove{Src: a.Addr(), Dst: b.Addr(), Slots: mainttest.FormatSlots(cl.Slots(a))})
					_, err := emu.WaitEvent(ctx, mainttest.IsKind(a, mainttest.KindSMigrated))
					return err
				}}
			var followed uint64
			var st maint.ClusterStats
			r := shardedPubSubRun(t, rt.name, setup, func(opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
				g := maint.NewGroup()
				cc := rt.mk(t, g, opt)
				return cc, func() {
					followed, _, _, _ = maint.ShardStats(g, opt)
					st = maint.ClusterStatsOf(g, opt)
					_ = g.Close()
				}
			})
			t.Logf("followed=%d SMIGRATED=%d refuted=%d contradicted=%d confirm reads=%d", followed, st.SMigrated, st.Refuted, st.Contradicted, st.ConfirmReads)
			for ch, n := range r.missing {
				assert.Zero(t, n, "%s missed %d of the %d messages checked", ch, n, spChecked)
			}
			for ch, n := range r.dup {
				assert.Zero(t, n, "%s got %d messages twice", ch, n)
			}
			assert.Zero(t, followed, "a subscriber was moved on a move the cluster never made")
			assert.Equal(t, uint64(1), st.SMigrated, "the SMIGRATED was not acted on: the test proves nothing")
			assert.NotZero(t, st.ConfirmReads, "maint never asked the cluster")
		})
	}
}

// TestShardedFollowWhenTheSlotComesBack: a slot leaves a subscriber's node
// and comes back before go-redis's slot map showed it elsewhere (here
// go-redis's map stays stale meanwhile): the node dropped the slot's
// subscribers when it gave it away, so the subscriber moves, once, back to
// the node it is on, whether the node said so with sunsubscribe or maint
// read the cluster's map while the slot was away. (Found by
// TestShardedFollowProperty, seeds 9 and 25: the subscriber stayed silent
// for good.)
func TestShardedFollowWhenTheSlotComesBack(t *testing.T) {
	for _, push := range []bool{true, false} {
		t.Run(fmt.Sprintf("push=%v", push), func(t *testing.T) {
			ctx := context.Background()
			emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
			require.NoError(t, err)
			defer emu.Close()
			// Distinct ports: with ClusterSlots go-redis names loopback nodes ":port".
			cl, err := emu.NewCluster(mainttest.ClusterConfig{Addrs: []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}})
			require.NoError(t, err)
			cl.SetShardUnsubscribePush(push)
			a, b := cl.Nodes()[0], cl.Nodes()[1]
			g := maint.NewGroup(maint.WithLogf(t.Logf))
			defer g.Close()
			sc := newStaleableCluster(t, cl, g, "back")
			defer sc.close()
			x, stale, opt, cc, pub := sc.x, &sc.stale, sc.opt, sc.cc, sc.pub
			slot := strconv.Itoa(mainttest.KeySlot(x))
			ps := cc.SSubscribe(ctx, x)
			defer ps.Close()
			msgs := ps.Channel()
			require.True(t, spublishUntilSeen(ctx, pub, msgs, x, 5*time.Second))

			// go-redis's map gives the slot to a throughout.
			stale.Store(true)
			require.NoError(t, cl.SetOwner(slot, b))
			if !push {
				a.SMigrated(mainttest.SlotMove{Src: a.Addr(), Dst: b.Addr(), Slots: slot})
				// maint read the cluster's map while the slot was at b.
				waitFor(t, "maint's read of the cluster's map", 5*time.Second, func() bool {
					return maint.ClusterStatsOf(g, opt).ConfirmReads > 0
				})
			}
			require.NoError(t, cl.SetOwner(slot, a))
			assert.True(t, spublishUntilSeen(ctx, pub, msgs, x, 3*time.Second),
				"the subscriber stayed on %s, which dropped it when the slot left, and never resubscribed", a.Addr())
			followed, _, _, _ := maint.ShardStats(g, opt)
			assert.Equal(t, uint64(1), followed)
		})
	}
}

// TestShardedFollowWhenTheSlotLeavesTheNewOwnerToo: maint closes a
// subscriber for go-redis to resubscribe on the slot's new owner, and the
// slot leaves that node before go-redis's SSUBSCRIBE reaches it (here its
// dial is held until then): the SSUBSCRIBE meets MOVED, which go-redis
// never retries, and the subscriber follows the slot again, to where it is
// now. (Found by TestShardedFollowProperty, seed 44: a slot given to a new
// node and moved back at once; the subscriber stayed silent.)
func TestShardedFollowWhenTheSlotLeavesTheNewOwnerToo(t *testing.T) {
	ctx := context.Background()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	a, b, c := cl.Nodes()[0], cl.Nodes()[1], cl.Nodes()[2]
	var tag string
	for i := 0; ; i++ {
		if tag = "twice" + strconv.Itoa(i); cl.OwnerOf(tag) == a {
			break
		}
	}
	x := "{" + tag + "}:x"
	slot := strconv.Itoa(mainttest.KeySlot(x))

	// Once the subscriber's connection to a is closed, the next dial to b
	// (go-redis's PubSub reconnecting) waits for release.
	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	dial := emu.Dialer()
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == b.Addr() && armed.Load() {
				first := false
				once.Do(func() { first = true })
				if first {
					close(held)
					select {
					case <-release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
			}
			nc, err := dial(ctx, network, addr)
			if err == nil && addr == a.Addr() {
				nc = &subscriberConn{Conn: nc, closed: func() { armed.Store(true) }}
			}
			return nc, err
		}}
	cc := g.NewClusterClient(opt)
	defer cc.Close()
	pub := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()})
	defer pub.Close()
	ps := cc.SSubscribe(ctx, x)
	defer ps.Close()
	msgs := ps.Channel()
	require.True(t, spublishUntilSeen(ctx, pub, msgs, x, 5*time.Second))

	require.NoError(t, cl.SetOwner(slot, b)) // a pushes sunsubscribe
	select {
	case <-held: // maint closed the subscriber; go-redis dials b to resubscribe
	case <-time.After(5 * time.Second):
		t.Fatal("go-redis never dialled b to resubscribe")
	}
	require.NoError(t, cl.SetOwner(slot, c))
	close(release)
	assert.True(t, spublishUntilSeen(ctx, pub, msgs, x, 3*time.Second),
		"the subscriber resubscribed on %s after the slot left it, met MOVED and stayed silent", b.Addr())
	followed, _, _, _ := maint.ShardStats(g, opt)
	assert.Equal(t, uint64(2), followed, "one close per move")
}

// TestShardedFollowWhenTheServerClosesASubscriberOnAStaleMap: the node a
// sharded subscriber is on closes its connection (here with every other:
// a removed node does so once its slots are gone) while go-redis's slot
// map is stale: go-redis resubscribes by it, on a node that no longer has
// the slot, meets MOVED and never retries. The resubscription follows the
// slot, once the maps agree on where it is. (Found by
// TestShardedFollowProperty, seed 53: a removed node closed a subscriber
// that maint had not moved yet, while the slot map maint served was wrong.)
func TestShardedFollowWhenTheServerClosesASubscriberOnAStaleMap(t *testing.T) {
	ctx := context.Background()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	// Distinct ports: with ClusterSlots go-redis names loopback nodes ":port".
	cl, err := emu.NewCluster(mainttest.ClusterConfig{Addrs: []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}, LogRedirects: true})
	require.NoError(t, err)
	cl.SetShardUnsubscribePush(false)
	a, b := cl.Nodes()[0], cl.Nodes()[1]
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	sc := newStaleableCluster(t, cl, g, "closed")
	defer sc.close()
	x, stale, opt, cc, pub := sc.x, &sc.stale, sc.opt, sc.cc, sc.pub
	ps := cc.SSubscribe(ctx, x)
	defer ps.Close()
	msgs := ps.Channel()
	require.True(t, spublishUntilSeen(ctx, pub, msgs, x, 5*time.Second))

	// go-redis's map still gives the slot to a when a closes the subscriber.
	stale.Store(true)
	require.NoError(t, cl.SetOwner(strconv.Itoa(mainttest.KeySlot(x)), b))
	mark := len(emu.Events())
	a.CloseAll()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = emu.WaitEvent(rctx, after(mark, mainttest.IsKind(a, mainttest.KindRedirect)))
	require.NoError(t, err, "go-redis never resubscribed on %s", a.Addr())
	stale.Store(false)
	assert.True(t, spublishUntilSeen(ctx, pub, msgs, x, 3*time.Second),
		"the subscriber resubscribed on %s by a stale map, met MOVED and stayed silent", a.Addr())
	followed, _, _, _ := maint.ShardStats(g, opt)
	assert.Equal(t, uint64(1), followed)
}

// subscriberConn calls closed when a connection that wrote an SSUBSCRIBE
// is closed.
type subscriberConn struct {
	net.Conn
	sub    atomic.Bool
	closed func()
}

func (c *subscriberConn) Write(p []byte) (int, error) {
	if strings.Contains(strings.ToLower(string(p)), "ssubscribe") {
		c.sub.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *subscriberConn) Close() error {
	if c.sub.Load() {
		c.closed()
	}
	return c.Conn.Close()
}

// heldSlotRead is an application's hook on every node client, outside
// maint's: while armed, the first slot-map read maint makes itself (a
// follow's confirming read) waits, its reply in hand, until release.
type heldSlotRead struct {
	armed         *atomic.Bool
	once          *sync.Once
	read, release chan struct{}
}

func (heldSlotRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h heldSlotRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if _, ok := cmd.(*redis.ClusterSlotsCmd); ok && h.armed.Load() && maint.IsOwnRead(ctx) {
			first := false
			h.once.Do(func() { first = true })
			if first {
				close(h.read)
				<-h.release
			}
		}
		return err
	}
}
func (heldSlotRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestShardedFollowOfASignalDuringAnotherFollow: a follow holds a
// subscriber (a late SMIGRATED naming another node as the source, which
// moves nothing) while its slot really moves and the SMIGRATED of that
// comes: the first follow, reading the cluster's map from before the move,
// lets the subscriber go as home; the signal that came meanwhile is not
// lost, the subscriber follows its slot. (Found by
// TestShardedFollowProperty, seed 167: a resubscription's follow held the
// subscriber when its new node gave the slot away; it stayed silent.)
func TestShardedFollowOfASignalDuringAnotherFollow(t *testing.T) {
	ctx := context.Background()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	cl.SetShardUnsubscribePush(false)
	a, b, c := cl.Nodes()[0], cl.Nodes()[1], cl.Nodes()[2]
	var tag string
	for i := 0; ; i++ {
		if tag = "during" + strconv.Itoa(i); cl.OwnerOf(tag) == a {
			break
		}
	}
	x := "{" + tag + "}:x"
	slot := strconv.Itoa(mainttest.KeySlot(x))
	h := heldSlotRead{armed: new(atomic.Bool), once: new(sync.Once), read: make(chan struct{}), release: make(chan struct{})}
	defer func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	}()
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer(),
		NewClient: func(o *redis.Options) *redis.Client {
			cli := redis.NewClient(o)
			cli.AddHook(h)
			return cli
		}}
	cc := g.NewClusterClient(opt)
	defer cc.Close()
	pub := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()})
	defer pub.Close()
	ps := cc.SSubscribe(ctx, x)
	defer ps.Close()
	msgs := ps.Channel()
	require.True(t, spublishUntilSeen(ctx, pub, msgs, x, 5*time.Second))

	// The first follow: a late SMIGRATED from b (maint's map has the slot
	// at a: it is not applied), read on the client's connection to b, its
	// read of the cluster's map held.
	var kb string
	for i := 0; ; i++ {
		if kb = "kb" + strconv.Itoa(i); cl.OwnerOf(kb) == b {
			break
		}
	}
	require.NoError(t, cc.Set(ctx, kb, "1", 0).Err())
	h.armed.Store(true)
	b.SMigrated(mainttest.SlotMove{Src: b.Addr(), Dst: c.Addr(), Slots: slot})
	require.NoError(t, cc.Get(ctx, kb).Err())
	select {
	case <-h.read:
	case <-time.After(5 * time.Second):
		t.Fatal("maint never read the cluster's map for the late SMIGRATED")
	}
	// The slot moves to b, silently but for a's SMIGRATED, which maint
	// reads while the first follow holds the subscriber.
	require.NoError(t, cl.SetOwner(slot, b))
	a.SMigrated(mainttest.SlotMove{Src: a.Addr(), Dst: b.Addr(), Slots: slot})
	waitFor(t, "maint to read a's SMIGRATED", 5*time.Second, func() bool {
		st := maint.ClusterStatsOf(g, opt)
		return st.SMigrated+st.Unapplied+st.Stale >= 2
	})
	close(h.release)
	assert.True(t, spublishUntilSeen(ctx, pub, msgs, x, 5*time.Second),
		"the subscriber stayed on %s: the SMIGRATED read while another follow held it was lost", a.Addr())
	followed, _, _, _ := maint.ShardStats(g, opt)
	assert.Equal(t, uint64(1), followed)
}
