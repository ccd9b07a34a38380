package mainttest

// These tests point go-redis's built-in maintenance handler, a client nobody
// here wrote, at the emulator. They pin the emulator to the protocol as
// another implementation reads it: keep them in the suite.

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
)

// notificationLog is a go-redis maintnotifications.NotificationHook that
// records what the built-in handler received.
type notificationLog struct {
	mu   sync.Mutex
	seen []string
	seqs []int64
}

func (l *notificationLog) PreHook(_ context.Context, _ push.NotificationHandlerContext, typ string, n []interface{}) ([]interface{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, typ)
	var seq int64
	if len(n) > 1 {
		seq, _ = n[1].(int64)
	}
	l.seqs = append(l.seqs, seq)
	return n, true
}

func (l *notificationLog) PostHook(context.Context, push.NotificationHandlerContext, string, []interface{}, error) {
}

// count returns how many notifications of typ with seq were received.
func (l *notificationLog) count(typ string, seq int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i, s := range l.seen {
		if s == typ && l.seqs[i] == seq {
			n++
		}
	}
	return n
}

// TestGoRedisBuiltinMoving: after a MOVING with a named successor, go-redis's
// built-in handler hands its connection over to the new endpoint.
func TestGoRedisBuiltinMoving(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	client, log := builtinClient(t, e, old.Addr(), redis.Options{MaxRetries: -1}, maintnotifications.Config{})
	ctx := context.Background()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := client.Get(ctx, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := old.Stats()
	if before.OptedIn != 1 || before.Open != 1 {
		t.Fatalf("want one opted-in go-redis connection: %+v", before)
	}

	const window = 2 * time.Second
	seq := old.Moving(Moving{Window: window, To: nw})
	movedAt := time.Now()
	// go-redis reads the push with the next reply, marks the connection and
	// hands it over when the command returns it to the pool.
	if err := client.Get(ctx, "k").Err(); err != nil {
		t.Fatalf("GET delivering the MOVING: %v", err)
	}
	if log.count("MOVING", seq) != 1 {
		t.Fatalf("the built-in handler did not see MOVING %d (saw %v)", seq, log.seen)
	}
	doneAt := awaitHandoff(t, old)
	initServed := nw.Stats().Served // the handoff's connection set-up (HELLO, CLIENT SETINFO)
	for i := 0; i < 50; i++ {
		if err := client.Get(ctx, "k").Err(); err != nil {
			t.Fatalf("GET after the handoff: %v", err)
		}
	}
	ns := nw.Stats()
	t.Logf("MOVING seq %d (window %v): go-redis left the old endpoint %v after it; new endpoint: opened %d, opted in %d, served %d",
		seq, window, doneAt.Sub(movedAt).Round(time.Millisecond), ns.Opened, ns.OptedIn, ns.Served)
	if doneAt.Sub(movedAt) > window {
		t.Fatalf("handoff took %v, longer than the window", doneAt.Sub(movedAt))
	}
	if ns.Opened != 1 || ns.OptedIn != 1 || ns.Served != initServed+50 {
		t.Fatalf("new endpoint %+v, want one opted-in connection serving the 50 GETs (after %d set-up commands)", ns, initServed)
	}
	ev := waitEvent(t, e, IsKind(old, KindWindowEndClose))
	t.Logf("window end: %s", ev.Detail)
	if ev.Detail != "closed=0 owed=0" {
		t.Fatalf("window end %s: go-redis left connections behind", ev.Detail)
	}
	if err := client.Get(ctx, "k").Err(); err != nil {
		t.Fatalf("GET after the window: %v", err)
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestGoRedisBuiltinRelaxesTimeouts: during MIGRATING the built-in handler
// relaxes its timeouts, so a command slower than ReadTimeout succeeds; after
// MIGRATED (or with no event at all) the same command times out.
func TestGoRedisBuiltinRelaxesTimeouts(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	client, log := builtinClient(t, e, ep.Addr(),
		redis.Options{ReadTimeout: 200 * time.Millisecond, PoolSize: 1, MaxRetries: -1},
		maintnotifications.Config{RelaxedTimeout: 3 * time.Second, PostHandoffRelaxedDuration: 100 * time.Millisecond})
	ctx := context.Background()
	const slow = 600 * time.Millisecond

	// Without an event a 600 ms command fails with a timeout.
	ep.SetCommandLatency("get", slow)
	if err := client.Get(ctx, "k").Err(); !isTimeoutErr(err) {
		t.Fatalf("600 ms GET with ReadTimeout 200 ms: %v, want a timeout", err)
	}
	ep.SetCommandLatency("get", 0)
	if err := client.Ping(ctx).Err(); err != nil { // a fresh, opted-in connection
		t.Fatal(err)
	}

	// MIGRATING: the migration (and its latency) starts 1 s later. go-redis
	// reads the push with the next reply, so a fast PING picks it up.
	ep.SetMaintLatency(slow)
	seq := ep.Migrating(time.Second, `["1"]`)
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if log.count("MIGRATING", seq) != 1 {
		t.Fatalf("the built-in handler did not see MIGRATING %d: %v", seq, log.seen)
	}
	waitEvent(t, e, IsKind(ep, KindMaintStart))
	start := time.Now()
	if err := client.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET during MIGRATING: %v, want redis.Nil (relaxed timeout)", err)
	}
	took := time.Since(start)
	t.Logf("GET during MIGRATING took %v with ReadTimeout 200 ms", took.Round(time.Millisecond))
	if took < slow {
		t.Fatalf("GET took %v: the maintenance latency was not applied", took)
	}

	// MIGRATED: the handler clears the relaxed timeout.
	mseq := ep.Migrated(`["1"]`)
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if log.count("MIGRATED", mseq) != 1 {
		t.Fatalf("the built-in handler did not see MIGRATED %d: %v", mseq, log.seen)
	}
	ep.SetCommandLatency("get", slow)
	if err := client.Get(ctx, "k").Err(); !isTimeoutErr(err) {
		t.Fatalf("600 ms GET after MIGRATED: %v, want a timeout", err)
	}
	ep.SetCommandLatency("get", 0)

	// A new connection opting in gets the retained MIGRATED replayed.
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n := log.count("MIGRATED", mseq); n != 2 {
		t.Fatalf("MIGRATED %d seen %d times, want 2 (event + replay on the new connection)", mseq, n)
	}
}

// TestGoRedisBuiltinNullMovingFollowsDNS: a null MOVING makes the built-in
// handler reconnect to its configured address after time/2; through the
// emulator's Dialer that address resolves to the new node once DNS moved.
func TestGoRedisBuiltinNullMovingFollowsDNS(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	const host = "db.test"
	e.DNS().Set(host, old.IP())
	client, log := builtinClient(t, e, host+":"+old.Port(), redis.Options{MaxRetries: -1}, maintnotifications.Config{})
	ctx := context.Background()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const window = 2 * time.Second // wire time 2: go-redis reconnects after 1 s
	seq := old.Moving(Moving{Window: window, To: nw, Null: true, DNSHost: host, DNSLag: 500 * time.Millisecond})
	movedAt := time.Now()
	if err := client.Get(ctx, "k").Err(); err != nil { // delivers the MOVING
		t.Fatal(err)
	}
	if log.count("MOVING", seq) != 1 {
		t.Fatalf("the built-in handler did not see MOVING %d", seq)
	}
	dns := waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindDNS && ev.Detail == host+" -> "+nw.IP() })
	doneAt := awaitHandoff(t, old)
	initServed := nw.Stats().Served
	if v, err := client.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET after the handoff: %q %v", v, err)
	}
	ns := nw.Stats()
	t.Logf("null MOVING seq %d: DNS moved %v after it, go-redis left the old node %v after it; new endpoint opened %d, served %d",
		seq, dns.At.Sub(movedAt).Round(time.Millisecond), doneAt.Sub(movedAt).Round(time.Millisecond), ns.Opened, ns.Served)
	if d := doneAt.Sub(movedAt); d < 900*time.Millisecond || d > window {
		t.Fatalf("left the old node %v after MOVING, want about time/2 = 1 s", d)
	}
	if ns.Opened != 1 || ns.OptedIn != 1 || ns.Served != initServed+1 {
		t.Fatalf("new endpoint %+v", ns)
	}
	settleHandoffs(t, e, old)
}

// TestGoRedisBuiltinStress hammers go-redis's built-in handler with
// concurrent commands through MOVINGs back and forth between two endpoints.
// Opt-in (MAINTTEST_GOREDIS_STRESS=1): go-redis v9.23 can let a command use
// a connection while a handoff worker re-initialises it, a data race inside
// go-redis that -race reports (seen as "short write" errors too). It is
// rare: run it with -count.
func TestGoRedisBuiltinStress(t *testing.T) {
	if os.Getenv("MAINTTEST_GOREDIS_STRESS") == "" {
		t.Skip("set MAINTTEST_GOREDIS_STRESS=1: exposes a data race inside go-redis v9.23")
	}
	e := newEmu(t, Config{})
	a, b := pairEndpoints(t, e)
	client, log := builtinClient(t, e, a.Addr(), redis.Options{MaxRetries: -1}, maintnotifications.Config{})
	ctx := context.Background()
	client.Set(ctx, "k", "v", 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops, failed atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ops.Add(1)
				if err := client.Get(ctx, "k").Err(); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	from, to := a, b
	for round := 0; round < 6; round++ {
		from.Moving(Moving{Window: 300 * time.Millisecond, To: to})
		waitEvent(t, e, func(ev Event) bool {
			return ev.Kind == KindWindowEndClose && ev.Endpoint == from.Addr() && ev.Seq == int64(round+1)
		})
		from, to = to, from
	}
	close(stop)
	wg.Wait()
	t.Logf("%d MOVINGs seen, %d of %d GETs failed", len(log.seen), failed.Load(), ops.Load())
}
