package maint_test

// Sharded pub/sub follows its slot: 16 sharded channels over 8 slots (two
// per slot, one go-redis PubSub per slot), a publisher SPUBLISHing on every
// channel every 50ms, a third of the slots moving. One second after the
// migration, 10 consecutive messages on every channel must arrive exactly
// once, with maint; without it go-redis loses the moved channels (proving
// the test can fail). The emulated cluster here, the real redis-server
// cluster tier in realcluster_pubsub_test.go.

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

const (
	spSlots    = 8  // slots with subscribers, two channels each
	spPerSlot  = 2  // channels per slot (one PubSub subscribes to both)
	spChecked  = 10 // consecutive messages that must all arrive
	spInterval = 50 * time.Millisecond
)

// spClient makes the subscribing ClusterClient of a run, and says how to
// close what it made besides the client.
type spClient func(opt *redis.ClusterOptions) (*redis.ClusterClient, func())

// spNoMaint is a bare ClusterClient: go-redis alone.
func spNoMaint(opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
	return redis.NewClusterClient(opt), func() {}
}

// spMaint is a ClusterClient with maint on the options route.
func spMaint(opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
	g := maint.NewGroup()
	return g.NewClusterClient(opt), func() { _ = g.Close() }
}

// spInstrumented is a ClusterClient with maint installed by Instrument.
func spInstrumented(t *testing.T) spClient {
	return func(opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
		cc := redis.NewClusterClient(opt)
		g, err := maint.Instrument(cc)
		require.NoError(t, err)
		return cc, func() { _ = g.Close() }
	}
}

// spCase is one client of a proof.
type spCase struct {
	name  string
	mk    spClient
	maint bool // maint is installed: every checked message must arrive
}

// spClients are the clients of the proofs: go-redis alone (its built-in
// handler in its default mode, auto, and with emulated, also forced on),
// then maint by both routes.
func spClients(t *testing.T, emulated bool) []spCase {
	cs := []spCase{{name: "no handler (go-redis's built-in: auto)", mk: spNoMaint}}
	if emulated {
		cs = append(cs, spCase{name: "go-redis's built-in handler (enabled)", mk: spBuiltin})
	}
	return append(cs,
		spCase{name: "maint (options route)", mk: spMaint, maint: true},
		spCase{name: "maint (Instrument)", mk: spInstrumented(t), maint: true})
}

// spBuiltin is a bare ClusterClient with go-redis's own maintenance
// handler required on.
func spBuiltin(opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeEnabled}
	return redis.NewClusterClient(opt), func() {}
}

// movingSlots returns the slots of the moving channels.
func movingSlots(moving map[string]bool) []int {
	var slots []int
	seen := map[int]bool{}
	for ch := range moving {
		if s := mainttest.KeySlot(ch); !seen[s] {
			seen[s] = true
			slots = append(slots, s)
		}
	}
	return slots
}

// spSetup is the cluster of a run: its addresses, a dialer (the emulator's,
// or nil), the channels of each subscribed slot, which of them move, and the
// migration.
type spSetup struct {
	addrs   []string
	dialer  func(ctx context.Context, network, addr string) (net.Conn, error)
	groups  [][]string
	moving  map[string]bool
	migrate func(ctx context.Context) error
	// kind is "" for sharded pub/sub (SSUBSCRIBE, SPUBLISH), "subscribe"
	// or "psubscribe" (one pattern per group) with PUBLISH.
	kind string
}

// kindName is the confirmation a subscription of s's kind gets.
func (s *spSetup) kindName() string {
	if s.kind == "" {
		return "ssubscribe"
	}
	return s.kind
}

// spResult is what one run saw of the spChecked messages published from one
// second after the migration on.
type spResult struct {
	name      string
	maint     bool           // maint was installed
	missing   map[string]int // channel → checked messages that never arrived
	dup       map[string]int // channel → checked messages that arrived twice
	published int            // SPUBLISH calls that succeeded
	pubErrs   []string
	// gap is the most rounds in a row any moved channel missed, over the
	// whole run (the migration included).
	gap int
}

// lostMoved and lostStill count the channels that missed a checked message,
// among the moving ones and the others.
func (r *spResult) lost(s *spSetup) (moved, still int) {
	for ch, n := range r.missing {
		if n == 0 {
			continue
		}
		if s.moving[ch] {
			moved++
		} else {
			still++
		}
	}
	return moved, still
}

func (r *spResult) String() string {
	var parts []string
	for ch, n := range r.missing {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s:-%d", ch, n))
		}
	}
	for ch, n := range r.dup {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s:+%d", ch, n))
		}
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s: published=%d pubErrs=%v longest gap of a moved channel=%d rounds (%v); channels off=%v",
		r.name, r.published, r.pubErrs, r.gap, time.Duration(r.gap)*spInterval, parts)
}

// spChannels picks spSlots hash tags, spMoving of them in slots moving(slot)
// says move and the others in slots it says stay, and names spPerSlot
// channels per tag.
func spChannels(prefix string, moving func(slot int) bool, nMoving int) (groups [][]string, moved map[string]bool) {
	moved = map[string]bool{}
	used := map[int]bool{}
	stay := 0
	for i := 0; len(groups) < spSlots; i++ {
		tag := prefix + strconv.Itoa(i)
		s := mainttest.KeySlot(tag)
		if used[s] {
			continue
		}
		m := moving(s)
		if m && len(moved) >= nMoving*spPerSlot || !m && stay >= spSlots-nMoving {
			continue
		}
		used[s] = true
		var g []string
		for j := 0; j < spPerSlot; j++ {
			ch := "{" + tag + "}:ch" + strconv.Itoa(j)
			g = append(g, ch)
			if m {
				moved[ch] = true
			}
		}
		if !m {
			stay++
		}
		groups = append(groups, g)
	}
	return groups, moved
}

// shardedPubSubRun subscribes, publishes, migrates and checks, as the file's
// comment says.
func shardedPubSubRun(t *testing.T, name string, s *spSetup, newClient spClient) *spResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opt := &redis.ClusterOptions{Addrs: s.addrs, Protocol: 3}
	if s.dialer != nil {
		opt.Dialer = s.dialer
	}
	sub, closeSub := newClient(opt)
	defer closeSub()
	defer sub.Close()
	// The publisher: SPUBLISH follows the slot (a ClusterClient of its own,
	// without maint); PUBLISH reaches every node's subscribers, so it goes
	// to the last node, which no reshard here touches.
	var pub redis.UniversalClient
	if s.kind == "" {
		pub = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.addrs, Protocol: 3, Dialer: s.dialer})
	} else {
		pub = redis.NewClient(&redis.Options{Addr: s.addrs[len(s.addrs)-1], Protocol: 3, Dialer: s.dialer})
	}
	defer pub.Close()

	var mu sync.Mutex
	got := map[string]map[int]int{} // channel → seq → times received
	var all []string
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, g := range s.groups {
		all = append(all, g...)
		for _, ch := range g {
			got[ch] = map[int]int{}
		}
	}
	for _, g := range s.groups {
		var ps *redis.PubSub
		confirms := len(g)
		switch s.kind {
		case "subscribe":
			ps = sub.Subscribe(ctx, g...)
		case "psubscribe":
			ps = sub.PSubscribe(ctx, strings.TrimSuffix(g[0], "0")+"*") // every channel of the group
			confirms = 1
		default:
			ps = sub.SSubscribe(ctx, g...)
		}
		defer ps.Close()
		for range confirms {
			msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
			require.NoError(t, err, "%s: %s %v", name, s.kindName(), g)
			sb, ok := msg.(*redis.Subscription)
			require.True(t, ok, "%s: %s %v answered %v", name, s.kindName(), g, msg)
			require.Equal(t, s.kindName(), sb.Kind)
		}
		msgs := ps.Channel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				n, err := strconv.Atoi(m.Payload)
				if err != nil {
					continue
				}
				mu.Lock()
				if seqs := got[m.Channel]; seqs != nil {
					seqs[n]++
				}
				mu.Unlock()
			}
		}()
	}

	res := &spResult{name: name, missing: map[string]int{}, dup: map[string]int{}}
	var pubMu sync.Mutex
	pubAt := map[int]time.Time{} // seq → when its round began
	stop := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		tk := time.NewTicker(spInterval)
		defer tk.Stop()
		for seq := 1; ; seq++ {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			pubMu.Lock()
			pubAt[seq] = time.Now()
			pubMu.Unlock()
			for _, ch := range all {
				var err error
				if s.kind == "" {
					err = pub.SPublish(ctx, ch, strconv.Itoa(seq)).Err()
				} else {
					err = pub.Publish(ctx, ch, strconv.Itoa(seq)).Err()
				}
				pubMu.Lock()
				if err != nil {
					if len(res.pubErrs) < 5 {
						res.pubErrs = append(res.pubErrs, ch+": "+err.Error())
					}
				} else {
					res.published++
				}
				pubMu.Unlock()
			}
		}
	}()
	stopPub := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-pubDone
	}
	defer stopPub()

	// Every channel delivers before the migration.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ch := range all {
			if len(got[ch]) < 2 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "%s: a channel never delivered before the migration", name)

	require.NoError(t, s.migrate(ctx), "%s: migration", name)
	from := time.Now().Add(time.Second)

	// The first round begun a second after the migration, and spChecked
	// rounds from it.
	first := 0
	require.Eventually(t, func() bool {
		pubMu.Lock()
		defer pubMu.Unlock()
		if first == 0 {
			for seq := 1; seq <= len(pubAt); seq++ {
				if !pubAt[seq].Before(from) {
					first = seq
					break
				}
			}
		}
		return first > 0 && len(pubAt) >= first+spChecked
	}, 30*time.Second, 5*time.Millisecond, "%s: the publisher stalled", name)
	// The last checked round has been published in full when the next began.
	time.Sleep(spInterval)
	stopPub()
	// Delivery of what was published: generous, and it only waits on a failure.
	deadline := time.Now().Add(2 * time.Second)
	for {
		mu.Lock()
		complete := true
		for _, ch := range all {
			res.missing[ch], res.dup[ch] = 0, 0
			for seq := first; seq < first+spChecked; seq++ {
				switch n := got[ch][seq]; {
				case n == 0:
					res.missing[ch]++
					complete = false
				case n > 1:
					res.dup[ch]++
				}
			}
		}
		res.gap = 0
		for ch := range s.moving {
			run := 0
			for seq := 1; seq < first+spChecked; seq++ {
				if got[ch][seq] == 0 && seq > 2 {
					run++
					res.gap = max(res.gap, run)
				} else {
					run = 0
				}
			}
		}
		mu.Unlock()
		if complete || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%s", res)
	return res
}

// spCheck asserts the proof: with maint every checked message arrived once;
// without it, every moved channel lost messages and no other did.
func spCheck(t *testing.T, s *spSetup, runs []*spResult) {
	t.Helper()
	for _, r := range runs {
		if !r.maint {
			moved, still := r.lost(s)
			assert.Equal(t, len(s.moving), moved, "go-redis alone should lose every moved channel: %s", r)
			assert.Zero(t, still, "go-redis alone lost channels that did not move: %s", r)
			continue
		}
		for ch, n := range r.missing {
			assert.Zero(t, n, "%s: %s missed %d of the %d messages checked (moved: %v)", r.name, ch, n, spChecked, s.moving[ch])
		}
		for ch, n := range r.dup {
			assert.Zero(t, n, "%s: %s got %d messages twice", r.name, ch, n)
		}
		assert.Empty(t, r.pubErrs, "%s: the publisher failed", r.name)
	}
}

// TestClusterShardedPubSubFollowsSlot: on the emulated cluster, a third of
// the slots (all of node A's) move to node B with SMIGRATING/SMIGRATED, and
// node A pushes sunsubscribe to the moved slots' subscribers.
func TestClusterShardedPubSubFollowsSlot(t *testing.T) { emulatedShardProof(t, true) }

// TestClusterShardedPubSubFollowsSMigrated: the same, but node A drops its
// subscribers silently: the SMIGRATED alone tells maint.
func TestClusterShardedPubSubFollowsSMigrated(t *testing.T) { emulatedShardProof(t, false) }

func emulatedShardProof(t *testing.T, push bool) {
	var runs []*spResult
	var setup *spSetup
	var stats []string
	for _, c := range spClients(t, true) {
		emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
		require.NoError(t, err)
		cl, err := emu.NewCluster(mainttest.ClusterConfig{})
		require.NoError(t, err)
		cl.SetShardUnsubscribePush(push)
		a, b := cl.Nodes()[0], cl.Nodes()[1]
		aSlots := mainttest.FormatSlots(cl.Slots(a))
		groups, moving := spChannels("sp", func(s int) bool { return cl.Owner(s) == a }, spSlots/3+1)
		setup = &spSetup{addrs: cl.Addrs(), dialer: emu.Dialer(), groups: groups, moving: moving,
			migrate: func(ctx context.Context) error {
				_, err := cl.MigrateSlots(mainttest.SlotMigration{From: a, To: b, Slots: aSlots, Duration: 100 * time.Millisecond})
				if err != nil {
					return err
				}
				_, err = emu.WaitEvent(ctx, mainttest.IsKind(a, mainttest.KindSMigrated))
				return err
			}}
		mk := c.mk
		if c.name == "maint (options route)" {
			mk = func(opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
				g := maint.NewGroup()
				cc := g.NewClusterClient(opt)
				return cc, func() {
					f, u, st, sp := maint.ShardStats(g, opt)
					stats = append(stats, fmt.Sprintf("followed=%d unasked=%d settled=%d spanning=%d", f, u, st, sp))
					_ = g.Close()
				}
			}
		}
		r := shardedPubSubRun(t, c.name, setup, mk)
		r.maint = c.maint
		runs = append(runs, r)
		require.NoError(t, emu.Close())
	}
	t.Logf("maint's sharded subscribers (options route): %v", stats)
	spCheck(t, setup, runs)
}

// TestClusterShardedOwnSunsubscribeIsNotAMove: the confirmations of the
// application's own SUNSUBSCRIBE (some channels, then all) change nothing:
// the PubSub keeps its connection and subscribes again on it. A
// server-pushed sunsubscribe (the slot given to another node) then moves it.
func TestClusterShardedOwnSunsubscribeIsNotAMove(t *testing.T) {
	ctx := context.Background()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	a, b := cl.Nodes()[0], cl.Nodes()[1]
	var tag string
	for i := 0; ; i++ {
		if tag = "own" + strconv.Itoa(i); cl.OwnerOf(tag) == a {
			break
		}
	}
	x, y := "{"+tag+"}:x", "{"+tag+"}:y"
	dials := &subDialLog{next: emu.Dialer()}
	g := maint.NewGroup()
	defer g.Close()
	opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: dials.dial}
	cc := g.NewClusterClient(opt)
	defer cc.Close()
	pub := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()})
	defer pub.Close()

	ps := cc.SSubscribe(ctx, x, y)
	defer ps.Close()
	// recv waits for a confirmation or message; a read error (maint closing
	// the connection under go-redis, which reconnects) is skipped.
	recv := func(kind, channel string) {
		t.Helper()
		end := time.Now().Add(5 * time.Second)
		for {
			m, err := ps.ReceiveTimeout(ctx, time.Until(end))
			require.False(t, time.Now().After(end), "waiting for %s %s: %v", kind, channel, err)
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == kind && m.Channel == channel {
					return
				}
			case *redis.Message:
				if kind == "message" && m.Channel == channel {
					return
				}
			}
		}
	}
	recv("ssubscribe", x)
	recv("ssubscribe", y)
	require.NoError(t, ps.SUnsubscribe(ctx, x))
	recv("sunsubscribe", x)
	require.NoError(t, ps.SUnsubscribe(ctx))
	recv("sunsubscribe", y)
	require.NoError(t, ps.SSubscribe(ctx, x))
	recv("ssubscribe", x)
	require.NoError(t, pub.SPublish(ctx, x, "1").Err())
	recv("message", x)
	_, addr, n := dials.last()
	assert.Equal(t, 1, n, "the PubSub reconnected after its own SUNSUBSCRIBE")
	assert.Equal(t, a.Addr(), addr)
	followed, unasked, _, _ := maint.ShardStats(g, opt)
	assert.Zero(t, unasked, "the application's own sunsubscribe confirmations taken for the server's")
	assert.Zero(t, followed)

	// The server's own sunsubscribe: the PubSub moves to b and delivers.
	require.NoError(t, cl.SetOwner(strconv.Itoa(mainttest.KeySlot(x)), b))
	recv("sunsubscribe", x)
	recv("ssubscribe", x) // go-redis's resubscription, on b
	_, addr, n = dials.last()
	assert.Equal(t, 2, n)
	assert.Equal(t, b.Addr(), addr, "the PubSub resubscribed on the slot's new owner")
	require.NoError(t, pub.SPublish(ctx, x, "2").Err())
	recv("message", x)
	// Counted just after the close go-redis recovered from.
	require.Eventually(t, func() bool { f, _, _, _ := maint.ShardStats(g, opt); return f > 0 }, 5*time.Second, time.Millisecond)
	followed, unasked, _, _ = maint.ShardStats(g, opt)
	assert.Equal(t, uint64(1), unasked)
	assert.Equal(t, uint64(1), followed)
}

// TestClusterPlainPubSubThroughReshard: Subscribe and PSubscribe on a
// ClusterClient keep delivering through a reshard that empties node A and
// removes it (its connections, subscribers included, closed 200ms after the
// SMIGRATED): 10 consecutive messages on every channel, one second after.
func TestClusterPlainPubSubThroughReshard(t *testing.T) {
	for _, kind := range []string{"subscribe", "psubscribe"} {
		t.Run(kind, func(t *testing.T) {
			for _, c := range []struct {
				name string
				mk   spClient
			}{
				{"no handler", spNoMaint},
				{"maint (options route)", spMaint},
			} {
				emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
				require.NoError(t, err)
				cl, err := emu.NewCluster(mainttest.ClusterConfig{})
				require.NoError(t, err)
				a, b := cl.Nodes()[0], cl.Nodes()[1]
				aSlots := mainttest.FormatSlots(cl.Slots(a))
				groups, _ := spChannels("pp", func(s int) bool { return cl.Owner(s) == a }, spSlots/3+1)
				setup := &spSetup{addrs: cl.Addrs(), dialer: emu.Dialer(), groups: groups, kind: kind,
					migrate: func(ctx context.Context) error {
						_, err := cl.MigrateSlots(mainttest.SlotMigration{From: a, To: b, Slots: aSlots,
							Duration: 100 * time.Millisecond, RemoveSource: true, CloseAfter: 200 * time.Millisecond})
						if err != nil {
							return err
						}
						_, err = emu.WaitEvent(ctx, mainttest.IsKind(a, mainttest.KindRemovedClose))
						return err
					}}
				r := shardedPubSubRun(t, c.name, setup, c.mk)
				require.NoError(t, emu.Close())
				if c.mk == nil || c.name == "no handler" {
					continue // go-redis alone: logged, for comparison
				}
				for ch, n := range r.missing {
					assert.Zero(t, n, "%s %s: %s missed %d of the %d messages checked", kind, r.name, ch, n, spChecked)
				}
				for ch, n := range r.dup {
					assert.Zero(t, n, "%s %s: %s got %d messages twice", kind, r.name, ch, n)
				}
			}
		})
	}
}

// TestClusterShardedPubSubAcrossSlotsIsLeftAlone: one PubSub subscribed in
// two slots of one node (two SSubscribe calls). go-redis would resubscribe
// both in one SSUBSCRIBE, refused across slots
// (TestContractPubSubAcrossSlotsCannotResubscribe), so when one slot moves
// maint leaves the connection alone: the channel whose slot stayed keeps
// delivering.
func TestClusterShardedPubSubAcrossSlotsIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	a, b := cl.Nodes()[0], cl.Nodes()[1]
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := "{span" + strconv.Itoa(i) + "}:c"
		if cl.OwnerOf(k) == a && (len(keys) == 0 || mainttest.KeySlot(k) != mainttest.KeySlot(keys[0])) {
			keys = append(keys, k)
		}
	}
	moved, stays := keys[0], keys[1]
	g := maint.NewGroup()
	defer g.Close()
	opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()}
	cc := g.NewClusterClient(opt)
	defer cc.Close()
	pub := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()})
	defer pub.Close()
	ps := cc.SSubscribe(ctx, moved)
	defer ps.Close()
	require.NoError(t, ps.SSubscribe(ctx, stays))
	msgs := ps.Channel()
	deliver := func(ch string) bool { return spublishUntilSeen(ctx, pub, msgs, ch, 2*time.Second) }
	require.True(t, deliver(moved))
	require.True(t, deliver(stays))
	require.NoError(t, cl.SetOwner(strconv.Itoa(mainttest.KeySlot(moved)), b))
	require.Eventually(t, func() bool { _, _, _, sp := maint.ShardStats(g, opt); return sp > 0 }, 5*time.Second, time.Millisecond,
		"maint never looked at the connection")
	assert.True(t, deliver(stays), "the channel whose slot stayed stopped delivering")
	followed, _, _, _ := maint.ShardStats(g, opt)
	assert.Zero(t, followed, "maint closed a connection go-redis cannot resubscribe")
}

// TestClusterShardedStaleSlotMapIsFollowed: after maint moved a subscriber,
// go-redis's slot map goes stale again (here: the application's
// ClusterSlots serves the old map for a while) and a new PubSub subscribes on
// the node the slot left, meeting MOVED, which go-redis never retries. The
// SSUBSCRIBE written where the slot just left makes it follow the slot too,
// once the map is right again.
func TestClusterShardedStaleSlotMapIsFollowed(t *testing.T) {
	ctx := context.Background()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	// Distinct ports: with ClusterSlots go-redis names loopback nodes ":port".
	cl, err := emu.NewCluster(mainttest.ClusterConfig{Addrs: []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}})
	require.NoError(t, err)
	a, b := cl.Nodes()[0], cl.Nodes()[1]
	name := func(ep *mainttest.Endpoint) string { _, port, _ := net.SplitHostPort(ep.Addr()); return ":" + port }
	g := maint.NewGroup()
	defer g.Close()
	sc := newStaleableCluster(t, cl, g, "stale")
	defer sc.close()
	x, stale, opt, cc, pub := sc.x, &sc.stale, sc.opt, sc.cc, sc.pub
	deliver := func(msgs <-chan *redis.Message) bool {
		return spublishUntilSeen(ctx, pub, msgs, x, 5*time.Second)
	}

	ps1 := cc.SSubscribe(ctx, x)
	defer ps1.Close()
	msgs1 := ps1.Channel()
	require.True(t, deliver(msgs1))
	require.NoError(t, cl.SetOwner(strconv.Itoa(mainttest.KeySlot(x)), b))
	require.True(t, deliver(msgs1), "the first PubSub did not follow the slot")

	// The map goes stale: go-redis sends the next SSUBSCRIBE of x to a.
	stale.Store(true)
	cc.ReloadState(ctx)
	require.Eventually(t, func() bool { return ownerBy(t, cc, x) == name(a) }, 5*time.Second, time.Millisecond)
	ps2 := cc.SSubscribe(ctx, x)
	defer ps2.Close()
	msgs2 := ps2.Channel()
	stale.Store(false) // maint's next reload reads the truth
	assert.True(t, deliver(msgs2), "the PubSub that subscribed by a stale slot map stayed silent")
	followed, _, _, _ := maint.ShardStats(g, opt)
	assert.Equal(t, uint64(2), followed)
}

// staleableCluster is a Group's ClusterClient whose slot map can be kept
// stale (go-redis loads it through ClusterOptions.ClusterSlots: the map read
// when it was made while stale is set), a channel x whose slot node 0 owns,
// and a publisher without maint.
type staleableCluster struct {
	x     string
	stale atomic.Bool
	opt   *redis.ClusterOptions
	cc    *redis.ClusterClient
	pub   *redis.ClusterClient
	admin *redis.Client
}

// newStaleableCluster makes it on cl with g, the channel named after
// prefix; close closes its clients (before g and the emulator).
func newStaleableCluster(t *testing.T, cl *mainttest.Cluster, g *maint.Group, prefix string) *staleableCluster {
	t.Helper()
	var tag string
	for i := 0; ; i++ {
		if tag = prefix + strconv.Itoa(i); cl.OwnerOf(tag) == cl.Nodes()[0] {
			break
		}
	}
	sc := &staleableCluster{x: "{" + tag + "}:x"}
	admin := redis.NewClient(&redis.Options{Addr: cl.Nodes()[2].Addr(), Protocol: 2})
	sc.admin = admin
	before, err := admin.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	sc.opt = &redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, ClusterSlots: func(ctx context.Context) ([]redis.ClusterSlot, error) {
		if sc.stale.Load() {
			return before, nil
		}
		return admin.ClusterSlots(ctx).Result()
	}}
	sc.cc = g.NewClusterClient(sc.opt)
	sc.pub = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3})
	return sc
}

// close closes the publisher, the ClusterClient and the admin client.
func (sc *staleableCluster) close() {
	_ = sc.pub.Close()
	_ = sc.cc.Close()
	_ = sc.admin.Close()
}

// spublishUntilSeen publishes to ch every 50 ms until a message of ch
// arrives on msgs, and reports whether one did within d.
func spublishUntilSeen(ctx context.Context, pub *redis.ClusterClient, msgs <-chan *redis.Message, ch string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); {
		_ = pub.SPublish(ctx, ch, "m").Err()
		select {
		case m := <-msgs:
			if m.Channel == ch {
				return true
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// slowSlotMaps is an application's hook on every node client, outside
// maint's: go-redis installs a CLUSTER SLOTS reply d after maint saw it
// (maint counts the map handed in its hook, before go-redis stores it), as
// a slow scheduler between go-redis's reload and its state.Store does.
type slowSlotMaps struct{ d time.Duration }

func (slowSlotMaps) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowSlotMaps) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if _, ok := cmd.(*redis.ClusterSlotsCmd); ok {
			time.Sleep(h.d)
		}
		return err
	}
}
func (slowSlotMaps) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestClusterShardedSubscriberOfEmptiedNodeFollowsInstalledMap: node A gives
// all its slots to B (SMIGRATED only, no sunsubscribe), and go-redis
// installs each slot map 200ms after its CLUSTER SLOTS reply. A's sharded
// subscriber must reach B: the retirement of the emptied source must not
// close it before go-redis routes by the new map (it would resubscribe on A
// by the old one, meet MOVED and stay silent for good).
func TestClusterShardedSubscriberOfEmptiedNodeFollowsInstalledMap(t *testing.T) {
	routes := []struct {
		name string
		mk   func(t *testing.T, opt *redis.ClusterOptions) (*redis.ClusterClient, func())
	}{
		{"options route", func(t *testing.T, opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
			g := maint.NewGroup()
			return g.NewClusterClient(opt), func() { _ = g.Close() }
		}},
		{"Instrument", func(t *testing.T, opt *redis.ClusterOptions) (*redis.ClusterClient, func()) {
			cc := redis.NewClusterClient(opt)
			g, err := maint.Instrument(cc)
			require.NoError(t, err)
			return cc, func() { _ = g.Close() }
		}},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
			require.NoError(t, err)
			defer emu.Close()
			cl, err := emu.NewCluster(mainttest.ClusterConfig{})
			require.NoError(t, err)
			cl.SetShardUnsubscribePush(false)
			a, b := cl.Nodes()[0], cl.Nodes()[1]
			var x string
			for i := 0; ; i++ {
				if x = "{empt" + strconv.Itoa(i) + "}:x"; cl.OwnerOf(x) == a {
					break
				}
			}
			opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer(),
				NewClient: func(o *redis.Options) *redis.Client {
					c := redis.NewClient(o)
					c.AddHook(slowSlotMaps{d: 200 * time.Millisecond})
					return c
				}}
			cc, done := rt.mk(t, opt)
			defer done()
			defer cc.Close()
			pub := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()})
			defer pub.Close()

			ps := cc.SSubscribe(ctx, x)
			defer ps.Close()
			_, err = ps.ReceiveTimeout(ctx, 5*time.Second)
			require.NoError(t, err)
			msgs := ps.Channel()

			_, err = cl.MigrateSlots(mainttest.SlotMigration{From: a, To: b,
				Slots: mainttest.FormatSlots(cl.Slots(a)), Duration: 100 * time.Millisecond})
			require.NoError(t, err)
			_, err = emu.WaitEvent(ctx, mainttest.IsKind(a, mainttest.KindSMigrated))
			require.NoError(t, err)

			// Within 3s of the SMIGRATED, a message published on x arrives.
			end := time.After(3 * time.Second)
			tk := time.NewTicker(50 * time.Millisecond)
			defer tk.Stop()
			for seq := 0; ; seq++ {
				select {
				case m := <-msgs:
					if m.Channel == x {
						return
					}
				case <-tk.C:
					_ = pub.SPublish(ctx, x, strconv.Itoa(seq)).Err()
				case <-end:
					t.Fatalf("%s: no message on %s within 3s of the SMIGRATED: its subscriber stayed on %s", rt.name, x, a.Addr())
				}
			}
		})
	}
}
