//go:build goredis_v9_24

package maint_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/multidb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// multiDB builds a v9.24 MultiDBClient over standalone members, one per
// env, the first the preferred (weight 1, the others 0.5). Member i's
// options are e.options(pool), configured by ms[i] (its dial path) before
// NewMultiDBClient, and ms[i] goes into the member's process hooks by
// AddDatabaseHook after: the only two ways into a member, which
// NewMultiDBClient builds from a copy of the options and never hands out.
// MultiDB's own retries are off (CommandRetries -1) and the members' are
// -1 as e.options says, so that no retry hides a failure; its health checks
// are one PING a second per member, through the member (and maint); no
// auto-fallback. failovers counts MultiDB's failovers and circuit changes.
func multiDB(t *testing.T, envs []*env, ms []*maint.Maint, configure, hook bool, mode maintnotifications.Mode, pool int) (mdb *redis.MultiDBClient, failovers func() []string) {
	t.Helper()
	var mu sync.Mutex
	var changes []string
	opts := &redis.MultiDBOptions{
		HealthCheckInterval:  time.Second,
		HealthCheckTimeout:   500 * time.Millisecond,
		HealthChecks:         []redis.MultiDBHealthCheck{multidb.NewPingHealthCheck(multidb.WithProbes(1))},
		CommandRetries:       -1,
		AutoFallbackInterval: -1,
		OnFailover: func(_ context.Context, from, to int) {
			mu.Lock()
			changes = append(changes, fmt.Sprintf("failover %d->%d", from, to))
			mu.Unlock()
		},
		OnCircuitStateChanged: func(id int, from, to string) {
			mu.Lock()
			changes = append(changes, fmt.Sprintf("circuit %d %s->%s", id, from, to))
			mu.Unlock()
		},
	}
	for i, e := range envs {
		opt := e.options(pool)
		if mode != "" {
			opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: mode}
		}
		if configure {
			ms[i].Configure(opt)
		}
		w := 1.0
		if i > 0 {
			w = 0.5
		}
		opts.Clients = append(opts.Clients, redis.MultiDBClientConfig{Options: opt, Weight: w})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mdb, err := redis.NewMultiDBClient(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mdb.Close() })
	require.Equal(t, 0, mdb.ActiveDatabaseID(), "the preferred member is active")
	if hook {
		for i := range envs {
			require.NoError(t, mdb.AddDatabaseHook(i, ms[i]))
		}
	}
	return mdb, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), changes...)
	}
}

// A MultiDBClient (Active-Active, go-redis v9.24) whose standalone members
// are protected as the docs say (m.Configure on each member's options before
// NewMultiDBClient, mdb.AddDatabaseHook(id, m) after, one Maint per member)
// serves an INCR load through a MOVING with a named successor on its active
// member: nothing fails, nothing runs twice, the member's Maint hands off
// (its connections retired, the old node closes none at the window's end),
// the load goes on on the successor, and MultiDB sees nothing to fail over
// for: no failover, no circuit change, the standby member gets no command.
func TestMultiDBMemberThroughMoving(t *testing.T) {
	e1, e2 := newEnv(t), newEnv(t)
	ev1, ev2 := &eventLog{}, &eventLog{}
	ms := []*maint.Maint{newMaint(t, ev1), newMaint(t, ev2)}
	mdb, changes := multiDB(t, []*env{e1, e2}, ms, true, true, "", 16)
	ctx := context.Background()
	l := startIncrOp(8, "mdb:", 1, func(key string) (int64, error) { return mdb.Incr(ctx, key).Result() })
	waitFor(t, "load", 10*time.Second, func() bool { return e1.old.Stats().Served > 300 })
	window := 2 * time.Second
	e1.old.Moving(mainttest.Moving{Window: window, To: e1.new})
	e1.waitEvent(e1.old, mainttest.KindWindowEndClose, window+10*time.Second)
	base := e1.new.Stats().Served
	waitFor(t, "load on the successor", 15*time.Second, func() bool { return e1.new.Stats().Served > base+300 })
	l.stop()
	st := ms[0].Stats()
	t.Logf("member 0's maint %+v\nold node %+v\nnew node %+v\nMultiDB changes %v\nevents:\n%s", st, e1.old.Stats(), e1.new.Stats(), changes(), ev1)
	l.check(t, e1.emu.Miniredis(), "mdb:")
	assert.Equal(t, uint64(1), st.Handoffs, "member 0's Maint handed off once")
	assert.NotZero(t, st.Retired, "member 0's connections to the old node were retired")
	assert.Zero(t, e1.old.Stats().ClosedAtWindowEnd, "the old node closed none of the member's connections at the window's end")
	assert.Zero(t, e1.old.Stats().OwedAtClose, "no reply was owed when the old node closed")
	assert.Equal(t, 0, mdb.ActiveDatabaseID(), "still on the preferred member")
	assert.Empty(t, changes(), "MultiDB saw nothing to fail over for")
	assert.Empty(t, e2.emu.Miniredis().Keys(), "the standby member got no command")
	assert.Zero(t, ms[1].Stats().Handoffs)
}

// What half the protection leaves out, through the same MOVING with a
// named successor under load (a failure, if any, is what the docs say that
// half cannot prevent: logged, not asserted):
//
//   - ConfigureOnly: m.Configure on the member's options, no
//     AddDatabaseHook. maint has the dial path: every connection is opted in
//     by maint, watched and retired, the old node closes none at the
//     window's end; it has not the process hooks, so it can neither hold nor
//     run a command again (M15's Conditions).
//   - HookOnly: AddDatabaseHook, no Configure: the AddHook route, whose
//     opt-in is go-redis's own handshake. MultiDB turns that off on a
//     member whose MaintNotificationsConfig is unset (it "owns endpoint
//     transitions itself"), so no connection opts in, the server tells maint
//     of nothing, and the old node closes every connection at the window's
//     end: maint is off for that member.
//   - HookOnlyAuto: the same with MaintNotificationsConfig{Mode: Auto} set
//     on the member's options, as a plain client's default: go-redis opts in
//     and maint hands off, except on the connection NewMultiDBClient's first
//     health check dialled before the hook went in, which is not maint's
//     (go-redis's own handler acts on it).
//
// And maint.Instrument, which could count those connections for a client
// it knows, refuses a MultiDBClient with an error: it cannot reach the
// members (v9.24 hands them out nowhere).
func TestMultiDBMemberHalfProtected(t *testing.T) {
	for _, tc := range []struct {
		name            string
		configure, hook bool
		mode            maintnotifications.Mode
	}{
		{"ConfigureOnly", true, false, ""},
		{"HookOnly", false, true, ""},
		{"HookOnlyAuto", false, true, maintnotifications.ModeAuto},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e1 := newEnv(t)
			ev := &eventLog{}
			ms := []*maint.Maint{newMaint(t, ev)}
			mdb, changes := multiDB(t, []*env{e1}, ms, tc.configure, tc.hook, tc.mode, 16)
			before := e1.old.Stats().Opened
			ctx := context.Background()
			l := startIncrOp(8, "mdbh:", 1, func(key string) (int64, error) { return mdb.Incr(ctx, key).Result() })
			waitFor(t, "load", 10*time.Second, func() bool { return e1.old.Stats().Served > 300 })
			window := 2 * time.Second
			e1.old.Moving(mainttest.Moving{Window: window, To: e1.new})
			e1.waitEvent(e1.old, mainttest.KindWindowEndClose, window+10*time.Second)
			off := tc.hook && !tc.configure && tc.mode == ""
			if !off {
				// Off, nothing moves the load: what the case asserts is
				// settled at the window's end, whatever the load does next.
				base := e1.new.Stats().Served
				waitFor(t, "load on the successor", 15*time.Second, func() bool { return e1.new.Stats().Served > base+300 })
			}
			l.stop()
			st := ms[0].Stats()
			var acked, failed int64
			for w := range l.acked {
				acked += l.acked[w].Load()
				failed += l.failed[w].Load()
			}
			t.Logf("%s: INCRs acknowledged %d, failed %d; maint %+v; old node %+v (%d opened at construction); MultiDB changes %v\nevents:\n%s",
				tc.name, acked, failed, st, e1.old.Stats(), before, changes(), ev)
			require.NotZero(t, before, "NewMultiDBClient's health check dialled before the hook went in")
			assert.Zero(t, st.Held, "nothing held")
			if !off {
				assert.Zero(t, st.NoOptIn, "the member opted in")
			}
			switch {
			case off:
				assert.Zero(t, e1.old.Stats().OptedIn, "no connection opted in")
				assert.Zero(t, st.Notifications, "maint was told of nothing")
				assert.Zero(t, st.Handoffs)
				assert.NotZero(t, e1.old.Stats().ClosedAtWindowEnd, "the old node closes the member's connections at the window's end")
				assert.NotZero(t, st.NoOptIn, "maint says it is told nothing (TestNoOptInIsSaid)")
			case tc.configure:
				assert.Equal(t, uint64(1), st.Handoffs, "the Maint handed off")
				assert.NotZero(t, st.Retired)
				assert.Zero(t, e1.old.Stats().ClosedAtWindowEnd, "the dial path alone closes every connection to the old node before the window's end")
			default:
				assert.Equal(t, uint64(1), st.Handoffs, "the Maint handed off")
				assert.NotZero(t, st.Retired)
			}
			_, err := maint.Instrument(mdb)
			assert.ErrorContains(t, err, "*redis.MultiDBClient not supported", "Instrument refuses a MultiDBClient")
		})
	}
}
