package maint_test

import (
	"context"
	"fmt"
	"io"
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

// The proofs for go-redis's FailoverClient through the emulated
// Discovery Service: a MOVING of the master and a failover that changes it,
// under load with verified writes (INCR, every acknowledgement counted) and
// an open-loop SET load, with maint installed by the options route
// (Group.NewFailoverClient) or on the existing client (Group.Instrument).

// failoverRun is one FailoverClient with maint under load against e's
// Discovery Service.
type failoverRun struct {
	t    *testing.T
	e    *env
	ds   *mainttest.Sentinel
	g    *maint.Group
	rdb  *redis.Client
	ev   *eventLog
	incr *incrLoad
	open *openLoad
	// minIdle is the client's MinIdleConns.
	minIdle int
}

const failoverPrefix = "fo:"

// startFailoverRun builds the client (route "Options" or "Instrument"),
// checks it serves, and starts the loads; it returns once the old master
// has served some of them.
func startFailoverRun(t *testing.T, route string, retries int) *failoverRun {
	e := newEnv(t)
	r := &failoverRun{t: t, e: e, ds: e.newDiscovery(), ev: &eventLog{}}
	r.g = maint.NewGroup(maint.WithLogf(t.Logf), maint.WithOnEvent(r.ev.add))
	opt := dsOptions(r.ds, retries)
	opt.PoolSize = 16
	switch route {
	case "Options":
		r.rdb = r.g.NewFailoverClient(opt)
	case "Instrument":
		opt.MinIdleConns = 0 // nothing dialled before Instrument
		r.rdb = redis.NewFailoverClient(opt)
		require.NoError(t, r.g.Instrument(r.rdb))
	default:
		t.Fatalf("route %q", route)
	}
	r.minIdle = opt.MinIdleConns
	t.Cleanup(func() {
		_ = r.rdb.Close()
		_ = r.g.Close()
	})
	require.NoError(t, r.rdb.Ping(context.Background()).Err())
	r.incr = startIncr(r.rdb, 8, failoverPrefix)
	r.open = startOpenLoad(r.rdb, 400, 4096)
	waitFor(t, "load on the old master", 10*time.Second, func() bool { return e.old.Stats().Served > 300 })
	return r
}

// finish waits for the load to be served by the new master after the
// Discovery Service names it, stops the load and checks what every run
// must show: no failed command, no write lost or run twice, the sentinels
// never wrapped nor sent the handshake, the data nodes opted in.
//
// After switched, the old master may serve only for slack: the replies it
// owed at the switch.
func (r *failoverRun) finish(switched time.Time, slack time.Duration) {
	t, e := r.t, r.e
	before := e.new.Stats().Served
	waitFor(t, "load on the new master", 15*time.Second, func() bool { return e.new.Stats().Served > before+300 })
	r.incr.stop()
	r.open.stop()
	st := r.g.Stats()
	t.Logf("maint %+v\nold %+v\nnew %+v\nsentinel %+v\nopen load ok %d failed %d %v\nevents:\n%s",
		st, e.old.Stats(), e.new.Stats(), r.ds.Stats(), r.open.ok.Load(), r.open.failed.Load(), r.open.errs, r.ev)
	r.incr.check(t, e.emu.Miniredis(), failoverPrefix)
	assert.Zero(t, r.open.failed.Load(), "open-loop commands failed: %v", r.open.errs)
	assert.Zero(t, r.open.notStarted.Load(), "open-loop commands not started (4096 in flight)")

	ds := r.ds.Stats()
	assert.Zero(t, ds.Handshakes, "the Discovery Service received the handshake")
	assert.NotZero(t, ds.MasterQueries, "the client asked the Discovery Service")
	old, nw := e.old.Stats(), e.new.Stats()
	assert.NotZero(t, old.OptedIn, "the old master's connections opted in")
	assert.NotZero(t, nw.OptedIn, "the new master's connections opted in")
	assert.Equal(t, nw.Handshakes, nw.OptedIn, "every handshake the new master read opted its connection in")
	// The opt-in goes behind a connection's first command: only idle
	// MinIdleConns connections may not have sent it yet.
	assert.LessOrEqual(t, nw.Open-nw.OptedIn, r.minIdle, "connections open to the new master that did not opt in")
	assert.Zero(t, old.OwedAtClose, "replies the old master still owed when it closed connections")
	assert.Len(t, r.g.Maints(), 1, "one Maint for the data nodes")

	// Doomed dials: the Discovery Service named the retiring master after
	// the event (maint's probes land there). maint holds the new work
	// meanwhile: nothing is served on the old master once the new one is
	// named (but the replies it owed), and the load goes on there.
	doomed := 0
	for _, ev := range e.emu.Events() {
		if ev.Kind == mainttest.KindSentinelQuery && ev.Detail == e.old.Addr() && ev.At.Before(switched) {
			doomed++
		}
	}
	t.Logf("queries answered with the retiring master: %d (before the switch at %s)", doomed, switched.Format("15:04:05.000"))
	assert.False(t, old.LastServed.After(switched.Add(slack)),
		"the old master served a command %v after the Discovery Service named the new one", old.LastServed.Sub(switched))
}

// switchedAt waits for the Discovery Service's switch and returns when it was.
func (r *failoverRun) switchedAt(d time.Duration) time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := r.e.emu.WaitEvent(ctx, mainttest.IsKind(nil, mainttest.KindSentinelSwitch))
	require.NoError(r.t, err, "the Discovery Service's switch")
	return ev.At
}

// A MOVING of the master, naming its successor or with a null endpoint, the
// old master refusing connections at the window's end and the Discovery
// Service naming the successor as the window ends or 0.5 s later: maint
// holds the new work until the service names the new master, fails no
// command, runs no write twice, and leaves no connection that carried a
// command for the old master to close.
func TestFailoverClientMovingOfTheMaster(t *testing.T) {
	const window = 2 * time.Second
	cases := []struct {
		route     string
		null      bool
		nameAfter time.Duration
		retries   []int
	}{
		{"Options", false, window, []int{-1, 0}},
		{"Options", true, window + 500*time.Millisecond, []int{-1, 0}},
		{"Instrument", true, window, []int{-1}},
	}
	for _, c := range cases {
		for _, retries := range c.retries {
			name := fmt.Sprintf("%s/null=%v/nameAfter=%v/%s", c.route, c.null, c.nameAfter, retriesName(retries))
			t.Run(name, func(t *testing.T) {
				r := startFailoverRun(t, c.route, retries)
				r.ds.Moving(mainttest.SentinelMoving{
					Moving:    mainttest.Moving{Window: window, To: r.e.new, Null: c.null, StopAccepting: true},
					NameAfter: c.nameAfter,
				})
				switched := r.switchedAt(window + 5*time.Second)
				r.finish(switched, 0) // drained before the window's end
				st := r.g.Stats()
				assert.EqualValues(t, 1, st.Handoffs, "one handoff")
				// A dial in flight when the handoff retires the node can land
				// there and be told of the MOVING in its own handshake; with
				// every command held (no successor named yet) none comes to
				// it, and maint leaves it to its first command (M15): the
				// server's close at the window's end finds it with nothing on
				// it. Any other connection is maint's to have moved.
				old := r.e.old.Stats()
				assert.Zero(t, old.ClosedAtWindowEnd-old.UnusedAtWindowEnd,
					"connections that had carried commands, which the old master had to close at the window's end")
				if old.UnusedAtWindowEnd > 0 {
					t.Logf("connections with nothing but their handshake closed at the window's end: %d", old.UnusedAtWindowEnd)
				}
			})
		}
	}
}

// A failover that changes the master, announced with FAILING_OVER on the
// old one; a second later the Discovery Service names the promoted replica
// (+switch-master: go-redis closes its connections to the old master, in
// use or not), the old master refuses new connections, sends FAILED_OVER,
// and closes what is left half a second later. No command fails, no write
// runs twice.
func TestFailoverClientFailoverOfTheMaster(t *testing.T) {
	cases := []struct {
		route    string
		retries  int
		noPubSub bool
	}{{"Options", -1, false}, {"Options", 0, false}, {"Instrument", -1, false}, {"Options", -1, true}, {"Options", 0, true}}
	for _, c := range cases {
		name := c.route + "/" + retriesName(c.retries)
		if c.noPubSub {
			name += "/NoSwitchMessages"
		}
		t.Run(name, func(t *testing.T) {
			r := startFailoverRun(t, c.route, c.retries)
			r.ds.SetSwitchMessages(!c.noPubSub)
			r.ds.Failover(mainttest.Failover{To: r.e.new, SwitchAfter: time.Second,
				RefuseOld: true, CloseOld: true, CloseOldAfter: 500 * time.Millisecond})
			switched := r.switchedAt(10 * time.Second)
			r.finish(switched, 500*time.Millisecond) // the replies owed at the switch
			assert.NotZero(t, r.g.Stats().Relaxations, "FAILING_OVER read and acted on")
			for _, ev := range r.e.emu.Events() {
				if ev.Kind == mainttest.KindClose && ev.Endpoint == r.e.old.Addr() && strings.Contains(ev.Detail, "owed") {
					t.Logf("old master closed with a reply owed: %v", ev)
				}
			}
		})
	}
}

// A failover behind the endpoint: FAILING_OVER and FAILED_OVER on the master
// while the Discovery Service keeps naming it. maint asks the service at
// FAILED_OVER, finds the same node, and retires nothing: the load stays on
// the master, no command fails.
func TestFailoverClientFailedOverSameMasterRetiresNothing(t *testing.T) {
	r := startFailoverRun(t, "Options", -1)
	r.e.old.FailingOver(0, "1")
	waitFor(t, "FAILING_OVER read", 5*time.Second, func() bool { return r.g.Stats().Relaxations > 0 })
	failedOver := time.Now()
	before := r.ds.Stats().MasterQueries // before the FAILED_OVER: maint may ask before FailedOver returns
	r.e.old.FailedOver("1")
	waitFor(t, "the service asked after FAILED_OVER", 5*time.Second, func() bool { return r.ds.Stats().MasterQueries > before })
	served := r.e.old.Stats().Served
	waitFor(t, "load on the master", 10*time.Second, func() bool { return r.e.old.Stats().Served > served+300 })
	r.incr.stop()
	r.open.stop()
	r.incr.check(t, r.e.emu.Miniredis(), failoverPrefix)
	assert.Zero(t, r.open.failed.Load())
	assert.Zero(t, r.g.Stats().Retired, "connections retired though the service names the same master")
	assert.Zero(t, r.e.new.Stats().Opened, "connections to another node")
	// maint asks the service by dialling through the client's dialer (which
	// asks it) and closing the connection unused. go-redis's dialer asks it
	// too, for every connection it dials (the open-loop load can grow the
	// pool at any time, the more so on a busy machine), but those
	// connections opt in and serve: they are not counted.
	accepted := map[uint64]bool{} // the master's connections accepted after FAILED_OVER
	optedIn := map[uint64]bool{}
	probes := 0
	for _, ev := range r.e.emu.Events() {
		if !ev.At.After(failedOver) || ev.Endpoint != r.e.old.Addr() {
			continue
		}
		switch ev.Kind {
		case mainttest.KindAccept:
			accepted[ev.Conn] = true
		case mainttest.KindOptIn:
			optedIn[ev.Conn] = true
		case mainttest.KindClose:
			if accepted[ev.Conn] && !optedIn[ev.Conn] && strings.HasPrefix(ev.Detail, "client") {
				probes++
			}
		}
	}
	// FAILED_OVER comes on each of the master's opted-in connections: one
	// question to the service for all of them.
	assert.Equal(t, 1, probes, "questions to the service after FAILED_OVER (dials closed unused)")
}

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
			maint.SetClusterGone(g, 400*time.Millisecond) // the sweeper runs every 100ms
			opt := failoverOptions(s, -1)
			var rdb *redis.Client
			var h redis.Hook
			if route == "Configure" {
				h = g.ConfigureFailover(opt)
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
			if h != nil {
				// The group cannot see the client: closing the hook (an
				// io.Closer), after the client, is what ends its Maint.
				require.NoError(t, rdb.Close())
				require.NoError(t, h.(io.Closer).Close())
				waitFor(t, "the closed hook's Maint forgotten", 10*time.Second, func() bool { return len(g.Maints()) == 0 })
			}
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
