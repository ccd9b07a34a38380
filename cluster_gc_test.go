package maint_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// The options route and Instrument: the Maint of a node client
// that go-redis drops (its node left the slot map, and go-redis closes such
// node clients after its reload) is closed and forgotten, so a cluster
// whose nodes come and go keeps the group bounded; a node that is quiet but
// still in the slot map keeps its Maint.
func TestClusterDroppedNodeMaintIsForgotten(t *testing.T) {
	for _, options := range []bool{true, false} {
		t.Run(map[bool]string{true: "options", false: "Instrument"}[options], func(t *testing.T) {
			emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
			require.NoError(t, err)
			t.Cleanup(func() { _ = emu.Close() })
			cl, err := emu.NewCluster(mainttest.ClusterConfig{})
			require.NoError(t, err)
			nodes := cl.Nodes()
			opt := &redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3, PoolSize: 4}
			g := maint.NewGroup(maint.WithLogf(t.Logf))
			t.Cleanup(func() { _ = g.Close() })
			const gone = 300 * time.Millisecond
			maint.SetClusterGone(g, gone)
			var cc *redis.ClusterClient
			if options {
				cc = g.NewClusterClient(opt)
			} else {
				cc = redis.NewClusterClient(opt)
				require.NoError(t, g.Instrument(cc))
			}
			t.Cleanup(func() { _ = cc.Close() })
			ctx := context.Background()
			// A command on every node, so that every node client exists.
			for i := 0; i < 64; i++ {
				require.NoError(t, cc.Set(ctx, "k"+strconv.Itoa(i), "v", 0).Err())
			}
			require.Len(t, g.Maints(), 3, "one Maint per node client")

			// Quiet nodes still in the slot map keep their Maints.
			time.Sleep(4 * gone)
			assert.Len(t, g.Maints(), 3, "quiet nodes that own slots are not forgotten")

			// The third node gives its slots away and leaves the cluster;
			// the client reloads its slot map.
			leaving := nodes[2]
			require.NoError(t, cl.SetOwner(mainttest.FormatSlots(cl.Slots(leaving)), nodes[0]))
			require.NoError(t, cl.RemoveNode(leaving, 0))
			cc.ReloadState(ctx)
			for i := 0; i < 64; i++ { // commands on the remaining nodes; the reload is lazy
				require.NoError(t, cc.Set(ctx, "k"+strconv.Itoa(i), "w", 0).Err())
			}
			waitFor(t, "the dropped node's Maint forgotten", 15*time.Second, func() bool {
				return len(g.Maints()) == 2
			})
			// The remaining nodes are still watched and serve.
			require.NoError(t, cc.Set(ctx, "after", "v", 0).Err())
			assert.Len(t, g.Maints(), 2)
			assert.Zero(t, leaving.Stats().Open, "no connection left on the removed node")
		})
	}
}

// TestContractClusterNodeGC pins what the group relies on to forget a
// cluster node client's Maint: go-redis's ClusterClient closes the node
// clients a reloaded slot map no longer names, a minute after the reload
// (clusterNodes.GC). Observing it takes over a minute, so the source is
// read: an upgrade that changes it fails here and the group's clusterGone
// (group.go) must be revisited.
func TestContractClusterNodeGC(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/redis/go-redis/v9").Output()
	require.NoError(t, err, "locating go-redis's source")
	srcb, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "osscluster.go"))
	require.NoError(t, err)
	src := string(srcb)
	assert.Regexp(t, regexp.MustCompile(`time\.AfterFunc\(time\.Minute, func\(\) \{\s*nodes\.GC\(c\.generation\)`), src,
		"the node GC a minute after a slot map is loaded")
	assert.Regexp(t, regexp.MustCompile(`(?s)func \(c \*clusterNodes\) GC\(generation uint32\) \{.*?delete\(c\.nodes, addr\).*?node\.Client\.Close\(\)`), src,
		"the GC closes the node clients of older generations")
}

// The options route: every node client's Maint is in place before
// its first dial, so the MinIdleConns connections go-redis dials for each
// node as the client starts are watched (and opted in) like the others.
func TestClusterOptionsRouteWatchesMinIdleConns(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	t.Cleanup(func() { _ = g.Close() })
	cc := g.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3, PoolSize: 2, MinIdleConns: 2,
	})
	t.Cleanup(func() { _ = cc.Close() })
	ctx := context.Background()
	require.NoError(t, cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	for _, ep := range cl.Nodes() {
		waitFor(t, "MinIdleConns dialled on "+ep.Addr(), 10*time.Second, func() bool { return ep.Stats().Opened >= 2 })
	}
	var mu sync.Mutex
	var nodes []*redis.Client
	require.NoError(t, cc.ForEachShard(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, c)
		mu.Unlock()
		return nil
	}))
	for _, c := range nodes {
		useConns(t, c, 2)
	}
	for _, ep := range cl.Nodes() {
		allOptedIn(t, ep, 2)
	}
	assert.Len(t, g.Maints(), 3, "one Maint per node client")
}
