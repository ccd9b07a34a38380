package maint_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// A node added and a source removed, on the real cluster tier: a spare
// redis-server in cluster mode, in no cluster (MAINT_TEST_CLUSTER_SPARE,
// loopback), joins the cluster (CLUSTER MEET), takes the slots of the first
// node under load, gives them back, and leaves (CLUSTER FORGET on every
// node; it is reset after the run) while the load goes on; with no handler
// and with maint (both routes), MaxRetries at its default: no command
// failed with maint that did not without, no write run twice.
//
// Run it on a cluster of its own, or last: after it (the spare met,
// given slots, forgotten, reset) TestRealClusterReshard on the same
// cluster lost a few acknowledged INCRs with no handler too, and lost
// none on a cluster created fresh. Not yet explained; not in CI.
func TestRealClusterNodeAddedAndRemoved(t *testing.T) {
	env, spare := os.Getenv("MAINT_TEST_CLUSTER"), os.Getenv("MAINT_TEST_CLUSTER_SPARE")
	if env == "" || spare == "" {
		t.Skip("MAINT_TEST_CLUSTER and MAINT_TEST_CLUSTER_SPARE (an empty cluster-mode redis-server) not set")
	}
	masters := strings.Split(env, ",")
	rc := openRealCluster(t, masters)
	ctx := context.Background()
	sc := redis.NewClient(&redis.Options{Addr: spare, Protocol: 2})
	t.Cleanup(func() { _ = sc.Close() })
	host, port, _ := strings.Cut(spare, ":")
	join := func() {
		t.Helper()
		require.NoError(t, sc.Do(ctx, "CLUSTER", "RESET", "HARD").Err())
		// Left with no slot, it stays an empty master (no replica
		// migration: a resync would drop what it still answers for).
		require.NoError(t, sc.ConfigSet(ctx, "cluster-allow-replica-migration", "no").Err())
		id, err := sc.Do(ctx, "CLUSTER", "MYID").Text()
		require.NoError(t, err)
		require.NoError(t, rc.admin[rc.a].Do(ctx, "CLUSTER", "MEET", host, port).Err())
		rcWait(t, "every node to know the spare", 30*time.Second, func() bool {
			for _, a := range masters {
				nodes, err := rc.admin[a].ClusterNodes(ctx).Result()
				if err != nil || !strings.Contains(nodes, id) {
					return false
				}
			}
			nodes, err := sc.ClusterNodes(ctx).Result()
			if err != nil || strings.Count(nodes, "master") < len(masters)+1 || strings.Contains(nodes, "handshake") {
				return false
			}
			info, err := sc.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		rc.admin[spare], rc.ids[spare] = sc, id
		rc.addrs = append(append([]string(nil), masters...), spare)
		rc.seeds, rc.b = masters, spare
		// The removal, under load: the spare, left with no slot, is
		// forgotten by the masters.
		rc.afterBack = func() {
			for _, a := range masters {
				_ = rc.admin[a].Do(ctx, "CLUSTER", "FORGET", id).Err()
			}
		}
	}
	leave := func() {
		rc.afterBack()
		_ = sc.Do(ctx, "CLUSTER", "RESET", "HARD").Err()
		rc.addrs, rc.b = masters, masters[1]
		delete(rc.admin, spare)
	}
	run := func(name string, newClient func(*redis.ClusterOptions) (*redis.ClusterClient, *maint.Group)) *rcResult {
		join()
		defer leave()
		return rc.reshardUnderLoad(t, name, newClient)
	}
	plain := run("no handler, a node added and removed", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		return redis.NewClusterClient(opt), nil
	})
	optioned := run("Group.NewClusterClient, a node added and removed", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		g := maint.NewGroup()
		return g.NewClusterClient(opt), g
	})
	instrumented := run("maint.Instrument, a node added and removed", func(opt *redis.ClusterOptions) (*redis.ClusterClient, *maint.Group) {
		c := redis.NewClusterClient(opt)
		g, err := maint.Instrument(c)
		require.NoError(t, err)
		return c, g
	})
	for _, r := range []*rcResult{plain, optioned, instrumented} {
		// Not asserted: this scenario loses a few acknowledged INCRs with
		// no handler as well (2-7 of 600 000 in the runs so far), on keys
		// of slots the spare received and gave back: a finding about the
		// reshard itself, to be explained, not maint's (it routes nothing).
		t.Logf("%s: acknowledged writes lost %d", r.name, r.lost)
		assert.Zero(t, r.dup, "%s: writes run twice", r.name)
		assert.Zero(t, r.torn, "%s: a MULTI/EXEC seen half applied", r.name)
		assert.Zero(t, r.wrongReads, "%s: wrong reads", r.name)
	}
	for _, r := range []*rcResult{optioned, instrumented} {
		if plain.failed == 0 {
			assert.Zero(t, r.failed, "%s: failed commands: %v", r.name, r.errs)
		}
	}
}
