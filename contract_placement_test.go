package maint_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// callerHook records, at every command, the client kind callerClient reads
// from the stack inside its ProcessHook.
type callerHook struct {
	mu    sync.Mutex
	kinds map[string]int
}

func (h *callerHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *callerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		k := maint.CallerClient()
		h.mu.Lock()
		if h.kinds == nil {
			h.kinds = map[string]int{}
		}
		h.kinds[k]++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *callerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *callerHook) seen() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, n := range h.kinds {
		out[k] = n
	}
	return out
}

// Contract (placement.go callerClient), checked on v9.23.0 and v9.24.0:
// inside a ProcessHook, the first go-redis method on the stack that is
// not its hook plumbing (hooksMixin) is the Process of the client whose
// hooks run the command: (*ClusterClient) for a hook on a ClusterClient,
// (*Ring) on a Ring, (*Client) on a Client and on the node clients of a
// cluster or ring (their commands, go-redis's own slot-map loads
// included; the handshake go-redis sends on a new connection runs as a
// (*Conn)'s), (*Conn) on a Conn; with another hook of the application's
// around it. If this fails, a hook added to a ClusterClient or Ring is no
// longer told apart (maint says nothing of it), or a hook on a client
// that dials is taken for one that does not.
func TestContractHookCallerNamesTheClient(t *testing.T) {
	t.Logf("go-redis %s", redis.Version())
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	single, err := emu.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)
	ctx := context.Background()

	outer, onCluster, onNode := &hookLog{}, &callerHook{}, &callerHook{}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(),
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(onNode)
			return c
		}})
	defer cc.Close()
	cc.AddHook(outer) // the application's, around the one that asks
	cc.AddHook(onCluster)
	for range 5 {
		require.NoError(t, cc.Set(ctx, "k", "v", 0).Err())
	}
	assert.Equal(t, map[string]int{"ClusterClient": 5}, onCluster.seen(), "a hook on the ClusterClient")
	dials := func(what string, seen map[string]int) {
		t.Helper()
		assert.NotZero(t, seen["Client"], "%s: %v", what, seen)
		for k := range seen {
			assert.Contains(t, []string{"Client", "Conn"}, k, "%s: %v", what, seen)
		}
	}
	dials("hooks on the node clients (go-redis's slot-map load included; its connection handshake is a Conn's)", onNode.seen())

	onRing, onShard := &callerHook{}, &callerHook{}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": single.Addr()}, Dialer: emu.Dialer(),
		HeartbeatFrequency: time.Hour,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(onShard)
			return c
		}})
	defer ring.Close()
	ring.AddHook(onRing)
	for range 3 {
		require.NoError(t, ring.Set(ctx, "k", "v", 0).Err())
	}
	assert.Equal(t, map[string]int{"Ring": 3}, onRing.seen(), "a hook on the Ring")
	dials("a hook on a shard", onShard.seen())

	onClient := &callerHook{}
	rdb := redis.NewClient(&redis.Options{Addr: single.Addr(), Dialer: emu.Dialer()})
	defer rdb.Close()
	rdb.AddHook(onClient)
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	conn := rdb.Conn()
	defer conn.Close()
	onConn := &callerHook{}
	conn.AddHook(onConn)
	require.NoError(t, conn.Get(ctx, "k").Err())
	dials("a hook on a Client", onClient.seen())
	assert.Equal(t, map[string]int{"Conn": 1}, onConn.seen(), "a hook on a Conn")
}
