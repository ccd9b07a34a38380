package maint

// The slot map maint serves in CLUSTER SHARDS form (go-redis v9.24 on)
// parses in go-redis exactly as the cluster's own reply: the same master
// for every slot, the same replicas, the same nodes left out for their
// health, with host names, TLS ports, null endpoints and shards that own
// no slot; and a map with moves done parses as the cluster's reply with
// the same moves.

import (
	"context"
	cryptotls "crypto/tls"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/slot"
)

// shardsOrigin is the node the replies are read from (never dialled).
const shardsOrigin = "127.0.0.9:7000"

// crafted is a CLUSTER SHARDS reply with what a Redis Enterprise or OSS
// cluster may give: host names, TLS ports, a replica that
// failed and one loading, a failed former master beside the promoted one,
// and a shard that owns no slot yet. (A null endpoint or port names the
// node asked: TestShardsNullEndpointIsTheNodeAsked.)
func crafted() []redis.ClusterShard {
	n := func(id, ep string, port, tlsPort int64, role, health string) redis.Node {
		return redis.Node{ID: id, Endpoint: ep, IP: ep, Hostname: "node-" + id + ".cluster.example", Port: port, TLSPort: tlsPort,
			Role: role, ReplicationOffset: 42, Health: health}
	}
	return []redis.ClusterShard{
		{Slots: []redis.SlotRange{{Start: 0, End: 5000}}, Nodes: []redis.Node{
			n("a", "127.0.0.10", 7001, 7101, "master", "online"),
			n("a2", "127.0.0.11", 7003, 7103, "replica", "fail"),
			n("a1", "127.0.0.12", 7002, 7102, "replica", "online"),
			n("a3", "127.0.0.13", 7004, 7104, "slave", "loading"),
		}},
		{Slots: []redis.SlotRange{{Start: 5001, End: 10000}, {Start: 12000, End: 16383}}, Nodes: []redis.Node{
			n("b0", "127.0.0.14", 7011, 7111, "master", "fail"),
			n("b", "127.0.0.15", 7012, 7112, "master", "online"),
		}},
		{Slots: []redis.SlotRange{{Start: 10001, End: 11999}}, Nodes: []redis.Node{
			n("c", "127.0.0.16", 7021, 7121, "master", "online"),
		}},
		{Nodes: []redis.Node{n("d", "127.0.0.17", 7031, 7131, "master", "online")}},
	}
}

// goRedisView is what go-redis makes of a slot map: the master of each
// sampled slot, the online masters and replicas it routes to.
type goRedisView struct {
	masters  map[int]string
	online   []string
	replicas []string
}

// sampled are the slots whose masters are compared: each range's ends.
var sampled = []int{0, 100, 5000, 5001, 10000, 10001, 11999, 12000, 16383}

// keyIn returns a key of slot s.
func keyIn(s int) string {
	for i := 0; ; i++ {
		if k := "k" + strconv.Itoa(i); slot.Of(k) == s {
			return k
		}
	}
}

// viewOf loads shards into a go-redis ClusterClient (tls: with a
// TLSConfig) through a node hook, as the reply of CLUSTER SHARDS, and
// reads what go-redis made of it; nothing is dialled.
func viewOf(t *testing.T, shards []redis.ClusterShard, tls bool) goRedisView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opt := &redis.ClusterOptions{Addrs: []string{shardsOrigin}, Protocol: 3, ReadOnly: true,
		Dialer: func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("not dialled") }}
	if tls {
		opt.TLSConfig = &cryptotls.Config{ServerName: "cluster.localhost"}
	}
	cc := redis.NewClusterClient(opt)
	defer cc.Close()
	cc.OnNewNode(func(c *redis.Client) {
		c.AddHook(loadHook{shards: shards})
	})
	v := goRedisView{masters: make(map[int]string)}
	for _, s := range sampled {
		c, err := cc.MasterForKey(ctx, keyIn(s))
		require.NoError(t, err)
		v.masters[s] = c.Options().Addr
	}
	var mu sync.Mutex
	require.NoError(t, cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		v.online = append(v.online, c.Options().Addr)
		return nil
	}))
	require.NoError(t, cc.ForEachSlave(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		v.replicas = append(v.replicas, c.Options().Addr)
		return nil
	}))
	slices.Sort(v.online)
	slices.Sort(v.replicas)
	return v
}

// loadHook answers CLUSTER SHARDS with shards, and CLUSTER SLOTS with an
// error: the fallback must not be what go-redis read.
type loadHook struct{ shards []redis.ClusterShard }

func (loadHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h loadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch c := cmd.(type) {
		case *redis.ClusterShardsCmd:
			c.SetVal(h.shards)
			return nil
		case *redis.ClusterSlotsCmd:
			c.SetErr(errors.New("ERR the test answers CLUSTER SHARDS only"))
			return c.Err()
		}
		return next(ctx, cmd)
	}
}
func (loadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestShardsServedParseAsTheClusters(t *testing.T) {
	if !goRedisLoadsShards() {
		t.Skipf("go-redis %s loads CLUSTER SLOTS only", redis.Version())
	}
	for _, tls := range []bool{false, true} {
		t.Run("tls="+strconv.FormatBool(tls), func(t *testing.T) {
			read := crafted()
			sm, err := newShardsMap(read, shardsOrigin, tls)
			require.NoError(t, err)
			want := viewOf(t, read, tls)
			t.Logf("go-redis's view of the cluster's reply: %+v", want)
			assert.Equal(t, want, viewOf(t, sm.shardsReply(), tls), "the map served as maint read it")

			// Slots 0-100 move to d, the shard with no slot; 10001-11999
			// to a: the cluster's reply with the same moves.
			moved := crafted()
			moved[0].Slots = []redis.SlotRange{{Start: 101, End: 5000}, {Start: 10001, End: 11999}}
			moved[2].Slots = nil
			moved[3].Slots = []redis.SlotRange{{Start: 0, End: 100}}
			d, ok := sm.node(mustAddr(t, sm, "d"))
			require.True(t, ok)
			a, ok := sm.node(mustAddr(t, sm, "a"))
			require.True(t, ok)
			c, ok := sm.node(mustAddr(t, sm, "c"))
			require.True(t, ok)
			got := sm.moved([]slotMove{
				{src: a.Addr, dst: d.Addr, r: []slotRange{{0, 100}}},
				{src: c.Addr, dst: a.Addr, r: []slotRange{{10001, 11999}}},
			})
			wantMoved := viewOf(t, moved, tls)
			assert.Equal(t, wantMoved, viewOf(t, got.shardsReply(), tls), "the map with the moves done")
			assert.NotEqual(t, want.masters[0], wantMoved.masters[0])

			// The nodes are served as read (what go-redis took from the
			// node asked written in): health, role, host names, offsets.
			served := got.shardsReply()
			require.Len(t, served, 4, "every shard, the one left with no slot included")
			for i, sh := range served {
				for j, n := range sh.Nodes {
					r := read[i].Nodes[j]
					assert.Equal(t, []string{r.ID, r.Role, r.Health, r.Hostname, r.IP}, []string{n.ID, n.Role, n.Health, n.Hostname, n.IP})
					assert.Equal(t, r.ReplicationOffset, n.ReplicationOffset)
				}
			}
		})
	}
}

// A null endpoint is the host of the node asked, a zero port its port (a
// TLS-only node's, with TLS): written into the node maint keeps, the map
// served to a node client asked at another address names the same node.
func TestShardsNullEndpointIsTheNodeAsked(t *testing.T) {
	null := redis.Node{ID: "c", Role: "master", Health: "online"}
	for _, tc := range []struct {
		tls           bool
		port, tlsPort int64
	}{{false, 7000, 0}, {true, 0, 7000}} {
		addr, n, err := shardNodeAddr(null, shardsOrigin, tc.tls)
		require.NoError(t, err)
		assert.Equal(t, shardsOrigin, addr)
		assert.Equal(t, "127.0.0.9", n.Endpoint)
		assert.Equal(t, tc.port, n.Port)
		assert.Equal(t, tc.tlsPort, n.TLSPort)
		again, _, err := shardNodeAddr(n, "127.0.0.8:6000", tc.tls)
		require.NoError(t, err)
		assert.Equal(t, shardsOrigin, again, "asked elsewhere, the same node")
	}
	_, _, err := shardNodeAddr(null, "no-port", false)
	assert.Error(t, err, "a null endpoint with no usable origin")
}

// mustAddr returns the address sm gives the node of id.
func mustAddr(t *testing.T, sm *slotMap, id string) string {
	t.Helper()
	for _, g := range sm.groups {
		for _, n := range g {
			if n.ID == id {
				return n.Addr
			}
		}
	}
	t.Fatalf("no node %q", id)
	return ""
}

// goRedisLoadsShards reports whether the go-redis release built with
// loads its topology with CLUSTER SHARDS (v9.24.0 on).
func goRedisLoadsShards() bool {
	v := redis.Version()
	return !strings.HasPrefix(v, "9.23.") && !strings.HasPrefix(v, "9.22.")
}

// A reply go-redis refuses (it falls back to CLUSTER SLOTS) maint does not
// keep either: an unknown health, two online masters, an unknown role, an
// unknown endpoint, a slot out of range, no slot at all.
func TestShardsRefusedAsGoRedisRefusesThem(t *testing.T) {
	for name, mod := range map[string]func([]redis.ClusterShard){
		"unknown health":    func(s []redis.ClusterShard) { s[0].Nodes[1].Health = "dazed" },
		"two online":        func(s []redis.ClusterShard) { s[1].Nodes[0].Health = "online" },
		"unknown role":      func(s []redis.ClusterShard) { s[0].Nodes[1].Role = "arbiter" },
		"unknown endpoint":  func(s []redis.ClusterShard) { s[0].Nodes[0].Endpoint = "?" },
		"slot out of range": func(s []redis.ClusterShard) { s[3].Slots = []redis.SlotRange{{Start: 16000, End: 16384}} },
		"inverted range":    func(s []redis.ClusterShard) { s[3].Slots = []redis.SlotRange{{Start: 9, End: 8}} },
		"no slot": func(s []redis.ClusterShard) {
			for i := range s {
				s[i].Slots = nil
			}
		},
		"no master": func(s []redis.ClusterShard) { s[2].Nodes[0].Role = "replica" },
	} {
		t.Run(name, func(t *testing.T) {
			s := crafted()
			mod(s)
			_, err := newShardsMap(s, shardsOrigin, false)
			require.ErrorIs(t, err, errShards)
		})
	}
}
