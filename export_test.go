package maint

import (
	"time"

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
