package maint_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// Through the emulated Discovery Service: a MOVING of the master (null
// endpoint, the old node refusing connections at the window's end) whose
// successor the service names 0.5 s after the window fails no command under
// maint, with MaxRetries -1 and at go-redis's default; the old node closes
// none of the client's connections; the service never receives the
// handshake.
func TestDiscoveryServiceMovingFailsNothing(t *testing.T) {
	for _, retries := range []int{-1, 0} {
		t.Run(map[int]string{-1: "MaxRetries-1", 0: "MaxRetriesDefault"}[retries], func(t *testing.T) {
			e := newEnv(t)
			ds := e.newDiscovery()
			ev := &eventLog{}
			g := maint.NewGroup(maint.WithLogf(t.Logf), maint.WithOnEvent(ev.add))
			defer g.Close()
			rdb := g.NewFailoverClient(dsOptions(ds, retries))
			defer rdb.Close()
			require.NoError(t, rdb.Ping(context.Background()).Err())
			l := startLoad(rdb, 8)
			time.Sleep(300 * time.Millisecond)
			const window = 2 * time.Second
			ds.Moving(mainttest.SentinelMoving{
				Moving:    mainttest.Moving{Window: window, To: e.new, Null: true, StopAccepting: true},
				NameAfter: window + 500*time.Millisecond,
			})
			waitFor(t, "commands served by the new master", 15*time.Second, func() bool {
				return e.new.Stats().Served > 50
			})
			l.stop()
			t.Logf("ok %d failed %d errs %v; maint %+v\n%s", l.ok.Load(), l.failed.Load(), l.errs, g.Stats(), ev)
			assert.Zero(t, l.failed.Load(), "failed commands")
			assert.Zero(t, e.old.Stats().ClosedAtWindowEnd, "connections the old master had to close")
			assert.Zero(t, ds.Stats().Handshakes, "the Discovery Service never receives the handshake")
			// A connection opts in with its first command: use every pool
			// connection (MinIdleConns ones may be idle still), then wait
			// for the count to settle rather than read it once.
			useConns(t, rdb, 8)
			waitFor(t, "every connection open to the new master opted in (probes close theirs unused)", 10*time.Second, func() bool {
				st := e.new.Stats()
				return st.Open == st.OpenOptedIn
			})
		})
	}
}

// Through the emulated Discovery Service: a failover announced with
// FAILING_OVER, the service naming the promoted replica a second later, the
// old master refusing connections then and closing its own afterwards.
// maint relaxes the node and the sentinels never receive the handshake.
//
// At the switch go-redis's FailoverClient closes every connection to the old
// master, in-use ones included (onFailover: pool.Filter); maint's failover
// route closes one that owes a reply once the reply is in
// (failover_close.go), so no command in flight fails (F3).
func TestDiscoveryServiceFailover(t *testing.T) {
	e := newEnv(t)
	ds := e.newDiscovery()
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	opt := dsOptions(ds, -1)
	rdb := g.NewFailoverClient(opt)
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	l := startLoad(rdb, 8)
	time.Sleep(300 * time.Millisecond)
	ds.Failover(mainttest.Failover{To: e.new, SwitchAfter: time.Second, RefuseOld: true, CloseOld: true, CloseOldAfter: 500 * time.Millisecond})
	waitFor(t, "commands served by the new master", 15*time.Second, func() bool {
		return e.new.Stats().Served > 50
	})
	time.Sleep(time.Second)
	l.stop()
	t.Logf("ok %d failed %d errs %v; maint %+v", l.ok.Load(), l.failed.Load(), l.errs, g.Stats())
	assert.Zero(t, ds.Stats().Handshakes, "the Discovery Service never receives the handshake")
	assert.NotZero(t, g.Stats().Relaxations, "FAILING_OVER read and acted on")
	assert.Zero(t, l.failed.Load(), "no command cut at the switch: %v", l.errs)
}

// Sentinels the client discovers (SENTINEL sentinels) are learned as
// sentinels: when the configured one goes down, go-redis asks a discovered
// peer, whose connections maint never wraps nor opts in.
func TestDiscoveredSentinelIsNeverWrapped(t *testing.T) {
	e := newEnv(t)
	ds := e.newDiscovery()
	peer, err := ds.AddPeer("127.0.0.10:0")
	require.NoError(t, err)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	opt := dsOptions(ds, -1)
	opt.DialTimeout, opt.ReadTimeout = 200*time.Millisecond, time.Second
	rdb := g.NewFailoverClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	// Past the grace after the hook went in (DialTimeout + ReadTimeout),
	// during which an unknown address outside the hook is taken for a data
	// node dialled before it.
	time.Sleep(1500 * time.Millisecond)
	ds.RefuseNew(true)
	// go-redis's pool keeps a goroutine redialling a sentinel that refused,
	// a second apart, until a dial succeeds or the pool is closed: wait for
	// it to end before goleak looks.
	t.Cleanup(func() {
		waitFor(t, "go-redis's redial goroutines to end", 10*time.Second, func() bool {
			buf := make([]byte, 1<<20)
			return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "pool.(*ConnPool).tryDial")
		})
	})
	ds.CloseAll()
	e.old.CloseAll() // the next data-node dial asks the sentinels again: the peer answers
	waitFor(t, "the peer asked", 10*time.Second, func() bool {
		_ = rdb.Ping(ctx).Err()
		return peer.Stats().MasterQueries > 0
	})
	require.NoError(t, rdb.Ping(ctx).Err())
	assert.Zero(t, peer.Stats().Handshakes, "the discovered sentinel never receives the handshake")
	assert.Zero(t, ds.Stats().Handshakes)
}
