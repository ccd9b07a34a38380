package maint_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/mainttest"
)

// The go-redis options that change how a pool opens, times, reuses and
// closes its connections, each through a MOVING under load, on both install
// routes: every write runs exactly once and nothing fails (docs/guarantees.md
// M1, M11), no reply is owed when the old node closes and no connection is
// left for it to close. Each load is a pipeline (or a transaction) of a
// 20 KiB SET, an INCR and a GET of the value, so that small buffers split
// commands and replies across many writes and reads.
func TestMovingUnderEachPoolOption(t *testing.T) {
	cases := []struct {
		name string
		tune func(o *redis.Options)
		mv   func(e *env) mainttest.Moving
	}{
		// Idle connections dialled by the pool ahead of use, before any
		// handshake: they are initialized on their first command.
		{"MinIdleConns", func(o *redis.Options) { o.MinIdleConns = o.PoolSize }, nullDNSAt40},
		// No deadline at all: nothing to relax or floor.
		{"NoTimeouts", func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = -1, -1 }, namedSuccessor},
		// Deadlines from the command's context, which carry a monotonic reading.
		{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }, namedSuccessor},
		// go-redis closes connections of its own accord during the window.
		{"ConnMaxIdleTime", func(o *redis.Options) { o.ConnMaxIdleTime = 150 * time.Millisecond }, namedSuccessor},
		{"ConnMaxLifetime", func(o *redis.Options) { o.ConnMaxLifetime = 400 * time.Millisecond }, nullDNSAt40},
		// A replacement dialled while retired connections still count.
		{"MaxActiveConns", func(o *redis.Options) { o.MaxActiveConns = o.PoolSize }, nullDNSAt40},
		{"MaxIdleConns", func(o *redis.Options) { o.MaxIdleConns = 2 }, namedSuccessor},
		{"PoolFIFO", func(o *redis.Options) { o.PoolFIFO = true }, nullDNSAt40},
		// A handshake with SELECT and CLIENT SETNAME, and one without SETINFO.
		{"DBAndClientName", func(o *redis.Options) { o.DB, o.ClientName = 3, "options-test" }, namedSuccessor},
		{"DisableIdentity", func(o *redis.Options) { o.DisableIdentity = true }, nullDNSAt40},
		// Commands and replies split across many writes and reads.
		{"SmallBuffers", func(o *redis.Options) { o.ReadBufferSize, o.WriteBufferSize = 64, 64 }, namedSuccessor},
		// go-redis's own retries on: still nothing runs twice.
		{"MaxRetries", func(o *redis.Options) { o.MaxRetries = 3 }, nullDNSAt40},
	}
	value := strings.Repeat("v", 20<<10)
	for _, r := range routes[:2] {
		for i, c := range cases {
			tx := i%2 == 1 // half the cases as transactions
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				opt := e.options(8)
				c.tune(opt)
				rdb, m, ev := e.client(r, opt)
				require.NoError(t, rdb.Ping(context.Background()).Err())
				const prefix = "options:"
				l := startIncrOp(16, prefix, 1, func(key string) (int64, error) {
					return setIncrGet(rdb, tx, key, value)
				})
				waitFor(t, "load on the old node", 20*time.Second, func() bool { return e.old.Stats().Served > 200 })
				moving := c.mv(e)
				e.old.Moving(moving)
				e.waitEvent(e.old, mainttest.KindWindowEndClose, moving.Window+20*time.Second)
				waitFor(t, "load on the new node", 20*time.Second, func() bool { return e.new.Stats().Served > 200 })
				l.stop()
				st := e.old.Stats()
				t.Logf("transactions %v; old node: closed at window end %d (unused %d), replies owed %d; maint %+v\nevents:\n%s",
					tx, st.ClosedAtWindowEnd, st.UnusedAtWindowEnd, st.OwedAtClose, m.Stats(), ev)
				l.check(t, e.emu.Miniredis().DB(opt.DB), prefix)
				assert.Zero(t, st.OwedAtClose, "replies owed when the old node closed")
				assert.Zero(t, st.ClosedAtWindowEnd-st.UnusedAtWindowEnd, "connections left on the old node for the server to close")
				assert.NotZero(t, m.Stats().Handoffs)
			})
		}
	}
}

// setIncrGet sends SET key:v value, INCR key and GET key:v in one pipeline
// (or transaction) and returns the INCR's reply, once the GET has returned
// the whole value.
func setIncrGet(rdb *redis.Client, tx bool, key, value string) (int64, error) {
	ctx := context.Background()
	var incr *redis.IntCmd
	var get *redis.StringCmd
	fn := func(p redis.Pipeliner) error {
		p.Set(ctx, key+":v", value, 0)
		incr = p.Incr(ctx, key)
		get = p.Get(ctx, key+":v")
		return nil
	}
	var err error
	if tx {
		_, err = rdb.TxPipelined(ctx, fn)
	} else {
		_, err = rdb.Pipelined(ctx, fn)
	}
	if err != nil {
		return 0, err
	}
	if n := len(get.Val()); n != len(value) {
		return 0, fmt.Errorf("GET returned %d bytes of the %d set", n, len(value))
	}
	return incr.Val(), nil
}
