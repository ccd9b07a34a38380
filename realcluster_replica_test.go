package maint_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// On the real cluster tier: reads routed to replicas
// (ReadOnly with RouteRandomly) of slots moving under them fail nothing,
// with maint as without (a replica's nil for a key its master just
// migrated is Redis's answer, counted apart). It needs a replica of MAINT_TEST_CLUSTER's first
// node (redis-cli --cluster add-node NEW FIRST --cluster-slave); skipped
// otherwise.
func TestRealClusterReplicaReads(t *testing.T) {
	env := os.Getenv("MAINT_TEST_CLUSTER")
	if env == "" {
		t.Skip("MAINT_TEST_CLUSTER not set")
	}
	rc := openRealCluster(t, strings.Split(env, ","))
	ctx := context.Background()
	slots, err := rc.admin[rc.a].ClusterSlots(ctx).Result()
	require.NoError(t, err)
	replica := ""
	for _, s := range slots {
		if len(s.Nodes) > 1 && s.Nodes[0].ID == rc.ids[rc.a] {
			replica = s.Nodes[1].Addr
		}
	}
	if replica == "" {
		t.Skipf("%s has no replica: add one to run the replica reads", rc.a)
	}
	moving := map[int]bool{}
	for _, s := range rc.slots {
		moving[s] = true
	}
	var keys []string
	for i := 0; len(keys) < 100; i++ {
		k := "maint-rr-" + strconv.Itoa(i)
		if moving[mainttest.KeySlot(k)] {
			keys = append(keys, k)
		}
	}
	verify := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.addrs})
	defer verify.Close()
	for _, k := range keys {
		require.NoError(t, verify.Set(ctx, k, "v-"+k, 0).Err())
	}
	defer func() {
		for _, k := range keys {
			_ = verify.Del(ctx, k).Err()
		}
	}()
	require.Eventually(t, func() bool { // the replica has the keys
		c := redis.NewClient(&redis.Options{Addr: replica})
		defer c.Close()
		_ = c.ReadOnly(ctx).Err()
		n, err := c.DBSize(ctx).Result()
		return err == nil && n >= int64(len(keys))
	}, 10*time.Second, 10*time.Millisecond)

	run := func(name string, newClient func(*redis.ClusterOptions) (*redis.ClusterClient, *maint.Group)) (ok, failed, fromReplica uint64, errs []string) {
		cc, g := newClient(&redis.ClusterOptions{Addrs: rc.addrs, ReadOnly: true, RouteRandomly: true})
		defer cc.Close()
		if g != nil {
			defer g.Close()
		}
		var replicaReads atomic.Uint64
		cc.OnNewNode(func(c *redis.Client) {
			if c.Options().Addr == replica {
				c.AddHook(funcHook{process: func(next redis.ProcessHook) redis.ProcessHook {
					return func(ctx context.Context, cmd redis.Cmder) error {
						if cmd.Name() == "get" {
							replicaReads.Add(1)
						}
						return next(ctx, cmd)
					}
				}})
			}
		})
		var okN, failN, nilN atomic.Uint64
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for r := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := r; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := keys[i%len(keys)]
					v, err := cc.Get(ctx, k).Result()
					if errors.Is(err, redis.Nil) {
						// Redis's own answer: the replica serves its
						// master's view, whose MIGRATE deleted the key
						// before the slot changed hands (no ASK from a
						// replica). With or without maint.
						nilN.Add(1)
						continue
					}
					if err != nil || v != "v-"+k {
						failN.Add(1)
						mu.Lock()
						if len(errs) < 10 {
							errs = append(errs, k+": "+v+" "+errString(err))
						}
						mu.Unlock()
						continue
					}
					okN.Add(1)
				}
			}()
		}
		defer func() {
			select {
			case <-stop:
			default:
				close(stop)
				wg.Wait()
			}
		}()
		rcWait(t, name+": reads before the reshard", 30*time.Second, func() bool { return okN.Load() > 1000 })
		require.NoError(t, rc.moveSlots(ctx, rc.slots, rc.a, rc.b))
		require.NoError(t, rc.moveSlots(ctx, rc.slots, rc.b, rc.a))
		before := okN.Load()
		rcWait(t, name+": reads after", 30*time.Second, func() bool { return okN.Load() > before+1000 })
		close(stop)
		wg.Wait()
		t.Logf("%s: reads ok %d, failed %d, nil from a migrating slot %d (%d served by the replica %s); errors %v",
			name, okN.Load(), failN.Load(), nilN.Load(), replicaReads.Load(), replica, errs)
		return okN.Load(), failN.Load(), replicaReads.Load(), errs
	}
	_, plainFailed, plainReplica, _ := run("no handler", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		return redis.NewClusterClient(opt), nil
	})
	_, failed, fromReplica, errs := run("Group.NewClusterClient", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		g := maint.NewGroup()
		return g.NewClusterClient(opt), g
	})
	assert.Positive(t, plainReplica, "no read reached the replica: the test proves nothing")
	assert.Positive(t, fromReplica, "with maint, no read reached the replica (READONLY lost?)")
	assert.LessOrEqual(t, failed, plainFailed, "maint failed more replica reads than go-redis alone: %v", errs)
	assert.Zero(t, failed, "replica reads failed with maint: %v", errs)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
