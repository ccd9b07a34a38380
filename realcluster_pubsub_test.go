package maint_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/mainttest"
)

// The real cluster tier (MAINT_TEST_CLUSTER, see realcluster_test.go) for
// sharded pub/sub: redis-server moves slots with CLUSTER SETSLOT/MIGRATE and
// pushes sunsubscribe to the moved slots' subscribers itself; no SMIGRATED.

func realClusterEnv(t *testing.T) *realCluster {
	env := os.Getenv("MAINT_TEST_CLUSTER")
	if env == "" {
		t.Skip("MAINT_TEST_CLUSTER not set: the real cluster tier needs redis-server masters in cluster mode " +
			"(host:port,host:port,host:port on loopback; .ci/run starts three)")
	}
	return openRealCluster(t, strings.Split(env, ","))
}

// TestRealClusterShardedPubSubFollowsSlot is the sharded pub/sub proof on
// real servers: a third of the subscribed slots move from node A to node B
// (and back afterwards).
func TestRealClusterShardedPubSubFollowsSlot(t *testing.T) {
	rc := realClusterEnv(t)
	groups, moving := spChannels("maint-rcsp-", func(s int) bool { return rc.owner(t, rc.a, s) == rc.a }, spSlots/3+1)
	slots := movingSlots(moving)
	setup := &spSetup{addrs: rc.addrs, groups: groups, moving: moving}
	var runs []*spResult
	for _, c := range spClients(t, false) {
		setup.migrate = func(ctx context.Context) error { return rc.moveSlots(ctx, slots, rc.a, rc.b) }
		r := shardedPubSubRun(t, c.name, setup, c.mk)
		r.maint = c.maint
		runs = append(runs, r)
		require.NoError(t, rc.moveSlots(context.Background(), slots, rc.b, rc.a), "moving the slots back")
	}
	spCheck(t, setup, runs)
}

// sunsubscribeBytes subscribes a raw RESP3 connection to addr to channels,
// runs move (which moves their slot away from addr) and returns the bytes
// the server pushes within a second.
func sunsubscribeBytes(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	addr string, channels []string, move func() error) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	br := bufio.NewReader(nc)
	send := func(args ...string) {
		b := resp.AppendArrayHeader(nil, len(args))
		for _, a := range args {
			b = resp.AppendBulk(b, a)
		}
		_, err := nc.Write(b)
		require.NoError(t, err)
	}
	read := func() []byte {
		_ = nc.SetReadDeadline(time.Now().Add(time.Second))
		f, err := resp.ReadFrame(br, nil)
		if err != nil {
			return nil
		}
		return f
	}
	send("HELLO", "3")
	require.NotNil(t, read())
	send(append([]string{"SSUBSCRIBE"}, channels...)...)
	for range channels {
		f := read()
		require.Contains(t, string(f), "ssubscribe", "confirmation")
	}
	require.NoError(t, move())
	var out []byte
	for range channels {
		out = append(out, read()...)
	}
	return out
}

// TestRealClusterSunsubscribeBytes checks the emulated cluster's
// sunsubscribe against redis-server's: the same channels subscribed on the
// node that owns their slot, the slot given to another node, byte for byte
// the same pushes.
func TestRealClusterSunsubscribeBytes(t *testing.T) {
	rc := realClusterEnv(t)
	var tag string
	for i := 0; ; i++ {
		tag = "maint-rcsb-" + string(rune('a'+i))
		if rc.owner(t, rc.a, mainttest.KeySlot(tag)) == rc.a {
			break
		}
	}
	s := mainttest.KeySlot(tag)
	channels := []string{"{" + tag + "}:a", "{" + tag + "}:b"}
	real := sunsubscribeBytes(t, nil, rc.a, channels, func() error { return rc.moveSlots(context.Background(), []int{s}, rc.a, rc.b) })
	require.NoError(t, rc.moveSlots(context.Background(), []int{s}, rc.b, rc.a), "moving the slot back")

	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	a := cl.Owner(s)
	var b *mainttest.Endpoint
	for _, ep := range cl.Nodes() {
		if ep != a {
			b = ep
			break
		}
	}
	emulated := sunsubscribeBytes(t, emu.Dialer(), a.Addr(), channels, func() error {
		return cl.SetOwner(mainttest.FormatSlots([]mainttest.SlotRange{{Start: s, End: s}}), b)
	})
	assert.NotEmpty(t, real, "redis-server pushed nothing when the slot moved")
	assert.Equal(t, string(real), string(emulated), "the emulated cluster's sunsubscribe pushes differ from redis-server's")
}

// TestRealClusterPlainPubSubThroughReshard: Subscribe and PSubscribe on a
// ClusterClient with maint keep delivering while a third of the subscribed
// slots move between real servers.
func TestRealClusterPlainPubSubThroughReshard(t *testing.T) {
	rc := realClusterEnv(t)
	for _, kind := range []string{"subscribe", "psubscribe"} {
		groups, moving := spChannels("maint-rc"+kind+"-", func(s int) bool { return rc.owner(t, rc.a, s) == rc.a }, spSlots/3+1)
		slots := movingSlots(moving)
		setup := &spSetup{addrs: rc.addrs, groups: groups, kind: kind,
			migrate: func(ctx context.Context) error { return rc.moveSlots(ctx, slots, rc.a, rc.b) }}
		r := shardedPubSubRun(t, kind+" maint (options route)", setup, spMaint)
		require.NoError(t, rc.moveSlots(context.Background(), slots, rc.b, rc.a), "moving the slots back")
		for ch, n := range r.missing {
			assert.Zero(t, n, "%s: %s missed %d of the %d messages checked", r.name, ch, n, spChecked)
		}
		for ch, n := range r.dup {
			assert.Zero(t, n, "%s: %s got %d messages twice", r.name, ch, n)
		}
	}
}
