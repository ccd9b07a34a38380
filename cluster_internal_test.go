package maint

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

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

// clusterFixture is three node clients' Maints of one cluster (src, dst,
// third) with one connection each, and the slot map src 0-8191, dst
// 8192-16000, third 16001-16383, read through src's node client.
type clusterFixture struct {
	cs                *clusterState
	reloads           atomic.Int64
	src, dst, third   *Maint
	cSrc, cDst, cThrd *conn
}

const srcAddr, dstAddr, thirdAddr = "127.0.0.2:7000", "127.0.0.3:7001", "127.0.0.4:7002"

func fixtureMap() []redis.ClusterSlot {
	return []redis.ClusterSlot{
		{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: srcAddr}}},
		{Start: 8192, End: 16000, Nodes: []redis.ClusterNode{{Addr: dstAddr}}},
		{Start: 16001, End: 16383, Nodes: []redis.ClusterNode{{Addr: thirdAddr}}},
	}
}

func newClusterFixture(t testing.TB) *clusterFixture {
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
	f.third, f.cThrd = mk(thirdAddr)
	sawSlots(f.cs, f.src, fixtureMap())
	return f
}

func smigrated(seq int64, slots string) []byte {
	return resp.AppendSMigrated(nil, seq, []resp.SlotMove{{Src: srcAddr, Dst: dstAddr, Slots: slots}})
}

// reload runs a CLUSTER SLOTS through m's process hook as go-redis's
// reload does; next is the node (nil: the test fails if it is asked).
func (f *clusterFixture) reload(t testing.TB, m *Maint, node []redis.ClusterSlot) []redis.ClusterSlot {
	t.Helper()
	h := m.ProcessHook(func(_ context.Context, c redis.Cmder) error {
		if node == nil {
			t.Fatalf("CLUSTER SLOTS sent to the node while maint serves its map")
		}
		c.(*redis.ClusterSlotsCmd).SetVal(node)
		return nil
	})
	cmd := redis.NewClusterSlotsCmd(context.Background(), "cluster", "slots")
	require.NoError(t, h(reloadCtx, cmd))
	return cmd.Val()
}

// masterOf is the master a CLUSTER SLOTS reply gives slot.
func masterOf(slots []redis.ClusterSlot, slot int) string {
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	return ""
}

// One SMIGRATED, delivered on connections of several nodes, is acted on
// once: one reload asked, answered from maint's map with no round trip;
// later copies and replays change nothing.
func TestSMigratedOncePerSeqAcrossNodes(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.onNotification(smigrated(20, "0-100"))
	f.cDst.onNotification(smigrated(20, "0-100"))
	f.cSrc.onNotification(smigrated(20, "0-100"))
	st := f.src.ClusterStats()
	assert.EqualValues(t, 1, st.SMigrated)
	assert.EqualValues(t, 2, st.Copies)
	assert.EqualValues(t, 1, f.reloads.Load(), "one reload asked per SMIGRATED, as it is read")

	got := f.reload(t, f.dst, nil)
	assert.Equal(t, dstAddr, masterOf(got, 0))
	assert.Equal(t, dstAddr, masterOf(got, 100))
	assert.Equal(t, srcAddr, masterOf(got, 101))
	assert.Equal(t, thirdAddr, masterOf(got, 16383))
	st = f.src.ClusterStats()
	assert.EqualValues(t, 1, st.Served)
	assert.Zero(t, st.SlotMaps, "the reload cost no round trip")

	// A replay under another id (servers replay the latest completion for
	// hours, past the ids' memory): the slot map shows it.
	f.cDst.onNotification(smigrated(21, "0-100"))
	assert.EqualValues(t, 1, f.src.ClusterStats().Stale)
	assert.EqualValues(t, 1, f.reloads.Load())

	// Past serveFor, go-redis's reloads ask the cluster again.
	f.cs.serve.Load().until = monoNow() - 1
	got = f.reload(t, f.src, fixtureMap())
	assert.Equal(t, srcAddr, masterOf(got, 0), "the cluster's reply, as it is")
	assert.EqualValues(t, 1, f.src.ClusterStats().SlotMaps)
}

// Bad SMIGRATED input is ignored with one log line and a counter: no
// reload, no map served, and its sequence id is not remembered (a good
// copy of it still counts).
func TestSMigratedBadInputIgnored(t *testing.T) {
	for name, moves := range map[string][]resp.SlotMove{
		"empty list":        {},
		"no host":           {{Src: srcAddr, Dst: ":7000", Slots: "0-10"}},
		"negative port":     {{Src: srcAddr, Dst: "node:-1", Slots: "0-10"}},
		"port over 65535":   {{Src: srcAddr, Dst: "node:70000", Slots: "0-10"}},
		"garbage":           {{Src: srcAddr, Dst: "\x00\xff", Slots: "0-10"}},
		"no port":           {{Src: srcAddr, Dst: "127.0.0.3", Slots: "0-10"}},
		"bad source":        {{Src: "x", Dst: dstAddr, Slots: "0-10"}},
		"slot over 16383":   {{Src: srcAddr, Dst: dstAddr, Slots: "16384"}},
		"inverted range":    {{Src: srcAddr, Dst: dstAddr, Slots: "10-5"}},
		"absurd range":      {{Src: srcAddr, Dst: dstAddr, Slots: "0-99999999999999999999"}},
		"no slot":           {{Src: srcAddr, Dst: dstAddr, Slots: " , "}},
		"one bad of two":    {{Src: srcAddr, Dst: dstAddr, Slots: "0-10"}, {Src: srcAddr, Dst: dstAddr, Slots: "x"}},
		"bad second triple": {{Src: srcAddr, Dst: dstAddr, Slots: "0-10"}, {Src: srcAddr, Dst: "node:0", Slots: "11"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newClusterFixture(t)
			var lines atomic.Int64
			f.src.s.logf = func(string, ...any) { lines.Add(1) }
			f.cSrc.onNotification(resp.AppendSMigrated(nil, 5, moves))
			st := f.src.ClusterStats()
			assert.EqualValues(t, 1, st.Malformed)
			assert.Zero(t, st.SMigrated)
			assert.Zero(t, f.reloads.Load(), "no reload for input that cannot be read")
			assert.Nil(t, f.cs.serve.Load(), "no map served")
			assert.LessOrEqual(t, lines.Load(), int64(1), "one log line")
			assert.Equal(t, srcAddr, masterOf(f.reload(t, f.src, fixtureMap()), 5))

			f.cSrc.onNotification(smigrated(5, "0-10"))
			assert.EqualValues(t, 1, f.src.ClusterStats().SMigrated, "the good copy of the same id is acted on")
			assert.Equal(t, dstAddr, masterOf(f.reload(t, f.src, nil), 5))
		})
	}
}

// An SMIGRATED the slot map does not agree with (a destination that is no
// node of it, a slot another node owns) is not applied: go-redis reloads
// from the cluster, whose map wins.
func TestSMigratedClusterMapWins(t *testing.T) {
	for name, mv := range map[string]resp.SlotMove{
		"unknown destination":  {Src: srcAddr, Dst: "127.0.0.9:1", Slots: "0-100"},
		"slot of another node": {Src: srcAddr, Dst: dstAddr, Slots: "16001-16010"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newClusterFixture(t)
			f.cSrc.onNotification(resp.AppendSMigrated(nil, 7, []resp.SlotMove{mv}))
			st := f.src.ClusterStats()
			assert.EqualValues(t, 1, st.Unapplied)
			assert.EqualValues(t, 1, f.reloads.Load(), "go-redis reloads from the cluster")
			assert.Nil(t, f.cs.serve.Load())
			got := f.reload(t, f.src, fixtureMap())
			assert.Equal(t, srcAddr, masterOf(got, 50))
			assert.Equal(t, thirdAddr, masterOf(got, 16005))
		})
	}
}

// A MOVED that disagrees with the map maint serves ends its serving: the
// cluster's word wins, go-redis's next reload asks the cluster. A MOVED
// that agrees (a command routed by the old map) keeps it.
func TestMovedContradictingServedMapEndsServing(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.onNotification(smigrated(30, "0-100"))
	require.NotNil(t, f.cs.serve.Load())
	moved := func(m *Maint, msg string) {
		h := m.ProcessHook(func(_ context.Context, c redis.Cmder) error {
			err := errors.New(msg)
			c.SetErr(err)
			return err
		})
		_ = h(context.Background(), redis.NewStringCmd(context.Background(), "get", "k"))
	}
	moved(f.src, "MOVED 50 "+dstAddr)
	assert.NotNil(t, f.cs.serve.Load(), "a MOVED agreeing with the map served")
	moved(f.src, "MOVED 200 "+srcAddr)
	assert.NotNil(t, f.cs.serve.Load())
	moved(f.dst, "MOVED 50 "+srcAddr)
	assert.Nil(t, f.cs.serve.Load(), "the destination sends slot 50 back: the cluster's word wins")
	assert.EqualValues(t, 1, f.src.ClusterStats().Contradicted)
	assert.Equal(t, srcAddr, masterOf(f.reload(t, f.src, fixtureMap()), 50))
}

// A CLUSTER SLOTS in flight when the SMIGRATED came (asked before it):
// go-redis folds the reload maint asks for into it, so its reply gets the
// moves done; a reply read while maint serves keeps them too.
func TestSlotMapInFlightGetsMoves(t *testing.T) {
	f := newClusterFixture(t)
	h := f.src.ProcessHook(func(_ context.Context, c redis.Cmder) error {
		f.cDst.onNotification(smigrated(31, "0-100")) // read while the reply is on its way
		c.(*redis.ClusterSlotsCmd).SetVal(fixtureMap())
		return nil
	})
	cmd := redis.NewClusterSlotsCmd(context.Background(), "cluster", "slots")
	require.NoError(t, h(reloadCtx, cmd))
	assert.Equal(t, dstAddr, masterOf(cmd.Val(), 50), "go-redis installs the reply: it has the moves")
	assert.Equal(t, srcAddr, masterOf(cmd.Val(), 101))

	sawSlots(f.cs, f.dst, fixtureMap()) // another reply, asked before
	assert.Equal(t, dstAddr, masterOf(f.reload(t, f.src, nil), 50))
}

// A CLUSTER SLOTS waiting for its reply (queued behind a busy source's
// pool) when an SMIGRATED is read is answered with the served map at once;
// the late reply is dropped.
func TestWaitingSlotMapAnsweredAtSMigrated(t *testing.T) {
	f := newClusterFixture(t)
	release := make(chan struct{})
	asked := make(chan struct{}) // the CLUSTER SLOTS went to the node: it waits for its reply
	var once sync.Once
	h := f.src.ProcessHook(func(_ context.Context, c redis.Cmder) error {
		once.Do(func() { close(asked) })
		<-release
		c.(*redis.ClusterSlotsCmd).SetVal(fixtureMap())
		return nil
	})
	got := make(chan []redis.ClusterSlot, 1)
	go func() {
		cmd := redis.NewClusterSlotsCmd(context.Background(), "cluster", "slots")
		_ = h(reloadCtx, cmd)
		got <- cmd.Val()
	}()
	select {
	case <-asked:
	case <-time.After(testWait):
		t.Fatal("the CLUSTER SLOTS never reached the node")
	}
	f.cDst.onNotification(smigrated(32, "0-100"))
	select {
	case v := <-got:
		assert.Equal(t, dstAddr, masterOf(v, 50))
	case <-time.After(testWait):
		t.Fatal("the waiting CLUSTER SLOTS was not answered at the SMIGRATED")
	}
	close(release)
	require.Eventually(t, func() bool { return f.src.ClusterStats().SlotMaps == 1 }, testWait, testTick)
	assert.Equal(t, dstAddr, f.cs.slotMapNow().master(50), "the late reply does not replace what go-redis was handed")
}

// A source the SMIGRATED leaves with no slot has its connections retired
// and, owing nothing, closed once go-redis has a new map.
func TestSourceLeftWithoutSlotsIsRetired(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.onNotification(smigrated(50, "0-8191"))
	assert.EqualValues(t, 1, f.src.ClusterStats().Emptied)
	time.Sleep(5 * drainTick)
	assert.Equal(t, stateActive, f.cSrc.state.Load(), "kept until go-redis has reloaded its slot map: commands routed there before still need it")
	f.reload(t, f.dst, nil)
	require.Eventually(t, func() bool { return f.cSrc.state.Load() == stateClosed }, testWait, testTick,
		"an idle connection of the emptied source is closed")
	assert.Equal(t, stateActive, f.cDst.state.Load())
	assert.EqualValues(t, 1, f.src.ClusterStats().EmptiedClosed)
}

// movedMap is the fixture's slot map once src gave all its slots to dst.
func movedMap() []redis.ClusterSlot {
	return []redis.ClusterSlot{
		{Start: 0, End: 16000, Nodes: []redis.ClusterNode{{Addr: dstAddr}}},
		{Start: 16001, End: 16383, Nodes: []redis.ClusterNode{{Addr: thirdAddr}}},
	}
}

// A source that disappears from the slot map is retired too.
func TestSourceGoneFromSlotMapIsRetired(t *testing.T) {
	f := newClusterFixture(t)
	sawSlots(f.cs, f.dst, movedMap())
	require.Eventually(t, func() bool { return f.cSrc.state.Load() == stateClosed }, testWait, testTick)
	assert.Equal(t, stateActive, f.cDst.state.Load())
}

// A connection whose reply is owed is never closed; it is once the reply is in.
func TestEmptiedSourceKeepsOwedConnection(t *testing.T) {
	f := newClusterFixture(t)
	f.cSrc.written.Store(1) // one command written, its reply owed
	f.cSrc.onNotification(smigrated(60, "0-8191"))
	f.reload(t, f.dst, nil)
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

// An SMIGRATING relaxes the migrating master's replicas
// too (reads reach them with ReadOnly, RouteByLatency, RouteRandomly), and
// its SMIGRATED ends it there.
func TestSMigratingRelaxesReplicas(t *testing.T) {
	f := newClusterFixture(t)
	const replicaAddr = "127.0.0.5:7003"
	r := New(WithLogf(t.Logf))
	r.s.cluster = f.cs
	t.Cleanup(func() { _ = r.Close() })
	f.cs.noteDial(r, replicaAddr)
	cR := r.wrap(r.target(replicaAddr), &fakeConn{remote: replicaAddr}, replicaAddr)
	withReplica := fixtureMap()
	withReplica[0].Nodes = append(withReplica[0].Nodes, redis.ClusterNode{Addr: replicaAddr})
	sawSlots(f.cs, f.src, withReplica)

	f.cSrc.onNotification(resp.AppendSMigrating(nil, 90, "0-100"))
	assert.True(t, f.cSrc.n.relaxing())
	assert.True(t, cR.n.relaxing(), "the migrating master's replica is relaxed")
	assert.False(t, f.cDst.n.relaxing(), "another master is not")
	f.cSrc.onNotification(smigrated(91, "0-100"))
	cR.n.mu.Lock()
	open := len(cR.n.ops)
	cR.n.mu.Unlock()
	assert.Zero(t, open, "the SMIGRATED ended the replica's SMIGRATING")
	// The moved slots take the destination's group: reads of them go to
	// the destination's replicas, never to the source's.
	got := f.reload(t, f.src, nil)
	for _, s := range got {
		if s.Start <= 50 && 50 <= s.End {
			assert.Equal(t, []redis.ClusterNode{{Addr: dstAddr}}, s.Nodes)
		}
	}
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

// 100 000 distinct addresses, in SMIGRATEDs (as sources
// and destinations, each under its own id), in slot maps read, and as
// ClusterClients bound, leave every table within its bound.
func TestClusterTablesBoundedOverManyAddresses(t *testing.T) {
	f := newClusterFixture(t)
	f.src.s.logf = func(string, ...any) {}
	const n = 100_000
	for i := range n {
		a := "127.1." + strconv.Itoa(i/250%250) + "." + strconv.Itoa(i%250+1) + ":" + strconv.Itoa(1+i%65535)
		f.cSrc.onNotification(resp.AppendSMigrated(nil, int64(1000+i), []resp.SlotMove{{Src: a, Dst: a, Slots: "0-10"}}))
		if i%1000 == 0 {
			sawSlots(f.cs, f.src, []redis.ClusterSlot{
				{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: a}, {Addr: srcAddr}}},
			})
			sawSlots(f.cs, f.src, fixtureMap())
		}
		f.cs.bind(i, func() {})
	}
	f.cs.mu.Lock()
	defer f.cs.mu.Unlock()
	assert.LessOrEqual(t, len(f.cs.seen), maxSeenSMigrated)
	assert.Len(t, f.cs.handed.groups, 3, "the slot map holds its own nodes only")
	assert.Len(t, f.cs.members, 3)
	assert.LessOrEqual(t, len(f.cs.reloads), maxBound)
	assert.EqualValues(t, n, f.src.ClusterStats().Unapplied)
}

// With no SMIGRATED being served the process hook's added cost on a
// cluster node client is a type check: no allocation per command.
func TestClusterHotPathAllocatesNothing(t *testing.T) {
	f := newClusterFixture(t)
	h := f.src.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	cmd := redis.NewStringCmd(context.Background(), "get", "foo")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() { _ = h(ctx, cmd) })
	assert.Zero(t, allocs)
	ph := f.src.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
	cmds := []redis.Cmder{cmd}
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = ph(ctx, cmds) }))
}

// The slot maps handed to go-redis are watched: what sharded pub/sub
// follows (clusterpubsub.go).
func TestWatchSlotMaps(t *testing.T) {
	f := newClusterFixture(t)
	var got []string
	stop := f.cs.watchSlotMaps(func(v slotMapView) { got = append(got, v.master(50)) })
	assert.Equal(t, srcAddr, f.cs.slotMapNow().master(50))
	f.cSrc.onNotification(smigrated(95, "0-100"))
	f.reload(t, f.src, nil)
	assert.Equal(t, dstAddr, f.cs.slotMapNow().master(50))
	stop()
	f.cs.serve.Load().until = monoNow() - 1
	f.reload(t, f.src, fixtureMap())
	assert.Equal(t, []string{dstAddr}, got)
	assert.Empty(t, slotMapView{}.master(1))
	assert.Empty(t, f.cs.slotMapNow().master(-1))
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

// FuzzSMigratedSlotMap: the SMIGRATED path end to end, push in, slot map
// out. Whatever SMIGRATING and SMIGRATED (two triplets) a server sends, on
// whichever node client: nothing panics, memory stays bounded, and the map
// go-redis is served covers each slot once, names only nodes of the
// cluster's map, and differs from it only in slots a triplet that parsed
// moved to its destination.
func FuzzSMigratedSlotMap(f *testing.F) {
	f.Add(int64(1), "0-100", srcAddr, dstAddr, "0-100", dstAddr, thirdAddr, "9000")
	f.Add(int64(2), "", "127.0.0.9:7000", "", "x", ":7000", "node:-1", "1")
	f.Add(int64(-5), "16383", dstAddr, srcAddr, "0-16383", "node:70000", srcAddr, "16384")
	f.Add(int64(9), "1", srcAddr, thirdAddr, "5-3", srcAddr, dstAddr, "8191")
	f.Fuzz(func(t *testing.T, seq int64, migrating, src1, dst1, slots1, src2, dst2, slots2 string) {
		f := newClusterFixture(t)
		for _, m := range []*Maint{f.src, f.dst, f.third} {
			m.s.logf = func(string, ...any) {}
		}
		f.cSrc.onNotification(resp.AppendSMigrating(nil, seq, migrating))
		moves := []resp.SlotMove{{Src: src1, Dst: dst1, Slots: slots1}, {Src: src2, Dst: dst2, Slots: slots2}}
		frame := resp.AppendSMigrated(nil, seq+1, moves)
		f.cDst.onNotification(frame)
		f.cSrc.onNotification(frame)
		if len(f.cs.seen) > maxSeenSMigrated {
			t.Fatalf("%d ids remembered", len(f.cs.seen))
		}
		served := f.cs.serve.Load() != nil
		got := f.reload(t, f.src, fixtureMap())
		var covered [numSlots]int
		for _, s := range got {
			if s.Start < 0 || s.End >= numSlots || s.Start > s.End || len(s.Nodes) == 0 {
				t.Fatalf("bad entry %+v", s)
			}
			for i := s.Start; i <= s.End; i++ {
				covered[i]++
			}
			switch s.Nodes[0].Addr {
			case srcAddr, dstAddr, thirdAddr:
			default:
				t.Fatalf("served a node the cluster does not have: %+v", s)
			}
		}
		base := fixtureMap()
		var movable [numSlots]string // slots a parsed triplet moved, to where
		if served {
			for _, mv := range moves {
				if r, err := parseSlots(mv.Slots); err == nil {
					for _, x := range r {
						for s := x.lo; s <= x.hi; s++ {
							movable[s] = mv.Dst
						}
					}
				}
			}
		}
		for s := range numSlots {
			if covered[s] != 1 {
				t.Fatalf("slot %d covered %d times", s, covered[s])
			}
			if g, b := masterOf(got, s), masterOf(base, s); g != b && g != movable[s] {
				t.Fatalf("slot %d: served %s, the cluster says %s, no triplet moved it there", s, g, b)
			}
		}
	})
}

// BenchmarkClusterProcessHook is the process hook's own cost on a cluster
// node client: idle, and while maint serves a map after an SMIGRATED.
func BenchmarkClusterProcessHook(b *testing.B) {
	f := newClusterFixture(b)
	f.src.s.logf = func(string, ...any) {}
	h := f.src.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", "foo")
	b.Run("idle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = h(ctx, cmd)
		}
	})
	b.Run("serving", func(b *testing.B) {
		f.cSrc.onNotification(smigrated(1, "0-100"))
		f.cs.serve.Load().until = monoNow() + int64(time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			_ = h(ctx, cmd)
		}
	})
}
