package maint

import (
	"net"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// SetClusterGone shortens, for tests, how long a cluster node client's
// Maint must be quiet and out of the slot maps before the group forgets it
// (go-redis closes such a node client a minute after the reload). Call it
// before the group's first cluster node client is created.
func SetClusterGone(g *Group, d time.Duration) {
	g.mu.Lock()
	g.clusterGone = d
	g.mu.Unlock()
}

// Sweeps returns how many sweeps g's sweeper has done.
func Sweeps(g *Group) uint64 { return g.sweeps.Load() }

// GoRedisAddr is goRedisAddr, for the contract test that pins it to
// go-redis's own address rewriting.
var GoRedisAddr = goRedisAddr

// ShardStats returns what maint did for the sharded subscribers of the
// cluster g configured with opt: connections closed because their slot
// moved, sunsubscribe pushes the application did not ask for, follows
// that ended with the slots where they were, and connections left alone
// because they were subscribed in several slots.
func ShardStats(g *Group, opt *redis.ClusterOptions) (followed, unasked, settled, spanning uint64) {
	cs := g.clusterOf(opt)
	if cs == nil {
		return 0, 0, 0, 0
	}
	st := cs.subs.stats()
	return st.Followed, st.Unasked, st.Settled, st.Spanning
}

// WatchedRings returns how many Rings g polls for shards that come up.
func WatchedRings(g *Group) int { return g.watchedRings() }

// ErrNotWritten is errNotWritten, for tests that make a write fail as
// maint's connections do when closed before the command was written.
var ErrNotWritten = errNotWritten

// GroupMemory is what a Group remembers of its clients, for the uptime test:
// its members (Maints), the clients it knows them by, the cluster states of
// the ClusterOptions it configured, the options of every kind it owns
// (kindOwners), the Rings it polls, and the options the Maints of every
// Group have configured (misuse.go's configured, process-wide).
type GroupMemory struct {
	Members, Clients, Clusters, Owned, Watched, Configured int
}

// MemoryOf returns what g remembers.
func MemoryOf(g *Group) GroupMemory {
	g.mu.Lock()
	mem := GroupMemory{Members: len(g.ms), Clients: len(g.byCli), Clusters: len(g.clusters), Watched: len(g.watched)}
	g.mu.Unlock()
	kindOwners.Range(func(_, v any) bool {
		if v.(*Group) == g {
			mem.Owned++
		}
		return true
	})
	configured.Range(func(_, _ any) bool {
		mem.Configured++
		return true
	})
	return mem
}

// StateSize is the size in bytes of maint's structures, for the memory
// table of BenchmarkSideBySide: Conn per connection, Node per server node
// reached, Target per address the client dials, Maint per client. Buffers
// allocated only while maintenance is going on (a stripped notification,
// a peeked window) are not included.
type StateSize struct{ Conn, Node, Target, Maint uintptr }

// StateSizes returns the sizes of maint's structures.
func StateSizes() StateSize {
	return StateSize{
		Conn:   unsafe.Sizeof(conn{}),
		Node:   unsafe.Sizeof(node{}),
		Target: unsafe.Sizeof(target{}),
		Maint:  unsafe.Sizeof(Maint{}),
	}
}

// The tests dial through mainttest.Recorder, a wrapper that hands the
// socket's reads, writes and deadlines on as they are: its connections
// arm their deadlines lazily, as a bare TCP socket does in production, so
// that the suite runs the path production runs.
func init() {
	bare := armsLazily
	armsLazily = func(raw net.Conn) bool {
		if bare(raw) {
			return true
		}
		rc, ok := raw.(interface{ NetConn() net.Conn })
		return ok && !tlsInspectable(raw) && bare(rc.NetConn())
	}
}

// ClusterStatsOf returns the cluster counters of the cluster g configured
// with opt (zero if none).
func ClusterStatsOf(g *Group, opt *redis.ClusterOptions) ClusterStats {
	cs := g.clusterOf(opt)
	if cs == nil {
		return ClusterStats{}
	}
	for _, mb := range cs.members {
		return mb.m.ClusterStats()
	}
	return ClusterStats{}
}

// ClosedAsk is the AutoPipelineOptions the sweeper asks a quiet client for
// to tell whether it is closed (group.go clientClosed), for the contract
// test that pins go-redis's answer to it.
var ClosedAsk = closedAsk

// FromReload is fromReload, for the contract test that pins where
// go-redis sends its reload's slot-map load from.
var FromReload = fromReload

// CallerClient is callerClient: the client kind whose hooks run the
// calling ProcessHook (placement.go).
func CallerClient() string { return callerClient() }

// ForgetUnsupportedSaid forgets which endpoints' refusal of the opt-in
// was logged at Warn, for a test that counts that line.
func ForgetUnsupportedSaid() { unsupportedSaid.forget() }

// IsOwnRead is isOwnRead: whether a slot-map read is maint's own (the
// confirming read of a sharded subscriber's follow), for the tests that
// hold it.
var IsOwnRead = isOwnRead
