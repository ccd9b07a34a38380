package maint_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
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

// A replay's time left was reckoned by the server when it read the
// opt-in, whenever the client reads it: a client descheduled between
// writing its opt-in and reading the reply (a GC pause, a loaded machine)
// reads the reply and the replay together, late, and must count the time
// from its opt-in, not from that read. Here the window has 1.9 s left at
// the opt-in (time=2 on the wire), the client's first read after it stalls
// 1.2 s, and the old node takes 1 s to answer a SET: counted from the read
// (before: the replay, read more than a second after the opt-in, was even
// taken for a fresh MOVING of 2 s) the last call was still ahead, the SET
// was written to the old node and cut by the window's close; counted from
// the opt-in, the window has at most 0.7 s left, the last call is past,
// and the SET runs on the successor. On both routes: the hook route's
// opt-in is go-redis's, the options route's maint's.
func TestReplayReadLateCountsFromTheOptIn(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			const (
				window = 3 * time.Second
				left   = 1900 * time.Millisecond // at the opt-in: time=2
				stall  = 1200 * time.Millisecond // more than a replay is looked for apart from the reply
			)
			e.old.SetCommandLatency("set", time.Second)
			start := time.Now()
			e.old.Moving(mainttest.Moving{Window: window, To: e.new})
			time.Sleep(time.Until(start.Add(window - left)))
			opt := e.options(2)
			var stalled atomic.Int64 // when the stalled read went on (UnixNano)
			opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := e.dials.Dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &stallAfterOptIn{Conn: c, stall: stall, stalled: &stalled}, nil
			}
			ev := &eventLog{}
			m := maint.New(maint.WithLogf(t.Logf), maint.WithOnEvent(ev.add))
			rdb := r.install(m, opt)
			defer func() { _ = rdb.Close(); _ = m.Close() }()
			err := rdb.Set(context.Background(), "late", 1, 0).Err()
			require.NotZero(t, stalled.Load(), "no read stalled behind an opt-in: the test tests nothing")
			require.Less(t, time.Unix(0, stalled.Load()).Sub(start), window-500*time.Millisecond,
				"the stall ended too near the window's end for a SET written then to be cut: the test tests nothing")
			_, told := ev.first(maint.EventNotification)
			require.True(t, told, "the client was not told of the MOVING: the test tests nothing\n%s", ev)
			require.NoError(t, err, "the first command of a client that read its replay late\n%s", ev)
			_, doomed := ev.first(maint.EventDoomed)
			assert.True(t, doomed, "the connection that read the replay late carried the SET\n%s", ev)
		})
	}
}

// stallAfterOptIn is a connection whose first read after a write carrying
// CLIENT MAINT_NOTIFICATIONS waits stall before it reads, if no connection
// sharing stalled has yet: the client descheduled while the server's reply
// and replay wait in its socket.
type stallAfterOptIn struct {
	net.Conn
	stall   time.Duration
	stalled *atomic.Int64
	armed   atomic.Bool
}

func (c *stallAfterOptIn) Write(p []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(p), []byte("maint_notifications")) {
		c.armed.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *stallAfterOptIn) Read(p []byte) (int, error) {
	if c.armed.Swap(false) && c.stalled.CompareAndSwap(0, -1) {
		time.Sleep(c.stall)
		c.stalled.Store(time.Now().UnixNano())
	}
	return c.Conn.Read(p)
}
