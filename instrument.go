package maint

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Group is the set of Maints that Instrument installed on one go-redis
// client: one for a *redis.Client, one per node client for a
// *redis.ClusterClient or a *redis.Ring. It is safe for concurrent use.
type Group struct {
	mu sync.Mutex // guards ms
	ms []*Maint
}

// Instrument installs maint on any go-redis client. A *redis.Client gets one
// Maint through AddHook. A *redis.Ring gets one per shard, present and
// future. A *redis.ClusterClient gets one per node client through
// OnNewNode, for the nodes it creates afterwards: call Instrument before the
// first command. On a cluster, an SMIGRATED
// notification also reloads the cluster's slot map. It returns an error iff
// the client is of another type.
func Instrument(rdb redis.UniversalClient, opts ...Option) (*Group, error) {
	g := &Group{}
	switch c := rdb.(type) {
	case *redis.Client:
		m := New(opts...)
		c.AddHook(m)
		g.add(m)
		if n := c.PoolStats().TotalConns; n > 0 {
			m.logf("maint: %d connections were made before maint was installed; they are not watched until the pool replaces them", n)
		}
	case *redis.ClusterClient:
		cs := newClusterState(func() { c.ReloadState(context.Background()) }) // lazy: marks the slot map for reload
		c.AddHook(clusterHook{cs})
		c.OnNewNode(func(node *redis.Client) {
			m := New(opts...)
			m.s.cluster = cs
			node.AddHook(m)
			cs.join(node, m)
			g.add(m)
		})
	case *redis.Ring:
		install := func(node *redis.Client) {
			m := New(opts...)
			node.AddHook(m)
			g.add(m)
		}
		c.OnNewNode(install)
		// The shards that exist already: a Ring creates them at NewRing.
		_ = c.ForEachShard(context.Background(), func(_ context.Context, node *redis.Client) error {
			install(node)
			return nil
		})
	default:
		return nil, fmt.Errorf("maint: %T not supported", rdb)
	}
	return g, nil
}

func (g *Group) add(m *Maint) {
	g.mu.Lock()
	g.ms = append(g.ms, m)
	g.mu.Unlock()
}

// Maints returns the Maints installed so far.
func (g *Group) Maints() []*Maint {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Maint(nil), g.ms...)
}

// Stats returns the sum of the counters of every Maint of the group.
func (g *Group) Stats() Stats {
	var s Stats
	for _, m := range g.Maints() {
		s.add(m.Stats())
	}
	return s
}

// Close closes every Maint of the group. Close the client first.
func (g *Group) Close() error {
	for _, m := range g.Maints() {
		_ = m.Close()
	}
	return nil
}
