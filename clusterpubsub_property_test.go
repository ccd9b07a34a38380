package maint_test

// A seeded property test of S1c (docs/guarantees.md): over the emulated
// cluster, a random sequence of 3 to 6 slot moves (a part of a node's slots
// migrated to another node, a node added and given slots, a node emptied
// and removed, a shuffle with or without the server's sunsubscribe, a late
// SMIGRATED copy the cluster does not confirm, the first of two
// ClusterClients on one set of options closed) runs under sharded
// subscribers in 9 slots spread over the key space and a publisher
// SPUBLISHing on every channel every 50 ms. Afterwards:
//
//  1. every channel still subscribed delivers 10 consecutive messages
//     exactly, in order: its subscriber is on its slot's owner;
//  2. no message arrived twice, or out of order, on any channel, over the
//     whole run;
//  3. no subscriber was closed more often than its slot changed owner while
//     it was subscribed (maint's closes are counted per slot, one
//     subscriber per slot), and ShardStats' followed agrees; and, for each
//     stretch of steps between two points where every channel delivers
//     again (an epoch; the seed settles after a step or not), a subscriber
//     now on another node than at the epoch's start was closed by maint at
//     least once, unless the node it was on was removed (a removed node
//     closes its connections itself);
//  4. the run moved something: at least one subscriber's slot changed
//     owner, and maint closed at least one subscriber for it.
//
// The seeds are MAINT_TEST_SEEDS (N: seeds 1..N; or a list "7,12"), by
// default propDefaultSeeds. A failing seed prints its steps and how to
// replay it: the steps depend on the seed and the cluster's topology only,
// never on timing.
//
// Two things the signals cannot tell are not asked for. A SetOwner that
// neither pushes sunsubscribe nor is followed by an SMIGRATED tells a
// subscriber nothing (no signal S1c lists): the shuffle without the push
// sends the SMIGRATED after the fact, as a server announcing moves with
// SMIGRATED only does. And a node that dropped a subscriber silently and
// is given the slot back before maint read the cluster's map leaves
// nothing a late SMIGRATED copy does not (which must move nothing): before
// such a step every channel delivers first.

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
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

const (
	propSlots    = 9  // subscribed slots, one PubSub each, spread over the key space
	propPerSlot  = 2  // channels per slot
	propChecked  = 10 // consecutive messages every channel must deliver at the end
	propInterval = 50 * time.Millisecond
	// propSettle bounds the wait for every channel to deliver again after
	// a step: a follow is bounded by 5 s (shardFollowFor), a PubSub's
	// reconnect by go-redis's backoff. It only waits on a failure.
	propSettle = 20 * time.Second
	// propCloseAfter is how long a removed node keeps its connections.
	propCloseAfter = 500 * time.Millisecond
)

// propDefaultSeeds are the seeds CI runs: together they run every kind of
// step (asserted when they all run).
var propDefaultSeeds = []uint64{1, 2, 3}

// propSeedList returns the seeds to run: MAINT_TEST_SEEDS, else the
// defaults.
func propSeedList(t *testing.T) []uint64 {
	v := strings.TrimSpace(os.Getenv("MAINT_TEST_SEEDS"))
	if v == "" {
		return propDefaultSeeds
	}
	if !strings.Contains(v, ",") {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "MAINT_TEST_SEEDS: N (seeds 1..N) or a list of seeds")
		seeds := make([]uint64, 0, n)
		for i := uint64(1); i <= n; i++ {
			seeds = append(seeds, i)
		}
		return seeds
	}
	var seeds []uint64
	for _, f := range strings.Split(v, ",") {
		s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		require.NoError(t, err, "MAINT_TEST_SEEDS: %q", f)
		seeds = append(seeds, s)
	}
	return seeds
}

// The kinds of step.
const (
	stepMigrate    = "migrate"
	stepScaleOut   = "scale-out"
	stepScaleIn    = "scale-in"
	stepShuffle    = "shuffle"
	stepLateCopy   = "late copy"
	stepCloseFirst = "close first client"
)

var propKinds = []string{stepMigrate, stepScaleOut, stepScaleIn, stepShuffle, stepLateCopy, stepCloseFirst}

// TestShardedFollowProperty runs the property for each seed.
func TestShardedFollowProperty(t *testing.T) {
	seeds := propSeedList(t)
	var mu sync.Mutex
	ran := map[string]bool{}
	done := 0
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			kinds := runShardedProperty(t, seed)
			mu.Lock()
			defer mu.Unlock()
			for _, k := range kinds {
				ran[k] = true
			}
			done++
		})
	}
	if done == len(propDefaultSeeds) && slices.Equal(seeds, propDefaultSeeds) {
		for _, k := range propKinds {
			assert.True(t, ran[k], "the default seeds never ran a %q step: pick seeds that do", k)
		}
	}
}

// propSub is one subscriber: a PubSub on one slot's channels.
type propSub struct {
	slot   int
	tag    string // the hash tag of its channels
	chans  []string
	client int // which ClusterClient: 0 the first, 1 the second
	ps     *redis.PubSub
	done   chan struct{} // its reader ended
	closed bool          // the test closed it (its client was closed)
	moves  int           // steps that gave its slot to another node while it was subscribed
	// epochMoves are its moves since the last settle, silentLeft the nodes
	// its slot left without a sunsubscribe since then.
	epochMoves int
	silentLeft map[*mainttest.Endpoint]bool
}

// propRun is one seed's run.
type propRun struct {
	t    *testing.T
	rng  *rand.Rand
	emu  *mainttest.Emulator
	cl   *mainttest.Cluster
	ctx  context.Context
	subs []*propSub

	added    int                   // nodes added
	removing []*mainttest.Endpoint // removed nodes whose connections the run waits to see closed
	clients  []*redis.ClusterClient
	stopLoad []func() // per client: stops its command load
	firstOff bool     // the first client was closed

	round atomic.Int64 // the publisher's last round begun (its sequence number)

	mu      sync.Mutex
	got     map[string][]int   // channel → sequence numbers received, in order
	pubErr  map[int64][]string // round → its failed SPUBLISHes
	closes  map[int]int        // slot → subscriber connections maint closed
	closeTo map[int][]string   // slot → where maint said each close sent it

	// The epoch: the steps since every channel last delivered again.
	epochStart   []*mainttest.Endpoint        // every subscriber's node at its start
	epochCloses  map[int]int                  // closes at its start
	epochRemoved map[*mainttest.Endpoint]bool // the nodes removed in it
}

var shardCloseDetail = regexp.MustCompile(`^sharded subscriber \(.*\): slot (\d+) now at (\S+): connection closed`)

// runShardedProperty runs one seed and returns the kinds of step it ran.
func runShardedProperty(t *testing.T, seed uint64) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{LogRedirects: true})
	require.NoError(t, err)
	r := &propRun{t: t, rng: rand.New(rand.NewPCG(seed, 0x37)), emu: emu, cl: cl, ctx: ctx,
		got: map[string][]int{}, pubErr: map[int64][]string{}, closes: map[int]int{}, closeTo: map[int][]string{}}
	var steps []string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d failed; its steps:\n  %s\nreplay: MAINT_TEST_SEEDS=%d go test -race -count=1 -run 'TestShardedFollowProperty/seed=%d' .",
				seed, strings.Join(steps, "\n  "), seed, seed)
		}
	})

	// The subscribed slots, one per ninth of the key space, so that every
	// node has some.
	band := map[int]bool{}
	for i := 0; len(r.subs) < propSlots; i++ {
		tag := fmt.Sprintf("p%d-%d", seed, i)
		s := mainttest.KeySlot(tag)
		if b := s * propSlots / mainttest.NumSlots; !band[b] {
			band[b] = true
			sub := &propSub{slot: s, tag: tag}
			for j := 0; j < propPerSlot; j++ {
				sub.chans = append(sub.chans, "{"+tag+"}:ch"+strconv.Itoa(j))
			}
			r.subs = append(r.subs, sub)
		}
	}
	slices.SortFunc(r.subs, func(a, b *propSub) int { return a.slot - b.slot })

	// The clients: one, or two on the same options (the second made after
	// the first was used, by the options route or instrumented).
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	stopObs := g.Observe(func(ev maint.Event) {
		if ev.Kind != maint.EventRetire {
			return
		}
		if m := shardCloseDetail.FindStringSubmatch(ev.Detail); m != nil {
			sl, _ := strconv.Atoi(m[1])
			r.mu.Lock()
			r.closes[sl]++
			r.closeTo[sl] = append(r.closeTo[sl], m[2])
			r.mu.Unlock()
			t.Logf("seed %d: maint closed the subscriber of slot %d on %s: %s", seed, sl, ev.Node, ev.Detail)
		}
	})
	defer stopObs()
	opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()}
	route := []string{"one client", "second client on the same options", "second client instrumented"}[r.rng.IntN(3)]
	first := g.NewClusterClient(opt)
	r.clients = append(r.clients, first)
	require.NoError(t, first.Ping(ctx).Err())
	switch route {
	case "second client on the same options":
		r.clients = append(r.clients, g.NewClusterClient(opt))
	case "second client instrumented":
		cc := redis.NewClusterClient(opt)
		require.NoError(t, g.Instrument(cc))
		r.clients = append(r.clients, cc)
	}
	steps = append(steps, "clients: "+route)
	t.Logf("seed %d: %s", seed, route)
	defer func() {
		for _, cc := range r.clients {
			_ = cc.Close()
		}
	}()

	// Every client runs a light command load on the subscribed slots' keys
	// (go-redis meets MOVED and reloads on its own, as an application's
	// client does).
	var loadWG sync.WaitGroup
	defer loadWG.Wait()
	for i, cc := range r.clients {
		stop := make(chan struct{})
		var once sync.Once
		r.stopLoad = append(r.stopLoad, func() { once.Do(func() { close(stop) }) })
		defer r.stopLoad[i]()
		loadWG.Add(1)
		go func() {
			defer loadWG.Done()
			tk := time.NewTicker(propInterval)
			defer tk.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-tk.C:
				}
				_ = cc.Get(ctx, "{"+r.subs[n%len(r.subs)].tag+"}:k").Err()
			}
		}()
	}

	// The subscribers: with two clients, every other one on the first.
	for i, sub := range r.subs {
		sub.client = i % len(r.clients)
		t.Logf("seed %d: the subscriber of slot %d (%v) on client %d, at %s", seed, sub.slot, sub.chans, sub.client, cl.Owner(sub.slot).Addr())
		sub.ps = r.clients[sub.client].SSubscribe(ctx, sub.chans...)
		for range sub.chans {
			msg, err := sub.ps.ReceiveTimeout(ctx, 5*time.Second)
			require.NoError(t, err, "ssubscribe %v", sub.chans)
			sb, ok := msg.(*redis.Subscription)
			require.True(t, ok && sb.Kind == "ssubscribe", "ssubscribe %v answered %v", sub.chans, msg)
		}
		sub.done = make(chan struct{})
		msgs := sub.ps.Channel()
		go func() {
			defer close(sub.done)
			for m := range msgs {
				n, err := strconv.Atoi(m.Payload)
				if err != nil {
					continue
				}
				r.mu.Lock()
				r.got[m.Channel] = append(r.got[m.Channel], n)
				r.mu.Unlock()
			}
		}()
	}
	defer func() {
		for _, sub := range r.subs {
			if !sub.closed {
				_ = sub.ps.Close()
				<-sub.done
			}
		}
	}()

	// The publisher: go-redis alone (it follows MOVED), every channel every
	// propInterval, the round's number as the payload.
	pub := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()})
	defer pub.Close()
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		tk := time.NewTicker(propInterval)
		defer tk.Stop()
		for {
			select {
			case <-stopPub:
				return
			case <-tk.C:
			}
			seq := r.round.Add(1)
			for _, sub := range r.subs {
				for _, ch := range sub.chans {
					if err := pub.SPublish(ctx, ch, strconv.FormatInt(seq, 10)).Err(); err != nil {
						r.mu.Lock()
						r.pubErr[seq] = append(r.pubErr[seq], ch+": "+err.Error())
						r.mu.Unlock()
					}
				}
			}
		}
	}()
	defer func() { close(stopPub); <-pubDone }()

	r.settle("before the first step")
	r.beginEpoch()

	// The steps.
	var kinds []string
	n := 3 + r.rng.IntN(4)
	pairs := 0
	for i := 0; i < n; i++ {
		livePairs := 0
		for _, sub := range r.subs {
			if !sub.closed {
				livePairs += sub.moves
			}
		}
		kind := r.pickKind(i, i == n-1, i == n-1 && livePairs == 0)
		p := r.plan(kind)
		settle := r.rng.IntN(2) == 0
		// A node that dropped a subscriber silently, given its slot back
		// before maint read the cluster's map, leaves no trace a late
		// SMIGRATED does not (S1c): the channels deliver first.
		for _, sub := range r.subs {
			if to := p.gives(sub.slot); !sub.closed && to != nil && sub.silentLeft[to] {
				line := fmt.Sprintf("before step %d: every channel delivers first (slot %d goes back to %s, which dropped its subscriber silently)",
					i+1, sub.slot, to.Addr())
				steps = append(steps, line)
				t.Logf("seed %d: %s", seed, line)
				r.settle(line)
				r.checkEpoch(line)
				r.beginEpoch()
				break
			}
		}
		before := r.owners()
		require.NoError(t, p.apply(), "step %d (%s)", i+1, p.desc)
		now := r.owners()
		moved := 0
		for j, sub := range r.subs {
			if !sub.closed && before[j] != now[j] {
				sub.moves++
				sub.epochMoves++
				moved++
				if p.silent {
					sub.silentLeft[before[j]] = true
				}
			}
		}
		pairs += moved
		line := fmt.Sprintf("step %d/%d: %s; subscribers moved: %d; settle: %v", i+1, n, p.desc, moved, settle)
		steps = append(steps, line)
		kinds = append(kinds, kind)
		t.Logf("seed %d: %s", seed, line)
		if settle {
			r.settle(fmt.Sprintf("step %d (%s)", i+1, p.desc))
			r.checkEpoch(fmt.Sprintf("up to step %d", i+1))
			r.beginEpoch()
		}
	}

	// Afterwards: the removed nodes have closed their connections, every
	// channel delivers again, then propChecked consecutive rounds arrive
	// exactly on every channel.
	for _, ep := range r.removing {
		_, err := emu.WaitEvent(ctx, mainttest.IsKind(ep, mainttest.KindRemovedClose))
		require.NoError(t, err, "removed node %s never closed its connections", ep.Addr())
	}
	r.settle("after the last step")
	r.checkEpoch("up to the end")
	from := r.round.Load() + 1
	waitFor(t, "the checked rounds to be published", propSettle, func() bool { return r.round.Load() > from+propChecked })
	live := r.liveChannels()
	missing := func() map[string][]int {
		r.mu.Lock()
		defer r.mu.Unlock()
		out := map[string][]int{}
		for _, ch := range live {
			have := map[int]bool{}
			for _, seq := range r.got[ch] {
				have[seq] = true
			}
			for seq := from; seq < from+propChecked; seq++ {
				if !have[int(seq)] {
					out[ch] = append(out[ch], int(seq))
				}
			}
		}
		return out
	}
	// Delivery of what was published: generous, it only waits on a failure.
	deadline := time.Now().Add(2 * time.Second)
	miss := missing()
	for len(miss) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		miss = missing()
	}

	// The counters first, then what was received (the observer and the
	// readers take r.mu).
	followed, unasked, settled, spanning := maint.ShardStats(g, opt)
	st := maint.ClusterStatsOf(g, opt)
	r.mu.Lock()
	got := make(map[string][]int, len(r.got))
	for ch, seqs := range r.got {
		got[ch] = slices.Clone(seqs)
	}
	pubErr := maps.Clone(r.pubErr)
	closes, closeTo := maps.Clone(r.closes), maps.Clone(r.closeTo)
	r.mu.Unlock()

	for seq := from; seq < from+propChecked; seq++ {
		assert.Empty(t, pubErr[seq], "round %d: the publisher failed", seq)
	}
	var errRounds []int64
	for seq := range pubErr {
		errRounds = append(errRounds, seq)
	}
	slices.Sort(errRounds)
	if len(errRounds) > 0 {
		t.Logf("rounds with a failed SPUBLISH (before the checked ones): %v, first: %v", errRounds, pubErr[errRounds[0]])
	}
	// 1. Every subscriber is on its slot's owner.
	for _, ch := range live {
		assert.Empty(t, miss[ch], "%s (slot %d, owner %s) missed checked rounds %v of %d..%d",
			ch, mainttest.KeySlot(ch), cl.OwnerOf(ch).Addr(), miss[ch], from, from+propChecked-1)
	}
	// 2. Never twice, never out of order.
	for ch, seqs := range got {
		for k := 1; k < len(seqs); k++ {
			if seqs[k] <= seqs[k-1] {
				assert.Fail(t, "a message twice or out of order", "%s received %d after %d", ch, seqs[k], seqs[k-1])
				break
			}
		}
	}
	// 3. At most one close per move, per subscriber, and the counters agree.
	total := 0
	for _, sub := range r.subs {
		total += closes[sub.slot]
		assert.LessOrEqual(t, closes[sub.slot], sub.moves,
			"the subscriber of slot %d was closed %d times (to %v) for %d moves of its slot", sub.slot, closes[sub.slot], closeTo[sub.slot], sub.moves)
	}
	assert.Equal(t, uint64(total), followed, "ShardStats' followed and the closes maint reported differ")
	assert.LessOrEqual(t, followed, uint64(pairs), "more closes than (subscriber, move) pairs")
	assert.Zero(t, spanning, "a subscriber in one slot was taken for one in several")
	// 4. The run moved something.
	assert.NotZero(t, pairs, "no subscriber's slot moved: the seed proves nothing")
	assert.NotZero(t, followed, "maint followed no subscriber: the seed proves nothing")
	t.Logf("seed %d: %d (subscriber, move) pairs, followed=%d unasked=%d settled=%d; SMIGRATED=%d stale=%d unapplied=%d refuted=%d confirm reads=%d; checked rounds %d..%d on %d channels",
		seed, pairs, followed, unasked, settled, st.SMigrated, st.Stale, st.Unapplied, st.Refuted, st.ConfirmReads, from, from+propChecked-1, len(live))
	return kinds
}

// liveChannels returns the channels of the subscribers still subscribed.
func (r *propRun) liveChannels() []string {
	var out []string
	for _, sub := range r.subs {
		if !sub.closed {
			out = append(out, sub.chans...)
		}
	}
	return out
}

// owners returns the owner of every subscriber's slot now.
func (r *propRun) owners() []*mainttest.Endpoint {
	out := make([]*mainttest.Endpoint, len(r.subs))
	for i, sub := range r.subs {
		out[i] = r.cl.Owner(sub.slot)
	}
	return out
}

// settle waits until every channel still subscribed has received a message
// of a round begun now or later: its subscriber is on its slot's owner.
func (r *propRun) settle(what string) {
	r.t.Helper()
	after := int(r.round.Load())
	live := r.liveChannels()
	silent := func() []string {
		r.mu.Lock()
		defer r.mu.Unlock()
		var out []string
		for _, ch := range live {
			if seqs := r.got[ch]; len(seqs) == 0 || seqs[len(seqs)-1] <= after {
				out = append(out, ch)
			}
		}
		return out
	}
	for end := time.Now().Add(propSettle); ; time.Sleep(5 * time.Millisecond) {
		left := silent()
		if len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			var desc []string
			for _, ch := range left {
				sl := mainttest.KeySlot(ch)
				r.mu.Lock()
				desc = append(desc, fmt.Sprintf("%s (slot %d, at %s, closed by maint %d times, last message %v)",
					ch, sl, r.cl.Owner(sl).Addr(), r.closes[sl], r.got[ch][max(0, len(r.got[ch])-1):]))
				r.mu.Unlock()
			}
			r.t.Fatalf("%v after %s: silent since round %d: %s", propSettle, what, after, strings.Join(desc, "; "))
		}
	}
}

// beginEpoch starts an epoch: every subscriber is on its slot's owner.
func (r *propRun) beginEpoch() {
	r.epochStart = r.owners()
	r.mu.Lock()
	r.epochCloses = maps.Clone(r.closes)
	r.mu.Unlock()
	r.epochRemoved = map[*mainttest.Endpoint]bool{}
	for _, sub := range r.subs {
		sub.epochMoves = 0
		sub.silentLeft = map[*mainttest.Endpoint]bool{}
	}
}

// checkEpoch asserts, once every channel delivers again, what maint did
// for each subscriber in the epoch: no more closes than moves of its slot,
// and at least one if it is now on another node and the node it was on
// was not removed (only a removed node closes a subscriber's connection
// itself: any other way it moved, maint's follow moved it).
func (r *propRun) checkEpoch(what string) {
	t := r.t
	t.Helper()
	end := r.owners()
	r.mu.Lock()
	closes := maps.Clone(r.closes)
	r.mu.Unlock()
	for i, sub := range r.subs {
		if sub.closed {
			continue
		}
		c := closes[sub.slot] - r.epochCloses[sub.slot]
		assert.LessOrEqual(t, c, sub.epochMoves, "%s: the subscriber of slot %d was closed %d times for %d moves of its slot",
			what, sub.slot, c, sub.epochMoves)
		if from := r.epochStart[i]; end[i] != from && !r.epochRemoved[from] {
			assert.NotZero(t, c, "%s: the subscriber of slot %d delivers from %s, having been at %s (not removed), and maint's follow never closed it",
				what, sub.slot, end[i].Addr(), from.Addr())
		}
	}
}

// pickKind chooses the i-th step's kind among those that apply; mustMove
// (the last step, no subscriber still subscribed moved yet) makes it a
// migration.
func (r *propRun) pickKind(i int, last, mustMove bool) string {
	if mustMove {
		return stepMigrate
	}
	kinds := []string{stepMigrate, stepScaleOut, stepShuffle, stepLateCopy}
	if len(r.cl.Nodes()) >= 3 {
		kinds = append(kinds, stepScaleIn)
	}
	// Midway: neither first nor last (the last subscribers moved must be
	// left to follow).
	if len(r.clients) == 2 && !r.firstOff && i > 0 && !last {
		kinds = append(kinds, stepCloseFirst)
	}
	return kinds[r.rng.IntN(len(kinds))]
}

// pick returns a random element of eps.
func (r *propRun) pick(eps []*mainttest.Endpoint) *mainttest.Endpoint {
	return eps[r.rng.IntN(len(eps))]
}

// others returns the nodes but ep.
func (r *propRun) others(ep *mainttest.Endpoint) []*mainttest.Endpoint {
	var out []*mainttest.Endpoint
	for _, n := range r.cl.Nodes() {
		if n != ep {
			out = append(out, n)
		}
	}
	return out
}

// source picks a node owning slots, one with a subscriber if any does.
func (r *propRun) source() *mainttest.Endpoint {
	var with, owning []*mainttest.Endpoint
	for _, n := range r.cl.Nodes() {
		if len(r.cl.Slots(n)) == 0 {
			continue
		}
		owning = append(owning, n)
		if len(r.subSlotsOf(n)) > 0 {
			with = append(with, n)
		}
	}
	if len(with) > 0 {
		return r.pick(with)
	}
	return r.pick(owning)
}

// subSlotsOf returns the subscribed slots (of subscribers still
// subscribed) ep owns.
func (r *propRun) subSlotsOf(ep *mainttest.Endpoint) []int {
	var out []int
	for _, sub := range r.subs {
		if !sub.closed && r.cl.Owner(sub.slot) == ep {
			out = append(out, sub.slot)
		}
	}
	return out
}

// chunk returns a slot list of ep's slots around one of its subscribed
// slots (any of its slots if it has none): a contiguous part of one of its
// ranges, up to 2400 slots.
func (r *propRun) chunk(ep *mainttest.Endpoint) string {
	rs := r.cl.Slots(ep)
	var s int
	if subs := r.subSlotsOf(ep); len(subs) > 0 {
		s = subs[r.rng.IntN(len(subs))]
	} else {
		rg := rs[r.rng.IntN(len(rs))]
		s = rg.Start + r.rng.IntN(rg.End-rg.Start+1)
	}
	for _, rg := range rs {
		if s >= rg.Start && s <= rg.End {
			lo, hi := max(rg.Start, s-r.rng.IntN(1200)), min(rg.End, s+r.rng.IntN(1200))
			return fmt.Sprintf("%d-%d", lo, hi)
		}
	}
	panic("slot not owned")
}

// propPlan is a step chosen, not yet applied.
type propPlan struct {
	kind string
	desc string
	// silent: the nodes giving slots away drop their subscribers without
	// a sunsubscribe.
	silent bool
	// gives returns the node the step gives slot to, nil when it does not
	// move it (or to a node added by the step).
	gives func(slot int) *mainttest.Endpoint
	// apply applies the step and waits for its event.
	apply func() error
}

// in reports whether slot is in the slot list slots.
func in(slots string, slot int) bool {
	rs, err := mainttest.ParseSlots(slots)
	if err != nil {
		panic(err)
	}
	for _, rg := range rs {
		if slot >= rg.Start && slot <= rg.End {
			return true
		}
	}
	return false
}

// after returns a WaitEvent matcher for events matching m logged after the
// n events logged so far (WaitEvent looks at each event once, in order).
func after(n int, m func(mainttest.Event) bool) func(mainttest.Event) bool {
	seen := 0
	return func(ev mainttest.Event) bool {
		seen++
		return seen > n && m(ev)
	}
}

// migrated waits for the SMIGRATED src sends after the SMIGRATING seq.
func (r *propRun) migrated(src *mainttest.Endpoint, seq int64) error {
	_, err := r.emu.WaitEvent(r.ctx, func(ev mainttest.Event) bool {
		return ev.Kind == mainttest.KindSMigrated && ev.Endpoint == src.Addr() && ev.Seq > seq
	})
	return err
}

// smigrated waits for the SMIGRATED of sequence id seq.
func (r *propRun) smigrated(seq int64) error {
	_, err := r.emu.WaitEvent(r.ctx, func(ev mainttest.Event) bool {
		return ev.Kind == mainttest.KindSMigrated && ev.Seq == seq
	})
	return err
}

// plan chooses a step of kind, from the topology now and the seed only.
func (r *propRun) plan(kind string) propPlan {
	cl := r.cl
	setSilent := func(silent bool) { cl.SetShardUnsubscribePush(!silent) }
	pushed := func(silent bool) string {
		if silent {
			return "no sunsubscribe"
		}
		return "sunsubscribe pushed"
	}
	to := func(slots string, dst **mainttest.Endpoint) func(int) *mainttest.Endpoint {
		return func(slot int) *mainttest.Endpoint {
			if in(slots, slot) {
				return *dst
			}
			return nil
		}
	}
	switch kind {
	case stepMigrate, stepScaleOut:
		src := r.source()
		var dst *mainttest.Endpoint
		if kind == stepMigrate {
			dst = r.pick(r.others(src))
		}
		slots := r.chunk(src)
		silent := r.rng.IntN(2) == 0
		p := propPlan{kind: kind, silent: silent, gives: to(slots, &dst)}
		var addr string
		if kind == stepMigrate {
			p.desc = fmt.Sprintf("%s: slots %s from %s to %s, SMIGRATING/SMIGRATED, %s", kind, slots, src.Addr(), dst.Addr(), pushed(silent))
		} else {
			r.added++
			addr = fmt.Sprintf("127.0.0.%d:0", 8+r.added)
			p.desc = fmt.Sprintf("%s: a node added on %s, slots %s from %s to it, SMIGRATING/SMIGRATED, %s", kind, addr, slots, src.Addr(), pushed(silent))
		}
		p.apply = func() error {
			if addr != "" {
				var err error
				if dst, err = cl.AddNode(addr); err != nil {
					return err
				}
			}
			setSilent(silent)
			seq, err := cl.MigrateSlots(mainttest.SlotMigration{From: src, To: dst, Slots: slots, Duration: 100 * time.Millisecond})
			if err != nil {
				return err
			}
			return r.migrated(src, seq)
		}
		return p

	case stepScaleIn:
		src := r.pick(cl.Nodes())
		silent := r.rng.IntN(2) == 0
		rs := cl.Slots(src)
		if len(rs) == 0 {
			return propPlan{kind: kind, silent: silent, desc: fmt.Sprintf("%s: %s, owning no slot, removed", kind, src.Addr()),
				gives: func(int) *mainttest.Endpoint { return nil },
				apply: func() error {
					r.removing = append(r.removing, src)
					r.epochRemoved[src] = true
					mark := len(r.emu.Events())
					if err := cl.RemoveNode(src, propCloseAfter); err != nil {
						return err
					}
					_, err := r.emu.WaitEvent(r.ctx, after(mark, mainttest.IsKind(src, mainttest.KindNodeRemove)))
					return err
				}}
		}
		// Every range to one of the other nodes, chosen at random.
		byDst := map[*mainttest.Endpoint][]mainttest.SlotRange{}
		var dsts []*mainttest.Endpoint
		others := r.others(src)
		for _, rg := range rs {
			d := r.pick(others)
			if byDst[d] == nil {
				dsts = append(dsts, d)
			}
			byDst[d] = append(byDst[d], rg)
		}
		m := mainttest.SlotMigration{From: src, To: dsts[0], Slots: mainttest.FormatSlots(byDst[dsts[0]]),
			Duration: 100 * time.Millisecond, RemoveSource: true, CloseAfter: propCloseAfter}
		parts := []string{m.Slots + " to " + dsts[0].Addr()}
		for _, d := range dsts[1:] {
			m.Also = append(m.Also, mainttest.SlotTarget{Slots: mainttest.FormatSlots(byDst[d]), To: d})
			parts = append(parts, mainttest.FormatSlots(byDst[d])+" to "+d.Addr())
		}
		return propPlan{kind: kind, silent: silent,
			desc: fmt.Sprintf("%s: %s emptied (%s), SMIGRATING/SMIGRATED, %s, and removed", kind, src.Addr(), strings.Join(parts, ", "), pushed(silent)),
			gives: func(slot int) *mainttest.Endpoint {
				for _, d := range dsts {
					if in(mainttest.FormatSlots(byDst[d]), slot) {
						return d
					}
				}
				return nil
			},
			apply: func() error {
				r.removing = append(r.removing, src)
				r.epochRemoved[src] = true
				setSilent(silent)
				seq, err := cl.MigrateSlots(m)
				if err != nil {
					return err
				}
				return r.migrated(src, seq)
			}}

	case stepShuffle:
		src := r.source()
		dst := r.pick(r.others(src))
		slots := r.chunk(src)
		silent := r.rng.IntN(2) == 0
		p := propPlan{kind: kind, silent: silent, gives: to(slots, &dst)}
		if !silent {
			p.desc = fmt.Sprintf("%s: slots %s from %s to %s at once, sunsubscribe pushed", kind, slots, src.Addr(), dst.Addr())
			p.apply = func() error { setSilent(false); return cl.SetOwner(slots, dst) }
			return p
		}
		p.desc = fmt.Sprintf("%s: slots %s from %s to %s at once, no sunsubscribe, an SMIGRATED after", kind, slots, src.Addr(), dst.Addr())
		p.apply = func() error {
			setSilent(true)
			if err := cl.SetOwner(slots, dst); err != nil {
				return err
			}
			return r.smigrated(src.SMigrated(mainttest.SlotMove{Src: src.Addr(), Dst: dst.Addr(), Slots: slots}))
		}
		return p

	case stepLateCopy:
		src := r.source()
		dst := r.pick(r.others(src))
		slots := r.chunk(src)
		return propPlan{kind: kind,
			desc:  fmt.Sprintf("%s: %s sends an SMIGRATED of its slots %s to %s, which do not move", kind, src.Addr(), slots, dst.Addr()),
			gives: func(int) *mainttest.Endpoint { return nil },
			apply: func() error {
				return r.smigrated(src.SMigrated(mainttest.SlotMove{Src: src.Addr(), Dst: dst.Addr(), Slots: slots}))
			}}

	case stepCloseFirst:
		n := 0
		for _, sub := range r.subs {
			if sub.client == 0 {
				n++
			}
		}
		return propPlan{kind: kind, desc: fmt.Sprintf("%s: its %d subscribers closed, then the client", kind, n),
			gives: func(int) *mainttest.Endpoint { return nil },
			apply: func() error {
				r.firstOff = true
				r.stopLoad[0]()
				for _, sub := range r.subs {
					if sub.client == 0 {
						sub.closed = true
						_ = sub.ps.Close()
						<-sub.done
					}
				}
				return r.clients[0].Close()
			}}
	}
	panic("unknown step " + kind)
}
