package mainttest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// masterReply is get-master-addr-by-name's answer naming ep.
func masterReply(ep *Endpoint) string {
	return string(encodeCmd(ep.IP(), ep.Port()))
}

func TestSentinelRawRESP2(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	s := addSentinel(t, e, old)
	s.SetReplicas(nw)
	c := dialRaw(t, s.Addr())

	c.send("PING")
	c.expect("+PONG\r\n")
	c.send("ping", "hi")
	c.expect("$2\r\nhi\r\n")
	c.send("SENTINEL", "get-master-addr-by-name", "db1")
	c.expect(masterReply(old))
	c.send("sentinel", "GET-MASTER-ADDR-BY-NAME", "db1")
	c.expect(masterReply(old))
	c.send("SENTINEL", "get-master-addr-by-name", "nope")
	c.expect("*-1\r\n")
	c.send("SENTINEL", "get-master-addr-by-name")
	c.expect("-ERR wrong number of arguments for 'sentinel|get-master-addr-by-name' command\r\n")

	// The handshake is refused like on a server without support, with the
	// subcommand echoed as sent, and never opts anything in.
	c.send("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip")
	c.expect("-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.\r\n")
	c.send("CLIENT", "MAINT_NOTIFICATIONS", "ON")
	c.expect("-ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.\r\n")

	// Data commands are not relayed: a sentinel does not know them.
	c.send("get", "k")
	c.expect("-ERR unknown command 'get', with args beginning with: 'k' \r\n")
	c.send("SELECT", "1")
	c.expect("-ERR unknown command 'SELECT', with args beginning with: '1' \r\n")
	c.send("SENTINEL", "nosuch")
	c.expect("-ERR unknown subcommand 'nosuch'. Try SENTINEL HELP.\r\n")
	c.send("SENTINEL", "master", "nope")
	c.expect("-ERR No such master with that name\r\n")

	c.send("CLIENT", "SETNAME", "me")
	c.expect("+OK\r\n")
	c.send("CLIENT", "GETNAME")
	c.expect("$2\r\nme\r\n")
	c.send("CLIENT", "SETINFO", "LIB-NAME", "go-redis")
	c.expect("+OK\r\n")

	// Maps are flat arrays in RESP2.
	r := c.do("SENTINEL", "replicas", "db1")
	if !strings.HasPrefix(r, "*1\r\n*42\r\n$4\r\nname\r\n$"+itoa(int64(len(nw.Addr())))+"\r\n"+nw.Addr()+"\r\n$2\r\nip\r\n$9\r\n127.0.0.3\r\n$4\r\nport\r\n") {
		t.Fatalf("replicas: %q", r)
	}
	r = c.do("SENTINEL", "master", "db1")
	if !strings.HasPrefix(r, "*40\r\n$4\r\nname\r\n$3\r\ndb1\r\n$2\r\nip\r\n$9\r\n127.0.0.2\r\n") || !strings.Contains(r, "$5\r\nflags\r\n$6\r\nmaster\r\n") {
		t.Fatalf("master: %q", r)
	}
	c.send("SENTINEL", "sentinels", "db1")
	c.expect("*0\r\n")
	if r := c.do("SENTINEL", "myid"); !strings.HasPrefix(r, "$40\r\n") {
		t.Fatalf("myid: %q", r)
	}

	st := s.Stats()
	if st.Commands != 19 || st.MasterQueries != 2 || st.Handshakes != 2 || st.Unknown != 5 || st.Errors != 7 || st.Open != 1 || st.Opened != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Nothing reached the data endpoints.
	if o, n := old.Stats(), nw.Stats(); o.Opened != 0 || n.Opened != 0 {
		t.Fatalf("endpoints touched: old %+v new %+v", o, n)
	}
	ev := waitEvent(t, e, func(ev Event) bool { return ev.Kind == KindUnsupported && ev.Endpoint == s.Addr() })
	if !strings.Contains(ev.Detail, "unknown subcommand") {
		t.Fatalf("event %v", ev)
	}
}

func TestSentinelRawRESP3(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	s := addSentinel(t, e, old)
	c := dialRaw(t, s.Addr())

	r := c.do("HELLO", "3", "AUTH", "default", "secret", "SETNAME", "cli")
	if !strings.HasPrefix(r, "%6\r\n$6\r\nserver\r\n$5\r\nredis\r\n") || !strings.Contains(r, "$5\r\nproto\r\n:3\r\n") || !strings.Contains(r, "$4\r\nmode\r\n$8\r\nsentinel\r\n") {
		t.Fatalf("HELLO 3: %q", r)
	}
	c.send("CLIENT", "GETNAME")
	c.expect("$3\r\ncli\r\n")
	c.send("SENTINEL", "get-master-addr-by-name", "nope")
	c.expect("_\r\n")
	c.send("HELLO", "4")
	c.expect("-NOPROTO unsupported protocol version\r\n")
	c.send("HELLO", "3", "AUTH", "someone", "x")
	c.expect("-WRONGPASS invalid username-password pair or user is disabled.\r\n")
	r = c.do("SENTINEL", "master", "db1")
	if !strings.HasPrefix(r, "%20\r\n$4\r\nname\r\n$3\r\ndb1\r\n") {
		t.Fatalf("master: %q", r)
	}

	c.send("SUBSCRIBE", "+switch-master", "+replica-reconf-done")
	c.expect(">3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n")
	c.expect(">3\r\n$9\r\nsubscribe\r\n$20\r\n+replica-reconf-done\r\n:2\r\n")
	// RESP3 allows any command while subscribed.
	c.send("PING")
	c.expect("+PONG\r\n")
	c.send("SENTINEL", "get-master-addr-by-name", "db1")
	c.expect(masterReply(old))
	waitFor(t, "subscribed", func() bool { return s.Stats().Subscribed == 1 })

	seq := s.SetMaster(nw)
	if seq == 0 {
		t.Fatal("SetMaster returned 0")
	}
	c.expect(">3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$" +
		itoa(int64(len("db1 127.0.0.2 "+old.Port()+" 127.0.0.3 "+nw.Port()))) +
		"\r\ndb1 127.0.0.2 " + old.Port() + " 127.0.0.3 " + nw.Port() + "\r\n")
	ev := waitEvent(t, e, IsKind(nil, KindSentinelSwitch))
	if ev.Seq != seq || ev.Endpoint != s.Addr() || !strings.Contains(ev.Detail, "delivered=1") {
		t.Fatalf("switch event %v", ev)
	}
	c.send("SENTINEL", "get-master-addr-by-name", "db1")
	c.expect(masterReply(nw))
	if s.Master() != nw {
		t.Fatal("Master() not switched")
	}
	// The old master is now a replica.
	if reps := s.Replicas(); len(reps) != 1 || reps[0] != old {
		t.Fatalf("replicas after switch: %v", reps)
	}
	if s.SetMaster(nw) != 0 {
		t.Fatal("a switch to the current master must do nothing")
	}
	st := s.Stats()
	if st.Switches != 1 || st.SwitchMessages != 1 || st.Subscribed != 1 {
		t.Fatalf("stats %+v", st)
	}

	c.send("UNSUBSCRIBE")
	got := []string{c.read(), c.read()}
	if got[0] != ">3\r\n$11\r\nunsubscribe\r\n$20\r\n+replica-reconf-done\r\n:1\r\n" ||
		got[1] != ">3\r\n$11\r\nunsubscribe\r\n$14\r\n+switch-master\r\n:0\r\n" {
		t.Fatalf("unsubscribe: %q", got)
	}
	c.send("UNSUBSCRIBE")
	c.expect(">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n")
	c.send("QUIT")
	c.expect("+OK\r\n")
	if _, err := c.readErr(5 * time.Second); err == nil {
		t.Fatal("connection still open after QUIT")
	}
}

func TestSentinelRESP2PubSub(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	s := addSentinel(t, e, old)
	c := dialRaw(t, s.Addr())
	c.send("PSUBSCRIBE", "+switch-*", "*master")
	c.expect("*3\r\n$10\r\npsubscribe\r\n$9\r\n+switch-*\r\n:1\r\n")
	c.expect("*3\r\n$10\r\npsubscribe\r\n$7\r\n*master\r\n:2\r\n")
	c.send("SUBSCRIBE", "+switch-master")
	c.expect("*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:3\r\n")
	// RESP2's subscribed context allows only pub/sub commands and PING.
	c.send("SENTINEL", "get-master-addr-by-name", "db1")
	c.expect("-ERR Can't execute 'sentinel': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n")
	c.send("PING")
	c.expect("*2\r\n$4\r\npong\r\n$0\r\n\r\n")

	s.SetMaster(nw)
	payload := "db1 127.0.0.2 " + old.Port() + " 127.0.0.3 " + nw.Port()
	bulk := "$" + itoa(int64(len(payload))) + "\r\n" + payload + "\r\n"
	want := map[string]bool{
		"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n" + bulk:                     true,
		"*4\r\n$8\r\npmessage\r\n$9\r\n+switch-*\r\n$14\r\n+switch-master\r\n" + bulk: true,
		"*4\r\n$8\r\npmessage\r\n$7\r\n*master\r\n$14\r\n+switch-master\r\n" + bulk:   true,
	}
	for range 3 {
		f := c.read()
		if !want[f] {
			t.Fatalf("unexpected message %q", f)
		}
		delete(want, f)
	}
	if st := s.Stats(); st.SwitchMessages != 3 {
		t.Fatalf("stats %+v", st)
	}
	c.send("RESET")
	c.expect("+RESET\r\n")
	c.send("SENTINEL", "get-master-addr-by-name", "db1")
	c.expect(masterReply(nw))

	// A quiet service switches without a message.
	c.send("SUBSCRIBE", "+switch-master")
	c.expect("*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n")
	s.SetSwitchMessages(false)
	s.SetMaster(old)
	waitEvent(t, e, func(ev Event) bool {
		return ev.Kind == KindSentinelSwitch && strings.Contains(ev.Detail, "-> "+old.Addr())
	})
	c.noFrameWithin(100 * time.Millisecond)
}

func TestSentinelPeers(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	s1 := addSentinel(t, e, old)
	s2, err := s1.AddPeer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if p := s2.Peers(); len(p) != 2 || p[0] != s1 || p[1] != s2 || s2.MasterName() != "db1" {
		t.Fatalf("peers %v", p)
	}
	c1, c2 := dialRaw(t, s1.Addr()), dialRaw(t, s2.Addr())
	c1.hello3()
	c2.hello3() // stays free to ask while subscribed
	r := c1.do("SENTINEL", "sentinels", "db1")
	_, port, _ := net.SplitHostPort(s2.Addr())
	if !strings.HasPrefix(r, "*1\r\n%") || !strings.Contains(r, "$4\r\nport\r\n$"+itoa(int64(len(port)))+"\r\n"+port+"\r\n") {
		t.Fatalf("sentinels: %q", r)
	}
	c2.send("SUBSCRIBE", "+switch-master")
	c2.read()
	c1.send("SUBSCRIBE", "+switch-master")
	c1.read()
	waitFor(t, "both subscribed", func() bool { return s1.Stats().Subscribed == 1 && s2.Stats().Subscribed == 1 })
	s2.SetMaster(nw)
	for _, c := range []*rawClient{c1, c2} {
		if f := c.read(); !strings.Contains(f, "message") || !strings.Contains(f, nw.Port()) {
			t.Fatalf("message %q", f)
		}
	}
	if s1.Master() != nw {
		t.Fatal("peer does not share the topology")
	}
	ev := waitEvent(t, e, IsKind(nil, KindSentinelSwitch))
	if ev.Endpoint != s1.Addr() || !strings.Contains(ev.Detail, "delivered=2") {
		t.Fatalf("event %v", ev)
	}
	// Closing one node leaves the other serving.
	s1.Close()
	s1.Close()
	if _, err := net.DialTimeout("tcp", s1.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial closed sentinel: %v", err)
	}
	c2.send("SENTINEL", "get-master-addr-by-name", "db1")
	c2.expect(masterReply(nw))
}

// TestSentinelFailoverTimeline follows a failover on the wire: FAILING_OVER
// on the old master, the switch in the Discovery Service, FAILED_OVER, the
// old master refusing and closing.
func TestSentinelFailoverTimeline(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	s := addSentinel(t, e, old)
	s.SetReplicas(nw)
	data := dialRaw(t, old.Addr())
	data.hello3()
	data.optIn("internal-ip")
	sub := dialRaw(t, s.Addr())
	sub.hello3()
	sub.send("SUBSCRIBE", "+switch-master")
	sub.read()
	waitFor(t, "subscribed", func() bool { return s.Stats().Subscribed == 1 })

	seq := s.Failover(Failover{To: nw, StartsIn: 0, SwitchAfter: 200 * time.Millisecond,
		RefuseOld: true, CloseOld: true, CloseOldAfter: 100 * time.Millisecond})
	data.expect(">4\r\n$12\r\nFAILING_OVER\r\n:" + itoa(seq) + "\r\n:0\r\n$1\r\n1\r\n")
	if s.Master() != old {
		t.Fatal("switched before SwitchAfter")
	}
	f := data.read() // FAILED_OVER comes after the switch
	if !strings.HasPrefix(f, ">3\r\n$11\r\nFAILED_OVER\r\n") {
		t.Fatalf("want FAILED_OVER, got %q", f)
	}
	if s.Master() != nw {
		t.Fatal("FAILED_OVER before the switch")
	}
	if m := sub.read(); !strings.Contains(m, "db1 127.0.0.2 "+old.Port()+" 127.0.0.3 "+nw.Port()) {
		t.Fatalf("switch message %q", m)
	}
	if _, err := net.DialTimeout("tcp", old.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("old master still accepts: %v", err)
	}
	if _, err := data.readErr(5 * time.Second); err == nil {
		t.Fatal("old master's connection not closed")
	}
	sw := waitEvent(t, e, IsKind(nil, KindSentinelSwitch))
	fo := waitEvent(t, e, IsKind(old, KindFailedOver))
	if sw.Seq <= seq || fo.Seq <= sw.Seq || !strings.Contains(sw.Detail, "why=failover") {
		t.Fatalf("seqs: failing_over %d switch %v failed_over %v", seq, sw, fo)
	}
	if reps := s.Replicas(); len(reps) != 1 || reps[0] != old {
		t.Fatalf("replicas %v", reps)
	}
}

// TestSentinelMovingNameAfter checks when the Discovery Service names the
// successor of a MOVING: at the MOVING, or later.
func TestSentinelMovingNameAfter(t *testing.T) {
	t.Run("at_moving", func(t *testing.T) {
		e := newEmu(t, Config{})
		old, nw := pairEndpoints(t, e)
		s := addSentinel(t, e, old)
		data := dialRaw(t, old.Addr())
		data.hello3()
		data.optIn("internal-ip")
		seq := s.Moving(SentinelMoving{Moving: Moving{Window: time.Second, To: nw, Null: true}})
		// The switch precedes the push: a client reacting to it finds To.
		if s.Master() != nw {
			t.Fatal("not switched at the MOVING")
		}
		data.expect(">4\r\n$6\r\nMOVING\r\n:" + itoa(seq) + "\r\n:1\r\n_\r\n")
		sw := waitEvent(t, e, IsKind(nil, KindSentinelSwitch))
		if sw.Seq >= seq || !strings.Contains(sw.Detail, "why=moving") {
			t.Fatalf("switch %v, moving seq %d", sw, seq)
		}
	})
	t.Run("after", func(t *testing.T) {
		e := newEmu(t, Config{})
		old, nw := pairEndpoints(t, e)
		s := addSentinel(t, e, old)
		c := dialRaw(t, s.Addr())
		start := time.Now()
		s.Moving(SentinelMoving{Moving: Moving{Window: 300 * time.Millisecond, CloseJitter: 200 * time.Millisecond, To: nw}, NameAfter: 300 * time.Millisecond})
		c.send("SENTINEL", "get-master-addr-by-name", "db1")
		c.expect(masterReply(old))
		sw := waitEvent(t, e, IsKind(nil, KindSentinelSwitch))
		end := waitEvent(t, e, IsKind(old, KindWindowEndClose))
		if d := sw.At.Sub(start); d < 300*time.Millisecond {
			t.Fatalf("switched after %v, want >= 300ms", d)
		}
		if !sw.At.Before(end.At) {
			t.Fatalf("switch %v not before the close %v", sw.At, end.At)
		}
		c.send("SENTINEL", "get-master-addr-by-name", "db1")
		c.expect(masterReply(nw))
	})
	t.Run("never", func(t *testing.T) {
		e := newEmu(t, Config{})
		old, nw := pairEndpoints(t, e)
		s := addSentinel(t, e, old)
		s.Moving(SentinelMoving{Moving: Moving{Window: 50 * time.Millisecond, To: nw}, Never: true})
		waitEvent(t, e, IsKind(old, KindWindowEndClose))
		if s.Master() != old || s.Stats().Switches != 0 {
			t.Fatal("switched on a MOVING it must not follow")
		}
	})
}

func TestSentinelSentinelFailoverCommand(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	s := addSentinel(t, e, old)
	c := dialRaw(t, s.Addr())
	c.send("SENTINEL", "FAILOVER", "db1")
	c.expect("-NOGOODSLAVE No suitable replica to promote\r\n")
	s.SetReplicas(nw)
	c.send("SUBSCRIBE", "+switch-master")
	c.read()
	c.send("PSUBSCRIBE", "x") // stays subscribed; RESP2: only pub/sub now
	c.read()
	c2 := dialRaw(t, s.Addr())
	c2.send("SENTINEL", "FAILOVER", "db1")
	c2.expect("+OK\r\n")
	if f := c.read(); !strings.Contains(f, "+switch-master") {
		t.Fatalf("message %q", f)
	}
	c2.send("SENTINEL", "get-master-addr-by-name", "db1")
	c2.expect(masterReply(nw))
}

func TestSentinelAddErrors(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	if _, err := e.AddSentinel("10.0.0.1:26379", "db", ep); err == nil {
		t.Fatal("non-loopback address accepted")
	}
	if _, err := e.AddSentinel("nohost", "db", ep); err == nil {
		t.Fatal("bad address accepted")
	}
	if _, err := e.AddSentinel("127.0.0.1:0", "db", nil); err == nil {
		t.Fatal("nil master accepted")
	}
	s := addSentinel(t, e, ep)
	c := dialRaw(t, s.Addr())
	c.send("PING")
	c.expect("+PONG\r\n")
	_ = e.Close()
	if _, err := c.readErr(5 * time.Second); err == nil {
		t.Fatal("sentinel connection survived Emulator.Close")
	}
	if _, err := e.AddSentinel("127.0.0.1:0", "db", ep); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddSentinel after Close: %v", err)
	}
	if _, err := s.AddPeer("127.0.0.1:0"); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddPeer after Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := e.WaitEvent(ctx, func(ev Event) bool {
		return ev.Kind == KindClose && ev.Endpoint == s.Addr() && strings.HasPrefix(ev.Detail, "emulator_close")
	}); err != nil {
		t.Fatalf("no close event: %v", err)
	}
}

func TestSentinelProtocolError(t *testing.T) {
	e := newEmu(t, Config{})
	s := addSentinel(t, e, addEndpoint(t, e, "127.0.0.2:0"))
	c := dialRaw(t, s.Addr())
	c.write([]byte("*1\r\n$x\r\n"))
	if f := c.read(); !strings.HasPrefix(f, "-ERR Protocol error") {
		t.Fatalf("got %q", f)
	}
	if _, err := c.readErr(5 * time.Second); err == nil {
		t.Fatal("connection open after a protocol error")
	}
	// Inline commands work, and blank lines are ignored.
	c2 := dialRaw(t, s.Addr())
	c2.write([]byte("\r\nsentinel get-master-addr-by-name db1\r\n"))
	if f := c2.read(); !strings.HasPrefix(f, "*2\r\n$9\r\n127.0.0.2\r\n") {
		t.Fatalf("inline: %q", f)
	}
	c2.write([]byte("foo bar\r\n"))
	c2.expect("-ERR unknown command 'foo', with args beginning with: 'bar' \r\n")
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		ok   bool
	}{
		{"*", "+switch-master", true},
		{"+switch-*", "+switch-master", true},
		{"+switch-*", "+sdown", false},
		{"*master", "+switch-master", true},
		{"+s?own", "+sdown", true},
		{"+s?own", "+sdownx", false},
		{"[+-]sdown", "-sdown", true},
		{"[^+]sdown", "+sdown", false},
		{"[a-c]x", "bx", true},
		{"[c-a]x", "bx", true},
		{"\\*", "*", true},
		{"\\*", "a", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"", "", true},
		{"[abc", "b", true},
	} {
		if got := globMatch(tc.p, tc.s); got != tc.ok {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.ok)
		}
	}
}

func FuzzSentinelParsers(f *testing.F) {
	f.Add([]byte("*2\r\n$4\r\nPING\r\n$1\r\nx\r\n"), "a*[b-c]?\\")
	f.Add([]byte("get k\r\n"), "[^")
	f.Add([]byte("*1\r\n$99\r\nPING\r\n"), "**")
	f.Add([]byte("*\r\n\r\n"), "0") // once panicked rawName
	f.Fuzz(func(t *testing.T, frame []byte, pattern string) {
		raw := rawName(frame, "X")
		if name, _, err := resp.CommandName(frame); err == nil && strings.ToUpper(raw) != name {
			t.Fatalf("rawName(%q) = %q, CommandName says %q", frame, raw, name)
		}
		_ = globMatch(pattern, string(frame))
	})
}

func TestSentinelRefuseNew(t *testing.T) {
	e := newEmu(t, Config{})
	old, _ := pairEndpoints(t, e)
	s1 := addSentinel(t, e, old)
	s2, err := s1.AddPeer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := dialRaw(t, s1.Addr())
	open.send("PING") // accepted before the listener closes
	open.expect("+PONG\r\n")
	s1.RefuseNew(true)
	s1.RefuseNew(true) // no change, no event
	if _, err := net.DialTimeout("tcp", s1.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial refusing sentinel: %v", err)
	}
	open.send("PING") // open connections keep being served
	open.expect("+PONG\r\n")

	// go-redis finds the master through the node that is up.
	c := failoverClientAddrs(t, e, s1.MasterName(), []string{s1.Addr(), s2.Addr()})
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if s2.Stats().MasterQueries == 0 {
		t.Fatal("the node that is up was not asked")
	}
	s1.RefuseNew(false)
	dialRaw(t, s1.Addr()).send("PING")
	n := 0
	for _, ev := range e.Events() {
		if ev.Kind == KindRefuse && ev.Endpoint == s1.Addr() {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d refuse events, want 2:\n%s", n, dumpEvents(e))
	}
}

func TestSentinelLatencyAndQueryEvents(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	s := addSentinel(t, e, old)
	c := dialRaw(t, s.Addr())
	s.SetLatency(150 * time.Millisecond)
	start := time.Now()
	c.send("SENTINEL", "get-master-addr-by-name", "db1")
	c.expect(masterReply(old))
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("answered in %v despite a 150ms latency", d)
	}
	s.SetLatency(0)
	s.SetMasterAfter(nw, 50*time.Millisecond)
	waitEvent(t, e, IsKind(nil, KindSentinelSwitch))
	c.send("SENTINEL", "get-master-addr-by-name", "db1")
	c.expect(masterReply(nw))
	var named []string
	for _, ev := range e.Events() {
		if ev.Kind == KindSentinelQuery {
			if ev.Endpoint != s.Addr() || ev.Conn == 0 {
				t.Fatalf("query event %v", ev)
			}
			named = append(named, ev.Detail)
		}
	}
	if len(named) != 2 || named[0] != old.Addr() || named[1] != nw.Addr() {
		t.Fatalf("queries named %v", named)
	}
}

// FuzzSentinelServe feeds arbitrary commands to the Discovery Service: it
// never panics, and every answer is a sequence of well-formed RESP frames.
func FuzzSentinelServe(f *testing.F) {
	for _, seed := range []string{
		"*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$3\r\ndb1\r\n",
		"HELLO 3 AUTH default x SETNAME n\r\n",
		"SUBSCRIBE a b\r\n",
		"PUNSUBSCRIBE\r\n",
		"CLIENT maint_notifications on\r\n",
		"SENTINEL replicas db1\r\n",
		"SENTINEL failover db1\r\n",
		"PING x y\r\n",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	e, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = e.Close() })
	a, err := e.AddEndpoint("127.0.0.2:0")
	if err != nil {
		f.Fatal(err)
	}
	b, err := e.AddEndpoint("127.0.0.3:0")
	if err != nil {
		f.Fatal(err)
	}
	s, err := e.AddSentinel("127.0.0.1:0", "db1", a)
	if err != nil {
		f.Fatal(err)
	}
	s.SetReplicas(b)
	f.Fuzz(func(t *testing.T, in []byte, resp3 bool) {
		br := bufio.NewReader(bytes.NewReader(in))
		c := &sconn{s: s, id: 1, resp3: resp3}
		for range 8 {
			frame, err := resp.ReadCommand(br, nil)
			if err != nil || isBlankCommand(frame) {
				return
			}
			name, args, err := resp.CommandName(frame)
			if err != nil {
				return
			}
			c.mu.Lock()
			r := c.serve(nil, name, rawName(frame, name), args)
			c.mu.Unlock()
			if len(r.out) == 0 {
				t.Fatalf("%q: no answer", frame)
			}
			ob := bufio.NewReader(bytes.NewReader(r.out))
			for {
				_, err := resp.ReadFrame(ob, nil)
				if errors.Is(err, io.EOF) {
					break // at a frame boundary: the answer is whole
				}
				if err != nil {
					t.Fatalf("%q answered %q: %v", frame, r.out, err)
				}
			}
		}
	})
}

// TestSentinelNoPushes: a RESP3 connection to the Discovery Service that
// tried to opt in receives nothing while the master it names moves and
// fails over; its questions keep being answered.
func TestSentinelNoPushes(t *testing.T) {
	e := newEmu(t, Config{})
	a, b := pairEndpoints(t, e)
	s := addSentinel(t, e, a)
	c := dialRaw(t, s.Addr())
	c.hello3()
	c.send("CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip")
	c.expect("-ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.\r\n")
	s.Moving(SentinelMoving{Moving: Moving{Window: 50 * time.Millisecond, To: b}})
	s.Failover(Failover{To: a}) // back, at once
	waitEvent(t, e, IsKind(b, KindFailedOver))
	waitEvent(t, e, IsKind(a, KindWindowEndClose))
	c.noFrameWithin(100 * time.Millisecond)
	c.send("SENTINEL", "get-master-addr-by-name", "db1")
	c.expect(masterReply(a))
	if st := s.Stats(); st.Switches != 2 || st.Handshakes != 1 || st.SwitchMessages != 0 {
		t.Fatalf("stats %+v", st)
	}
}
