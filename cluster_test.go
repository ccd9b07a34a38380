package maint_test

// maint on go-redis's ClusterClient against the emulated OSS Cluster API
// (mainttest.Cluster): a reshard under load, and the removal of the
// endpoint it empties.

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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// clusterEnv is a 3-node emulated cluster and a ClusterClient with maint
// installed by Instrument, and a recorder inside maint on every node client
// that counts the redirects of commands sent after maint read the first
// SMIGRATED.
type clusterEnv struct {
	t     *testing.T
	emu   *mainttest.Emulator
	cl    *mainttest.Cluster
	nodes []*mainttest.Endpoint
	cc    *redis.ClusterClient
	g     *maint.Group
	ev    *eventLog

	smigratedAt   atomic.Int64 // UnixNano when maint read the first SMIGRATED
	lateRedirects atomic.Int64 // MOVED/ASK replies to commands sent after it
	lateMu        sync.Mutex
	late          []string
}

// newClusterEnv installs maint with Instrument on an existing
// ClusterClient, or (options) through the options route before the first
// dial of every node client (Group.NewClusterClient).
func newClusterEnv(t *testing.T, maxRetries int, options bool) *clusterEnv {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	ce := &clusterEnv{t: t, emu: emu, cl: cl, nodes: cl.Nodes(), ev: &eventLog{}}
	opt := &redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		Dialer:       emu.Dialer(),
		Protocol:     3,
		PoolSize:     16,
		MaxRetries:   maxRetries,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
	}
	mopts := []maint.Option{maint.WithLogf(t.Logf), maint.WithOnEvent(func(e maint.Event) {
		ce.ev.add(e)
		if e.Kind == maint.EventNotification && strings.HasPrefix(e.Detail, "SMIGRATED") {
			ce.smigratedAt.CompareAndSwap(0, e.At.UnixNano())
		}
	})}
	if options {
		ce.g = maint.NewGroup(mopts...)
		ce.cc = ce.g.NewClusterClient(opt)
	} else {
		ce.cc = redis.NewClusterClient(opt)
		ce.g, err = maint.Instrument(ce.cc, mopts...)
		require.NoError(t, err)
	}
	t.Cleanup(func() { _ = ce.g.Close() })
	t.Cleanup(func() { _ = ce.cc.Close() })
	ce.cc.OnNewNode(func(c *redis.Client) { c.AddHook(lateRecorder{ce}) })
	require.NoError(t, ce.cc.Ping(context.Background()).Err())
	return ce
}

// lateRecorder is a hook inside maint's on a node client: it sees what maint
// lets through to the node.
type lateRecorder struct{ ce *clusterEnv }

func (h lateRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h lateRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(sentAt(ctx), cmd, err)
		return err
	}
}
func (h lateRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := sentAt(ctx)
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.note(start, c, c.Err())
		}
		return err
	}
}

// sentAtKey carries when the load handed a command to the ClusterClient:
// the recorder sits inside maint's hooks, so its own clock would start after
// maint had already chosen the command's route.
type sentAtKey struct{}

// stamp returns a context saying the command is sent now.
func stamp() context.Context {
	return context.WithValue(context.Background(), sentAtKey{}, time.Now().UnixNano())
}

// sentAt is when the load sent the command of ctx (now, for a command sent
// by something else).
func sentAt(ctx context.Context) int64 {
	if at, ok := ctx.Value(sentAtKey{}).(int64); ok {
		return at
	}
	return time.Now().UnixNano()
}

func (h lateRecorder) note(start int64, cmd redis.Cmder, err error) {
	at := h.ce.smigratedAt.Load()
	if err == nil || at == 0 || start < at {
		return
	}
	if s := err.Error(); strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ") {
		h.ce.lateRedirects.Add(1)
		h.ce.lateMu.Lock()
		if len(h.ce.late) < 10 {
			h.ce.late = append(h.ce.late, fmt.Sprintf("%v: %s", cmd.Args(), s))
		}
		h.ce.lateMu.Unlock()
	}
}

// clusterLoad runs workers doing verified INCRs (single, in pipelines, and
// in MULTI/EXEC on a hash tag), SETs and GETs across every slot range, and
// counts what each key was acknowledged.
type clusterLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	acked      map[string]int64
	errs       map[string]int
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

func startClusterLoad(cc *redis.ClusterClient, workers int) *clusterLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &clusterLoad{acked: map[string]int64{}, errs: map[string]int{}, cancel: cancel}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.worker(ctx, cc, w)
		}()
	}
	return l
}

func (l *clusterLoad) fail(err error) {
	l.failed.Add(1)
	l.mu.Lock()
	l.errs[err.Error()]++
	l.mu.Unlock()
}

// ack records an acknowledged INCR of key and checks its reply.
func (l *clusterLoad) ack(key string, reply int64) {
	l.ok.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[key]++
	if got := l.acked[key]; got != reply {
		l.errs[fmt.Sprintf("%s: reply %d for acknowledged INCR number %d", key, reply, got)]++
		l.acked[key] = reply
	}
}

func (l *clusterLoad) worker(ctx context.Context, cc *redis.ClusterClient, w int) {
	for i := 0; ctx.Err() == nil; i++ {
		// Each command's own context, not ctx: the stop must not fail one.
		// It says when the command was sent (sentAt).
		bg := stamp()
		j := i % 16
		switch i % 5 {
		case 0, 1:
			key := "c" + strconv.Itoa(w) + "." + strconv.Itoa(j)
			n, err := cc.Incr(bg, key).Result()
			if err != nil {
				l.fail(err)
				continue
			}
			l.ack(key, n)
		case 2:
			key := "s" + strconv.Itoa(w) + "." + strconv.Itoa(j)
			if err := cc.Set(bg, key, i, 0).Err(); err != nil {
				l.fail(err)
				continue
			}
			if err := cc.Get(stamp(), key).Err(); err != nil {
				l.fail(err)
				continue
			}
			l.ok.Add(2)
		case 3:
			keys := make([]string, 4)
			cmds, err := cc.Pipelined(bg, func(p redis.Pipeliner) error {
				for x := range keys {
					keys[x] = "p" + strconv.Itoa(w) + "." + strconv.Itoa((j+x)%16)
					p.Incr(bg, keys[x])
				}
				return nil
			})
			for x, c := range cmds {
				if c.Err() != nil {
					l.fail(c.Err())
					continue
				}
				l.ack(keys[x], c.(*redis.IntCmd).Val())
			}
			if err != nil && len(cmds) == 0 {
				l.fail(err)
			}
		case 4:
			tag := "{t" + strconv.Itoa(w) + "." + strconv.Itoa(j) + "}"
			cmds, err := cc.TxPipelined(bg, func(p redis.Pipeliner) error {
				p.Incr(bg, tag+"a")
				p.Incr(bg, tag+"b")
				return nil
			})
			if err != nil {
				l.fail(err)
				continue
			}
			l.ack(tag+"a", cmds[0].(*redis.IntCmd).Val())
			l.ack(tag+"b", cmds[1].(*redis.IntCmd).Val())
		}
	}
}

func (l *clusterLoad) stop() { l.cancel(); l.wg.Wait() }

// check compares every key's final value in the backend with the INCRs
// acknowledged: more is a write run twice, less a lost one.
func (l *clusterLoad) check(t *testing.T, emu *mainttest.Emulator) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	twice := 0
	for key, n := range l.acked {
		v, err := emu.Miniredis().Get(key)
		final := int64(0)
		if err == nil {
			final, _ = strconv.ParseInt(v, 10, 64)
		}
		if final != n {
			twice++
			t.Errorf("%s: %d INCRs acknowledged, final value %d", key, n, final)
		}
	}
	t.Logf("commands ok %d, failed %d; keys checked %d; errors %v", l.ok.Load(), l.failed.Load(), len(l.acked), l.errs)
	assert.Zero(t, l.failed.Load(), "failed commands: %v", l.errs)
	assert.Zero(t, twice, "keys whose final value is not what was acknowledged")
	for e := range l.errs {
		assert.NotContains(t, e, "reply", "an INCR reply skipped a value: %s", e)
	}
}

// redirects sums the MOVED and ASK the nodes served.
func (ce *clusterEnv) redirects() int64 {
	var n int64
	for _, ep := range ce.nodes {
		st := ep.Stats().Cluster
		n += st.Moved + st.Ask
	}
	return n
}

func (ce *clusterEnv) slotMaps() int64 {
	var n int64
	for _, ep := range ce.nodes {
		n += ep.Stats().Cluster.SlotMaps
	}
	return n
}

func (ce *clusterEnv) waitEvent(ep *mainttest.Endpoint, kind string) mainttest.Event {
	ce.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := ce.emu.WaitEvent(ctx, mainttest.IsKind(ep, kind))
	require.NoError(ce.t, err, "waiting for %s on %s", kind, ep.Addr())
	return ev
}

// reshard moves node 0's slots (a third of them) to nodes 1 and 2 under
// load, removing node 0 afterwards if remove, and checks the proof of issue
// 9: no command failed, no write ran twice, no redirect of a command sent
// after maint read the SMIGRATED, one slot-map reload for it, and (remove)
// no connection the removed endpoint had to close.
func reshard(t *testing.T, maxRetries int, remove, options bool) {
	ce := newClusterEnv(t, maxRetries, options)
	src, a, b := ce.nodes[0], ce.nodes[1], ce.nodes[2]
	l := startClusterLoad(ce.cc, 12)
	waitFor(t, "load on every node", 20*time.Second, func() bool {
		return src.Stats().Served > 300 && a.Stats().Served > 300 && b.Stats().Served > 300
	})
	mapsBefore := ce.slotMaps()
	_, err := ce.cl.MigrateSlots(mainttest.SlotMigration{
		From: src, To: a, Slots: "0-2730",
		Also:         []mainttest.SlotTarget{{Slots: "2731-5460", To: b}},
		Duration:     500 * time.Millisecond,
		Latency:      50 * time.Millisecond,
		RemoveSource: remove,
		CloseAfter:   time.Second,
	})
	require.NoError(t, err)
	ce.waitEvent(src, mainttest.KindSMigrated)
	waitFor(t, "maint to read the SMIGRATED", 10*time.Second, func() bool {
		st := ce.g.Maints()[0].ClusterStats()
		return st.SMigrated+st.Stale > 0
	})
	redirectsAtRead := ce.redirects()
	waitFor(t, "the slot-map reload", 10*time.Second, func() bool {
		st := ce.g.Maints()[0].ClusterStats()
		return st.Served > 0 || st.Stale > 0 || ce.slotMaps() > mapsBefore
	})
	if remove {
		ce.waitEvent(src, mainttest.KindRemovedClose)
	}
	// Load on the new owners after the move, then a little more.
	served := a.Stats().Served + b.Stats().Served
	waitFor(t, "load after the move", 20*time.Second, func() bool { return a.Stats().Served+b.Stats().Served > served+1000 })
	l.stop()

	cst := ce.g.Maints()[0].ClusterStats()
	t.Logf("maint %+v; cluster %+v", ce.g.Stats(), cst)
	for i, ep := range ce.nodes {
		t.Logf("node %d %s: %+v", i, ep.Addr(), ep.Stats().Cluster)
	}
	t.Logf("redirects served: %d by the SMIGRATED read, %d after; slot maps %d before the move, %d after",
		redirectsAtRead, ce.redirects()-redirectsAtRead, mapsBefore, ce.slotMaps())
	l.check(t, ce.emu)
	// Commands go-redis routed by its old map between the SMIGRATED's read
	// and the new map's install meet a MOVED, which go-redis follows: a
	// round trip, never a failure.
	t.Logf("redirects of commands sent after maint read the SMIGRATED: %d %v", ce.lateRedirects.Load(), ce.late)
	// Acted on, or found already shown by the slot map go-redis reloaded on
	// MOVEDs met before it was read.
	assert.EqualValues(t, 1, cst.SMigrated+cst.Stale, "one SMIGRATED acted on")
	assert.Positive(t, cst.Copies, "its copies on the other connections and nodes were ignored")
	if cst.SMigrated > 0 {
		assert.Positive(t, cst.Served, "go-redis's reload was answered from maint's map")
	}
	// The CLUSTER SLOTS round trips: go-redis's own reload on a MOVED met
	// before maint read the SMIGRATED, at most (contract_cluster_test.go).
	assert.LessOrEqual(t, ce.slotMaps()-mapsBefore, int64(1), "slot-map round trips for the SMIGRATED")
	assert.Zero(t, cst.Contradicted)
	if remove {
		assert.Zero(t, src.Stats().Cluster.ClosedAtRemoval, "connections the removed endpoint had to close")
		assert.Zero(t, src.Stats().OwedAtClose, "replies owed when the removed endpoint closed")
		assert.EqualValues(t, 1, cst.Emptied, "the emptied source was retired")
	}
}

// Issue 9: a reshard of a third of the slots under load fails no command
// and runs no write twice, with go-redis's default retries and with none.
func TestClusterReshardUnderLoad(t *testing.T) {
	for _, mr := range []int{0, -1} {
		t.Run("Instrument/MaxRetries"+strconv.Itoa(mr), func(t *testing.T) { reshard(t, mr, false, false) })
		t.Run("options/MaxRetries"+strconv.Itoa(mr), func(t *testing.T) { reshard(t, mr, false, true) })
	}
}

// Issue 9: the reshard empties its source, which is then removed: maint
// retires and closes its connections first, so the endpoint closes none.
func TestClusterReshardRemovesSource(t *testing.T) {
	for _, mr := range []int{0, -1} {
		t.Run("Instrument/MaxRetries"+strconv.Itoa(mr), func(t *testing.T) { reshard(t, mr, true, false) })
		t.Run("options/MaxRetries"+strconv.Itoa(mr), func(t *testing.T) { reshard(t, mr, true, true) })
	}
}

// settle waits until maint has handled n SMIGRATEDs and their reloads.
func (ce *clusterEnv) settle(n uint64, mapsBefore int64) {
	ce.t.Helper()
	waitFor(ce.t, "maint to handle the SMIGRATEDs and their reloads", 20*time.Second, func() bool {
		st := ce.g.Maints()[0].ClusterStats()
		return st.SMigrated+st.Stale+st.Unapplied >= n && (st.Served > 0 || ce.slotMaps() > mapsBefore)
	})
}

// Two migrations back to back, their SMIGRATEDs sent to the source's
// connections only, one triplet per range (the same source and destination
// in several triplets), the second moving slots to a node created after
// the client started (its node client appears with the reload, which maint
// then asks for at once): no command fails, none runs twice, no command
// sent after an SMIGRATED was read meets a redirect to a node the client
// knew, and each SMIGRATED is handled once.
func TestClusterMigrationsInARowAndANewNode(t *testing.T) {
	for _, options := range []bool{false, true} {
		name := "Instrument"
		if options {
			name = "options"
		}
		t.Run(name, func(t *testing.T) {
			ce := newClusterEnv(t, -1, options)
			n0, n1, n2 := ce.nodes[0], ce.nodes[1], ce.nodes[2]
			l := startClusterLoad(ce.cc, 12)
			waitFor(t, "load", 20*time.Second, func() bool { return n1.Stats().Served > 300 })
			mapsBefore := ce.slotMaps()
			_, err := ce.cl.MigrateSlots(mainttest.SlotMigration{
				From: n1, To: n2, Slots: "5461-6000,6100-6200,7000-7100",
				Duration: 300 * time.Millisecond, SourceOnly: true, TripletPerRange: true,
			})
			require.NoError(t, err)
			ce.waitEvent(n1, mainttest.KindSMigrated)
			ce.settle(1, mapsBefore)

			n3, err := ce.cl.AddNode("127.0.0.5:" + n0.Port())
			require.NoError(t, err)
			ce.nodes = append(ce.nodes, n3)
			mapsBefore = ce.slotMaps()
			_, err = ce.cl.MigrateSlots(mainttest.SlotMigration{
				From: n0, To: n3, Slots: "0-2000", Duration: 300 * time.Millisecond,
			})
			require.NoError(t, err)
			ce.waitEvent(n0, mainttest.KindSMigrated)
			ce.settle(2, mapsBefore)
			served := n3.Stats().Served
			waitFor(t, "load on the new node", 20*time.Second, func() bool { return n3.Stats().Served > served+200 })
			l.stop()

			cst := ce.g.Maints()[0].ClusterStats()
			t.Logf("cluster %+v", cst)
			for i, ep := range ce.nodes {
				t.Logf("node %d %s: %+v", i, ep.Addr(), ep.Stats().Cluster)
			}
			l.check(t, ce.emu)
			t.Logf("redirects of commands sent after maint read an SMIGRATED: %d %v", ce.lateRedirects.Load(), ce.late)
			assert.EqualValues(t, 2, cst.SMigrated+cst.Stale+cst.Unapplied, "each SMIGRATED handled once")
			assert.EqualValues(t, 1, cst.Unapplied, "the move to a node the slot map did not have yet: go-redis reloaded from the cluster")
			assert.Zero(t, cst.Contradicted, "maint never served a map the cluster disagreed with")
			assert.Zero(t, cst.Emptied, "no node was emptied")
		})
	}
}
