package maint_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/internal/resp"
)

// A named successor that refuses connections (127.0.0.9:1: nothing
// listens) is refused as a successor, and the handoff goes on as a null
// endpoint's: the old node serves until the last call, commands are held
// from there to the window's end (the address is an IP: time tells), and
// nothing fails, with go-redis's own dialer and its dial retries (v9.24: a
// refused dial fails after about 0.4 s, its retries not restarted by
// MaxRetries) on both releases: the refused dial never reaches the pool.
// Before, each dial through the pin returned the refusal to the pool,
// PoolSize of them tripped its dial breaker, and about a million commands
// failed fast in a 2 s window.
func TestSuccessorRefusingConnectionsIsTreatedAsNull(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			opt := &redis.Options{Addr: e.old.Addr(), Protocol: 3, PoolSize: 8, MaxRetries: -1}
			rdb, m, ev := e.client(r, opt)
			l := startIncr(rdb, 8, "refused:")
			waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
			e.old.SendRaw(resp.AppendMoving(nil, 77, 2, "127.0.0.9:1", false))
			waitFor(t, "the hold's release", 15*time.Second, func() bool { _, ok := ev.first(maint.EventRelease); return ok })
			base := e.old.Stats().Served
			waitFor(t, "load after the release", 10*time.Second, func() bool { return e.old.Stats().Served > base+200 })
			l.stop()
			st := m.Stats()
			t.Logf("maint %+v; events:\n%s", st, ev)
			l.check(t, e.emu.Miniredis(), "refused:")
			_, refused := ev.first(maint.EventSuccessorRefused)
			assert.True(t, refused, "the successor is refused")
			assert.NotZero(t, st.RefusedSuccessors)
			assert.NotZero(t, st.Held, "held from the last call, as for a null endpoint")
		})
	}
}
