package maint

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/internal/slot"
)

func TestKeySlot(t *testing.T) {
	assert.Equal(t, 12182, keySlot("foo"), "CLUSTER KEYSLOT foo")
	assert.Equal(t, keySlot("user1000"), keySlot("{user1000}.following"))
	assert.Equal(t, keySlot("user1000"), keySlot("{user1000}.followers"))
	assert.Equal(t, slot.CRC16("foo{}{bar}")%numSlots, uint16(keySlot("foo{}{bar}")), "an empty tag hashes the whole key")
	assert.Equal(t, keySlot("{bar"), keySlot("foo{{bar}}zap"))
	assert.Equal(t, keySlot("bar"), keySlot("foo{bar}{zap}"))
}

func TestCmdSlot(t *testing.T) {
	assert.Equal(t, 12182, cmdSlot([]any{"get", "foo"}))
	assert.Equal(t, 12182, cmdSlot([]any{"incr", []byte("foo")}))
	assert.Equal(t, -1, cmdSlot([]any{"ping"}))
	assert.Equal(t, -1, cmdSlot([]any{"cluster", "slots"}))
	assert.Equal(t, keySlot("k"), cmdSlot([]any{"eval", "return 1", "1", "k"}))
	assert.Equal(t, -1, cmdSlot([]any{"eval", "return 1", 0}))
	assert.Equal(t, keySlot("dst"), cmdSlot([]any{"bitop", "and", "dst", "a"}))
	assert.Equal(t, -1, cmdSlot([]any{"get", 42}), "a key maint cannot read is left to go-redis")
	assert.Equal(t, -1, cmdSlot(nil))
}

func TestParseSlots(t *testing.T) {
	r, err := parseSlots("5-7, 1,3-4")
	require.NoError(t, err)
	assert.Equal(t, "1,3-7", canonSlots(r))
	for _, bad := range []string{"a", "3-1", "16384", "-1", "1-x", "0-16384"} {
		_, err := parseSlots(bad)
		assert.ErrorIs(t, err, errSlots, bad)
	}
	r, err = parseSlots("")
	require.NoError(t, err)
	assert.Empty(t, r)
}

// clusterFixture is two node clients' Maints of one cluster (src, dst) with
// one connection each, and the slot map src 0-8191, dst 8192-16383.
type clusterFixture struct {
	cs         *clusterState
	reloads    atomic.Int64
	src, dst   *Maint
	cSrc, cDst *conn
}

const srcAddr, dstAddr = "127.0.0.2:7000", "127.0.0.3:7001"

func newClusterFixture(t *testing.T) *clusterFixture {
	f := &clusterFixture{}
	f.cs = newClusterState(func() { f.reloads.Add(1) })
	mk := func(addr string) (*Maint, *conn) {
		m := New(WithLogf(t.Logf))
		m.s.cluster = f.cs
		t.Cleanup(func() { _ = m.Close() })
		f.cs.noteDial(m, addr)
		return m, m.wrap(m.target(addr), &fakeConn{remote: addr}, addr)
	}
	f.src, f.cSrc = mk(srcAddr)
	f.dst, f.cDst = mk(dstAddr)
	f.cs.sawSlotMap([]redis.ClusterSlot{
		{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: srcAddr}}},
		{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: dstAddr}}},
	})
	return f
}

func smigrated(seq int64, slots string) []byte {
	return resp.AppendSMigrated(nil, seq, []resp.SlotMove{{Src: srcAddr, Dst: dstAddr, Slots: slots}})
}

// One SMIGRATED, delivered on connections of both nodes, is acted on once:
// one reload, one overlay; later copies and replays change nothing.
func TestSMigratedOncePerSeqAcrossNodes(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.onNotification(smigrated(20, "0-100"))
	f.cDst.onNotification(smigrated(20, "0-100"))
	f.cSrc.onNotification(smigrated(20, "0-100"))
	st := f.src.ClusterStats()
	assert.EqualValues(t, 1, st.SMigrated)
	assert.EqualValues(t, 2, st.Copies)
	require.Eventually(t, func() bool { return f.reloads.Load() == 1 }, testWait, testTick, "one slot-map reload per SMIGRATED")

	a := f.src.away.Load()
	require.NotNil(t, a, "the source sends the moved slots on")
	assert.Equal(t, dstAddr, a.lookup(50).addr)
	assert.Nil(t, a.lookup(101))
	assert.Nil(t, f.dst.away.Load(), "nothing moved away from the destination")

	// A replay under another id (servers replay the latest completion for
	// hours, past the ids' memory): the slot map maint knows shows it.
	f.cDst.onNotification(smigrated(21, "0-100"))
	assert.EqualValues(t, 1, f.src.ClusterStats().Stale)
	time.Sleep(2 * reloadDelay)
	assert.EqualValues(t, 1, f.reloads.Load())

	// The reload: a slot map agreeing with the move ends the overlay soon.
	f.cs.sawSlotMap([]redis.ClusterSlot{
		{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: dstAddr}}},
		{Start: 101, End: 8191, Nodes: []redis.ClusterNode{{Addr: srcAddr}}},
		{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: dstAddr}}},
	})
	assert.LessOrEqual(t, a.until.Load(), monoNow()+int64(movedAfterReload))
}

// A slot map showing the moves before maint asks for its reload (go-redis
// reloaded on a MOVED) makes maint's reload unnecessary: not asked. A
// destination with no node client yet has the reload asked at once.
func TestSMigratedReloadSkippedWhenSlotMapShowsIt(t *testing.T) {
	f := newClusterFixture(t)
	// The destination's node client is known (else maint asks for the
	// reload at once: a reload makes it).
	rdb := redis.NewClient(&redis.Options{Addr: dstAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	f.cs.join(rdb, f.dst)
	f.cSrc.onNotification(smigrated(25, "0-100"))
	f.cs.sawSlotMap([]redis.ClusterSlot{
		{Start: 0, End: 100, Nodes: []redis.ClusterNode{{Addr: dstAddr}}},
		{Start: 101, End: 8191, Nodes: []redis.ClusterNode{{Addr: srcAddr}}},
		{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: dstAddr}}},
	})
	require.Eventually(t, func() bool { return f.src.ClusterStats().ReloadsSeen == 1 }, testWait, testTick)
	assert.Zero(t, f.reloads.Load())
	assert.Zero(t, f.src.ClusterStats().Reloads)

	g := newClusterFixture(t) // no node client known for the destination
	g.cSrc.onNotification(smigrated(26, "0-100"))
	require.Eventually(t, func() bool { return g.reloads.Load() == 1 }, reloadDelay/2, time.Millisecond,
		"the reload is asked at once")
}

// A slot map that does not show the move yet (a reload begun before the
// SMIGRATED) does not end the overlay.
func TestStaleSlotMapKeepsOverlay(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.onNotification(smigrated(30, "0-100"))
	a := f.src.away.Load()
	require.NotNil(t, a)
	until := a.until.Load()
	f.cs.sawSlotMap([]redis.ClusterSlot{
		{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: srcAddr}}},
		{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: dstAddr}}},
	})
	assert.Equal(t, until, a.until.Load())
}

// Without the destination's node client, the source's hook answers with a
// MOVED of its own, which go-redis's ClusterClient follows.
func TestAwayAnswersMovedWithoutDestinationClient(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.onNotification(smigrated(40, "0-16383"))
	a := f.src.away.Load()
	require.NotNil(t, a)
	cmd := redis.NewStringCmd(context.Background(), "get", "foo") // slot 12182
	done, err := f.src.awayProcess(context.Background(), a, cmd)
	require.True(t, done)
	require.Error(t, err)
	assert.Equal(t, "MOVED 12182 "+dstAddr, err.Error())
	addr, ok := redis.IsMovedError(err)
	assert.True(t, ok)
	assert.Equal(t, dstAddr, addr)
	assert.EqualValues(t, 1, f.src.ClusterStats().Redirected)

	ping := redis.NewStatusCmd(context.Background(), "ping")
	done, _ = f.src.awayProcess(context.Background(), a, ping)
	assert.False(t, done, "a keyless command is left to go-redis")
}

// A source the SMIGRATED leaves with no slot has its connections retired
// and, owing nothing, closed.
func TestSourceLeftWithoutSlotsIsRetired(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.onNotification(smigrated(50, "0-8191"))
	assert.EqualValues(t, 1, f.src.ClusterStats().Emptied)
	time.Sleep(5 * drainTick)
	assert.Equal(t, stateActive, f.cSrc.state.Load(), "kept until go-redis has reloaded its slot map: commands routed there before still need it")
	f.cs.sawSlotMap(movedMap())
	require.Eventually(t, func() bool { return f.cSrc.state.Load() == stateClosed }, testWait, testTick,
		"an idle connection of the emptied source is closed")
	assert.Equal(t, stateActive, f.cDst.state.Load())
	assert.EqualValues(t, 1, f.src.ClusterStats().EmptiedClosed)
}

// movedMap is the fixture's slot map once src gave all its slots to dst.
func movedMap() []redis.ClusterSlot {
	return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: dstAddr}}}}
}

// A source that disappears from the slot map is retired too.
func TestSourceGoneFromSlotMapIsRetired(t *testing.T) {
	f := newClusterFixture(t)
	f.cs.sawSlotMap([]redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: dstAddr}}}})
	require.Eventually(t, func() bool { return f.cSrc.state.Load() == stateClosed }, testWait, testTick)
	assert.Equal(t, stateActive, f.cDst.state.Load())
}

// A connection whose reply is owed is never closed; it is once the reply is in.
func TestEmptiedSourceKeepsOwedConnection(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.written.Store(1) // one command written, its reply owed
	f.cSrc.onNotification(smigrated(60, "0-8191"))
	f.cs.sawSlotMap(movedMap())
	time.Sleep(5 * drainTick)
	assert.Equal(t, stateActive, f.cSrc.state.Load(), "a node whose connection owes a reply is not quiet")
	f.cSrc.replies.Store(1)
	require.Eventually(t, func() bool { return f.cSrc.state.Load() == stateClosed }, testWait, testTick)
}

// SMIGRATED ends the SMIGRATING of its slots, not an older one of others.
func TestSMigratedEndsItsOwnSMigrating(t *testing.T) {
	f := newClusterFixture(t)
	n := f.cSrc.n
	f.cSrc.onNotification(resp.AppendSMigrating(nil, 70, "0-100"))
	f.cSrc.onNotification(resp.AppendSMigrating(nil, 71, "200-300"))
	require.Len(t, n.ops, 2)
	f.cSrc.onNotification(smigrated(72, "200-300"))
	n.mu.Lock()
	defer n.mu.Unlock()
	require.Len(t, n.ops, 1)
	assert.EqualValues(t, 70, n.ops[0].seq, "the SMIGRATING of slots 0-100 stays open")
	assert.True(t, n.relaxing())
}

// The memory of SMIGRATED ids is bounded.
func TestSMigratedMemoryBounded(t *testing.T) {
	cs := newClusterState(nil)
	now := monoNow()
	for i := range int64(3 * maxSeenSMigrated) {
		cs.rememberLocked(i, now+i)
	}
	assert.LessOrEqual(t, len(cs.seen), maxSeenSMigrated)
	_, newest := cs.seen[3*maxSeenSMigrated-1]
	assert.True(t, newest)
}

// With no slot moved recently the hooks' added cost is one atomic load:
// no allocation per command.
func TestAwayHotPathAllocatesNothing(t *testing.T) {
	f := newClusterFixture(t)
	h := f.src.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	cmd := redis.NewStringCmd(context.Background(), "get", "foo")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() { _ = h(ctx, cmd) })
	assert.Zero(t, allocs)
}

// Bounds of the Eventually waits of these tests: generous, the machine is shared.
const testWait, testTick = 5 * time.Second, 5 * time.Millisecond

// FuzzParseSlots: a slot list from the network never panics the parser,
// and what it accepts survives the canonical form.
func FuzzParseSlots(f *testing.F) {
	for _, s := range []string{"0-100", "123,456,789-1000", " 1 , 3-4", "16383", "5-3", "a-b", ",,", "0-16384", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := parseSlots(s)
		if err != nil {
			return
		}
		c := canonSlots(rs)
		again, err := parseSlots(c)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", c, s, err)
		}
		if c2 := canonSlots(again); c2 != c {
			t.Fatalf("canonical form of %q: %q then %q", s, c, c2)
		}
	})
}

// FuzzClusterNotifications: whatever SMIGRATING and SMIGRATED a server
// sends, on whichever node client, the cluster state never panics and its
// memory stays bounded.
func FuzzClusterNotifications(f *testing.F) {
	f.Add(int64(1), "0-100", srcAddr, dstAddr, "0-100")
	f.Add(int64(2), "", "127.0.0.9:7000", "", "x")
	f.Add(int64(-5), "16383", dstAddr, srcAddr, "0-16383")
	f.Fuzz(func(t *testing.T, seq int64, migrating, src, dst, slots string) {
		f := newClusterFixture(t)
		f.cSrc.onNotification(resp.AppendSMigrating(nil, seq, migrating))
		frame := resp.AppendSMigrated(nil, seq+1, []resp.SlotMove{{Src: src, Dst: dst, Slots: slots}})
		f.cDst.onNotification(frame)
		f.cSrc.onNotification(frame)
		if a := f.src.away.Load(); a != nil {
			_, _ = f.src.awayProcess(context.Background(), a, redis.NewStringCmd(context.Background(), "get", "foo"))
		}
		if len(f.cs.seen) > maxSeenSMigrated {
			t.Fatalf("%d ids remembered", len(f.cs.seen))
		}
	})
}

// Slots moving back to the node that gave them away recently are its own
// again: neither node sends them to the other (no forwarding loop), and a
// command already forwarded is never forwarded again.
func TestSlotsMovingBackAreNotForwardedInALoop(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.onNotification(smigrated(80, "0-100"))
	require.NotNil(t, f.src.away.Load().lookup(50))
	back := resp.AppendSMigrated(nil, 81, []resp.SlotMove{{Src: dstAddr, Dst: srcAddr, Slots: "0-100"}})
	f.cDst.onNotification(back)
	assert.Nil(t, f.src.away.Load().lookup(50), "slot 50 is the source's again")
	require.NotNil(t, f.dst.away.Load())
	assert.Equal(t, srcAddr, f.dst.away.Load().lookup(50).addr)

	a := f.dst.away.Load()
	cmd := redis.NewStringCmd(context.Background(), "get", keyInSlot(50))
	done, _ := f.dst.awayProcess(forwarded(context.Background()), a, cmd)
	assert.False(t, done, "a forwarded command is not forwarded again")
}

// keyInSlot returns a key of slot.
func keyInSlot(slot int) string {
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		if keySlot(k) == slot {
			return k
		}
	}
}

// BenchmarkClusterProcessHook is the process hook's own cost on a cluster
// node client with no slot moved recently (idle) and with an overlay of
// moved slots in force (a command of a slot that did not move).
func BenchmarkClusterProcessHook(b *testing.B) {
	cs := newClusterState(nil)
	m := New(WithLogf(func(string, ...any) {}))
	defer m.Close()
	m.s.cluster = cs
	h := m.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", "foo") // slot 12182
	b.Run("idle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = h(ctx, cmd)
		}
	})
	b.Run("overlay", func(b *testing.B) {
		mv := merge(nil, []slotMove{{src: "a", dst: "b", r: []slotRange{{0, 100}}}}, "a", monoNow()+int64(time.Hour), monoNow())
		m.away.Store(mv)
		defer m.away.Store(nil)
		b.ReportAllocs()
		for b.Loop() {
			_ = h(ctx, cmd)
		}
	})
}
