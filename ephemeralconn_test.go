package maint_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// EphemeralConn (go-redis v9.23 and v9.24) is Conn, except that Close discards its connection
// instead of returning it to the pool. Without client-side caching its
// connection comes from the pool (and a fresh one through maint's dial
// path), with the client's hooks. Through a MOVING with a named successor,
// on both hook routes:
//
//   - one held across the handoff keeps its connection to the old node and
//     serves on it before the drain cap, as Conn's does (M8); its Close
//     closes that connection (the client's close, before the window's end),
//     and the old node closes none at the window's end;
//   - one taken after the window's end dials through maint's dial path to
//     the successor;
//   - nothing else fails, nothing runs twice.
func TestEphemeralConnThroughMoving(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			rdb, m, ev := e.client(r, e.options(4))
			ctx := context.Background()
			l := startIncr(rdb, 2, "eph:")
			held := rdb.EphemeralConn()
			defer held.Close()
			require.NoError(t, held.Incr(ctx, "held").Err())
			waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })

			window := 3 * time.Second
			e.old.Moving(mainttest.Moving{Window: window, To: e.new})
			pingUntilRetired(t, rdb, ev)
			servedBefore := e.old.Stats().Served
			require.NoError(t, held.Incr(ctx, "held").Err(), "the held EphemeralConn serves before the drain cap; events:\n%s", ev)
			assert.Greater(t, e.old.Stats().Served, servedBefore, "on the old node")
			closes := clientCloses(e, e.old)
			require.NoError(t, held.Close())
			waitFor(t, "the EphemeralConn's connection closed by the client", 5*time.Second, func() bool { return clientCloses(e, e.old) > closes })

			e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
			opened := e.new.Stats().Opened
			after := rdb.EphemeralConn()
			defer after.Close()
			require.NoError(t, after.Incr(ctx, "held").Err())
			require.NoError(t, after.Close())
			base := e.new.Stats().Served
			waitFor(t, "load on the successor", 15*time.Second, func() bool { return e.new.Stats().Served > base+200 })
			l.stop()
			t.Logf("maint %+v; old node %+v; new node %+v (%d opened before the second EphemeralConn); events:\n%s", m.Stats(), e.old.Stats(), e.new.Stats(), opened, ev)
			l.check(t, e.emu.Miniredis(), "eph:")
			v, err := e.emu.Miniredis().Get("held")
			require.NoError(t, err)
			assert.Equal(t, "3", v, "each EphemeralConn INCR ran once")
			assert.Zero(t, e.old.Stats().ClosedAtWindowEnd, "the old node closed none of the client's connections at the window's end")
			assert.Zero(t, e.old.Stats().OwedAtClose)
			assert.Equal(t, uint64(1), m.Stats().Handoffs)
		})
	}
}

// An EphemeralConn's first command past a handoff's last call, on a
// connection that read the MOVING (replayed at its opt-in) before it
// carried any, behaves as Conn's (M15): maint refuses it unwritten (a
// dedicated connection's command cannot be moved to another connection), so
// it fails with ErrRetired instead of racing the window's close, and it did
// not run. A new client is made 1.2 s into a 2 s window (time=1 replayed:
// past the last call), once per kind of dedicated connection.
func TestEphemeralConnFirstCommandPastTheLastCallIsConns(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			outcome := map[string]error{}
			for _, kind := range []string{"Conn", "EphemeralConn"} {
				e := newEnv(t)
				start := time.Now()
				e.old.Moving(mainttest.Moving{Window: 2 * time.Second, To: e.new})
				time.Sleep(time.Until(start.Add(1200 * time.Millisecond)))
				rdb, _, ev := e.client(r, e.options(2))
				var cn *redis.Conn
				if kind == "Conn" {
					cn = rdb.Conn()
				} else {
					cn = rdb.EphemeralConn()
				}
				err := cn.Incr(context.Background(), "first").Err()
				_ = cn.Close()
				require.Less(t, time.Since(start), 2*time.Second, "the command ended before the window did: the test tests what it says")
				_, told := ev.first(maint.EventNotification)
				require.True(t, told, "%s: the connection was told of the MOVING; events:\n%s", kind, ev)
				v, _ := e.emu.Miniredis().Get("first")
				t.Logf("%s: %v (value %q); events:\n%s", kind, err, v, ev)
				if err != nil {
					assert.Empty(t, v, "%s: a refused command did not run", kind)
				}
				outcome[kind] = err
				require.NoError(t, rdb.Incr(context.Background(), "after").Err(), "a plain command past the last call runs on the successor")
			}
			assert.True(t, errors.Is(outcome["Conn"], maint.ErrRetired), "Conn's first command: %v", outcome["Conn"])
			assert.True(t, errors.Is(outcome["EphemeralConn"], maint.ErrRetired), "EphemeralConn's first command as Conn's: %v", outcome["EphemeralConn"])
		})
	}
}
