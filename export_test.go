package maint

import "time"

// SetClusterGone shortens, for tests, how long a cluster node client's
// Maint must be quiet and out of the slot maps before the group forgets it
// (go-redis closes such a node client a minute after the reload). Call it
// before the group's first cluster node client is created.
func SetClusterGone(g *Group, d time.Duration) {
	g.mu.Lock()
	g.clusterGone = d
	g.mu.Unlock()
}

// WatchedRings returns how many Rings g polls for shards that come up.
func WatchedRings(g *Group) int { return g.watchedRings() }
