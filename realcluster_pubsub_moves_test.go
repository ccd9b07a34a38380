package maint_test

// Sharded subscribers follow their slot on real servers (the real cluster
// tier, MAINT_TEST_CLUSTER) in the ways of clusterpubsub_moves_test.go
// that redis-server can show: two ClusterClients on one set of options (the
// first one closed too), a move to a node that owned no slot (scale-out),
// and a cluster that names its nodes in another form than the client's
// seeds (host names, seeds by IP). redis-server sends no SMIGRATED: the
// signal is the sunsubscribe it pushes to the moved slots' subscribers,
// and the cluster's word is its own CLUSTER SLOTS/SHARDS. The proof is the
// emulated one's (16 channels over 8 slots, 10 consecutive messages exact
// on every channel from 1 s after the move, at most one close per moved
// subscriber), with go-redis alone as the control.

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// realMoveCase runs the proof on the real cluster: go-redis alone, then
// maint by each route, each run moving a third of the subscribed slots
// from rc.a to dst and back afterwards. seeds are the clients' Addrs,
// dialer their Dialer (nil: go-redis's).
func realMoveCase(t *testing.T, rc *realCluster, dst string, seeds []string,
	dialer func(ctx context.Context, network, addr string) (net.Conn, error), routes ...subRoute) {
	t.Helper()
	groups, moving := spChannels("maint-rcmv-", func(s int) bool { return rc.owner(t, rc.a, s) == rc.a }, spSlots/3+1)
	slots := movingSlots(moving)
	t.Cleanup(func() { // a run that stopped midway leaves the slots anywhere
		for _, s := range slots {
			if o := rc.owner(t, rc.a, s); o != rc.a && o != "" {
				if err := rc.moveSlots(context.Background(), []int{s}, o, rc.a); err != nil {
					t.Errorf("moving slot %d back to %s: %v (restart the cluster)", s, rc.a, err)
				}
			}
		}
	})
	setup := &spSetup{addrs: seeds, dialer: dialer, groups: groups, moving: moving,
		migrate: func(ctx context.Context) error { return rc.moveSlots(ctx, slots, rc.a, dst) }}
	var runs []*spResult
	run := func(name string, isMaint bool, mk spClient) {
		r := shardedPubSubRun(t, name, setup, mk)
		r.maint = isMaint
		runs = append(runs, r)
		require.NoError(t, rc.moveSlots(context.Background(), slots, dst, rc.a), "moving the slots back")
	}
	run("no handler", false, spNoMaint)
	for _, rt := range routes {
		run("maint ("+rt.name+")", true, routeRun(t, rt, func() *spSetup { return setup }))
	}
	spCheck(t, setup, runs)
}

// TestRealClusterShardedFollowOnTwoClientsOfOneOptions: the subscribers of
// a second ClusterClient on the same options follow by their own client's
// slot map, also when the first one is closed.
func TestRealClusterShardedFollowOnTwoClientsOfOneOptions(t *testing.T) {
	rc := realClusterEnv(t)
	realMoveCase(t, rc, rc.b, rc.addrs, nil, secondClient, secondInstrumented, firstClosed)
}

// TestRealClusterShardedFollowToANodeWithNoSlotYet: the slots move to a
// redis-server that joined the cluster with no slot (scale-out), a node no
// slot map named until the move and no client was seeded with.
func TestRealClusterShardedFollowToANodeWithNoSlotYet(t *testing.T) {
	rc := realClusterEnv(t)
	seeds := append([]string(nil), rc.addrs...)
	added := rc.addNode(t)
	realMoveCase(t, rc, added, seeds, nil, oneClient, secondClient)
}

// TestRealClusterShardedFollowWithNodesNamedByHost: the cluster names its
// nodes by host name (cluster-preferred-endpoint-type hostname), the
// clients' seeds are IPs: go-redis names the nodes by the host name, and
// the subscribers follow by the nodes as go-redis names them. The dialer
// takes the host name to 127.0.0.1 (no other loopback address is dialled).
func TestRealClusterShardedFollowWithNodesNamedByHost(t *testing.T) {
	rc := realClusterEnv(t)
	const host = "maint-node.localhost"
	rc.nameNodesBy(t, host)
	var d net.Dialer
	dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if h == host {
			addr = net.JoinHostPort("127.0.0.1", p)
		}
		return d.DialContext(ctx, network, addr)
	}
	// The cluster's map names the nodes by host name, as go-redis will.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.addrs, Dialer: dialer, Protocol: 3})
	defer cc.Close()
	ctx := context.Background()
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	var mu sync.Mutex
	var named []string
	_ = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error { // on a goroutine per master
		mu.Lock()
		defer mu.Unlock()
		named = append(named, c.Options().Addr)
		return nil
	})
	require.NotEmpty(t, named)
	for _, a := range named {
		require.True(t, strings.HasPrefix(a, host+":"), "go-redis names a master %q, not by the host name: the test proves nothing", a)
	}
	realMoveCase(t, rc, rc.b, rc.addrs, dialer, oneClient, secondClient)
}

// nameNodesBy has every node of rc announce host as its host name and
// prefer it in the slot maps it gives (CLUSTER SLOTS names the node by
// it), until the test ends; it waits until every node's map names every
// node so, and at the end until they are named by IP again.
func (rc *realCluster) nameNodesBy(t *testing.T, host string) {
	t.Helper()
	ctx := context.Background()
	set := func(hostname, preferred string) {
		for _, addr := range rc.addrs {
			c := rc.admin[addr]
			if hostname != "" {
				require.NoError(t, c.ConfigSet(ctx, "cluster-announce-hostname", hostname).Err(), "%s", addr)
			}
			require.NoError(t, c.ConfigSet(ctx, "cluster-preferred-endpoint-type", preferred).Err(), "%s", addr)
			if hostname == "" {
				require.NoError(t, c.ConfigSet(ctx, "cluster-announce-hostname", "").Err(), "%s", addr)
			}
		}
	}
	namedBy := func(prefix string) bool {
		for _, addr := range rc.addrs {
			ranges, err := rc.admin[addr].ClusterSlots(ctx).Result()
			if err != nil {
				return false
			}
			for _, r := range ranges {
				for _, n := range r.Nodes {
					if !strings.HasPrefix(n.Addr, prefix) {
						return false
					}
				}
			}
		}
		return true
	}
	set(host, "hostname")
	t.Cleanup(func() {
		set("", "ip")
		rcWait(t, "every node's map naming the nodes by IP again", 30*time.Second, func() bool { return namedBy("127.") })
	})
	rcWait(t, "every node's map naming the nodes by "+host, 30*time.Second, func() bool { return namedBy(host + ":") })
}

// addNode starts a redis-server in cluster mode with no slot on a free
// loopback port, has the cluster meet it and waits until every node knows
// it. The node is administered as rc's others are and is in rc.addrs (the
// slot moves tell it); at the test's end it is stopped and forgotten by
// every other node. It skips the test where redis-server is not at hand.
func (rc *realCluster) addNode(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH: the scale-out case starts a node of its own")
	}
	port := freeClusterPort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-allow-replica-migration", "no", // it stays a master once its slots are back
		"--dir", dir, "--save", "", "--appendonly", "no", "--logfile", filepath.Join(dir, "redis.log"))
	require.NoError(t, cmd.Start())
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	ctx := context.Background()
	others := append([]string(nil), rc.addrs...)
	t.Cleanup(func() {
		_ = c.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for _, o := range others { // stopped first, so that it gossips itself back to nobody
			_ = rc.admin[o].Do(ctx, "CLUSTER", "FORGET", rc.ids[addr]).Err()
		}
		rcWait(t, "every node forgetting the added one", 10*time.Second, func() bool {
			for _, o := range others {
				nodes, err := rc.admin[o].ClusterNodes(ctx).Result()
				if err != nil || strings.Contains(nodes, rc.ids[addr]) {
					return false
				}
			}
			return true
		})
	})
	rcWait(t, "the added node answering", 10*time.Second, func() bool { return c.Ping(ctx).Err() == nil })
	id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	rc.admin[addr], rc.ids[addr] = c, id
	require.NoError(t, rc.admin[rc.a].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port).Err())
	rcWait(t, "every node knowing the added one, and it the cluster", 30*time.Second, func() bool {
		for _, o := range others {
			nodes, err := rc.admin[o].ClusterNodes(ctx).Result()
			if err != nil || !knowsConnected(nodes, id) {
				return false
			}
		}
		info, err := c.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(others)+1))
	})
	rc.addrs = append(rc.addrs, addr)
	return addr
}

// knowsConnected reports whether a CLUSTER NODES reply lists node id as a
// master whose link is up.
func knowsConnected(nodes, id string) bool {
	for _, line := range strings.Split(nodes, "\n") {
		if strings.HasPrefix(line, id+" ") {
			return strings.Contains(line, "master") && strings.HasSuffix(strings.TrimSpace(line), "connected") && !strings.Contains(line, "fail")
		}
	}
	return false
}

// freeClusterPort returns a loopback port that is free, and whose cluster
// bus port (10000 above it) is free too.
func freeClusterPort(t *testing.T) int {
	t.Helper()
	for p := 18100; p < 18900; p++ {
		a, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000))
		_ = a.Close()
		if err != nil {
			continue
		}
		_ = b.Close()
		return p
	}
	t.Fatal("no free port pair for a cluster node in 18100-18899")
	return 0
}
