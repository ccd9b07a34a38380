package maint

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// movedThrough runs a command through m's process hook whose node answers
// msg, as a MOVED reaches a node client's hooks.
func movedThrough(m *Maint, msg string) {
	h := m.ProcessHook(func(_ context.Context, c redis.Cmder) error {
		err := errors.New(msg)
		c.SetErr(err)
		return err
	})
	_ = h(context.Background(), redis.NewStringCmd(context.Background(), "get", "k"))
}

// A MOVED that disagrees with the map maint served, once that serving
// has ended (past serveFor), contradicts nothing: go-redis asks the
// cluster itself then, and the map it installed is the cluster's. It is
// not counted as Contradicted nor logged as a disagreement; the same MOVED
// while the serving is in force still is, as a pipeline's.
func TestMovedAfterServingEndedIsNoContradiction(t *testing.T) {
	f := newClusterFixture(t)
	var sink logSink
	f.dst.s.logf = sink.logf
	f.cSrc.onNotification(smigrated(40, "0-100"))
	s := f.cs.serve.Load()
	require.NotNil(t, s)
	s.until = monoNow() - 1 // the serving second is over
	movedThrough(f.dst, "MOVED 50 "+srcAddr)
	assert.Zero(t, f.src.ClusterStats().Contradicted, "a MOVED after the serving ended counted as contradicting it")
	for _, l := range sink.lines {
		assert.NotContains(t, l, "disagrees with the slot map maint served")
	}
	pipe := f.dst.ProcessPipelineHook(func(_ context.Context, cmds []redis.Cmder) error {
		cmds[0].SetErr(errors.New("MOVED 60 " + srcAddr))
		return cmds[0].Err()
	})
	_ = pipe(context.Background(), []redis.Cmder{redis.NewStringCmd(context.Background(), "get", "k")})
	assert.Zero(t, f.src.ClusterStats().Contradicted, "a pipeline's MOVED after the serving ended counted")

	// In force: counted, logged once.
	f.cSrc.onNotification(smigrated(41, "0-100"))
	require.NotNil(t, f.cs.serve.Load())
	require.Greater(t, f.cs.serve.Load().until, monoNow())
	movedThrough(f.dst, "MOVED 50 "+srcAddr)
	assert.EqualValues(t, 1, f.src.ClusterStats().Contradicted)
	n := 0
	for _, l := range sink.lines {
		if strings.Contains(l, "disagrees with the slot map maint served") {
			n++
		}
	}
	assert.Equal(t, 1, n)
}

// A slot-map load answered from the served map while its own request was
// still on its way (TestWaitingSlotMapAnsweredAtSMigrated) leaves that
// request running to its reply, so that the connection goes back to the
// pool clean. The Maint's Close waits for it, as for every goroutine of
// the Maint's: none outlives Close (the suite's goleak check). The node's
// reply here comes at its read timeout, after Close was called.
func TestCloseWaitsForTheSlotMapLoadItStarted(t *testing.T) {
	f := newClusterFixture(t)
	const readTimeout = 500 * time.Millisecond
	asked := make(chan struct{})
	var replied atomic.Bool
	h := f.src.ProcessHook(func(_ context.Context, c redis.Cmder) error {
		close(asked)
		<-time.After(readTimeout) // the node answers late
		c.(*redis.ClusterSlotsCmd).SetVal(fixtureMap())
		replied.Store(true)
		return nil
	})
	got := make(chan []redis.ClusterSlot, 1)
	go func() {
		cmd := redis.NewClusterSlotsCmd(context.Background(), "cluster", "slots")
		_ = h(reloadCtx, cmd)
		got <- cmd.Val()
	}()
	<-asked
	f.cDst.onNotification(smigrated(42, "0-100"))
	v := <-got // answered from the served map, its request still on its way
	assert.Equal(t, dstAddr, masterOf(v, 50))
	require.False(t, replied.Load())
	require.NoError(t, f.src.Close())
	assert.True(t, replied.Load(), "Close returned while the slot-map load it started was still running")
}

// appSlotsLoad sends a CLUSTER SLOTS through m's process hook as the
// application's own command does (cc.ClusterSlots, or a node client's):
// not from go-redis's reload. The node answers reply.
func appSlotsLoad(t *testing.T, m *Maint, reply []redis.ClusterSlot) []redis.ClusterSlot {
	t.Helper()
	h := m.ProcessHook(func(_ context.Context, c redis.Cmder) error {
		c.(*redis.ClusterSlotsCmd).SetVal(reply)
		return nil
	})
	cmd := redis.NewClusterSlotsCmd(context.Background(), "cluster", "slots")
	require.NoError(t, h(context.Background(), cmd))
	return cmd.Val()
}

// The application's own CLUSTER SLOTS (or SHARDS) is not go-redis's
// reload: go-redis installs nothing from it. maint leaves it as it is: it
// gets the cluster's reply even while maint serves its map, and nothing
// is taken from it: no node is marked gone or emptied (whose idle
// connections would be retired) by a map go-redis does not have, the map
// go-redis was handed stays the one it loaded, and no counter moves.
func TestApplicationsSlotMapLoadIsNotTakenForTheReload(t *testing.T) {
	f := newClusterFixture(t)
	before := f.src.ClusterStats()
	got := appSlotsLoad(t, f.dst, movedMap()) // the cluster gave src's slots away; go-redis was not told
	assert.Equal(t, movedMap(), got, "the application gets the cluster's reply")
	assert.Equal(t, srcAddr, f.cs.slotMapNow().master(0), "the application's reply taken for the map go-redis was handed")
	assert.False(t, f.src.isEmptied(), "a node emptied on the application's reply")
	assert.Zero(t, f.cs.goneFor(f.src, monoNow()+int64(time.Minute)), "a node marked gone on the application's reply")
	after := f.src.ClusterStats()
	assert.Equal(t, before.SlotMaps, after.SlotMaps, "the application's reply counted as a slot map go-redis read")
	assert.Equal(t, before.Emptied, after.Emptied)

	// While maint serves its map: the application still asks the cluster.
	f.cSrc.onNotification(smigrated(44, "0-100"))
	require.NotNil(t, f.cs.serve.Load())
	got = appSlotsLoad(t, f.src, fixtureMap())
	assert.Equal(t, srcAddr, masterOf(got, 50), "the application was answered with the map maint serves go-redis")
	assert.Equal(t, before.Served, f.src.ClusterStats().Served, "the application's command counted as a reload served")
	assert.Equal(t, dstAddr, f.cs.serve.Load().sm.master(50), "the map maint serves go-redis is kept")
	assert.Equal(t, dstAddr, masterOf(f.reload(t, f.dst, nil), 50), "go-redis's reload is still served")
}

// reloadCtx marks the slot-map loads tests send through a node hook by
// hand as go-redis's reload (fromReload).
var reloadCtx = context.WithValue(context.Background(), reloadMark{}, true)
