package maint_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/mainttest"
)

// The connections a MOVING costs a client beyond one new connection per
// connection in use (node-redis's criterion) are a small constant: probes of
// the configured address compare resolved addresses, stop once the
// successor is known, land on the retiring node at most four times before
// the last call, and a probe that reaches a replacement is handed to the
// pool's next dial.

// TestNamedSuccessorByHostNameStopsProbing: a MOVING names its successor by
// host name; DNS names the successor for the configured address at the
// window's end. While no dial goes through the pin after the window (the
// pool is already on the successor), nothing is probed: exactly one new
// connection per connection in use. Once the pool dials through the pin
// again, one probe finds the successor (by the address the pinned dials
// reached, not by comparing a name with an IP) and the pin is dropped: no
// probe more.
func TestNamedSuccessorByHostNameStopsProbing(t *testing.T) {
	const window = 3 * time.Second
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			const succHost = "new.redis.test"
			e.emu.DNS().Set(succHost, e.new.IP())
			rdb, m, ev := e.client(r, e.options(8))
			l := startLoad(rdb, 4)
			defer l.stop()
			waitFor(t, "four connections in use, opted in", 10*time.Second, func() bool {
				st := e.old.Stats()
				return st.Open >= 4 && st.OptedIn >= st.Open
			})
			oldOpen, newOpened := e.old.Stats().Open, e.new.Stats().Opened
			e.old.SendRaw(resp.AppendMoving(nil, 1, int64(window/time.Second), net.JoinHostPort(succHost, e.new.Port()), false))
			e.emu.DNS().SetAfter(host, window, e.new.IP())
			waitFor(t, "the handoff over", window+10*time.Second, func() bool {
				_, ok := ev.firstWith(maint.EventHandoffDone, "")
				return ok
			})
			time.Sleep(3 * handoffProbeInterval(window)) // time for probes that should not come
			st := m.Stats()
			extra := e.new.Stats().Opened - newOpened - oldOpen
			assert.Zero(t, st.Probes, "no probe while no dial goes through the pin; events:\n%s", ev)
			assert.Zero(t, extra, "exactly one new connection per connection in use")

			more := startLoad(rdb, 8) // the pool dials again, through the pin
			defer more.stop()
			var dropped maint.Event
			waitFor(t, "the pin dropped", 40*handoffProbeInterval(window), func() bool {
				var ok bool
				dropped, ok = ev.firstWith(maint.EventHandoffDone, "successor pin dropped")
				return ok
			})
			time.Sleep(3 * handoffProbeInterval(window))
			more.stop()
			l.stop()
			st = m.Stats()
			t.Logf("old connections %d, new ones %d; probes %d, reused %d, unused %d; pin dropped at %v",
				oldOpen, e.new.Stats().Opened-newOpened, st.Probes, st.ProbesReused, st.ProbesUnused, dropped.At.Format("15:04:05.000"))
			assert.EqualValues(t, 1, st.Probes, "one probe once the pool dials through the pin; events:\n%s", ev)
			assert.Zero(t, l.failed.Load()+more.failed.Load(), "failed: %v %v", l.errs, more.errs)
		})
	}
}

// firstWith is the first event of kind k with detail d.
func (l *eventLog) firstWith(k maint.EventKind, d string) (maint.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		if e.Kind == k && e.Detail == d {
			return e, true
		}
	}
	return maint.Event{}, false
}

// handoffProbeInterval is handoff.ProbeInterval: a tenth of the window,
// between 100 ms and 1 s.
func handoffProbeInterval(window time.Duration) time.Duration {
	return min(max(window/10, 100*time.Millisecond), time.Second)
}

// TestNullEndpointProbeConnections: a null-endpoint MOVING, DNS moving at
// 40% of the window, four connections in use. At most four probes land on
// the retiring node; the probe that finds the new node hands its connection
// to the pool, so the new node gets exactly one connection per connection in
// use.
func TestNullEndpointProbeConnections(t *testing.T) {
	const window = 8 * time.Second
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			rdb, m, ev := e.client(r, e.options(4))
			l := startLoad(rdb, 4)
			defer l.stop()
			waitFor(t, "four connections in use", 10*time.Second, func() bool { return e.old.Stats().Open >= 4 })
			oldStats, newOpened := e.old.Stats(), e.new.Stats().Opened
			e.old.Moving(mainttest.Moving{Window: window, To: e.new, Null: true, StopAccepting: true,
				DNSHost: host, DNSLag: window * 4 / 10})
			e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
			l.stop()
			st := m.Stats()
			onOld := e.old.Stats().Opened - oldStats.Opened
			onNew := e.new.Stats().Opened - newOpened
			t.Logf("in use %d; after the MOVING: on the old node %d, on the new %d; probes %d, reused %d, unused %d",
				oldStats.Open, onOld, onNew, st.Probes, st.ProbesReused, st.ProbesUnused)
			assert.LessOrEqual(t, onOld, 4, "probes landing on the retiring node; events:\n%s", ev)
			assert.Equal(t, oldStats.Open, onNew, "one new connection per connection in use")
			assert.EqualValues(t, 1, st.ProbesReused, "the probe that found the new node went to the pool")
			assert.Zero(t, st.ProbesUnused)
			assert.Zero(t, l.failed.Load(), "failed: %v", l.errs)
		})
	}
}
