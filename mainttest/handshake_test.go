package mainttest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

func TestHandshakeCaseInsensitive(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	for _, args := range [][]string{
		{"client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip"},
		{"CLIENT", "MAINT_NOTIFICATIONS", "ON", "MOVING-ENDPOINT-TYPE", "INTERNAL-IP"},
		{"Client", "Maint_Notifications", "On"},
	} {
		c := dialRaw(t, ep.Addr())
		c.hello3()
		if r := c.do(args...); r != "+OK\r\n" {
			t.Fatalf("%v: %q", args, r)
		}
	}
	if s := ep.Stats(); s.OptedIn != 3 || s.Opened != 3 || s.Open != 3 {
		t.Fatalf("stats %+v", s)
	}
	// go-redis's exact bytes, from protocol.md.
	c := dialRaw(t, ep.Addr())
	c.hello3()
	c.write([]byte("*5\r\n$6\r\nclient\r\n$19\r\nmaint_notifications\r\n$2\r\non\r\n$20\r\nmoving-endpoint-type\r\n$11\r\ninternal-ip\r\n"))
	c.expect("+OK\r\n")
	ev := waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindOptIn && ev.Detail == "internal-ip" })
	if ev.Endpoint != ep.Addr() {
		t.Fatalf("event %v", ev)
	}
	// Malformed forms get errors and opt nothing in.
	for _, args := range [][]string{
		{"client", "maint_notifications"},
		{"client", "maint_notifications", "maybe"},
		{"client", "maint_notifications", "on", "moving-endpoint-type"},
		{"client", "maint_notifications", "on", "moving-endpoint-type", "carrier-pigeon"},
		{"client", "maint_notifications", "off", "extra"},
	} {
		if r := c.do(args...); !strings.HasPrefix(r, "-ERR ") {
			t.Fatalf("%v: %q", args, r)
		}
	}
	if s := ep.Stats(); s.OptedIn != 4 {
		t.Fatalf("OptedIn %d, want 4", s.OptedIn)
	}
}

// TestHandshakeInPipeline: the intercepted +OK keeps its place among the
// relayed replies, even when the relayed command before it is slow.
func TestHandshakeInPipeline(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	ep.SetCommandLatency("echo", 100*time.Millisecond)
	c := dialRaw(t, ep.Addr())
	c.hello3()
	var b []byte
	b = append(b, encodeCmd("PING")...)
	b = append(b, encodeCmd("ECHO", "slow")...)
	b = append(b, encodeCmd("CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip")...)
	b = append(b, encodeCmd("PING")...)
	b = append(b, encodeCmd("client", "maint_notifications", "off")...)
	b = append(b, encodeCmd("ECHO", "x")...)
	c.write(b)
	for _, want := range []string{"+PONG\r\n", "$4\r\nslow\r\n", "+OK\r\n", "+PONG\r\n", "+OK\r\n", "$1\r\nx\r\n"} {
		c.expect(want)
	}
	// The handshake was never forwarded: miniredis would have answered -ERR.
	if s := ep.Stats(); s.Served != 5 { // HELLO, PING, ECHO, PING, ECHO
		t.Fatalf("served %d, want 5", s.Served)
	}
}

func TestUnsupported(t *testing.T) {
	e := newEmu(t, Config{Unsupported: true})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	c := dialRaw(t, ep.Addr())
	c.hello3()
	c.send("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip")
	c.expect("-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.\r\n")
	c.send("CLIENT", "MAINT_NOTIFICATIONS", "ON")
	c.expect("-ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.\r\n")
	ep.Migrating(0, `["1"]`)
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("got %q: pushed to a connection that never opted in", r)
	}
	if s := ep.Stats(); s.OptedIn != 0 {
		t.Fatalf("OptedIn %d", s.OptedIn)
	}
	waitEvent(t, e, IsKind(ep, KindUnsupported))
}

func TestOptOut(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	c := optedInClient(t, ep, "internal-ip")
	seq := ep.Migrating(0, `["1"]`)
	c.expect(string(resp.AppendMigrating(nil, seq, 0, `["1"]`)))
	if r := c.do("client", "maint_notifications", "off"); r != "+OK\r\n" {
		t.Fatalf("OFF: %q", r)
	}
	ep.Migrated(`["1"]`)
	waitEvent(t, e, IsKind(ep, KindMigrated))
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("got %q after OFF", r)
	}
	// Opting in again replays the retained MIGRATED.
	c.send("client", "maint_notifications", "on")
	c.expect("+OK\r\n")
	c.expect(fmt.Sprintf(">3\r\n$8\r\nMIGRATED\r\n:%d\r\n$5\r\n[\"1\"]\r\n", seq+1))
	if s := ep.Stats(); s.OptedIn != 1 {
		t.Fatalf("OptedIn %d: one connection", s.OptedIn)
	}
}

// TestRESP2NoPushes: only opted-in RESP3 connections receive pushes.
func TestRESP2NoPushes(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	c2 := dialRaw(t, ep.Addr()) // never sends HELLO
	if r := c2.do("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip"); r != "+OK\r\n" {
		t.Fatalf("%q", r)
	}
	c2b := dialRaw(t, ep.Addr()) // HELLO 2 explicitly
	if r := c2b.do("HELLO", "2"); r[0] != '*' {
		t.Fatalf("HELLO 2: %q", r)
	}
	c2b.optIn("internal-ip")
	c3 := optedInClient(t, ep, "internal-ip")

	ep.Migrating(0, `["1"]`)
	ep.Moving(Moving{Window: time.Hour})
	ep.SendRaw([]byte(">1\r\n$1\r\nx\r\n"))
	for _, c := range []*rawClient{c2, c2b} {
		if r := c.do("PING"); r != "+PONG\r\n" {
			t.Fatalf("RESP2 connection got %q", r)
		}
	}
	for i := 0; i < 3; i++ {
		if f := c3.read(); f[0] != '>' {
			t.Fatalf("RESP3 connection got %q", f)
		}
	}
	ev := waitEvent(t, e, IsKind(ep, KindMigrating))
	if !strings.HasSuffix(ev.Detail, "conns=1") {
		t.Fatalf("event %v", ev)
	}
	// A failed HELLO 3 leaves the protocol unchanged.
	cf := dialRaw(t, ep.Addr())
	if r := cf.do("HELLO", "3", "AUTH", "nobody", "wrong"); r[0] != '-' {
		t.Fatalf("HELLO with bad AUTH: %q", r)
	}
	cf.optIn("")
	ep.SendRaw([]byte(">1\r\n$1\r\ny\r\n"))
	if r := cf.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("connection whose HELLO 3 failed got %q", r)
	}
}

// TestReplayLatestCompletion: a newly opted-in connection gets the latest
// MIGRATED or FAILED_OVER right after its +OK; MIGRATING is not replayed.
func TestReplayLatestCompletion(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	ep.Migrating(0, `["1"]`)
	seq := ep.Migrated(`["1"]`)
	c := dialRaw(t, ep.Addr())
	c.hello3()
	var b []byte
	b = append(b, encodeCmd("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip")...)
	b = append(b, encodeCmd("PING")...)
	c.write(b)
	c.expect("+OK\r\n")
	c.expect(fmt.Sprintf(">3\r\n$8\r\nMIGRATED\r\n:%d\r\n$5\r\n[\"1\"]\r\n", seq))
	c.expect("+PONG\r\n")

	fseq := ep.FailedOver(`["2"]`)
	c.expect(string(resp.AppendFailedOver(nil, fseq, `["2"]`)))
	d := optedInClient(t, ep, "")
	d.expect(string(resp.AppendFailedOver(nil, fseq, `["2"]`)))
	waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindReplay && ev.Detail == KindFailedOver })

	// A RESP2 connection opting in gets no replay.
	r2 := dialRaw(t, ep.Addr())
	r2.optIn("internal-ip")
	if r := r2.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("RESP2 got %q", r)
	}
}

// TestMovingReplayDuringWindow: opting in during a MOVING window gets the
// MOVING with the whole seconds left.
func TestMovingReplayDuringWindow(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	seq := old.Moving(Moving{Window: 3 * time.Second, To: nw})
	waitEvent(t, e, IsKind(old, KindMoving))
	c := dialRaw(t, old.Addr())
	c.hello3()
	c.send("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip")
	c.expect("+OK\r\n")
	f := c.read()
	// 3 s window: 3 (or 2 on a very slow machine) whole seconds left.
	ok := false
	for _, left := range []int64{3, 2} {
		if f == string(resp.AppendMoving(nil, seq, left, nw.Addr(), false)) {
			ok = true
		}
	}
	if !ok {
		t.Fatalf("replayed MOVING %q", f)
	}
	n := dialRaw(t, old.Addr())
	n.hello3()
	n.send("client", "maint_notifications", "on", "moving-endpoint-type", "none")
	n.expect("+OK\r\n")
	if f := n.read(); !strings.HasPrefix(f, ">4\r\n$6\r\nMOVING\r\n:"+itoa(seq)+"\r\n") || !strings.HasSuffix(f, "_\r\n") {
		t.Fatalf("replayed MOVING for none: %q", f)
	}
}

// TestSetUnsupportedPerEndpoint: one endpoint without support next to one
// with it, and switching at run time.
func TestSetUnsupportedPerEndpoint(t *testing.T) {
	e := newEmu(t, Config{})
	a := addEndpoint(t, e, "127.0.0.2:0")
	b := addEndpoint(t, e, "127.0.0.3:0")
	b.SetUnsupported(true)
	ca, cb := dialRaw(t, a.Addr()), dialRaw(t, b.Addr())
	ca.optIn("internal-ip")
	if r := cb.do("client", "maint_notifications", "on"); r != "-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.\r\n" {
		t.Fatalf("unsupported endpoint: %q", r)
	}
	b.SetUnsupported(false)
	cb.optIn("")
	if a.Stats().OptedIn != 1 || b.Stats().OptedIn != 1 {
		t.Fatalf("a %+v b %+v", a.Stats(), b.Stats())
	}
}
