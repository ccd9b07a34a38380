package maint_test

// maint on go-redis's ClusterClient against the emulated OSS Cluster API
// (mainttest.Cluster): a reshard under load, and the removal of the
// endpoint it empties.

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/mainttest"
)

// reshard moves node 0's slots (a third of them) to nodes 1 and 2 under
// load, removing node 0 afterwards if remove, and checks the proof of issue
// 9: no command failed, no write ran twice, no redirect of a command sent
// after maint read the SMIGRATED, one slot-map reload for it, and (remove)
// no connection the removed endpoint had to close.
func reshard(t *testing.T, maxRetries int, remove, options bool, tune ...func(*redis.ClusterOptions)) {
	ce := newClusterEnv(t, maxRetries, options, tune...)
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
	ce.contradictionsOnlyAhead(t)
	assert.Zero(t, cst.ReloadsUnseen, "a reload maint asked for that reached no node hook")
	if remove {
		assert.Zero(t, src.Stats().Cluster.ClosedAtRemoval, "connections the removed endpoint had to close")
		assert.Zero(t, src.Stats().OwedAtClose, "replies owed when the removed endpoint closed")
		assert.EqualValues(t, 1, cst.Emptied, "the emptied source was retired")
	}
}

// A reshard of a third of the slots under load fails no command
// and runs no write twice, with go-redis's default retries and with none.
func TestClusterReshardUnderLoad(t *testing.T) {
	for _, mr := range []int{0, -1} {
		t.Run("Instrument/MaxRetries"+strconv.Itoa(mr), func(t *testing.T) { reshard(t, mr, false, false) })
		t.Run("options/MaxRetries"+strconv.Itoa(mr), func(t *testing.T) { reshard(t, mr, false, true) })
	}
}

// The reshard empties its source, which is then removed: maint
// retires and closes its connections first, so the endpoint closes none.
func TestClusterReshardRemovesSource(t *testing.T) {
	for _, mr := range []int{0, -1} {
		t.Run("Instrument/MaxRetries"+strconv.Itoa(mr), func(t *testing.T) { reshard(t, mr, true, false) })
		t.Run("options/MaxRetries"+strconv.Itoa(mr), func(t *testing.T) { reshard(t, mr, true, true) })
	}
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
			ce.contradictionsOnlyAhead(t) // maint never served a map the cluster disagreed with
			assert.Zero(t, cst.Emptied, "no node was emptied")
		})
	}
}

// A reshard under each go-redis option that changes how the node clients'
// pools open, time and reuse connections, or how their commands are split
// across writes and reads: the same proof as TestClusterReshardUnderLoad.
func TestClusterReshardUnderEachPoolOption(t *testing.T) {
	for _, c := range []struct {
		name string
		tune func(o *redis.ClusterOptions)
	}{
		{"MinIdleConns", func(o *redis.ClusterOptions) { o.MinIdleConns = o.PoolSize }},
		{"NoTimeouts", func(o *redis.ClusterOptions) { o.ReadTimeout, o.WriteTimeout = -1, -1 }},
		{"ContextTimeoutEnabled", func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true }},
		{"ConnMaxIdleTime", func(o *redis.ClusterOptions) { o.ConnMaxIdleTime = 150 * time.Millisecond }},
		{"SmallBuffers", func(o *redis.ClusterOptions) { o.ReadBufferSize, o.WriteBufferSize = 64, 64 }},
	} {
		t.Run("Instrument/"+c.name, func(t *testing.T) { reshard(t, -1, false, false, c.tune) })
		t.Run("options/"+c.name, func(t *testing.T) { reshard(t, -1, false, true, c.tune) })
	}
}
