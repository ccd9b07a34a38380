package maint_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// uptimeRounds is how many clients of every kind TestGroupUptimeEveryKind
// makes and closes: 1 000, or 150 under -race (the same kinds, fewer
// rounds, to fit CI: each round is 10 clients and 12 node clients).
func uptimeRounds() int {
	if raceOn {
		return 150
	}
	return 1000
}

// One Group that lives long: it makes and closes uptimeRounds clients of
// every kind (Client, by NewClient and by Configure and AddHook, its Maint
// closed after it; ClusterClient on the same options and on new ones;
// Ring, whose shards SetAddrs adds and drops; FailoverClient; and
// Instrument on an existing Client, ClusterClient, Ring and
// FailoverClient), with maintenance between them (MIGRATING/MIGRATED on
// the node the Clients, Rings and FailoverClients use, SMIGRATED on the
// cluster, MOVING now and then) while one live client of every kind is
// served. Afterwards the Group remembers what those live clients need and
// no more: its Maints, the clients it knows, its cluster states, the
// options it owns, the Rings it polls and the options configured are what
// they were before the rounds, the goroutines too (goleak), and the heap
// grew by less than a bound far below what one round's clients kept would
// cost.
func TestGroupUptimeEveryKind(t *testing.T) {
	e := quietEnv(t)
	k := newEveryKind(t, e)
	fo, cl := k.fo, k.cl
	g := maint.NewGroup(maint.WithLogf(func(string, ...any) {}))
	defer g.Close()
	maint.SetClusterGone(g, 400*time.Millisecond) // the sweeper runs every 100ms
	ctx := context.Background()

	plainOpt, clusterOpt, ringOpt, failoverOpt := k.plain, k.cluster, k.ring, k.failover
	oneRing := map[string]string{"a": e.old.Addr()}
	twoRing := map[string]string{"a": e.old.Addr(), "b": e.new.Addr()}
	set := func(what string, c redis.Cmdable, i int) {
		t.Helper()
		require.NoError(t, c.Set(ctx, fmt.Sprint("k", i%16), i, 0).Err(), "%s, round %d", what, i)
	}

	// One live client of every kind, served throughout.
	// Kept reachable, as the Group owns options only while they live: a
	// ClusterClient keeps its options on v9.23.0 but only a copy of them
	// from v9.24.0 (TestContractClusterNewClient), so the live one no
	// longer keeps these.
	sameCluster := clusterOpt()
	defer runtime.KeepAlive(sameCluster)
	liveFailover := failoverOpt() // kept reachable: the Group owns these options while they live
	liveRing := ringOpt(oneRing)  // NewRing copies them
	defer runtime.KeepAlive(liveFailover)
	defer runtime.KeepAlive(liveRing)
	live := []redis.UniversalClient{
		g.NewClient(plainOpt()),
		g.NewClusterClient(sameCluster),
		g.NewRing(liveRing),
		g.NewFailoverClient(liveFailover),
	}
	defer func() {
		for _, c := range live {
			_ = c.Close()
		}
	}()
	serveLive := func(i int) {
		t.Helper()
		for j, c := range live {
			set(fmt.Sprint("live client ", j), c, i)
		}
		require.NoError(t, live[1].(*redis.ClusterClient).ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}))
	}
	serveLive(0)
	settle := func(what string, want maint.GroupMemory, wantMaints int) {
		t.Helper()
		// go-redis holds a closed ClusterClient, and so its options, a
		// minute after its last reload (its node GC's timer:
		// TestContractClusterNodeGC); then the weak keys end.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			runtime.GC() // the options collected end their entries (weak keys)
			mem := maint.MemoryOf(g)
			if len(g.Maints()) == wantMaints && mem == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d Maints, %+v; want %d, %+v", what, len(g.Maints()), mem, wantMaints, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wantMaints := len(g.Maints())
	want := maint.MemoryOf(g)
	t.Logf("one live client of every kind: %d Maints, %+v", wantMaints, want)
	// The goroutines of this process, but the servers' (the emulator's and
	// miniredis's, one per connection: the live clients' connections change
	// at a handoff).
	leaks := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/maintkit/maint/mainttest.(*Emulator).goLocked.func1"),
		goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer"),
		goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2"),
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// The emulator keeps an event log (accepts, closes, pushes): its
	// growth is the test's, not maint's.
	logBytes := func() int64 {
		evs := e.emu.Events()
		n := int64(len(evs)) * int64(unsafe.Sizeof(mainttest.Event{})) * 5 / 4 // append's spare capacity
		for _, ev := range evs {
			n += int64(len(ev.Detail))
		}
		return n
	}
	before, logBefore := heap(), logBytes()

	// Maintenance between the rounds: MIGRATING (MIGRATED five rounds
	// later) on the nodes of the Clients, Rings and FailoverClients, an
	// SMIGRATED of a few slots to the next node of the cluster, and four
	// MOVINGs of e.old to e.new.
	nodes := cl.Nodes()
	const slots = "100-110"
	maintenance := func(i int) {
		e.old.Migrating(0, `["1"]`)
		fo.Migrating(0, `["1"]`)
		from := cl.Owner(100)
		to := nodes[0]
		for k, n := range nodes {
			if n == from {
				to = nodes[(k+1)%len(nodes)]
			}
		}
		_, err := cl.MigrateSlots(mainttest.SlotMigration{From: from, To: to, Slots: slots})
		require.NoError(t, err)
		if i%(uptimeRounds()/4) == 0 {
			e.old.Moving(mainttest.Moving{Window: time.Second, To: e.new}) // whole seconds: the window on the wire is the window kept
			// The rounds go on once the window is over: a client made in
			// its last moments is TestFreshClientAtAWindowsEndFailsNothing's
			// subject, not this one's; and one whose first connection opts
			// in just after the replays stop meets the server's close
			// without a word (docs/guarantees.md M15), which go-redis's
			// retries, off here, would take.
			e.waitEvent(e.old, mainttest.KindWindowEndClose, 10*time.Second)
		}
	}

	n := uptimeRounds()
	start := time.Now()

	var cs []redis.UniversalClient // the round's clients
	defer func() {
		for _, c := range cs { // a round cut short by a failure: its clients' pools would redial forever
			_ = c.Close()
		}
	}()
	for i := range n {
		cs = nil
		add := func(c redis.UniversalClient) { cs = append(cs, c) }
		add(g.NewClient(plainOpt()))
		configured := plainOpt()
		cm := g.Configure(configured)
		withHook := redis.NewClient(configured)
		withHook.AddHook(cm)
		add(withHook)
		if i%2 == 0 {
			add(g.NewClusterClient(sameCluster))
		} else {
			add(g.NewClusterClient(clusterOpt()))
		}
		rng := g.NewRing(ringOpt(oneRing))
		add(rng)
		add(g.NewFailoverClient(failoverOpt()))
		existing := []redis.UniversalClient{
			redis.NewClient(plainOpt()),
			redis.NewClusterClient(clusterOpt()),
			redis.NewRing(ringOpt(oneRing)),
			redis.NewFailoverClient(failoverOpt()),
		}
		for _, c := range existing {
			require.NoError(t, g.Instrument(c))
			add(c)
		}
		if i%10 == 0 {
			maintenance(i)
		}
		for j, c := range cs {
			set(fmt.Sprintf("%T %d", c, j), c, i)
		}
		rng.SetAddrs(twoRing)
		for k := range 4 {
			set("Ring with two shards", rng, k)
		}
		rng.SetAddrs(map[string]string{"b": e.new.Addr()})
		set("Ring with the other shard", rng, i)
		for _, c := range cs {
			require.NoError(t, c.Close())
		}
		cs = nil
		require.NoError(t, cm.Close(), "after its client, as Group.Configure says")
		if i%10 == 5 {
			e.old.Migrated(`["1"]`)
			fo.Migrated(`["1"]`)
			serveLive(i)
		}
	}
	made := time.Since(start)
	require.Greater(t, len(g.Maints()), wantMaints, "the closed clients' Maints are there before the sweep")

	settle("the closed clients forgotten", want, wantMaints)
	forgotten := time.Since(start)
	serveLive(n)
	// A live client's handoff keeps its successor pin, and the goroutine
	// that settles it, until the pin's bound (a minute after its window)
	// unless a probe lands on the successor first: the last MOVING's run
	// may still be settling once the closed clients are forgotten. Every
	// other goroutine of the rounds must be gone.
	leakDeadline := time.Now().Add(time.Minute + 30*time.Second)
	for {
		err := goleak.Find(leaks...)
		if err == nil {
			break
		}
		if time.Now().After(leakDeadline) {
			require.NoError(t, err, "goroutines beyond the live clients'")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// go-redis holds a closed ClusterClient, its node clients and pools, a
	// minute after its last reload (its node GC's timer:
	// TestContractClusterNodeGC): the heap is judged once those timers have
	// fired, two minutes after the last round at most.
	heapDeadline := time.Now().Add(2 * time.Minute)
	var after uint64
	var logAfter, grew int64
	for {
		after, logAfter = heap(), logBytes()
		grew = int64(after) - int64(before) - (logAfter - logBefore)
		if grew < 2<<20 || time.Now().After(heapDeadline) {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d rounds of 10 clients in %v, forgotten at %v: %d Maints, %+v; heap %d → %d, of which the emulator's log %+d B: %+d B",
		n, made.Round(time.Millisecond), forgotten.Round(time.Millisecond), len(g.Maints()), maint.MemoryOf(g), before, after, logAfter-logBefore, grew)
	// One round's clients kept would be far more (10 clients, 12 node
	// clients, their Maints and pools): 2 MiB is what the heap's own noise
	// needs, about 2 KiB per round.
	assert.Less(t, grew, int64(2<<20), "heap growth over %d rounds", n)
}

// quietEnv is newEnv with an emulator that logs nothing: a long test's
// thousands of connections would spend its time logging.
func quietEnv(t *testing.T) *env { return newEnvLogging(t, "", func(string, ...any) {}) }
