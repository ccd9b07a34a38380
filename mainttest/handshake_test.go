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

// TestSetHandshakeError: an arbitrary error line, temporary answers that
// give way to the standing one, and the count of handshakes read.
func TestSetHandshakeError(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	const loading = "LOADING Redis is loading the dataset in memory"
	ep.SetHandshake(Handshake{Answer: AnswerError, Error: loading, Times: 2})
	c := dialRaw(t, ep.Addr())
	c.hello3()
	for i := 0; i < 2; i++ {
		if r := c.do("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip"); r != "-"+loading+"\r\n" {
			t.Fatalf("handshake %d: %q, want -%s", i, r, loading)
		}
	}
	ev := waitEvent(t, e, IsKind(ep, KindUnsupported))
	if ev.Detail != loading {
		t.Fatalf("event %v", ev)
	}
	// The temporary answer is spent: the standing one (+OK) applies.
	c.optIn("internal-ip")
	if s := ep.Stats(); s.Handshakes != 3 || s.OptedIn != 1 {
		t.Fatalf("stats %+v, want 3 handshakes read and one connection opted in", s)
	}

	// A standing error answer, CR and LF made harmless, then back to +OK.
	ep.SetHandshake(Handshake{Answer: AnswerError, Error: "ERR no\r\nway"})
	for i := 0; i < 2; i++ {
		if r := c.do("client", "maint_notifications", "off"); r != "-ERR no  way\r\n" {
			t.Fatalf("standing error answer %d: %q", i, r)
		}
	}
	ep.SetUnsupported(true)
	if r := c.do("client", "maint_notifications", "on"); r != "-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.\r\n" {
		t.Fatalf("SetUnsupported(true): %q", r)
	}
	ep.SetUnsupported(false)
	c.optIn("")
	if s := ep.Stats(); s.Handshakes != 7 || s.OptedIn != 1 {
		t.Fatalf("stats %+v, want 7 handshakes read", s)
	}

	// Config.Handshake is every new endpoint's first answer.
	e2 := newEmu(t, Config{Handshake: Handshake{Answer: AnswerError, Error: loading, Times: 1}})
	ep2 := addEndpoint(t, e2, "127.0.0.2:0")
	c2 := dialRaw(t, ep2.Addr())
	c2.hello3()
	if r := c2.do("client", "maint_notifications", "on"); r != "-"+loading+"\r\n" {
		t.Fatalf("Config.Handshake: %q", r)
	}
	c2.optIn("")
}

// TestSetHandshakeNone: a handshake that is never answered holds every
// later reply too, until the client gives up and closes.
func TestSetHandshakeNone(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	ep.SetHandshake(Handshake{Answer: AnswerNone})
	c := dialRaw(t, ep.Addr())
	c.hello3()
	var b []byte
	b = append(b, encodeCmd("client", "maint_notifications", "on")...)
	b = append(b, encodeCmd("PING")...)
	c.write(b)
	waitEvent(t, e, IsKind(ep, KindHandshakeIgnored))
	c.noFrameWithin(200 * time.Millisecond)
	if s := ep.Stats(); s.Pending != 2 || s.Handshakes != 1 || s.OptedIn != 0 {
		t.Fatalf("stats %+v, want the handshake and the PING pending", s)
	}
	ep.Migrating(0, `["1"]`) // not opted in: nothing to push anyway
	c.noFrameWithin(50 * time.Millisecond)
	_ = c.nc.Close()
	ev := waitEvent(t, e, IsKind(ep, KindClose))
	if ev.Detail != "client owed=2" {
		t.Fatalf("close %v", ev)
	}
	if s := ep.Stats(); s.Open != 0 || s.OwedAtClose != 0 {
		t.Fatalf("stats %+v: a client's close is not the emulator's", s)
	}
}

// TestSetHandshakeClose: the connection is closed on the handshake, after
// the replies owed before it; commands after it are never answered.
func TestSetHandshakeClose(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	ep.SetHandshake(Handshake{Answer: AnswerClose, Times: 1})
	c := dialRaw(t, ep.Addr())
	c.hello3()
	var b []byte
	b = append(b, encodeCmd("ECHO", "before")...)
	b = append(b, encodeCmd("client", "maint_notifications", "on")...)
	b = append(b, encodeCmd("ECHO", "after")...)
	c.write(b)
	c.expect("$6\r\nbefore\r\n")
	if f, err := c.readErr(5 * time.Second); err == nil {
		t.Fatalf("got %q after the handshake, want the connection closed", f)
	}
	ev := waitEvent(t, e, IsKind(ep, KindClose))
	if ev.Detail != "handshake owed=0" {
		t.Fatalf("close %v", ev)
	}
	// Times 1: the next connection opts in.
	c2 := dialRaw(t, ep.Addr())
	c2.hello3()
	c2.optIn("internal-ip")
	if s := ep.Stats(); s.Handshakes != 2 || s.OptedIn != 1 || s.Open != 1 {
		t.Fatalf("stats %+v", s)
	}
}
