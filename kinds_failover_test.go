package maint_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/mainttest"
)

// failoverOptions are a FailoverClient's options against a fake Discovery
// Service.
func failoverOptions(s *fakeSentinel, retries int) *redis.FailoverOptions {
	return &redis.FailoverOptions{
		MasterName:    "db",
		SentinelAddrs: []string{s.addr()},
		Protocol:      3,
		PoolSize:      8,
		MaxRetries:    retries,
		ReadTimeout:   3 * time.Second,
		WriteTimeout:  3 * time.Second,
	}
}

// A FailoverClient under load through a MOVING of its master, the old node
// refusing connections at the window's end and the Discovery Service
// naming the new master only 0.5 s later: maint holds new work until the
// sentinels name another master (a successor is of no use: the client's
// dialer asks the sentinels) and fails no command.
func TestFailoverMovingHoldsUntilDiscoveryNamesNewMaster(t *testing.T) {
	for _, retries := range []int{-1, 0} {
		t.Run(map[int]string{-1: "MaxRetries-1", 0: "MaxRetriesDefault"}[retries], func(t *testing.T) {
			e := newEnv(t)
			s := newFakeSentinel(t, e.old.Addr())
			ev := &eventLog{}
			g := maint.NewGroup(maint.WithLogf(t.Logf), maint.WithOnEvent(ev.add))
			defer g.Close()
			rdb := g.NewFailoverClient(failoverOptions(s, retries))
			defer rdb.Close()
			require.NoError(t, rdb.Ping(context.Background()).Err())
			l := startLoad(rdb, 8)
			time.Sleep(300 * time.Millisecond)
			const window = 2 * time.Second
			e.old.Moving(mainttest.Moving{Window: window, To: e.new, StopAccepting: true})
			time.AfterFunc(window+500*time.Millisecond, func() { s.setMaster(e.new.Addr()) })
			waitFor(t, "commands served by the new master", 15*time.Second, func() bool {
				return e.new.Stats().Served > 50
			})
			l.stop()
			t.Logf("ok %d failed %d errs %v; maint %+v\n%s", l.ok.Load(), l.failed.Load(), l.errs, g.Stats(), ev)
			assert.Zero(t, l.failed.Load(), "failed commands")
			assert.EqualValues(t, 1, g.Stats().Handoffs)
			assert.Zero(t, e.old.Stats().ClosedAtWindowEnd, "connections the old master had to close")
			for _, c := range s.commands() {
				assert.False(t, strings.HasPrefix(c, "client maint_notifications"), "the sentinel got %q", c)
			}
		})
	}
}

// The options route in two steps: ConfigureFailover, redis.NewFailoverClient,
// AddHook; and Instrument on an existing FailoverClient. Both opt the data
// nodes' connections in and leave the sentinels alone.
func TestFailoverConfigureAndInstrument(t *testing.T) {
	for _, route := range []string{"Configure", "Instrument"} {
		t.Run(route, func(t *testing.T) {
			e := newEnv(t)
			s := newFakeSentinel(t, e.old.Addr())
			g := maint.NewGroup(maint.WithLogf(t.Logf))
			defer g.Close()
			opt := failoverOptions(s, -1)
			var rdb *redis.Client
			if route == "Configure" {
				h := g.ConfigureFailover(opt)
				rdb = redis.NewFailoverClient(opt)
				rdb.AddHook(h)
			} else {
				rdb = redis.NewFailoverClient(opt)
				require.NoError(t, g.Instrument(rdb))
			}
			defer rdb.Close()
			require.NoError(t, rdb.Set(context.Background(), "k", "v", 0).Err())
			allOptedIn(t, e.old, 1)
			for _, c := range s.commands() {
				assert.False(t, strings.HasPrefix(c, "client maint_notifications"), "the sentinel got %q", c)
			}
			assert.Len(t, g.Maints(), 1)
		})
	}
}

// A relay that pushes a MOVING naming a successor whatever the opt-in asked
// for: the failover Maint refuses the successor (the client's dialer would
// ask the sentinels anyway), dials nothing there, and holds until the
// Discovery Service names the new master; no command fails.
func TestFailoverNamedSuccessorIsNotDialled(t *testing.T) {
	e := newEnv(t)
	s := newFakeSentinel(t, e.old.Addr())
	g := maint.NewGroup(maint.WithLogf(t.Logf))
	defer g.Close()
	rdb := g.NewFailoverClient(failoverOptions(s, -1))
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	l := startLoad(rdb, 4)
	time.Sleep(200 * time.Millisecond)
	e.old.SendRaw(resp.AppendMoving(nil, 1, 2, e.new.Addr(), false))
	waitFor(t, "the successor refused", 5*time.Second, func() bool { return g.Stats().RefusedSuccessors > 0 })
	time.Sleep(2500 * time.Millisecond) // past the window: held, nothing dialled to the successor
	assert.Zero(t, e.new.Stats().Opened, "connections to the named successor before the sentinels name it")
	s.setMaster(e.new.Addr())
	waitFor(t, "commands served by the new master", 15*time.Second, func() bool { return e.new.Stats().Served > 50 })
	l.stop()
	t.Logf("ok %d failed %d errs %v; maint %+v", l.ok.Load(), l.failed.Load(), l.errs, g.Stats())
	assert.Zero(t, l.failed.Load(), "failed commands")
}
