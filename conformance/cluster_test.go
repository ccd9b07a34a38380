package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/internal/slot"
)

// clusterClient builds the column's cluster client: maint by Instrument
// (the AddHook route of a cluster: one Maint per node client) or by the
// group's NewClusterClient (the options route), or a control.
func (w *world) clusterClient(t *testing.T, col column, timeout time.Duration, taps *tapDialer) (*redis.ClusterClient, error) {
	cc, _, err := w.clusterClientOf(t, col, timeout, 30*time.Second, taps)
	return cc, err
}

// clusterClientOf is clusterClient with a relaxed timeout of the
// scenario's own; it also returns maint's Group (nil for a control).
func (w *world) clusterClientOf(t *testing.T, col column, timeout, relaxed time.Duration, taps *tapDialer) (*redis.ClusterClient, *maint.Group, error) {
	if w.cluster == nil {
		t.Skip("the endpoints file has no OSS Cluster API database (REDIS_CLUSTER_ENDPOINT_NAME)")
	}
	addrs, err := w.cluster.Addrs()
	if err != nil {
		return nil, nil, err
	}
	opt := &redis.ClusterOptions{
		Addrs: addrs, Username: w.cluster.Username, Password: w.cluster.Password, Protocol: 3,
		MaxRetries: -1, ReadTimeout: timeout, WriteTimeout: timeout, Dialer: taps.dial,
	}
	mopts := []maint.Option{maint.WithRelaxedTimeout(relaxed), maint.WithLogger(quietLog)}
	var cc *redis.ClusterClient
	var g *maint.Group
	switch col {
	case colAddHook:
		cc = redis.NewClusterClient(opt)
		if g, err = maint.Instrument(cc, mopts...); err != nil {
			_ = cc.Close()
			return nil, nil, err
		}
	case colOptions:
		g = maint.NewGroup(mopts...)
		cc = g.NewClusterClient(opt)
	case colBuiltin:
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeEnabled, RelaxedTimeout: relaxed}
		cc = redis.NewClusterClient(opt)
	case colNone:
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		cc = redis.NewClusterClient(opt)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		if g != nil {
			_ = g.Close()
		}
	})
	return cc, g, nil
}

// keysForAllShards is redis-py's generate_keys_for_all_shards: one key in
// each of shards equal parts of the slot space.
func keysForAllShards(shards int, prefix string) []string {
	keys := make([]string, shards)
	found := 0
	for i := 0; found < shards; i++ {
		k := fmt.Sprintf("%s_%d", prefix, i)
		part := slot.Of(k) * shards / 16384
		if keys[part] == "" {
			keys[part] = k
			found++
		}
	}
	return keys
}

// TestRedisPyClusterCommandExecutionDuringSlotMigration ports redis-py's
// test_command_execution_during_slot_shuffle_no_node_replacement: 10
// threads each SET+GET over keys on every shard, 1 s socket timeout,
// retries disabled, for 40 s (short: 3 s), the slot_migrate effect
// (slot-shuffle, remove, add) triggered 3 s in. Pass: 0 errors. go-redis's
// cluster client retries a timed-out command under MaxRedirects, the
// budget that also follows MOVED, so retries cannot be turned off there
// without failing redirects: a read that timed out on the wire counts as
// the error it would have been (a retried write may run twice).
func TestRedisPyClusterCommandExecutionDuringSlotMigration(t *testing.T) {
	parallelTop(t)
	var cases []tcase
	for _, effect := range []string{"slot-shuffle", "remove", "add"} {
		cases = append(cases, tcase{effect, func(t *testing.T) {
			scenario{
				name:      "TestRedisPyClusterCommandExecutionDuringSlotMigration/" + effect,
				criterion: "10 threads SET+GET on every shard, 1 s timeout, no retries, through the slot migration: 0 errors, 0 timeouts on the wire",
				world:     func(t *testing.T) *world { return newWorld(t, true, nil) },
				check: func(ctx context.Context, t *testing.T, w *world, col column) error {
					taps := &tapDialer{next: w.dial}
					cc, err := w.clusterClient(t, col, time.Second, taps)
					if err != nil {
						return err
					}
					if err := cc.Ping(ctx).Err(); err != nil {
						return err
					}
					start := time.Now()
					tr := startTraffic(ctx, 10, w.ph.pace, func(ctx context.Context, worker, _ int) error {
						for _, k := range keysForAllShards(3, fmt.Sprintf("cmd_execution_%d_%s_key", worker, effect)) {
							if err := cc.Set(ctx, k, "value", 0).Err(); err != nil {
								return err
							}
							if err := cc.Get(ctx, k).Err(); err != nil {
								return err
							}
						}
						return nil
					})
					sleepCtx(ctx, w.ph.warmup)
					fiErr := w.clusterAction(ctx, effect)
					sleepCtx(ctx, max(w.ph.clusterRun-time.Since(start), time.Second))
					err = errors.Join(fiErr, tr.stop("rounds"))
					if n := taps.timeouts.Load(); n > 0 {
						err = errors.Join(err, fmt.Errorf("%d reads timed out on the wire (the cluster client retried them)", n))
					}
					return err
				},
			}.run(t)
		}})
	}
	runCases(t, cases)
}

// clusterAction is redis-py's trigger_effect for an OSS Cluster API
// database: slot_migrate with an effect and a trigger.
func (w *world) clusterAction(ctx context.Context, effect string) error {
	return w.action(ctx, "slot_migrate", map[string]any{"bdb_id": w.cluster.BdbID(), "cluster_index": 0,
		"effect": effect, "trigger": "migrate"})
}
