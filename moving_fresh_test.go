package maint_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// A client opened in the last moments of a MOVING's window, by a Maint that
// has not heard of the MOVING, learns of it only from the replay behind
// its first connection's opt-in, with the time left rounded up to a whole
// second (time=1 with a few milliseconds left). Its first command must not
// be written to that connection, which the server closes at the window's
// end: the replay retires the connection before it carries a command, and
// the command runs on another (the named successor, or, with a null
// endpoint, the node DNS names once it moves, held until then). None fails.
//
// The old node delays SET by more than the time left, so that a SET
// written there is cut by the window's close, every time: without maint's
// handling every late client fails. Routes with maint's process hooks only:
// Configure alone (a dialer, no hooks) can neither hold nor rerun a command.
//
// With DisableIdentity the application's command is go-redis's next write
// after the opt-in's reply (no CLIENT SETINFO between), before the
// handoff's driver has retired the connection: the connection that read
// the MOVING refuses it all the same.
func TestFreshClientAtAWindowsEndFailsNothing(t *testing.T) {
	for _, tc := range []struct{ null, noIdentity bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		null := tc.null
		t.Run(fmt.Sprintf("null=%v/disable_identity=%v", null, tc.noIdentity), func(t *testing.T) {
			e := newEnv(t)
			window := time.Second
			e.old.SetCommandLatency("set", 200*time.Millisecond)
			mv := mainttest.Moving{Window: window, To: e.new, Null: null}
			if null {
				mv.DNSHost, mv.DNSLag = host, window+50*time.Millisecond
			}
			start := time.Now()
			e.old.Moving(mv)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed []string
			replayed := 0
			n := 0
			for _, left := range []time.Duration{150, 110, 80, 50, 25} {
				at := window - left*time.Millisecond
				time.Sleep(time.Until(start.Add(at)))
				for _, r := range routes[:2] {
					n++
					wg.Add(1)
					go func() {
						defer wg.Done()
						ev := &eventLog{}
						m := maint.New(maint.WithLogf(t.Logf), maint.WithOnEvent(ev.add))
						opt := e.options(2)
						opt.DisableIdentity = tc.noIdentity
						rdb := r.install(m, opt)
						defer func() { _ = rdb.Close(); _ = m.Close() }()
						err := rdb.Set(context.Background(), fmt.Sprintf("fresh:%s:%v", r.name, at), 1, 0).Err()
						_, saw := ev.first(maint.EventNotification)
						mu.Lock()
						defer mu.Unlock()
						if saw {
							replayed++
						}
						if err != nil {
							failed = append(failed, fmt.Sprintf("%s opened %v before the end: %v\n%s", r.name, window-at, err, ev))
						}
					}()
				}
			}
			wg.Wait()
			assert.Empty(t, failed, "%d of %d fresh clients failed their first command", len(failed), n)
			require.NotZero(t, replayed, "no client was told of the MOVING: the test tests nothing")
			t.Logf("%d of %d clients were told of the MOVING by its replay", replayed, n)
		})
	}
}

// A new client's first connection, retired by the MOVING replayed in its
// handshake, still serves a transaction started on it: go-redis cannot
// move a WATCH to another connection (the Tx's own), so maint does not
// refuse it, before the handoff's last call or past it (a replay of
// time=1, 0.8 s before the window's real end), and the transaction runs
// on the old node, which still serves. Before the last call the node also
// serves the first command of any kind (a dedicated connection's, which
// go-redis cannot move either), as it serves those already on their way;
// past it a plain command goes to the successor.
func TestFreshClientRunsItsTransactionOnTheConnectionItHas(t *testing.T) {
	for _, r := range routes[:2] {
		for _, tc := range []struct {
			name          string
			window, after time.Duration
		}{{"before_last_call", 4 * time.Second, 0}, {"past_last_call", 2 * time.Second, 1200 * time.Millisecond}} {
			t.Run(r.name+"/"+tc.name, func(t *testing.T) {
				e := newEnv(t)
				start := time.Now()
				e.old.Moving(mainttest.Moving{Window: tc.window, To: e.new})
				time.Sleep(time.Until(start.Add(tc.after)))
				rdb, _, ev := e.client(r, e.options(2))
				ctx := context.Background()
				err := rdb.Watch(ctx, func(tx *redis.Tx) error {
					if err := tx.Get(ctx, "w").Err(); err != nil && err != redis.Nil {
						return err
					}
					_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
						p.Set(ctx, "w", "1", 0)
						return nil
					})
					return err
				}, "w")
				require.NoError(t, err, "events:\n%s", ev)
				require.Less(t, time.Since(start), tc.window, "the transaction ended before the window did: the test tests what it says")
				_, replayed := ev.first(maint.EventNotification)
				assert.True(t, replayed, "the connection was told of the MOVING")
				assert.NoError(t, rdb.Set(ctx, "after", 1, 0).Err())
				if tc.after == 0 {
					// Before the last call a dedicated connection's first
					// command (rdb.Conn: go-redis cannot move it either)
					// runs on the old node too.
					rdb2, _, ev2 := e.client(r, e.options(2))
					cn := rdb2.Conn()
					defer cn.Close()
					require.NoError(t, cn.Set(ctx, "conn", 1, 0).Err(), "events:\n%s", ev2)
				}
			})
		}
	}
}

// A new client's first subscription past the last call is not refused: a
// PubSub's commands do not pass through the process hooks, so nothing
// would run it again. Its connection is closed when the handoff retires
// it, as every subscriber's is, and go-redis resubscribes elsewhere.
func TestFreshSubscriberPastTheLastCallSubscribes(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			start := time.Now()
			e.old.Moving(mainttest.Moving{Window: 2 * time.Second, To: e.new})
			time.Sleep(time.Until(start.Add(1200 * time.Millisecond))) // time=1 replayed: past the last call
			rdb, _, ev := e.client(r, e.options(2))
			ps := rdb.Subscribe(context.Background())
			defer ps.Close()
			require.NoError(t, ps.Subscribe(context.Background(), "ch"), "events:\n%s", ev)
		})
	}
}
