package maint_test

// Every invariant of go-redis's routing holds with maint
// installed, in the window after an SMIGRATED where maint used to route
// commands itself: a pipeline runs in the order written, XGROUP goes where
// go-redis sends it (its stream), Watch runs whole on one node, and the
// application's ClusterClient hooks see every command, pipeline and
// transaction once.

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/mainttest"
)

// countHook counts what reaches a ClusterClient's own hooks.
type countHook struct{ process, pipeline atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.process.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipeline.Add(1)
		return next(ctx, cmds)
	}
}

// afterMove is an emulated cluster with maint (options route or Instrument)
// and an application hook on the ClusterClient, just after maint read the
// SMIGRATED of one slot: the slot of the string "create", which a router
// hashing XGROUP's subcommand takes for the slot of `XGROUP CREATE s ...`.
// stream is a key on the source that did not move; moved a hash tag of the
// moved slot.
type afterMove struct {
	*clusterEnv
	app           *countHook
	stream, moved string
}

func newAfterMove(t *testing.T, options bool) *afterMove {
	ce := newClusterEnv(t, 0, options)
	am := &afterMove{clusterEnv: ce, app: &countHook{}, moved: "{create}"}
	ce.cc.AddHook(am.app)
	slot := mainttest.KeySlot("create")
	src := ce.cl.Owner(slot)
	dst := ce.nodes[0]
	if dst == src {
		dst = ce.nodes[1]
	}
	for i := 0; am.stream == ""; i++ {
		if k := "s" + strconv.Itoa(i); ce.cl.OwnerOf(k) == src && mainttest.KeySlot(k) != slot {
			am.stream = k
		}
	}
	// Every node client exists and has been used before the move.
	ctx := context.Background()
	var nodes []*redis.Client
	for _, ep := range ce.nodes {
		for i := 0; ; i++ {
			if k := "w" + strconv.Itoa(i); ce.cl.OwnerOf(k) == ep {
				require.NoError(t, ce.cc.Set(ctx, k, 1, 0).Err())
				c, err := ce.cc.MasterForKey(ctx, k)
				require.NoError(t, err)
				nodes = append(nodes, c)
				break
			}
		}
	}
	_, err := ce.cl.MigrateSlots(mainttest.SlotMigration{From: src, To: dst, Slots: strconv.Itoa(slot), Duration: 50 * time.Millisecond})
	require.NoError(t, err)
	ce.waitEvent(src, mainttest.KindSMigrated)
	// maint reads a push when go-redis next uses a connection: use them
	// (the node clients themselves: no reload of the slot map).
	waitFor(t, "maint to read the SMIGRATED", 10*time.Second, func() bool {
		for _, c := range nodes {
			_ = c.Ping(ctx).Err()
		}
		return ce.g.Maints()[0].ClusterStats().SMigrated > 0
	})
	am.app.process.Store(0)
	am.app.pipeline.Store(0)
	return am
}

// [XGROUP CREATE s g $ MKSTREAM, XADD s * f v] on a stream that never
// moved runs in that order: the group delivers the entry.
func TestClusterPipelineOrderAfterSMigrated(t *testing.T) {
	eachRoute(t, func(t *testing.T, options bool) {
		am := newAfterMove(t, options)
		ctx := context.Background()
		_, err := am.cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.XGroupCreateMkStream(ctx, am.stream, "g", "$")
			p.XAdd(ctx, &redis.XAddArgs{Stream: am.stream, Values: []any{"f", "v"}})
			p.Incr(ctx, am.moved+"n") // a command of the moved slot, in the same pipeline
			return nil
		})
		require.NoError(t, err)
		got, err := am.cc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{am.stream, ">"}, Count: 10, Block: -1}).Result()
		require.NoError(t, err, "the group has no entry: the pipeline ran [XADD, XGROUP]")
		require.Len(t, got, 1)
		assert.Len(t, got[0].Messages, 1, "the entry added after the group was created")
	})
}

// XGROUP goes where go-redis sends it (its stream's node), whatever slot
// its subcommand's name hashes to.
func TestClusterXGroupRoutedByStreamAfterSMigrated(t *testing.T) {
	eachRoute(t, func(t *testing.T, options bool) {
		am := newAfterMove(t, options)
		ctx := context.Background()
		require.NoError(t, am.cc.XGroupCreateMkStream(ctx, am.stream, "g1", "$").Err())
		require.NoError(t, am.cc.XAdd(ctx, &redis.XAddArgs{Stream: am.stream, Values: []any{"f", "v"}}).Err())
		n, err := am.cc.XGroupCreateConsumer(ctx, am.stream, "g1", "c1").Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		require.NoError(t, am.cc.XGroupDestroy(ctx, am.stream, "g1").Err())
	})
}

// Watch on the moved slot runs whole on one node: WATCH, the reads, MULTI
// and EXEC on the same connection; every optimistic increment lands.
func TestClusterWatchWholeAfterSMigrated(t *testing.T) {
	eachRoute(t, func(t *testing.T, options bool) {
		am := newAfterMove(t, options)
		ctx := context.Background()
		key := am.moved + "w"
		const n = 20
		for range n {
			err := am.cc.Watch(ctx, func(tx *redis.Tx) error {
				v, err := tx.Get(ctx, key).Int()
				if err != nil && !errors.Is(err, redis.Nil) {
					return err
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, key, v+1, 0)
					return nil
				})
				return err
			}, key)
			require.NoError(t, err)
		}
		v, err := am.cc.Get(ctx, key).Int()
		require.NoError(t, err)
		assert.Equal(t, n, v)
	})
}

// The application's ClusterClient hooks see every command, pipeline and
// transaction once, those of the moved slot included.
func TestClusterAppHooksSeeEverythingOnceAfterSMigrated(t *testing.T) {
	eachRoute(t, func(t *testing.T, options bool) {
		am := newAfterMove(t, options)
		ctx := context.Background()
		const n = 10
		for i := range n {
			require.NoError(t, am.cc.Incr(ctx, am.moved+"c"+strconv.Itoa(i)).Err())
			_, err := am.cc.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, am.moved+"p")
				p.Incr(ctx, am.stream+"p")
				return nil
			})
			require.NoError(t, err)
			_, err = am.cc.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, am.moved+"a")
				p.Incr(ctx, am.moved+"b")
				return nil
			})
			require.NoError(t, err)
		}
		assert.EqualValues(t, n, am.app.process.Load(), "commands the application's hook saw")
		assert.EqualValues(t, 2*n, am.app.pipeline.Load(), "pipelines and transactions the application's hook saw")
		v, err := am.cc.Get(ctx, am.moved+"a").Int()
		require.NoError(t, err)
		assert.Equal(t, n, v)
	})
}

// MaxRedirects applies with maint as without: with -1 (no redirect), a
// command that meets a MOVED for a slot an SMIGRATING named (its owner
// changed with no SMIGRATED) fails with go-redis's own MOVED error; maint
// does not send it on itself.
func TestClusterMaxRedirectsApply(t *testing.T) {
	eachRoute(t, func(t *testing.T, options bool) {
		ce := newClusterEnv(t, 0, options)
		ctx := context.Background()
		src, dst := ce.nodes[0], ce.nodes[1]
		var k string
		for i := 0; k == ""; i++ {
			if c := "r" + strconv.Itoa(i); ce.cl.OwnerOf(c) == src {
				k = c
			}
		}
		require.NoError(t, ce.cc.Incr(ctx, k).Err())
		opt := ce.cc.Options()
		plain := redis.NewClusterClient(&redis.ClusterOptions{Addrs: opt.Addrs, Dialer: opt.Dialer, Protocol: 3, MaxRedirects: -1})
		defer plain.Close()
		strict := redis.NewClusterClient(&redis.ClusterOptions{Addrs: opt.Addrs, Dialer: opt.Dialer, Protocol: 3, MaxRedirects: -1})
		defer strict.Close()
		if options {
			strict = ce.g.NewClusterClient(&redis.ClusterOptions{Addrs: opt.Addrs, Dialer: opt.Dialer, Protocol: 3, MaxRedirects: -1})
			defer strict.Close()
		} else {
			require.NoError(t, ce.g.Instrument(strict))
		}
		require.NoError(t, strict.Incr(ctx, k).Err())
		require.NoError(t, plain.Incr(ctx, k).Err())
		slot := strconv.Itoa(mainttest.KeySlot(k))
		_, err := ce.cl.MigrateSlots(mainttest.SlotMigration{From: src, To: dst, Slots: slot, Duration: time.Minute})
		require.NoError(t, err)
		ce.waitEvent(src, mainttest.KindSMigrating)
		waitFor(t, "maint to read the SMIGRATING", 10*time.Second, func() bool {
			_ = strict.Ping(ctx).Err()
			_ = ce.cc.Ping(ctx).Err()
			return ce.g.Stats().Relaxations > 0
		})
		require.NoError(t, ce.cl.SetOwner(slot, dst)) // no SMIGRATED
		errPlain := plain.Incr(ctx, k).Err()
		_, movedPlain := redis.IsMovedError(errPlain)
		require.True(t, movedPlain, "go-redis alone: %v", errPlain)
		errMaint := strict.Incr(ctx, k).Err()
		_, movedMaint := redis.IsMovedError(errMaint)
		assert.True(t, movedMaint, "with maint, MaxRedirects -1 no longer applies: %v", errMaint)
	})
}
