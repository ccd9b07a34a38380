package maint_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
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

// The real cluster tier: redis-server masters in cluster mode
// (MAINT_TEST_CLUSTER=host:port,host:port,...; .ci/run starts three on
// loopback). A real online reshard (CLUSTER SETSLOT IMPORTING/MIGRATING,
// MIGRATE key by key, CLUSTER SETSLOT NODE on every node) runs under load,
// with a bare ClusterClient, then with maint installed by Instrument and by
// the options route (Group.NewClusterClient). Real servers send no
// SMIGRATING/SMIGRATED, so this proves that maint does no harm to go-redis's
// own MOVED/ASK/TRYAGAIN handling: no more failed commands than without
// maint, no acknowledged write lost, none run twice, no MULTI split, every
// [XGROUP CREATE ... MKSTREAM, XADD] pipeline in its order, Watch whole or
// failed with go-redis's own error; with MaxRetries at its default and -1.

const (
	rcSlots    = 200 // slots moved from node A to node B and back
	rcWriters  = 8
	rcReaders  = 4
	rcPipers   = 2
	rcTxers    = 2
	rcTxTags   = 40 // hash tags written by MULTI/EXEC, all in moving slots
	rcControls = 30 // counters in slots that do not move
)

func TestRealClusterReshard(t *testing.T) {
	env := os.Getenv("MAINT_TEST_CLUSTER")
	if env == "" {
		t.Skip("MAINT_TEST_CLUSTER not set: the real cluster tier needs redis-server masters in cluster mode " +
			"(host:port,host:port,host:port on loopback; .ci/run starts three)")
	}
	rc := openRealCluster(t, strings.Split(env, ","))

	plain := rc.reshardUnderLoad(t, "no handler", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		return redis.NewClusterClient(opt), nil
	})
	// Instrument before the first command: every node client is created
	// after the install.
	instrumented := rc.reshardUnderLoad(t, "maint.Instrument", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		c := redis.NewClusterClient(opt)
		g, err := maint.Instrument(c)
		require.NoError(t, err)
		return c, g
	})
	// The options route: every node client made by the group, opted in
	// (and refused by a server without maintenance notifications) from its
	// first connection.
	optioned := rc.reshardUnderLoad(t, "Group.NewClusterClient", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		g := maint.NewGroup()
		return g.NewClusterClient(opt), g
	})
	assert.NotZero(t, optioned.stats.Handshakes+optioned.stats.Unsupported,
		"the options route never opted a node connection in: %+v", optioned.stats)
	// MaxRetries -1: go-redis's redirects only, no retry.
	plainNoRetry := rc.reshardUnderLoad(t, "no handler, MaxRetries -1", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		opt.MaxRetries = -1
		return redis.NewClusterClient(opt), nil
	})
	optionedNoRetry := rc.reshardUnderLoad(t, "Group.NewClusterClient, MaxRetries -1", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		opt.MaxRetries = -1
		g := maint.NewGroup()
		return g.NewClusterClient(opt), g
	})

	compare := func(plain, withMaint *rcResult) {
		assert.LessOrEqual(t, withMaint.failed, plain.failed,
			"%s failed more commands than go-redis alone: %v", withMaint.name, withMaint.errs)
		assert.LessOrEqual(t, withMaint.dup, plain.dup, "%s ran more writes twice than go-redis alone", withMaint.name)
		assert.Zero(t, withMaint.dup, "%s: writes run twice", withMaint.name)
		if plain.failed == 0 {
			assert.Zero(t, withMaint.failed, "%s: failed commands: %v", withMaint.name, withMaint.errs)
		}
	}
	compare(plain, instrumented)
	compare(plain, optioned)
	compare(plainNoRetry, optionedNoRetry)
	for _, r := range []*rcResult{plain, instrumented, optioned, plainNoRetry, optionedNoRetry} {
		// The reshard must have reached the client, or the comparison proves nothing.
		assert.NotZero(t, r.moved+r.ask, "%s: no MOVED or ASK reached the client", r.name)
		assert.Zero(t, r.lost, "%s: acknowledged writes lost: %v", r.name, r.losses)
		assert.Zero(t, r.torn, "%s: a MULTI/EXEC seen half applied", r.name)
		assert.Zero(t, r.wrongReads, "%s: reads returned a wrong value", r.name)
	}
}

// realCluster administers the cluster under test through one plain client
// per node (no maint, RESP2).
type realCluster struct {
	addrs []string
	admin map[string]*redis.Client
	ids   map[string]string // addr -> node ID
	a, b  string            // the slots move from a to b and back
	slots []int             // owned by a at rest
	// seeds are the clients' Addrs (nil: addrs); afterBack, if set, runs
	// under load once the slots are back on a.
	seeds     []string
	afterBack func()
}

func openRealCluster(t *testing.T, addrs []string) *realCluster {
	t.Helper()
	ctx := context.Background()
	rc := &realCluster{addrs: addrs, admin: map[string]*redis.Client{}, ids: map[string]string{}}
	require.GreaterOrEqual(t, len(addrs), 2, "MAINT_TEST_CLUSTER names fewer than two nodes")
	for _, addr := range addrs {
		host, _, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		require.True(t, net.ParseIP(host).IsLoopback(), "%s: the real cluster tier only talks to loopback", addr)
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		t.Cleanup(func() { _ = c.Close() })
		rc.admin[addr] = c
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		require.NoError(t, err, "%s: CLUSTER MYID (is it in cluster mode?)", addr)
		rc.ids[addr] = id
		info, err := c.ClusterInfo(ctx).Result()
		require.NoError(t, err)
		require.Contains(t, info, "cluster_state:ok", "%s: cluster not ready", addr)
		nodes, err := c.ClusterNodes(ctx).Result()
		require.NoError(t, err)
		require.NotContains(t, nodes, "->-", "%s: a slot is still migrating from an earlier run; restart the cluster", addr)
		require.NotContains(t, nodes, "-<-", "%s: a slot is still importing from an earlier run; restart the cluster", addr)
	}
	rc.a, rc.b = addrs[0], addrs[1]
	for s := 0; s < 16384 && len(rc.slots) < rcSlots; s++ {
		if rc.owner(t, rc.a, s) == rc.a {
			rc.slots = append(rc.slots, s)
		}
	}
	require.Len(t, rc.slots, rcSlots, "%s owns fewer than %d slots", rc.a, rcSlots)
	for _, addr := range addrs {
		for _, s := range []int{rc.slots[0], rc.slots[rcSlots-1]} {
			require.Equal(t, rc.a, rc.owner(t, addr, s), "%s's view of slot %d", addr, s)
		}
	}
	// Our slot function agrees with the server's.
	for _, k := range []string{"a", "{user1000}.following", "foo{}{bar}", "{}x", "123456789"} {
		want, err := rc.admin[rc.a].ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		require.Equal(t, int(want), mainttest.KeySlot(k), "slot of %q", k)
	}
	return rc
}

// owner returns the address that addr's view of the slot map gives slot s.
func (rc *realCluster) owner(t *testing.T, addr string, s int) string {
	t.Helper()
	ranges, err := rc.admin[addr].ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	for _, r := range ranges {
		if s >= r.Start && s <= r.End && len(r.Nodes) > 0 {
			for a, id := range rc.ids {
				if id == r.Nodes[0].ID {
					return a
				}
			}
			return r.Nodes[0].Addr
		}
	}
	return ""
}

// moveSlots moves each slot from one node to another as redis-cli --cluster
// reshard does, but one key per MIGRATE so multi-key commands meet a slot
// half moved (TRYAGAIN), with a pause before the slot changes hands so
// commands meet the ASK state.
func (rc *realCluster) moveSlots(ctx context.Context, slots []int, from, to string) error {
	src, dst := rc.admin[from], rc.admin[to]
	host, port, err := net.SplitHostPort(to)
	if err != nil {
		return err
	}
	for _, s := range slots {
		if err := dst.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", rc.ids[from]).Err(); err != nil {
			return fmt.Errorf("slot %d: importing on %s: %w", s, to, err)
		}
		if err := src.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", rc.ids[to]).Err(); err != nil {
			return fmt.Errorf("slot %d: migrating on %s: %w", s, from, err)
		}
		for {
			keys, err := src.ClusterGetKeysInSlot(ctx, s, 1).Result()
			if err != nil {
				return fmt.Errorf("slot %d: getkeysinslot: %w", s, err)
			}
			if len(keys) == 0 {
				break
			}
			args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			if err := src.Do(ctx, args...).Err(); err != nil {
				return fmt.Errorf("slot %d: migrate: %w", s, err)
			}
			time.Sleep(200 * time.Microsecond) // let commands meet the half-moved slot
		}
		time.Sleep(time.Millisecond) // the ASK state: keys at the destination, slot still the source's
		// The destination first, then the source, then the others.
		order := []string{to, from}
		for _, addr := range rc.addrs {
			if addr != to && addr != from {
				order = append(order, addr)
			}
		}
		for _, addr := range order {
			err := rc.admin[addr].Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", rc.ids[to]).Err()
			if err != nil && addr == from && strings.Contains(err.Error(), "only with masters") {
				continue // a source that gave its last slot away became a replica of the destination
			}
			if err != nil {
				return fmt.Errorf("slot %d: node on %s: %w", s, addr, err)
			}
		}
	}
	return nil
}

// restore puts the slots back on node a after a run that stopped midway:
// open IMPORTING/MIGRATING states are cleared and slots another node owns
// are moved back with their keys. Keys left behind by a half-moved slot
// carry that run's prefix and are never read again.
func (rc *realCluster) restore(t *testing.T) {
	ctx := context.Background()
	for _, s := range rc.slots {
		for _, addr := range rc.addrs {
			_ = rc.admin[addr].Do(ctx, "CLUSTER", "SETSLOT", s, "STABLE").Err()
		}
		if o := rc.owner(t, rc.a, s); o != rc.a && o != "" {
			if err := rc.moveSlots(ctx, []int{s}, o, rc.a); err != nil {
				t.Errorf("restoring slot %d to %s: %v (restart the cluster)", s, rc.a, err)
			}
		}
	}
}

// rcResult is what one reshard under load did.
type rcResult struct {
	name                 string
	ok, failed           uint64
	lost, dup            int      // counters below / above what their acknowledgements allow
	losses               []string // what each loss was: the key, its acknowledgements, what was read
	torn                 int      // MULTI/EXEC pairs found unequal
	wrongReads           uint64
	moved, ask, tryAgain uint64 // errors the node clients read, followed by go-redis
	errs                 []string
	stats                maint.Stats // the group's, when maint was installed
}

// rcCounter is one verified counter: acknowledged INCRs, and INCRs that
// failed (and so may or may not have run).
type rcCounter struct {
	key           string
	acked, failed int
}

// check compares the counter's final value with its acknowledgements.
func (c *rcCounter) check(r *rcResult, v int) {
	switch {
	case v < c.acked:
		r.lost += c.acked - v
		r.losses = append(r.losses, fmt.Sprintf("%s: read %d, %d acknowledged (%d failed)", c.key, v, c.acked, c.failed))
	case v > c.acked+c.failed:
		r.dup += v - c.acked - c.failed
	}
}

// rcRedirects counts, below go-redis's cluster routing, the redirections
// the node clients read.
type rcRedirects struct{ moved, ask, tryAgain atomic.Uint64 }

func (h *rcRedirects) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *rcRedirects) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd.Err())
		return err
	}
}

func (h *rcRedirects) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(c.Err())
		}
		return err
	}
}

func (h *rcRedirects) count(err error) {
	if err == nil {
		return
	}
	switch s := err.Error(); {
	case strings.HasPrefix(s, "MOVED "):
		h.moved.Add(1)
	case strings.HasPrefix(s, "ASK "):
		h.ask.Add(1)
	case strings.HasPrefix(s, "TRYAGAIN"):
		h.tryAgain.Add(1)
	}
}

// goRedisWatchErr reports whether err is what go-redis's Watch returns
// when its keys' slot is in migration: an ASK it does not follow, an
// EXECABORT, a TRYAGAIN.
func goRedisWatchErr(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "ASK ") || strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "EXECABORT") || strings.HasPrefix(s, "TRYAGAIN")
}

// rcLoad is the load of one run; each goroutine owns its counters.
type rcLoad struct {
	ok, failed, wrong atomic.Uint64
	watchErrs         atomic.Uint64 // go-redis's own Watch errors (goRedisWatchErr)
	phantoms          atomic.Uint64 // Watch calls go-redis reported done without running them
	mu                sync.Mutex
	errs              []string
}

func (l *rcLoad) fail(what string, err error) {
	l.failed.Add(1)
	l.mu.Lock()
	if len(l.errs) < 10 {
		l.errs = append(l.errs, what+": "+err.Error())
	}
	l.mu.Unlock()
}

// reshardUnderLoad moves rc.slots from a to b and back under load, through
// a ClusterClient made for the run by newClient, with its maint Group (nil:
// no handler).
func (rc *realCluster) reshardUnderLoad(t *testing.T, name string,
	newClient func(*redis.ClusterOptions) (*redis.ClusterClient, *maint.Group)) *rcResult {
	t.Helper()
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "maint-rc-" + hex.EncodeToString(b[:]) + "-"

	// One hash tag per moving slot, and control tags in every node's slots.
	moving := map[int]bool{}
	for _, s := range rc.slots {
		moving[s] = true
	}
	tagOf := map[int]string{}
	var controls []string
	for i := 0; len(tagOf) < rcSlots || len(controls) < rcControls; i++ {
		tag := prefix + strconv.Itoa(i)
		s := mainttest.KeySlot(tag)
		if moving[s] {
			if _, ok := tagOf[s]; !ok {
				tagOf[s] = tag
			}
		} else if len(controls) < rcControls {
			controls = append(controls, tag)
		}
	}
	tags := make([]string, 0, rcSlots)
	for _, s := range rc.slots {
		tags = append(tags, tagOf[s])
	}

	verify := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.addrs})
	defer verify.Close()
	filler := func(tag string) string { return "{" + tag + "}:f" }
	for _, tag := range append(append([]string(nil), tags...), controls...) {
		require.NoError(t, verify.Set(ctx, filler(tag), "v-"+tag, 0).Err())
	}

	seeds := rc.seeds
	if seeds == nil {
		seeds = rc.addrs
	}
	rdb, g := newClient(&redis.ClusterOptions{Addrs: seeds, PoolSize: 16})
	defer rdb.Close()
	if g != nil {
		defer g.Close()
	}
	redirects := &rcRedirects{}
	// The node clients the client has already (Instrument may have loaded
	// the slot map) and those it creates later, each counted once.
	var hooked sync.Map
	addRedirects := func(node *redis.Client) {
		if _, dup := hooked.LoadOrStore(node, true); !dup {
			node.AddHook(redirects)
		}
	}
	rdb.OnNewNode(addRedirects)
	_ = rdb.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		addRedirects(node)
		return nil
	})

	// Counters: writers INCR one key per moving slot plus the controls;
	// pipelines INCR their own keys; MULTI/EXEC INCRs two keys of a tag.
	all := append(append([]string(nil), tags...), controls...)
	writers := make([][]*rcCounter, rcWriters)
	for i, tag := range all {
		writers[i%rcWriters] = append(writers[i%rcWriters], &rcCounter{key: "{" + tag + "}:n"})
	}
	pipers := make([][]*rcCounter, rcPipers)
	for i, tag := range tags {
		pipers[i%rcPipers] = append(pipers[i%rcPipers], &rcCounter{key: "{" + tag + "}:p"})
	}
	type txTag struct {
		tag           string
		acked, failed int
	}
	txers := make([][]*txTag, rcTxers)
	txTags := make([]*txTag, 0, rcTxTags)
	for i := 0; i < rcTxTags; i++ {
		tt := &txTag{tag: tags[i*rcSlots/rcTxTags]}
		txTags = append(txTags, tt)
		txers[i%rcTxers] = append(txers[i%rcTxers], tt)
	}

	l := &rcLoad{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	stopLoad := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	defer stopLoad() // on a failure midway too, before the client closes
	run := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f(i)
			}
		}()
	}
	for w := range writers {
		cs := writers[w]
		run(func(i int) {
			c := cs[i%len(cs)]
			if err := rdb.Incr(ctx, c.key).Err(); err != nil {
				c.failed++
				l.fail("INCR", err)
				return
			}
			c.acked++
			l.ok.Add(1)
		})
	}
	for r := 0; r < rcReaders; r++ {
		run(func(i int) {
			if i%2 == 0 { // a filler, in a moving slot or not
				tag := all[(i/2*rcReaders+r)%len(all)]
				v, err := rdb.Get(ctx, filler(tag)).Result()
				if err != nil {
					l.fail("GET", err)
					return
				}
				if v != "v-"+tag {
					l.wrong.Add(1)
				}
				l.ok.Add(1)
				return
			}
			// Both keys of a MULTI/EXEC tag at once: TRYAGAIN while the
			// slot is half moved, and never unequal.
			tag := txTags[(i/2*rcReaders+r)%len(txTags)].tag
			vs, err := rdb.MGet(ctx, "{"+tag+"}:a", "{"+tag+"}:b").Result()
			if err != nil {
				l.fail("MGET", err)
				return
			}
			if fmt.Sprint(vs[0]) != fmt.Sprint(vs[1]) {
				l.wrong.Add(1)
			}
			l.ok.Add(1)
		})
	}
	for p := range pipers {
		cs := pipers[p]
		run(func(i int) {
			batch := make([]*rcCounter, 0, 10)
			for j := 0; j < 10; j++ {
				batch = append(batch, cs[(i*10+j)%len(cs)])
			}
			cmds := make([]*redis.IntCmd, len(batch))
			get := make([]*redis.StringCmd, 3)
			_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				for j, c := range batch {
					cmds[j] = pipe.Incr(ctx, c.key)
				}
				for j := range get {
					get[j] = pipe.Get(ctx, filler(controls[(i+j)%len(controls)]))
				}
				return nil
			})
			for j, c := range batch {
				if err := cmds[j].Err(); err != nil {
					c.failed++
					l.fail("pipelined INCR", err)
					continue
				}
				c.acked++
				l.ok.Add(1)
			}
			for _, g := range get {
				if err := g.Err(); err != nil {
					l.fail("pipelined GET", err)
					continue
				}
				l.ok.Add(1)
			}
		})
	}
	// Watch on a moving tag: GET, then SET in MULTI/EXEC, whole on one
	// node (one writer per key: an abort is the server's, counted failed).
	watchers := make([]*rcCounter, 0, rcTxTags)
	for i := 0; i < rcTxTags; i++ {
		watchers = append(watchers, &rcCounter{key: "{" + tags[(i*rcSlots/rcTxTags+1)%len(tags)] + "}:w"})
	}
	run(func(i int) {
		c := watchers[i%len(watchers)]
		committed := false
		err := rdb.Watch(ctx, func(tx *redis.Tx) error {
			n, err := tx.Get(ctx, c.key).Int()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, c.key, n+1, 0)
				return nil
			})
			committed = err == nil
			return err
		}, c.key)
		switch {
		case err == nil && !committed:
			// go-redis's Watch ran out of redirects and reported success
			// without running the function (a WATCH sent back and forth
			// while the slot changes hands): nothing ran, although the
			// application is told otherwise, with or without maint
			// (TestContractClusterWatchSucceedsWithoutRunningWhenRedirectsRunOut).
			l.phantoms.Add(1)
		case errors.Is(err, redis.TxFailedErr):
			// The key changed under the WATCH (MIGRATE moves it): nothing
			// ran, as go-redis reports it; the application's to retry.
		case err != nil && goRedisWatchErr(err):
			// go-redis's own answer to a Watch meeting a slot in
			// migration (it follows no ASK for Watch; EXECABORT after a
			// redirected command): nothing ran, as without maint.
			c.failed++
			l.watchErrs.Add(1)
		case err != nil:
			c.failed++
			l.fail("WATCH", err)
		default:
			c.acked++
			l.ok.Add(1)
		}
	})
	// XGROUP CREATE ... MKSTREAM then XADD, in one pipeline, on a stream
	// of a moving tag: the group must deliver the entry (order kept).
	run(func(i int) {
		s := "{" + tags[(i*7)%len(tags)] + "}:x" + strconv.Itoa(i)
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.XGroupCreateMkStream(ctx, s, "g", "$")
			p.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"f", i}})
			return nil
		})
		if err != nil {
			l.fail("XGROUP+XADD", err)
			_ = verify.Del(ctx, s).Err()
			return
		}
		got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{s, ">"}, Count: 10, Block: -1}).Result()
		switch {
		case err != nil && !errors.Is(err, redis.Nil):
			l.fail("XREADGROUP", err)
		case len(got) != 1 || len(got[0].Messages) != 1:
			l.wrong.Add(1) // the group started after the entry
		default:
			l.ok.Add(2)
		}
		_ = verify.Del(ctx, s).Err()
	})
	for x := range txers {
		tts := txers[x]
		run(func(i int) {
			tt := tts[i%len(tts)]
			_, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				pipe.Incr(ctx, "{"+tt.tag+"}:a")
				pipe.Incr(ctx, "{"+tt.tag+"}:b")
				return nil
			})
			if err != nil {
				tt.failed++
				l.fail("MULTI/EXEC", err)
				return
			}
			tt.acked++
			l.ok.Add(1)
		})
	}

	rcWait(t, "load before the reshard", 30*time.Second, func() bool { return l.ok.Load() > 2000 })
	before := l.ok.Load()
	start := time.Now()
	restored := false
	defer func() {
		if !restored {
			stopLoad()
			rc.restore(t)
		}
	}()
	err := rc.moveSlots(ctx, rc.slots, rc.a, rc.b)
	require.NoError(t, err, "reshard from %s to %s", rc.a, rc.b)
	rcWait(t, "load between the reshards", 30*time.Second, func() bool { return l.ok.Load() > before+2000 })
	err = rc.moveSlots(ctx, rc.slots, rc.b, rc.a)
	require.NoError(t, err, "reshard from %s back to %s", rc.b, rc.a)
	restored = true
	if rc.afterBack != nil {
		rc.afterBack()
	}
	took := time.Since(start)
	rcWait(t, "load after the reshards", 30*time.Second, func() bool { return l.ok.Load() > before+4000 })
	stopLoad()

	r := &rcResult{name: name, ok: l.ok.Load(), failed: l.failed.Load(), wrongReads: l.wrong.Load(), errs: l.errs,
		moved: redirects.moved.Load(), ask: redirects.ask.Load(), tryAgain: redirects.tryAgain.Load()}
	value := func(key string) int {
		v, err := verify.Get(ctx, key).Int()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		require.NoError(t, err, "reading %s back", key)
		return v
	}
	for _, cs := range append(append([][]*rcCounter(nil), writers...), pipers...) {
		for _, c := range cs {
			c.check(r, value(c.key))
		}
	}
	for _, c := range watchers {
		c.check(r, value(c.key))
	}
	for _, tt := range txTags {
		a, b := value("{"+tt.tag+"}:a"), value("{"+tt.tag+"}:b")
		if a != b {
			r.torn++
		}
		(&rcCounter{key: "{" + tt.tag + "}:a", acked: tt.acked, failed: tt.failed}).check(r, a)
	}
	for _, tag := range all {
		if v, err := verify.Get(ctx, filler(tag)).Result(); err != nil || v != "v-"+tag {
			r.lost++
			r.losses = append(r.losses, fmt.Sprintf("%s: read %q, %v", filler(tag), v, err))
		}
	}
	// Leave nothing behind: the keys of this run.
	for _, tag := range all {
		require.NoError(t, verify.Del(ctx, filler(tag), "{"+tag+"}:n", "{"+tag+"}:p", "{"+tag+"}:a", "{"+tag+"}:b", "{"+tag+"}:w").Err())
	}

	t.Logf("%s: two reshards of %d slots (%s <-> %s) in %v: ok=%d failed=%d lost=%d dup=%d torn=%d wrong reads=%d; "+
		"go-redis's own Watch errors %d, Watch reported done without running %d; redirects read: MOVED %d, ASK %d, TRYAGAIN %d; errors: %v",
		name, rcSlots, rc.a, rc.b, took.Round(time.Millisecond), r.ok, r.failed, r.lost, r.dup, r.torn, r.wrongReads,
		l.watchErrs.Load(), l.phantoms.Load(), r.moved, r.ask, r.tryAgain, r.errs)
	if g != nil {
		r.stats = g.Stats()
		t.Logf("%s: %d node Maints; %+v", name, len(g.Maints()), r.stats)
		assert.GreaterOrEqual(t, len(g.Maints()), len(seeds), "%s: a node client without maint", name)
	}
	return r
}

// rcWait polls cond until it holds or the generous deadline passes.
func rcWait(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
