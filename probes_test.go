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
// window's end. One probe after the window finds it (by the address the
// pinned dials reached, not by comparing a name with an IP) and the pin is
// dropped: no probe more, and the probe's connection was not wasted or is
// the only one.
func TestNamedSuccessorByHostNameStopsProbing(t *testing.T) {
	const window = 3 * time.Second
	for _, r := range blockingRoutes {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			const succHost = "new.redis.test"
			e.emu.DNS().Set(succHost, e.new.IP())
			rdb, m, ev := e.client(r, e.options(4))
			l := startLoad(rdb, 4)
			defer l.stop()
			waitFor(t, "four connections in use, opted in", 10*time.Second, func() bool {
				st := e.old.Stats()
				return st.Open >= 4 && st.OptedIn >= st.Open
			})
			oldOpen, newOpened := e.old.Stats().Open, e.new.Stats().Opened
			e.old.SendRaw(resp.AppendMoving(nil, 1, int64(window/time.Second), net.JoinHostPort(succHost, e.new.Port()), false))
			e.emu.DNS().SetAfter(host, window, e.new.IP())
			var dropped maint.Event
			waitFor(t, "the pin dropped", window+10*time.Second, func() bool {
				var ok bool
				dropped, ok = ev.firstWith(maint.EventHandoffDone, "successor pin dropped")
				return ok
			})
			time.Sleep(3 * handoffProbeInterval(window)) // time for probes that should not come
			l.stop()
			st := m.Stats()
			extra := e.new.Stats().Opened - newOpened - oldOpen
			t.Logf("old connections %d, new ones %d (extra %d); probes %d, reused %d, unused %d; pin dropped at %v",
				oldOpen, e.new.Stats().Opened-newOpened, extra, st.Probes, st.ProbesReused, st.ProbesUnused, dropped.At.Format("15:04:05.000"))
			assert.EqualValues(t, 1, st.Probes, "one probe after the window finds the successor; events:\n%s", ev)
			assert.LessOrEqual(t, extra, 1, "at most the probe's connection beyond one per connection in use")
			assert.Zero(t, l.failed.Load(), "failed: %v", l.errs)
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
