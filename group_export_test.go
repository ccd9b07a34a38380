package maint

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
