package mainttest

// These tests point go-redis's built-in maintenance handler, a client nobody
// here wrote, at the emulator. They pin the emulator to the protocol as
// another implementation reads it: keep them in the suite.

import (
	"context"
	"errors"
	"net"
	"sync"
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

func builtinClient(t *testing.T, e *Emulator, addr string, opt redis.Options, mc maintnotifications.Config) (*redis.Client, *notificationLog) {
	t.Helper()
	mc.Mode = maintnotifications.ModeEnabled
	mc.EndpointType = maintnotifications.EndpointTypeInternalIP
	opt.Addr = addr
	opt.Protocol = 3
	opt.Dialer = e.Dialer()
	opt.MaintNotificationsConfig = &mc
	c := redis.NewClient(&opt)
	t.Cleanup(func() { _ = c.Close() })
	m := c.GetMaintNotificationsManager()
	if m == nil {
		t.Fatal("go-redis built-in maintenance manager not enabled")
	}
	log := &notificationLog{}
	m.AddNotificationHook(log)
	return c, log
}

// TestGoRedisBuiltinMoving: after a MOVING with a named successor, go-redis's
// built-in handler hands its connections over to the new endpoint.
func TestGoRedisBuiltinMoving(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	client, log := builtinClient(t, e, old.Addr(), redis.Options{MaxRetries: -1, PoolSize: 4}, maintnotifications.Config{})
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
	if before.OptedIn == 0 || before.Open == 0 {
		t.Fatalf("go-redis did not opt in: %+v", before)
	}

	const window = 2 * time.Second
	seq := old.Moving(Moving{Window: window, To: nw})
	movedAt := time.Now()
	ops, failed := 0, 0
	deadline := movedAt.Add(window - 200*time.Millisecond) // well before the close
	for time.Now().Before(deadline) && (nw.Stats().Served < 50 || old.Stats().Open > 0) {
		if err := client.Get(ctx, "k").Err(); err != nil {
			failed++
			t.Logf("GET during the window: %v", err)
		}
		ops++
	}
	ns, os := nw.Stats(), old.Stats()
	t.Logf("MOVING seq %d: %d GETs, %d failed; new endpoint: opened %d, opted in %d, served %d, first served %v after MOVING; old endpoint: open %d",
		seq, ops, failed, ns.Opened, ns.OptedIn, ns.Served, ns.FirstServed.Sub(movedAt).Round(time.Millisecond), os.Open)
	if log.count("MOVING", seq) == 0 {
		t.Fatalf("the built-in handler never saw MOVING %d (saw %v)", seq, log.seen)
	}
	if ns.Opened == 0 || ns.Served == 0 || ns.OptedIn == 0 {
		t.Fatalf("go-redis did not move to the new endpoint: %+v", ns)
	}
	if failed != 0 {
		t.Fatalf("%d of %d commands failed during the move", failed, ops)
	}
	if os.Open != 0 {
		t.Fatalf("%d connections still on the old endpoint before the window's end", os.Open)
	}
	ev := waitEvent(t, e, IsKind(old, KindWindowEndClose))
	t.Logf("window end: %s", ev.Detail)
	if err := client.Get(ctx, "k").Err(); err != nil {
		t.Fatalf("GET after the window: %v", err)
	}
	if s := old.Stats(); s.ClosedAtWindowEnd != 0 || s.OwedAtClose != 0 {
		t.Fatalf("old endpoint at the window's end: %+v", s)
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
	client, log := builtinClient(t, e, host+":"+old.Port(), redis.Options{MaxRetries: -1, PoolSize: 2}, maintnotifications.Config{})
	ctx := context.Background()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const window = 2 * time.Second // wire time 2: go-redis reconnects after 1 s
	seq := old.Moving(Moving{Window: window, To: nw, Null: true, DNSHost: host, DNSLag: 500 * time.Millisecond})
	movedAt := time.Now()
	ops, failed := 0, 0
	for time.Since(movedAt) < window-200*time.Millisecond && (nw.Stats().Served < 20 || old.Stats().Open > 0) {
		if err := client.Get(ctx, "k").Err(); err != nil {
			failed++
		}
		ops++
		time.Sleep(time.Millisecond) // steady load, not a busy loop
	}
	ns, os := nw.Stats(), old.Stats()
	t.Logf("null MOVING seq %d: %d GETs, %d failed; new endpoint first served %v after MOVING, served %d; old endpoint open %d",
		seq, ops, failed, ns.FirstServed.Sub(movedAt).Round(time.Millisecond), ns.Served, os.Open)
	if log.count("MOVING", seq) == 0 {
		t.Fatalf("the built-in handler never saw MOVING %d", seq)
	}
	if ns.Served == 0 {
		t.Fatal("go-redis never reached the new node through DNS")
	}
	if d := ns.FirstServed.Sub(movedAt); d < 900*time.Millisecond {
		t.Fatalf("moved after %v, before time/2", d)
	}
	if failed != 0 || os.Open != 0 {
		t.Fatalf("%d failed, %d connections left on the old node", failed, os.Open)
	}
}
