package maint_test

// Contract tests of go-redis's ClusterClient: what maint's cluster handling
// (cluster.go) assumes of go-redis v9.23. Two miniredis servers play two
// masters; the slot map comes from ClusterOptions.ClusterSlots (counted: one
// call is one reload) except where CLUSTER SLOTS itself is the subject.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// funcHook is a redis.Hook made of optional functions.
type funcHook struct {
	process  func(next redis.ProcessHook) redis.ProcessHook
	pipeline func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook
}

func (h funcHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h funcHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if h.process != nil {
		return h.process(next)
	}
	return next
}
func (h funcHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if h.pipeline != nil {
		return h.pipeline(next)
	}
	return next
}

// twoMasters is a ClusterClient over two miniredis servers, every slot
// owned by A. hookA, if set, is added to A's node client.
type twoMasters struct {
	a, b    *miniredis.Miniredis
	cc      *redis.ClusterClient
	loads   atomic.Int64 // slot-map loads (reloads)
	mu      sync.Mutex
	clients map[string]*redis.Client // node clients by address
}

func newTwoMasters(t *testing.T, hookA redis.Hook) *twoMasters {
	t.Helper()
	tm := &twoMasters{a: miniredis.RunT(t), b: miniredis.RunT(t), clients: map[string]*redis.Client{}}
	tm.cc = redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:           []string{tm.a.Addr()},
		Protocol:        3,
		MinRetryBackoff: time.Second, // a redirect that waited would show
		MaxRetryBackoff: time.Second,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			tm.loads.Add(1)
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: tm.a.Addr()}}}}, nil
		},
	})
	tm.cc.OnNewNode(func(c *redis.Client) {
		tm.mu.Lock()
		tm.clients[c.Options().Addr] = c
		tm.mu.Unlock()
		// With ClusterSlots, go-redis names a loopback node ":port" (it
		// replaces a loopback host with the empty origin host).
		if hookA != nil && strings.HasSuffix(c.Options().Addr, ":"+tm.a.Port()) {
			c.AddHook(hookA)
		}
	})
	t.Cleanup(func() { _ = tm.cc.Close() })
	require.NoError(t, tm.cc.Ping(context.Background()).Err())
	return tm
}

// movedTo is a hook answering every keyed command with MOVED to addr,
// without calling next: what maint's hook does when the destination's node
// client is not known.
func movedTo(addr string) redis.Hook {
	return funcHook{process: func(next redis.ProcessHook) redis.ProcessHook {
		return func(ctx context.Context, cmd redis.Cmder) error {
			if cmd.Name() == "set" {
				err := errors.New("MOVED 12182 " + addr)
				cmd.SetErr(err)
				return err
			}
			return next(ctx, cmd)
		}
	}}
}

// maint answers a command of a slot its node gave away with a MOVED error of
// its own: ClusterClient.process follows it at once (no retry backoff), to
// the address named, and marks its slot map for reload.
func TestGoRedisClusterFollowsHookMoved(t *testing.T) {
	b := miniredis.RunT(t)
	tm := newTwoMasters(t, movedTo(b.Addr()))
	loads := tm.loads.Load()
	start := time.Now()
	require.NoError(t, tm.cc.Set(context.Background(), "foo", "v", 0).Err(),
		"go-redis no longer follows a MOVED a node client's hook returns: maint's fallback redirect (cluster.go awayProcess) fails commands")
	assert.Less(t, time.Since(start), 500*time.Millisecond, "go-redis waited a retry backoff before following a MOVED")
	got, err := b.Get("foo")
	require.NoError(t, err)
	assert.Equal(t, "v", got, "the command did not run where the MOVED sent it")
	assert.False(t, tm.a.Exists("foo"))
	require.Eventually(t, func() bool { return tm.loads.Load() > loads }, 5*time.Second, 5*time.Millisecond,
		"go-redis no longer reloads its slot map on a MOVED")
}

// A node client's pipeline hook that answers without calling next is taken
// as having served the batch: each command keeps its own result, and a
// MOVED error it returns is NOT followed. That is why maint forwards the
// commands of moved slots itself (cluster.go awayPipeline) rather than
// answering MOVED for pipelines.
func TestGoRedisClusterPipelineHookServes(t *testing.T) {
	var other atomic.Pointer[redis.Client]
	var mode atomic.Int32 // 0: serve elsewhere; 1: MOVED error; 2: split
	hook := funcHook{pipeline: func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			if cmds[0].Name() != "set" {
				return next(ctx, cmds)
			}
			switch mode.Load() {
			case 0:
				p := other.Load().Pipeline()
				for _, c := range cmds {
					_ = p.Process(ctx, c)
				}
				_, _ = p.Exec(ctx)
				return nil
			case 1:
				return errors.New("MOVED 12182 " + other.Load().Options().Addr)
			default:
				p := other.Load().Pipeline()
				_ = p.Process(ctx, cmds[0])
				_, _ = p.Exec(ctx)
				return next(ctx, cmds[1:])
			}
		}
	}}
	tm := newTwoMasters(t, hook)
	other.Store(redis.NewClient(&redis.Options{Addr: tm.b.Addr(), Protocol: 3}))
	defer other.Load().Close()
	ctx := context.Background()

	cmds, err := tm.cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k1", "1", 0)
		p.Incr(ctx, "{k1}n")
		return nil
	})
	require.NoError(t, err, "a node pipeline hook that served the batch and returned nil is no longer a success")
	assert.EqualValues(t, 1, cmds[1].(*redis.IntCmd).Val())
	assert.True(t, tm.b.Exists("k1"))
	assert.False(t, tm.a.Exists("k1"))

	mode.Store(1)
	_, err = tm.cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k2", "1", 0)
		return nil
	})
	assert.Error(t, err, "go-redis now follows a MOVED a node pipeline hook returns: maint could answer pipelines with MOVED (cluster.go)")
	assert.False(t, tm.b.Exists("k2"))

	mode.Store(2)
	_, err = tm.cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k3", "1", 0)
		p.Set(ctx, "k4", "1", 0)
		return nil
	})
	require.NoError(t, err, "a node pipeline hook may no longer call next with part of the batch")
	assert.True(t, tm.b.Exists("k3"))
	assert.True(t, tm.a.Exists("k4"))
}

// A cluster transaction reaches the ClusterClient's own pipeline hook as
// MULTI, the commands, EXEC, and that hook may serve it; a node client's
// hook that serves it without calling next makes it fail. That is why maint
// sends transactions of moved slots from a hook on the ClusterClient
// (cluster.go clusterHook).
func TestGoRedisClusterTxHooks(t *testing.T) {
	var nodeServes atomic.Bool
	nodeHook := funcHook{pipeline: func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			if nodeServes.Load() && cmds[0].Name() == "multi" {
				return nil
			}
			return next(ctx, cmds)
		}
	}}
	tm := newTwoMasters(t, nodeHook)
	other := redis.NewClient(&redis.Options{Addr: tm.b.Addr(), Protocol: 3})
	defer other.Close()
	var names atomic.Value
	tm.cc.AddHook(funcHook{pipeline: func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			var ns []string
			for _, c := range cmds {
				ns = append(ns, c.Name())
			}
			names.Store(ns)
			if len(cmds) > 2 && cmds[1].Name() == "incr" {
				_, err := other.TxPipelined(ctx, func(p redis.Pipeliner) error {
					for _, c := range cmds[1 : len(cmds)-1] {
						_ = p.Process(ctx, c)
					}
					return nil
				})
				return err
			}
			return next(ctx, cmds)
		}
	}})
	ctx := context.Background()
	cmds, err := tm.cc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "{t}a")
		p.Incr(ctx, "{t}a")
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"multi", "incr", "incr", "exec"}, names.Load(),
		"the ClusterClient's pipeline hook no longer sees a transaction as MULTI ... EXEC")
	assert.EqualValues(t, 2, cmds[1].(*redis.IntCmd).Val(), "the ClusterClient hook's answer is not the transaction's result")
	got, _ := tm.b.Get("{t}a")
	assert.Equal(t, "2", got)

	nodeServes.Store(true)
	_, err = tm.cc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{t}b", "1", 0)
		return nil
	})
	assert.Error(t, err, "go-redis now accepts a node hook serving a cluster transaction: maint could forward transactions from the node hook (cluster.go clusterHook)")
}

// go-redis reloads its slot map with CLUSTER SLOTS sent through a node
// client, whose hooks see the *redis.ClusterSlotsCmd and its reply: that is
// how maint sees the reload an SMIGRATED asked for (cluster.go sawSlotMap).
func TestGoRedisClusterReloadThroughNodeHook(t *testing.T) {
	mr := miniredis.RunT(t)
	var seen atomic.Int64
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{mr.Addr()}, Protocol: 3})
	defer cc.Close()
	cc.OnNewNode(func(c *redis.Client) {
		c.AddHook(funcHook{process: func(next redis.ProcessHook) redis.ProcessHook {
			return func(ctx context.Context, cmd redis.Cmder) error {
				err := next(ctx, cmd)
				if sc, ok := cmd.(*redis.ClusterSlotsCmd); ok && err == nil && len(sc.Val()) > 0 {
					seen.Add(1)
				}
				return err
			}
		}})
	})
	ctx := context.Background()
	require.NoError(t, cc.Set(ctx, "x", "1", 0).Err())
	require.Positive(t, seen.Load(), "the first slot map no longer comes through a node client's hooks as a ClusterSlotsCmd")
	n := seen.Load()
	cc.ReloadState(ctx)
	require.Eventually(t, func() bool { return seen.Load() > n }, 5*time.Second, 5*time.Millisecond,
		"ReloadState no longer reloads through a node client's hooks")
}

// LazyReload coalesces requests made while a reload runs, but a request in
// the 200 ms after one completes brings another reload: a MOVED followed
// just after the reload an SMIGRATED asked for would cost a second one. That
// is why maint sends moved slots on itself (no MOVED) until it has seen the
// reload, and a little after.
func TestGoRedisClusterReloadAfterReloadReloadsAgain(t *testing.T) {
	tm := newTwoMasters(t, nil)
	ctx := context.Background()
	time.Sleep(300 * time.Millisecond) // past the first load's cooldown
	n := tm.loads.Load()
	tm.cc.ReloadState(ctx)
	require.Eventually(t, func() bool { return tm.loads.Load() == n+1 }, 5*time.Second, time.Millisecond)
	// The count rises as the load begins; a request before the load ends is
	// coalesced into it. Ask again once it has ended, within the cooldown
	// (or after it: a reload either way).
	time.Sleep(50 * time.Millisecond)
	tm.cc.ReloadState(ctx)
	require.Eventually(t, func() bool { return tm.loads.Load() == n+2 }, 5*time.Second, 5*time.Millisecond,
		"a reload asked just after one completed no longer reloads again")
}

// keysOf is a helper for the other cluster tests: n keys of distinct slots.
func keysOf(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "k" + strconv.Itoa(i)
	}
	return out
}
