package mainttest

// go-redis's ClusterClient, a client nobody here wrote, against the emulated
// cluster: it pins the emulator's topology replies, redirects and slot
// migration notifications to what a real client reads.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// clusterClient returns a go-redis ClusterClient on cl, closed at the end of
// the test. opt's Addrs and Dialer are filled in.
func clusterClient(t *testing.T, cl *Cluster, opt redis.ClusterOptions) *redis.ClusterClient {
	t.Helper()
	opt.Addrs = cl.Addrs()
	opt.Dialer = cl.Emulator().Dialer()
	c := redis.NewClusterClient(&opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// slotMaps sums the slot-map requests the cluster's nodes answered.
func slotMaps(eps []*Endpoint) int64 {
	var n int64
	for _, ep := range eps {
		n += ep.Stats().Cluster.SlotMaps
	}
	return n
}

func TestClusterGoRedisSpread(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	c := clusterClient(t, cl, redis.ClusterOptions{})
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		if err := c.Set(ctx, "key"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatalf("SET %d: %v", i, err)
		}
	}
	for i := 0; i < 300; i++ {
		if v, err := c.Get(ctx, "key"+strconv.Itoa(i)).Int(); err != nil || v != i {
			t.Fatalf("GET %d: %d %v", i, v, err)
		}
	}
	// A pipeline over every node, and a transaction on a hash tag.
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 30; i++ {
			p.Incr(ctx, "key"+strconv.Itoa(i))
		}
		return nil
	})
	if err != nil || len(cmds) != 30 {
		t.Fatalf("pipeline: %d %v", len(cmds), err)
	}
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "{user}.a")
		p.Incr(ctx, "{user}.b")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get(ctx, "{user}.b").Int(); v != 1 {
		t.Errorf("{user}.b = %d", v)
	}
	for i, ep := range nodes {
		st := ep.Stats()
		if st.Served < 50 {
			t.Errorf("node %d served %d commands: keys not spread", i, st.Served)
		}
		if st.Cluster.Moved != 0 || st.Cluster.Ask != 0 {
			t.Errorf("node %d redirected: %+v", i, st.Cluster)
		}
	}
	if n := slotMaps(nodes); n < 1 {
		t.Errorf("%d slot-map requests", n)
	}
}

// clientVariants are the ClusterClients the redirect tests run with: no
// maintenance handler (RESP2) and go-redis's built-in enabled (RESP3).
var clientVariants = []struct {
	name string
	opt  func() redis.ClusterOptions
}{
	{"plain", func() redis.ClusterOptions { return redis.ClusterOptions{} }},
	{"builtin", func() redis.ClusterOptions {
		return redis.ClusterOptions{Protocol: 3, MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeEnabled, EndpointType: maintnotifications.EndpointTypeInternalIP}}
	}},
}

func TestClusterGoRedisFollowsMoved(t *testing.T) {
	for _, v := range clientVariants {
		t.Run(v.name, func(t *testing.T) { followsMoved(t, v.opt()) })
	}
}

func followsMoved(t *testing.T, opt redis.ClusterOptions) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	c := clusterClient(t, cl, opt)
	ctx := context.Background()
	k := keyOn(t, cl, nodes[0], "moving")
	if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := slotMaps(nodes)
	// The slot changes owner with no notification: the next command meets
	// -MOVED on the old owner and go-redis follows it.
	if err := cl.SetOwner(strconv.Itoa(KeySlot(k)), nodes[2]); err != nil {
		t.Fatal(err)
	}
	served2 := nodes[2].Stats().Served
	if v, err := c.Get(ctx, k).Result(); err != nil || v != "v" {
		t.Fatalf("GET after the move: %q %v", v, err)
	}
	if st := nodes[0].Stats().Cluster; st.Moved != 1 {
		t.Errorf("old owner served %d MOVED, want 1", st.Moved)
	}
	if nodes[2].Stats().Served <= served2 {
		t.Error("the new owner did not serve the redirected GET")
	}
	// go-redis reloads its slot map on a MOVED.
	waitFor(t, "a slot-map reload after MOVED", func() bool { return slotMaps(nodes) > before })
}

func TestClusterGoRedisFollowsAsk(t *testing.T) {
	for _, v := range clientVariants {
		t.Run(v.name, func(t *testing.T) { followsAsk(t, v.opt()) })
	}
}

func followsAsk(t *testing.T, opt redis.ClusterOptions) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	c := clusterClient(t, cl, opt)
	ctx := context.Background()
	k := keyOn(t, cl, nodes[1], "asked")
	if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MigrateSlots(SlotMigration{From: nodes[1], To: nodes[0], Slots: strconv.Itoa(KeySlot(k)),
		Duration: time.Hour, KeyMoved: AllKeys}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if v, err := c.Incr(ctx, k).Result(); err != nil || v != int64(2+i) {
			t.Fatalf("INCR during the migration: %d %v", v, err)
		}
	}
	if st := nodes[1].Stats().Cluster; st.Ask != 3 {
		t.Errorf("source served %d ASK, want 3", st.Ask)
	}
	if st := nodes[0].Stats().Cluster; st.Asking != 3 || st.Moved != 0 {
		t.Errorf("destination: %+v, want Asking 3 and no MOVED", st)
	}
	if cl.Owner(KeySlot(k)) != nodes[1] {
		t.Error("ownership changed before the migration ended")
	}
}

func TestClusterGoRedisCrossSlot(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	c := clusterClient(t, cl, redis.ClusterOptions{})
	ctx := context.Background()
	a := keyOn(t, cl, cl.Nodes()[0], "a")
	b := keyOn(t, cl, cl.Nodes()[0], "b")
	err := c.Eval(ctx, "return 1", []string{a, b}).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT ") {
		t.Fatalf("EVAL across slots: %v, want CROSSSLOT", err)
	}
	if n := cl.Nodes()[0].Stats().Cluster.CrossSlot; n != 1 {
		t.Errorf("CrossSlot = %d", n)
	}
}

// TestClusterGoRedisBuiltinSMigrated: go-redis's built-in handler, enabled
// explicitly on a ClusterClient, reads the SMIGRATED of a migration and
// reloads its slot map once; commands for the moved slots then go straight
// to the destination.
func TestClusterGoRedisBuiltinSMigrated(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	src, dst := nodes[0], nodes[1]
	c := clusterClient(t, cl, redis.ClusterOptions{
		Protocol: 3,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode:         maintnotifications.ModeEnabled,
			EndpointType: maintnotifications.EndpointTypeInternalIP,
		},
	})
	ctx := context.Background()
	moved := keyInSlot(t, 100, "m")    // in the slots that move
	staying := keyInSlot(t, 4000, "s") // on the source, not moving
	for _, k := range []string{moved, staying} {
		if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the source's connection opted in", func() bool { return src.Stats().OptedIn > 0 })
	before := slotMaps(nodes)

	if _, err := cl.MigrateSlots(SlotMigration{From: src, To: dst, Slots: "0-1000", Duration: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, e, IsKind(src, KindSMigrated))
	if strings.HasSuffix(ev.Detail, " conns=0") {
		t.Fatalf("SMIGRATED reached no connection: %q", ev.Detail)
	}
	// A command on the source (a slot that stays) reads the push.
	if err := c.Get(ctx, staying).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "go-redis's reload on SMIGRATED", func() bool { return slotMaps(nodes) > before })
	time.Sleep(500 * time.Millisecond) // past LazyReload's 200 ms cooldown: no second reload
	if n := slotMaps(nodes) - before; n != 1 {
		t.Errorf("%d slot-map requests after one SMIGRATED, want 1", n)
	}
	movedBefore, dstServed := src.Stats().Cluster.Moved, dst.Stats().Served
	if v, err := c.Incr(ctx, moved).Result(); err != nil || v != 2 {
		t.Fatalf("INCR on a moved slot: %d %v", v, err)
	}
	if n := src.Stats().Cluster.Moved - movedBefore; n != 0 {
		t.Errorf("%d MOVED for a moved slot after the reload, want 0", n)
	}
	if dst.Stats().Served <= dstServed {
		t.Error("the destination did not serve the moved slot's command")
	}
	if src.Stats().Cluster.Moved != 0 {
		t.Errorf("source served %d MOVED in all", src.Stats().Cluster.Moved)
	}
}

// TestClusterGoRedisReshardUnderLoad: a ClusterClient with no maintenance
// handler, under load (INCRs on keys all over the slot space, pipelines,
// transactions on hash tags), through a migration of a third of the slots
// whose keys leave the source slot by slot (so -ASK), then the source's
// removal. Every command gets its one reply: nothing fails, even with no
// retries, no INCR is lost or counted twice, and the ASKs are served and
// followed.
func TestClusterGoRedisReshardUnderLoad(t *testing.T) {
	for _, retries := range []int{0, -1} { // go-redis's default (3), none
		t.Run(fmt.Sprintf("MaxRetries=%d", retries), func(t *testing.T) { reshardUnderLoad(t, retries) })
	}
}

func reshardUnderLoad(t *testing.T, maxRetries int) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	nodes := cl.Nodes()
	src := nodes[2]
	c := clusterClient(t, cl, redis.ClusterOptions{PoolSize: 8, MaxRetries: maxRetries})
	ctx := context.Background()

	const workers, keysPer = 6, 40
	var (
		mu     sync.Mutex
		done   = map[string]int64{} // successful INCRs per key
		errs   []error
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		counts atomic.Int64
	)
	record := func(key string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			return
		}
		done[key]++
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d:k%d", w, i%keysPer)
				switch i % 5 {
				case 3: // a pipeline over several slots
					ks := []string{k, fmt.Sprintf("w%d:k%d", w, (i+7)%keysPer)}
					_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
						for _, k := range ks {
							p.Incr(ctx, k)
						}
						return nil
					})
					for _, k := range ks {
						record(k, err)
					}
				case 4: // a transaction on a hash tag
					tag := fmt.Sprintf("{w%d:t%d}", w, i%keysPer)
					_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
						p.Incr(ctx, tag+"a")
						p.Incr(ctx, tag+"b")
						return nil
					})
					record(tag+"a", err)
					record(tag+"b", err)
				default:
					record(k, c.Incr(ctx, k).Err())
				}
				counts.Add(1)
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	waitFor(t, "load", func() bool { return counts.Load() > 300 })

	// Keys leave the source slot by slot over the migration.
	const dur = 400 * time.Millisecond
	t0 := time.Now()
	keyMoved := func(k string) bool {
		return time.Since(t0) > time.Duration(KeySlot(k)-10923)*dur/(NumSlots-10923)
	}
	if _, err := cl.MigrateSlots(SlotMigration{From: src, To: nodes[0], Slots: "10923-13653",
		Also: []SlotTarget{{Slots: "13654-16383", To: nodes[1]}}, Duration: dur, Latency: 2 * time.Millisecond,
		KeyMoved: keyMoved, RemoveSource: true, CloseAfter: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, e, IsKind(src, KindRemovedClose))
	n := counts.Load()
	waitFor(t, "load after the removal", func() bool { return counts.Load() > n+300 })
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("%d failed commands, first: %v", len(errs), errs[0])
	}
	for k, want := range done {
		got, err := e.Miniredis().Get(k)
		if err != nil || got != strconv.FormatInt(want, 10) {
			t.Errorf("%s = %q (%v), %d INCRs succeeded", k, got, err, want)
		}
	}
	st := src.Stats()
	// MOVED after the ownership change depends on whether go-redis's
	// reload on ASK came first: it is logged, not asserted.
	if st.Cluster.Ask == 0 || nodes[0].Stats().Cluster.Asking+nodes[1].Stats().Cluster.Asking == 0 {
		t.Errorf("source redirects %+v: want ASKs, followed with ASKING", st.Cluster)
	}
	if st.OwedAtClose != 0 {
		t.Errorf("the removed node closed %d connections owing %d replies", st.Cluster.ClosedAtRemoval, st.OwedAtClose)
	}
	if len(cl.Slots(src)) != 0 || len(cl.Nodes()) != 2 {
		t.Errorf("topology after: %v", cl.Addrs())
	}
	t.Logf("%d operations; source: ASK %d MOVED %d, closed at removal %d; destinations ASKING %d+%d; slot maps %d",
		counts.Load(), st.Cluster.Ask, st.Cluster.Moved, st.Cluster.ClosedAtRemoval,
		nodes[0].Stats().Cluster.Asking, nodes[1].Stats().Cluster.Asking, slotMaps(nodes))
}
