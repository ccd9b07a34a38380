package mainttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/maintkit/maint/internal/resp"
	"github.com/redis/go-redis/v9"
)

// dialVia dials addr through the emulator's Dialer.
func dialVia(t *testing.T, e *Emulator, addr string) (*rawClient, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := e.Dialer()(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}, nil
}

func TestDNSAndDialer(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	const host = "redis-12000.cluster.test"
	dns := e.DNS()
	if dns.Lookup(host) != nil {
		t.Fatal("records before Set")
	}
	dns.Set(host, old.IP())
	c, err := dialVia(t, e, host+":"+old.Port())
	if err != nil {
		t.Fatal(err)
	}
	if r := c.do("PING"); r != "+PONG\r\n" || old.Stats().Opened != 1 || nw.Stats().Opened != 0 {
		t.Fatalf("first dial: %q old %+v new %+v", r, old.Stats(), nw.Stats())
	}
	// An address without records is dialled as given.
	if _, err := dialVia(t, e, nw.Addr()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "accept on new", func() bool { return nw.Stats().Opened == 1 })

	// A scheduled change lands later, not now.
	dns.SetAfter(host, 100*time.Millisecond, nw.IP())
	if got := dns.Lookup(host); len(got) != 1 || got[0] != old.IP() {
		t.Fatalf("changed too early: %v", got)
	}
	ev := waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindDNS && strings.HasSuffix(ev.Detail, nw.IP()) })
	if ev.Detail != host+" -> "+nw.IP() {
		t.Fatalf("event %v", ev)
	}
	if _, err := dialVia(t, e, host+":"+old.Port()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "dial landing on new", func() bool { return nw.Stats().Opened == 2 })

	// Several answers: the first that accepts wins.
	old.RefuseNew(true)
	dns.Set(host, old.IP(), nw.IP())
	if _, err := dialVia(t, e, host+":"+old.Port()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fallback to the second answer", func() bool { return nw.Stats().Opened == 3 })
	dns.Set(host) // removed: dialled as given, which does not resolve here
	if got := dns.Lookup(host); got != nil {
		t.Fatalf("records after removal: %v", got)
	}
}

// TestMovingWindowEnd: DNS trails the MOVING, the window's end closes the
// connections still on the old endpoint (counting a slow in-flight command
// as owed), and StopAccepting refuses new dials.
func TestMovingWindowEnd(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	const host = "db.test"
	e.DNS().Set(host, old.IP())
	addr := host + ":" + old.Port()

	idle, err := dialVia(t, e, addr)
	if err != nil {
		t.Fatal(err)
	}
	busy, err := dialVia(t, e, addr)
	if err != nil {
		t.Fatal(err)
	}
	busy.hello3()
	busy.optIn("internal-ip")
	if r := idle.do("SET", "k", "v"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	old.SetCommandLatency("get", time.Hour) // never answered before the close

	start := time.Now()
	seq := old.Moving(Moving{
		Window: 400 * time.Millisecond, CloseJitter: 100 * time.Millisecond, To: nw, Null: true,
		StopAccepting: true, DNSHost: host, DNSLag: 700 * time.Millisecond, // DNS trails the close
	})
	busy.expect(string(resp.AppendMoving(nil, seq, 1, "", true)))
	busy.send("GET", "k")
	busy.send("PING") // read but not relayed yet: owed too

	ev := waitEvent(t, e, IsKind(old, KindWindowEndClose))
	if el := ev.At.Sub(start); el < 500*time.Millisecond {
		t.Fatalf("closed after %v, before Window+CloseJitter", el)
	}
	if ev.Detail != "closed=2 owed=2" || ev.Seq != seq {
		t.Fatalf("event %v", ev)
	}
	s := old.Stats()
	if s.ClosedAtWindowEnd != 2 || s.OwedAtClose != 2 || s.Open != 0 || s.Pending != 0 {
		t.Fatalf("old stats %+v", s)
	}
	for _, c := range []*rawClient{idle, busy} {
		if _, err := c.readErr(5 * time.Second); !errors.Is(err, io.EOF) {
			t.Fatalf("client read after window end: %v", err)
		}
	}
	// DNS still points at the old node, which now refuses.
	if got := e.DNS().Lookup(host); got[0] != old.IP() {
		t.Fatalf("DNS moved before its lag: %v", got)
	}
	_, err = dialVia(t, e, addr)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial old after StopAccepting: %v", err)
	}
	// Then DNS follows and the same address reaches the new node.
	waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindDNS && ev.Detail == host+" -> "+nw.IP() })
	c, err := dialVia(t, e, addr)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.do("GET", "k"); r != "$1\r\nv\r\n" {
		t.Fatalf("GET on new: %q", r)
	}
	if s := nw.Stats(); s.Opened != 1 || s.Served != 1 {
		t.Fatalf("new stats %+v", s)
	}
	waitEvent(t, e, IsKind(old, KindRefuse))
}

// TestMovingSupersede: a later MOVING's window wins.
func TestMovingSupersede(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	c := optedInClient(t, old, "internal-ip")
	s1 := old.Moving(Moving{Window: 100 * time.Millisecond, To: nw})
	s2 := old.Moving(Moving{Window: 600 * time.Millisecond, To: nw})
	c.expect(string(resp.AppendMoving(nil, s1, 1, nw.Addr(), false)))
	c.expect(string(resp.AppendMoving(nil, s2, 1, nw.Addr(), false)))
	start := time.Now()
	ev := waitEvent(t, e, IsKind(old, KindWindowEndClose))
	if ev.Seq != s2 {
		t.Fatalf("closed by %v", ev)
	}
	if el := ev.At.Sub(start); el < 400*time.Millisecond {
		t.Fatalf("superseded window closed early (%v)", el)
	}
	// The endpoint keeps accepting without StopAccepting.
	d := dialRaw(t, old.Addr())
	if r := d.do("PING"); r != "+PONG\r\n" {
		t.Fatal(r)
	}
	if s := old.Stats(); s.ClosedAtWindowEnd != 1 || s.Open != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A connection told of the MOVING in its opt-in's reply that then sent
// nothing but its handshake is counted apart among those a window's end
// closes (Stats.UnusedAtWindowEnd): not one that sent a command, nor an
// idle one that opted in before the MOVING.
func TestUnusedConnectionsAtWindowEnd(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	before := optedInClient(t, old, "internal-ip")
	if r := before.do("PING"); r != "+PONG\r\n" {
		t.Fatal(r)
	}
	_ = optedInClient(t, old, "internal-ip") // idle, opted in before the MOVING
	seq := old.Moving(Moving{Window: 300 * time.Millisecond, To: nw})
	told := optedInClient(t, old, "internal-ip") // told by the replay, then used
	told.expect(string(resp.AppendMoving(nil, seq, 1, nw.Addr(), false)))
	if r := told.do("PING"); r != "+PONG\r\n" {
		t.Fatal(r)
	}
	_ = optedInClient(t, old, "internal-ip") // told by the replay, then nothing
	waitEvent(t, e, IsKind(old, KindWindowEndClose))
	if s := old.Stats(); s.ClosedAtWindowEnd != 4 || s.UnusedAtWindowEnd != 1 {
		t.Fatalf("stats %+v: want 4 closed at the window's end, 1 of them told at its opt-in and unused", s)
	}
}

func TestRefuseNewAndCloseAll(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	a := dialRaw(t, ep.Addr())
	b := dialRaw(t, ep.Addr())
	if a.do("PING") != "+PONG\r\n" || b.do("PING") != "+PONG\r\n" {
		t.Fatal("PING")
	}
	ep.RefuseNew(true)
	if _, err := net.DialTimeout("tcp", ep.Addr(), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v", err)
	}
	if a.do("PING") != "+PONG\r\n" {
		t.Fatal("open connection broken by RefuseNew")
	}
	ep.RefuseNew(false)
	c := dialRaw(t, ep.Addr())
	if c.do("PING") != "+PONG\r\n" {
		t.Fatal("PING after resuming")
	}
	ep.SetCommandLatency("ping", time.Hour)
	c.send("PING")
	waitFor(t, "the PING to be owed", func() bool { return ep.Stats().Pending == 1 })
	if n := ep.CloseAll(); n != 3 {
		t.Fatalf("CloseAll closed %d", n)
	}
	s := ep.Stats()
	if s.Open != 0 || s.Opened != 3 || s.OwedAtClose != 1 || s.ClosedAtWindowEnd != 0 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := c.readErr(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read after CloseAll: %v", err)
	}
	ev := waitEvent(t, e, IsKind(ep, KindCloseAll))
	if ev.Detail != "closed=3 owed=1" {
		t.Fatalf("event %v", ev)
	}
}

func TestLatency(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	c := dialRaw(t, ep.Addr())
	timed := func(args ...string) time.Duration {
		start := time.Now()
		c.do(args...)
		return time.Since(start)
	}
	ep.SetCommandLatency("Get", 150*time.Millisecond)
	if d := timed("GET", "k"); d < 150*time.Millisecond {
		t.Fatalf("GET took %v", d)
	}
	if d := timed("PING"); d > 140*time.Millisecond {
		t.Fatalf("PING took %v with GET-only latency", d)
	}
	// A pipeline sees it per command.
	start := time.Now()
	c.write(append(encodeCmd("GET", "a"), encodeCmd("GET", "b")...))
	c.read()
	c.read()
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("pipeline of two GETs took %v", d)
	}
	ep.SetCommandLatency("get", 0)
	ep.SetLatency(120 * time.Millisecond)
	if d := timed("PING"); d < 120*time.Millisecond {
		t.Fatalf("PING took %v with global latency", d)
	}
	ep.SetLatency(0)

	// Maintenance latency: from MIGRATING's start until MIGRATED.
	ep.SetMaintLatency(150 * time.Millisecond)
	if d := timed("PING"); d > 140*time.Millisecond {
		t.Fatalf("maint latency outside maintenance: %v", d)
	}
	ep.Migrating(300*time.Millisecond, `["1"]`)
	if d := timed("PING"); d > 140*time.Millisecond {
		t.Fatalf("maint latency before the start: %v", d)
	}
	waitEvent(t, e, IsKind(ep, KindMaintStart))
	if d := timed("PING"); d < 150*time.Millisecond {
		t.Fatalf("no maint latency during MIGRATING: %v", d)
	}
	ep.Migrated(`["1"]`)
	if d := timed("PING"); d > 140*time.Millisecond {
		t.Fatalf("maint latency after MIGRATED: %v", d)
	}
	ep.FailingOver(0, `["1"]`)
	if d := timed("PING"); d < 150*time.Millisecond {
		t.Fatalf("no maint latency during FAILING_OVER: %v", d)
	}
	ep.FailedOver(`["1"]`)
	if d := timed("PING"); d > 140*time.Millisecond {
		t.Fatalf("maint latency after FAILED_OVER: %v", d)
	}
}

// TestGarbage: malformed input gets a protocol error and a close, and never
// disturbs other connections; inline commands work.
func TestGarbage(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	other := dialRaw(t, ep.Addr())
	for _, g := range []string{
		"*2\r\n$3\r\nGET\r\n:1\r\n",             // not a bulk string
		"*1\r\n$-5\r\n",                         // bad length
		"*1\r\n$99999999999\r\n",                // absurd length
		"*x\r\n",                                // bad count
		"*1\r\n$4\r\nPINGXX",                    // no CRLF after the bulk
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$-1\r\n", // null argument
	} {
		c := dialRaw(t, ep.Addr())
		c.write([]byte(g))
		f, err := c.readErr(5 * time.Second)
		if err != nil || !strings.HasPrefix(f, "-ERR Protocol error") {
			// Truncated input simply waits for more: close our side.
			if isTimeout(err) {
				continue
			}
			t.Fatalf("%q: got %q, %v", g, f, err)
		}
		if _, err := c.readErr(5 * time.Second); !errors.Is(err, io.EOF) {
			t.Fatalf("%q: connection not closed: %v", g, err)
		}
	}
	c := dialRaw(t, ep.Addr())
	c.write([]byte("\r\nPING\r\n*0\r\nECHO  hi\r\n"))
	c.expect("+PONG\r\n")
	c.expect("$2\r\nhi\r\n")
	if other.do("PING") != "+PONG\r\n" {
		t.Fatal("other connection disturbed")
	}
	// A client vanishing mid-command is fine too.
	d := dialRaw(t, ep.Addr())
	d.write([]byte("*2\r\n$3\r\nGET\r\n$1"))
	_ = d.nc.Close()
	waitFor(t, "close", func() bool { return ep.Stats().Open == 2 })
}

// TestManyConnections: hundreds of concurrent connections all get the push
// and keep working.
func TestManyConnections(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	const n = 300
	clients := make([]*rawClient, n)
	for i := range clients {
		clients[i] = dialRaw(t, ep.Addr())
		clients[i].write(append(encodeCmd("HELLO", "3"), encodeCmd("client", "maint_notifications", "on")...))
	}
	for _, c := range clients {
		c.read()
		c.expect("+OK\r\n")
	}
	seq := ep.Migrating(0, `["1"]`)
	want := string(resp.AppendMigrating(nil, seq, 0, `["1"]`))
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := c.readErr(10 * time.Second)
			if err != nil || f != want {
				errs <- fmt.Errorf("client %d: %q %v", i, f, err)
				return
			}
			c.write(encodeCmd("INCR", "n"))
			if f, err := c.readErr(10 * time.Second); err != nil || f[0] != ':' {
				errs <- fmt.Errorf("client %d: INCR %q %v", i, f, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v, _ := e.Miniredis().Get("n"); v != fmt.Sprint(n) {
		t.Fatalf("n = %s", v)
	}
	s := ep.Stats()
	if s.Open != n || s.Opened != n || s.OptedIn != n || s.Served != 2*n {
		t.Fatalf("stats %+v", s)
	}
}

// TestExternalBackend relays to a Redis address instead of the embedded
// miniredis; pub/sub is relayed on RESP2 and RESP3 connections.
func TestExternalBackend(t *testing.T) {
	mr := miniredis.RunT(t)
	e := newEmu(t, Config{Backend: mr.Addr()})
	if e.Miniredis() != nil || e.BackendAddr() != mr.Addr() {
		t.Fatal("external backend")
	}
	ep := addEndpoint(t, e, "127.0.0.2:0")
	c := optedInClient(t, ep, "internal-ip")
	if r := c.do("SET", "k", "v"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	if v, _ := mr.Get("k"); v != "v" {
		t.Fatalf("backend has %q", v)
	}
	// RESP3 pub/sub: confirmations and messages are pushes, interleaved
	// with maintenance pushes at frame boundaries.
	c.send("SUBSCRIBE", "ch1", "ch2")
	c.expect(">3\r\n$9\r\nsubscribe\r\n$3\r\nch1\r\n:1\r\n")
	c.expect(">3\r\n$9\r\nsubscribe\r\n$3\r\nch2\r\n:2\r\n")
	mr.Publish("ch1", "hello")
	c.expect(">3\r\n$7\r\nmessage\r\n$3\r\nch1\r\n$5\r\nhello\r\n")
	seq := ep.SMigrating("1-2")
	c.expect(string(resp.AppendSMigrating(nil, seq, "1-2")))
	c.send("PING") // miniredis answers *2 pong "" when subscribed, Redis +PONG
	if f := c.read(); f[0] == '>' {
		t.Fatalf("PING answered with a push %q", f)
	}

	// RESP2 pub/sub.
	r2 := dialRaw(t, ep.Addr())
	r2.send("SUBSCRIBE", "ch1")
	c.noFrameWithin(50 * time.Millisecond)
	r2.expect("*3\r\n$9\r\nsubscribe\r\n$3\r\nch1\r\n:1\r\n")
	mr.Publish("ch1", "again")
	r2.expect("*3\r\n$7\r\nmessage\r\n$3\r\nch1\r\n$5\r\nagain\r\n")
	c.expect(">3\r\n$7\r\nmessage\r\n$3\r\nch1\r\n$5\r\nagain\r\n")
}

// TestCloseStopsEverything: Close is idempotent, ends connections with the
// owed replies counted, and stops pending timers (goleak checks the rest).
func TestCloseStopsEverything(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	old, nw := pairEndpoints(t, e)
	c := dialRaw(t, old.Addr())
	old.SetCommandLatency("get", time.Hour)
	c.send("GET", "k")
	waitFor(t, "accept", func() bool { return old.Stats().Open == 1 })
	old.Moving(Moving{Window: time.Hour, To: nw, DNSHost: "x.test", DNSLag: time.Hour})
	old.Migrating(time.Hour, "x")
	e.DNS().SetAfter("y.test", time.Hour, "127.0.0.9")
	waitFor(t, "the GET to be owed", func() bool { return old.Stats().Pending == 1 })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.readErr(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read after Close: %v", err)
	}
	if s := old.Stats(); s.Open != 0 || s.OwedAtClose != 1 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := e.AddEndpoint("127.0.0.2:0"); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddEndpoint after Close: %v", err)
	}
	if _, err := e.WaitEvent(context.Background(), func(Event) bool { return false }); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitEvent after Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", old.Addr(), time.Second); err == nil {
		t.Fatal("endpoint still accepting after Close")
	}
	old.Migrated("x") // events after Close are harmless
	old.RefuseNew(false)
}

// TestDNSRoundRobin: two nodes behind one name; with round-robin on,
// successive dials alternate between them, and one that refuses is skipped.
func TestDNSRoundRobin(t *testing.T) {
	e := newEmu(t, Config{})
	a, b := pairEndpoints(t, e)
	const host = "db.test"
	addr := host + ":" + a.Port()
	e.DNS().Set(host, a.IP(), b.IP())
	dial := e.Dialer()
	landed := func() string {
		t.Helper()
		c, err := dial(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.RemoteAddr().String()
	}
	for i := 0; i < 3; i++ {
		if got := landed(); got != a.Addr() {
			t.Fatalf("dial %d without round-robin landed on %s, want the first address %s", i, got, a.Addr())
		}
	}
	e.DNS().SetRoundRobin(true)
	var got []string
	for i := 0; i < 4; i++ {
		got = append(got, landed())
	}
	if got[0] == got[1] || got[0] != got[2] || got[1] != got[3] {
		t.Fatalf("round-robin dials landed on %v, want alternating nodes", got)
	}
	// A node that refuses is skipped: every dial lands on the other.
	a.RefuseNew(true)
	for i := 0; i < 3; i++ {
		if got := landed(); got != b.Addr() {
			t.Fatalf("dial %d with %s refusing landed on %s", i, a.Addr(), got)
		}
	}
	a.RefuseNew(false)
	// The probes above are closed on our side; wait until the nodes have
	// seen them go, so that the counts below are the pool's alone.
	waitFor(t, "probe connections closed on both nodes", func() bool {
		return a.Stats().Open == 0 && b.Stats().Open == 0
	})

	// A go-redis pool spreads over both nodes: four connections held at
	// once, two on each.
	client := redis.NewClient(&redis.Options{Addr: addr, Dialer: dial, PoolSize: 4, MaxRetries: -1})
	defer client.Close()
	for i := 0; i < 4; i++ {
		cn := client.Conn()
		defer cn.Close()
		if err := cn.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if a.Stats().Open != 2 || b.Stats().Open != 2 {
		t.Fatalf("go-redis connections: %d on %s, %d on %s, want 2 and 2", a.Stats().Open, a.Addr(), b.Stats().Open, b.Addr())
	}
	e.DNS().SetRoundRobin(false)
	if got := landed(); got != a.Addr() {
		t.Fatalf("round-robin off: landed on %s", got)
	}
}

// TestTwoEndpointsMovingAtOnce: two nodes of two databases move at the same
// time, both with a null endpoint and DNS following after the windows' end;
// each keeps its own seq, window, close and DNS change.
func TestTwoEndpointsMovingAtOnce(t *testing.T) {
	e := newEmu(t, Config{})
	type db struct {
		host     string
		old, nw  *Endpoint
		addr     string
		opted    *rawClient
		idle     *rawClient
		seq      int64
		dnsMoved Event
	}
	old1, new1 := pairEndpoints(t, e)
	var old2, new2 *Endpoint
	for i := 0; i < 20 && new2 == nil; i++ {
		old2 = addEndpoint(t, e, "127.0.0.4:0")
		var err error
		if new2, err = e.AddEndpoint("127.0.0.5:" + old2.Port()); err != nil {
			old2.RefuseNew(true)
			new2 = nil
		}
	}
	if new2 == nil {
		t.Fatal("no port free on both 127.0.0.4 and 127.0.0.5")
	}
	dbs := []*db{{host: "one.test", old: old1, nw: new1}, {host: "two.test", old: old2, nw: new2}}
	for _, d := range dbs {
		e.DNS().Set(d.host, d.old.IP())
		d.addr = d.host + ":" + d.old.Port()
		var err error
		if d.opted, err = dialVia(t, e, d.addr); err != nil {
			t.Fatal(err)
		}
		d.opted.hello3()
		d.opted.optIn("internal-ip")
		if d.idle, err = dialVia(t, e, d.addr); err != nil {
			t.Fatal(err)
		}
		if r := d.idle.do("SET", d.host, "v"); r != "+OK\r\n" {
			t.Fatal(r)
		}
	}

	const window, lag = 300 * time.Millisecond, 600 * time.Millisecond
	start := time.Now()
	for _, d := range dbs {
		d.seq = d.old.Moving(Moving{Window: window, To: d.nw, Null: true, StopAccepting: true, DNSHost: d.host, DNSLag: lag})
	}
	if dbs[0].seq == dbs[1].seq {
		t.Fatalf("both MOVINGs got seq %d", dbs[0].seq)
	}
	for _, d := range dbs {
		d.opted.expect(string(resp.AppendMoving(nil, d.seq, 1, "", true)))
	}
	for _, d := range dbs {
		ev := waitEvent(t, e, IsKind(d.old, KindWindowEndClose))
		if ev.Seq != d.seq || ev.Detail != "closed=2 owed=0" || ev.At.Sub(start) < window {
			t.Fatalf("%s window end %v (%v after the MOVINGs)", d.old.Addr(), ev, ev.At.Sub(start))
		}
		if s := d.old.Stats(); s.ClosedAtWindowEnd != 2 || s.Open != 0 {
			t.Fatalf("%s stats %+v", d.old.Addr(), s)
		}
		for _, c := range []*rawClient{d.opted, d.idle} {
			if _, err := c.readErr(5 * time.Second); !errors.Is(err, io.EOF) {
				t.Fatalf("%s: client read after the window's end: %v", d.old.Addr(), err)
			}
		}
		if got := e.DNS().Lookup(d.host); len(got) != 1 || got[0] != d.old.IP() {
			t.Fatalf("%s: DNS moved before its lag: %v", d.host, got)
		}
	}
	for _, d := range dbs {
		d.dnsMoved = waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindDNS && ev.Detail == d.host+" -> "+d.nw.IP() })
		if el := d.dnsMoved.At.Sub(start); el < lag {
			t.Fatalf("%s: DNS moved %v after the MOVING, before its lag %v", d.host, el, lag)
		}
		c, err := dialVia(t, e, d.addr)
		if err != nil {
			t.Fatalf("%s after DNS moved: %v", d.host, err)
		}
		if r := c.do("GET", d.host); r != "$1\r\nv\r\n" {
			t.Fatalf("%s: GET on the new node: %q", d.host, r)
		}
		if s := d.nw.Stats(); s.Opened != 1 || s.Served != 1 {
			t.Fatalf("%s stats %+v", d.nw.Addr(), s)
		}
	}
}
