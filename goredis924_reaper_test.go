//go:build goredis_v9_24

package maint_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// v9.24's idle-connection reaper (ConnMaxLifetimeReapInterval) runs beside
// a handoff: it closes idle connections past ConnMaxIdleTime or
// ConnMaxLifetime, retired ones included, and dials toward MinIdleConns
// through the dial path maint judges, during the hold too. It only takes
// idle connections (claimed like a Get), never one that owes a reply: with
// replies owed across the drain cap, and with commands held past the
// window, no command fails and none runs twice.
func TestReaperDuringAHandoff(t *testing.T) {
	for _, tc := range []struct {
		name string
		slow bool // replies owed across the drain cap (a MIGRATING's latency)
		mv   func(e *env, window time.Duration) mainttest.Moving
	}{
		{"NamedSuccessorRepliesOwedAtTheCap", true, func(e *env, w time.Duration) mainttest.Moving {
			return mainttest.Moving{Window: w, To: e.new}
		}},
		{"NullEndpointHeldPastTheWindow", false, func(e *env, w time.Duration) mainttest.Moving {
			return mainttest.Moving{Window: w, To: e.new, Null: true, StopAccepting: true, DNSHost: host, DNSLag: w + 500*time.Millisecond}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			opt := e.options(32)
			opt.MinIdleConns = 8
			opt.ConnMaxIdleTime = 100 * time.Millisecond
			opt.ConnMaxLifetime = 400 * time.Millisecond
			opt.ConnMaxLifetimeReapInterval = 10 * time.Millisecond
			rdb, m, ev := e.client(routes[1], opt)
			l := startIncr(rdb, 8, "reap:")
			waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
			// The reaper is at work before the handoff: idle connections past
			// their idle time or lifetime are closed and replaced.
			waitFor(t, "the reaper's closes", 10*time.Second, func() bool { return clientCloses(e, e.old) >= 8 })
			before := clientCloses(e, e.old)
			if tc.slow {
				e.old.SetLatencyAfterExecution(true)
				e.old.SetMaintLatency(2500 * time.Millisecond) // past the drain cap (+1.5 s), before the window's end (+3 s)
				e.old.Migrating(0, `["1"]`)
				waitFor(t, "relaxation", 10*time.Second, func() bool { _, ok := ev.first(maint.EventRelax); return ok })
				waitFor(t, "slow replies in flight", 10*time.Second, func() bool { return e.old.Stats().Pending >= 4 })
			}
			window := 3 * time.Second
			e.old.Moving(tc.mv(e, window))
			e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
			base := e.new.Stats().Served
			waitFor(t, "load on the new node", 15*time.Second, func() bool { return e.new.Stats().Served > base+200 })
			l.stop()
			st := m.Stats()
			t.Logf("maint %+v; old node %+v; client closes on the old node %d (%d during the handoff); events:\n%s",
				st, e.old.Stats(), clientCloses(e, e.old), clientCloses(e, e.old)-before, ev)
			l.check(t, e.emu.Miniredis(), "reap:")
			assert.Zero(t, e.old.Stats().OwedAtClose, "no reply was still owed when the server closed")
			assert.Greater(t, clientCloses(e, e.old), before, "connections closed by the client during the handoff")
			if tc.slow {
				assert.NotZero(t, st.OwedAtCap, "some connections owed a reply at the cap")
			} else {
				assert.NotZero(t, st.Held, "commands were held")
			}
		})
	}
}
