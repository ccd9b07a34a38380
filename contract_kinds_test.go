package maint_test

// Contract tests for the client kinds: what the options routes (group.go,
// failover.go) and Instrument (instrument.go) assume of go-redis
// v9.23's Cluster, Ring and failover clients.

import (
	"context"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookCounter counts the dials and commands that go through a client's
// hooks.
type hookCounter struct {
	dials, cmds atomic.Int64
	mu          sync.Mutex
	addrs       []string
}

func (h *hookCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		h.mu.Lock()
		h.addrs = append(h.addrs, addr)
		h.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (h *hookCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *hookCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// recordDialer records the addresses a Dialer is called with.
type recordDialer struct {
	mu    sync.Mutex
	addrs []string
}

func (r *recordDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	r.addrs = append(r.addrs, addr)
	r.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (r *recordDialer) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.addrs...)
}

// The failover route relies on: FailoverOptions.Dialer being called for
// the sentinels with their addresses and for the master with the address a
// sentinel named; the data-node client's dial hook seeing the master's
// dials only, with the address "FailoverClient"; rdb.Options().Dialer being
// a dialer that asks the sentinels whatever address it is given.
func TestContractFailoverClientAddr(t *testing.T) {
	e := newEnv(t)
	s := newFakeSentinel(t, e.old.Addr())
	rec := &recordDialer{}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "db", SentinelAddrs: []string{s.addr()}, Dialer: rec.dial, Protocol: 3,
	})
	defer rdb.Close()
	hc := &hookCounter{}
	rdb.AddHook(hc)
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	assert.Equal(t, "FailoverClient", rdb.Options().Addr,
		"maint recognises a failover client by its address (Instrument) and keys its target apart from it (failoverTarget)")
	assert.Contains(t, rec.seen(), s.addr(), "the sentinels are dialled through FailoverOptions.Dialer: maint must let them through unwrapped")
	assert.Contains(t, rec.seen(), e.old.Addr(), "the master is dialled through FailoverOptions.Dialer with the address a sentinel named")
	hc.mu.Lock()
	hookAddrs := append([]string(nil), hc.addrs...)
	hc.mu.Unlock()
	require.NotEmpty(t, hookAddrs)
	for _, a := range hookAddrs {
		assert.Equal(t, "FailoverClient", a, "the data-node client's dial hook sees its own dials only, all at \"FailoverClient\": the sentinels' dials never reach maint's hook")
	}
	// Options().Dialer asks the sentinels: a dial with any address lands on
	// the master.
	s.setMaster(e.new.Addr())
	c, err := rdb.Options().Dialer(ctx, "tcp", "ignored:1")
	require.NoError(t, err, "maint's failover probes dial through Options().Dialer")
	defer c.Close()
	assert.Equal(t, e.new.Addr(), c.RemoteAddr().String(), "Options().Dialer ignores its address and asks the sentinels (failover probes rely on it)")
}

// The failover route's pre-hook wrapping relies on: NewFailoverClient
// dialling MinIdleConns connections before it returns (before AddHook can
// run), through FailoverOptions.Dialer.
func TestContractFailoverMinIdleDialsBeforeHook(t *testing.T) {
	e := newEnv(t)
	s := newFakeSentinel(t, e.old.Addr())
	rec := &recordDialer{}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "db", SentinelAddrs: []string{s.addr()}, Dialer: rec.dial, Protocol: 3, MinIdleConns: 2,
	})
	defer rdb.Close()
	waitFor(t, "MinIdleConns dialled", 5*time.Second, func() bool { return e.old.Stats().Opened >= 2 })
	n := 0
	for _, a := range rec.seen() {
		if a == e.old.Addr() {
			n++
		}
	}
	assert.GreaterOrEqual(t, n, 2, "MinIdleConns of the master are dialled through FailoverOptions.Dialer, without any hook")
}

// The Cluster route relies on ClusterOptions.NewClient creating every node
// client, with options maint can configure before the client exists, and
// on ClusterClient.Options returning the options passed in (v9.23.0) or,
// from v9.24.0 on, a copy of them with the same NewClient: Instrument and
// ConfigureCluster recognise options a Group configured by their
// NewClient (madeByGroup) and find the cluster state through the node
// clients it made (bindThroughNodes). Checked on v9.23.0 and v9.24.0.
func TestContractClusterNewClient(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var made []string
	opt := &redis.ClusterOptions{
		Addrs: []string{e.old.Addr()},
		NewClient: func(o *redis.Options) *redis.Client {
			mu.Lock()
			made = append(made, o.Addr)
			mu.Unlock()
			return redis.NewClient(o)
		},
	}
	cc := redis.NewClusterClient(opt)
	defer cc.Close()
	_ = cc.Ping(context.Background()).Err() // the emulator is no cluster: whatever the answer, a node client is made
	mu.Lock()
	defer mu.Unlock()
	assert.NotEmpty(t, made, "ClusterOptions.NewClient makes the node clients")
	if goRedisAtLeast(9, 24) {
		assert.NotSame(t, opt, cc.Options(), "go-redis %s: ClusterClient.Options returns the options passed in again", redis.Version())
	} else {
		assert.Same(t, opt, cc.Options(), "go-redis %s: ClusterClient.Options no longer returns the options passed to NewClusterClient", redis.Version())
	}
	assert.Equal(t, reflect.ValueOf(opt.NewClient).Pointer(), reflect.ValueOf(cc.Options().NewClient).Pointer(),
		"ClusterClient.Options no longer carries the NewClient it was given")
}

// The Ring route and the sweeper rely on: RingOptions.NewClient creating
// every shard client (SetAddrs too, for new addresses only); SetAddrs
// closing the shard clients it drops; the heartbeat pinging every shard it
// holds, down ones included, through the shard client's hooks, and none it
// dropped; ForEachShard skipping down shards; Ring.Options returning the
// options passed in.
func TestContractRingShards(t *testing.T) {
	e := newEnv(t)
	extra := e.shards(1)[0]
	var mu sync.Mutex
	made := map[string]*redis.Client{}
	hooks := map[string]*hookCounter{}
	opt := &redis.RingOptions{
		Addrs:              map[string]string{"a": e.old.Addr(), "b": e.new.Addr()},
		HeartbeatFrequency: 50 * time.Millisecond,
		DialTimeout:        300 * time.Millisecond,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			h := &hookCounter{}
			c.AddHook(h)
			mu.Lock()
			made[o.Addr], hooks[o.Addr] = c, h
			mu.Unlock()
			return c
		},
	}
	e.new.RefuseNew(true)
	rng := redis.NewRing(opt)
	defer rng.Close()
	assert.NotSame(t, opt, rng.Options(), "Ring.Options returns a copy of the options passed to NewRing: Instrument recognises the shard clients ConfigureRing made by client, not by options")
	hookOf := func(a string) *hookCounter { mu.Lock(); defer mu.Unlock(); return hooks[a] }
	require.NotNil(t, hookOf(e.new.Addr()), "NewRing makes every shard client through RingOptions.NewClient, down ones too")
	waitFor(t, "b marked down", 5*time.Second, func() bool { return len(ringShards(rng)) == 1 })
	activity := func(a string) int64 { h := hookOf(a); return h.cmds.Load() + h.dials.Load() }
	before := activity(e.new.Addr())
	waitFor(t, "the heartbeat reaching the down shard", 10*time.Second, func() bool {
		return activity(e.new.Addr()) > before+2
	}) // the heartbeat pings a down shard through its client's hooks, commands or dials (the sweeper takes it for alive)
	assert.Len(t, ringShards(rng), 1, "ForEachShard skips down shards (Instrument polls for them)")

	mu.Lock()
	a := made[e.old.Addr()]
	mu.Unlock()
	rng.SetAddrs(map[string]string{"a": e.old.Addr(), "c": extra.Addr()})
	mu.Lock()
	assert.Same(t, a, made[e.old.Addr()], "SetAddrs keeps the shard client of an address it keeps")
	assert.NotNil(t, made[extra.Addr()], "SetAddrs makes new shard clients through RingOptions.NewClient")
	dropped := made[e.new.Addr()]
	mu.Unlock()
	assert.ErrorIs(t, dropped.Ping(context.Background()).Err(), redis.ErrClosed, "SetAddrs closes the shard clients it drops")
	// A heartbeat round under way when SetAddrs ran still pings the dropped
	// shard, and that ping goes on through its pool's dial retries (five,
	// 100 ms apart, each up to DialTimeout) after the client is closed. The
	// heartbeat runs its rounds one after the other in one goroutine: once
	// it pings the new shard c, it is in a round over the new list and the
	// old round has ended, its dials with it.
	pings := func(a string) int64 { return hookOf(a).cmds.Load() }
	waitFor(t, "a heartbeat round over the new shards", 10*time.Second, func() bool { return pings(extra.Addr()) > 0 })
	n := activity(e.new.Addr())
	rounds := pings(extra.Addr())
	waitFor(t, "three more heartbeat rounds", 10*time.Second, func() bool { return pings(extra.Addr()) >= rounds+3 })
	assert.Equal(t, n, activity(e.new.Addr()), "no heartbeat, command or dial reaches a dropped shard (the sweeper takes it for closed)")
}

// Contract (group.go ringClosed), checked on v9.23.0 and v9.24.0:
// (*redis.Ring).GetShardClientForKey answers redis.ErrClosed once the Ring
// is closed, and otherwise a shard, or another error when every shard is
// down, without running any of the Ring's hooks and without any I/O. If
// this fails, the Group cannot tell a closed instrumented Ring and polls
// it forever, or its sweeper runs the application's hooks.
func TestContractRingShardForKeyAnswersClosed(t *testing.T) {
	t.Logf("go-redis %s", redis.Version())
	hook := &hookLog{}
	down := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.9:1"}, HeartbeatFrequency: 10 * time.Millisecond})
	defer down.Close()
	down.AddHook(hook)
	waitFor(t, "the shard down", 5*time.Second, func() bool { return down.Len() == 0 })
	for range 3 {
		_, err := down.GetShardClientForKey("")
		require.Error(t, err)
		assert.NotErrorIs(t, err, redis.ErrClosed, "a Ring whose shards are down is not closed")
	}
	require.NoError(t, down.Close())
	for range 2 {
		_, err := down.GetShardClientForKey("")
		assert.ErrorIs(t, err, redis.ErrClosed, "a closed Ring whose shards were down")
	}

	e := newEnv(t)
	served := e.old.Stats().Served
	up := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": e.old.Addr()}, HeartbeatFrequency: time.Hour})
	up.AddHook(hook)
	c, err := up.GetShardClientForKey("")
	require.NoError(t, err, "a live Ring")
	assert.NotNil(t, c)
	assert.Equal(t, served, e.old.Stats().Served, "no command reached the shard")
	require.NoError(t, up.Close())
	_, err = up.GetShardClientForKey("")
	assert.ErrorIs(t, err, redis.ErrClosed, "a closed live Ring")
	assert.Empty(t, hook.seen(), "the Ring's hooks saw the asks")
}

// Contract (configure.go optionsInUse): redis.NewClient works on a copy of
// the options it is given, filled with go-redis's defaults (the Dialer,
// the network, the pool's and buffers' defaults), and rdb.Options() returns
// that copy; the caller's options are left as they were. If this fails,
// Configure can no longer tell a live client's options.
func TestContractNewClientFillsOptions(t *testing.T) {
	given := &redis.Options{Addr: "127.0.0.9:1"}
	rdb := redis.NewClient(given)
	defer rdb.Close()
	o := rdb.Options()
	assert.NotSame(t, given, o)
	assert.Nil(t, given.Dialer, "the caller's options are not filled")
	assert.NotNil(t, o.Dialer)
	assert.NotEmpty(t, o.Network)
	assert.Positive(t, o.PoolSize)
	assert.Positive(t, o.PoolTimeout)
	assert.NotZero(t, o.MinRetryBackoff)
	assert.NotZero(t, o.MaxRetryBackoff)
	assert.Positive(t, o.ReadBufferSize)
	assert.Positive(t, o.WriteBufferSize)
}
