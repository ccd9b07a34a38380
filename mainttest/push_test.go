package mainttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// TestMovingExampleBytes reproduces protocol.md's MOVING example exactly:
// seq 1 (first event of a fresh emulator), 15 s, endpoint 10.0.0.2:12000
// (the successor listens on port 12000 and advertises FQDN "10.0.0.2").
func TestMovingExampleBytes(t *testing.T) {
	e := newEmu(t, Config{})
	old := addEndpoint(t, e, "127.0.0.2:0")
	to, err := e.AddEndpoint("127.0.0.3:12000")
	if err != nil {
		t.Skipf("port 12000 busy on 127.0.0.3: %v", err)
	}
	to.SetFQDN("10.0.0.2")
	c := optedInClient(t, old, "internal-fqdn")
	if seq := old.Moving(Moving{Window: 15 * time.Second, To: to}); seq != 1 {
		t.Fatalf("seq %d, want 1", seq)
	}
	c.expect(">4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n$14\r\n10.0.0.2:12000\r\n")

	// protocol.md's null example is seq 2.
	if seq := old.Moving(Moving{Window: 15 * time.Second, To: to, Null: true}); seq != 2 {
		t.Fatalf("seq %d, want 2", seq)
	}
	c.expect(">4\r\n$6\r\nMOVING\r\n:2\r\n:15\r\n_\r\n")
}

// TestMovingEndpointPerType: each connection gets the endpoint its
// requested type asks for, all with the same seq.
func TestMovingEndpointPerType(t *testing.T) {
	e := newEmu(t, Config{})
	old, nw := pairEndpoints(t, e)
	nw.SetFQDN("node-b.test")
	clients := map[string]*rawClient{}
	for _, typ := range []string{"internal-ip", "external-ip", "internal-fqdn", "external-fqdn", "none", ""} {
		clients[typ] = optedInClient(t, old, typ)
	}
	plain := dialRaw(t, old.Addr()) // RESP3, not opted in
	plain.hello3()

	seq := old.Moving(Moving{Window: 1500 * time.Millisecond, To: nw})
	ip := nw.IP() + ":" + nw.Port()
	fqdn := "node-b.test:" + nw.Port()
	want := map[string]string{
		"internal-ip":   string(resp.AppendMoving(nil, seq, 2, ip, false)),
		"external-ip":   string(resp.AppendMoving(nil, seq, 2, ip, false)),
		"":              string(resp.AppendMoving(nil, seq, 2, ip, false)),
		"internal-fqdn": string(resp.AppendMoving(nil, seq, 2, fqdn, false)),
		"external-fqdn": string(resp.AppendMoving(nil, seq, 2, fqdn, false)),
		"none":          fmt.Sprintf(">4\r\n$6\r\nMOVING\r\n:%d\r\n:2\r\n_\r\n", seq),
	}
	for typ, c := range clients {
		c.expect(want[typ])
	}
	// Literal bytes for one of them, independent of the encoder.
	if w := fmt.Sprintf(">4\r\n$6\r\nMOVING\r\n:%d\r\n:2\r\n$%d\r\n%s\r\n", seq, len(ip), ip); want["internal-ip"] != w {
		t.Fatalf("encoder %q, literal %q", want["internal-ip"], w)
	}
	ev := waitEvent(t, e, IsKind(old, KindMoving))
	if ev.Seq != seq || ev.Detail != fmt.Sprintf("time=2 window=1.5s to=%s conns=6", nw.Addr()) {
		t.Fatalf("event %v", ev)
	}
	if r := plain.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("not opted in got %q", r)
	}
}

// TestEventPushBytes checks every other push against protocol.md section 2.
func TestEventPushBytes(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	c := optedInClient(t, ep, "internal-ip")

	seq := ep.Migrating(2*time.Second, `["1"]`)
	c.expect(fmt.Sprintf(">4\r\n$9\r\nMIGRATING\r\n:%d\r\n:2\r\n$5\r\n[\"1\"]\r\n", seq))
	seq2 := ep.Migrated(`["1"]`)
	if seq2 <= seq {
		t.Fatalf("completion seq %d not after %d", seq2, seq)
	}
	c.expect(fmt.Sprintf(">3\r\n$8\r\nMIGRATED\r\n:%d\r\n$5\r\n[\"1\"]\r\n", seq2))

	shards := `["1","2"]`
	seq = ep.FailingOver(1500*time.Millisecond, shards)
	want := fmt.Sprintf(">4\r\n$12\r\nFAILING_OVER\r\n:%d\r\n:2\r\n$%d\r\n%s\r\n", seq, len(shards), shards)
	if enc := string(resp.AppendFailingOver(nil, seq, 2, shards)); enc != want {
		t.Fatalf("encoder %q, literal %q", enc, want)
	}
	c.expect(want)
	seq = ep.FailedOver(shards)
	c.expect(fmt.Sprintf(">3\r\n$11\r\nFAILED_OVER\r\n:%d\r\n$%d\r\n%s\r\n", seq, len(shards), shards))

	seq = ep.SMigrating("123,456,789-1000")
	c.expect(fmt.Sprintf(">3\r\n$10\r\nSMIGRATING\r\n:%d\r\n$16\r\n123,456,789-1000\r\n", seq))
	seq = ep.SMigrated(SlotMove{Src: "10.0.0.1:7000", Dst: "10.0.0.2:7001", Slots: "0-100"})
	c.expect(fmt.Sprintf(">3\r\n$9\r\nSMIGRATED\r\n:%d\r\n*1\r\n*3\r\n$13\r\n10.0.0.1:7000\r\n$13\r\n10.0.0.2:7001\r\n$5\r\n0-100\r\n", seq))

	raw := ">2\r\n$7\r\nUNKNOWN\r\n:-1\r\n"
	ep.SendRaw([]byte(raw))
	c.expect(raw)

	// Still a working connection.
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING: %q", r)
	}
}

// TestSeqIncreasing: seq ids are shared across types and endpoints.
func TestSeqIncreasing(t *testing.T) {
	e := newEmu(t, Config{})
	a := addEndpoint(t, e, "127.0.0.2:0")
	b := addEndpoint(t, e, "127.0.0.3:0")
	var last int64
	for i, s := range []int64{
		a.Migrating(0, "x"), b.FailingOver(0, "y"), a.Migrated("x"), b.FailedOver("y"),
		a.SMigrating("1"), b.SMigrated(), a.Moving(Moving{Window: time.Hour}),
	} {
		if s <= last {
			t.Fatalf("seq #%d = %d after %d", i, s, last)
		}
		last = s
	}
}

// TestPushAtFrameBoundary: a pipeline of big replies while events fire;
// client-side framing must never see a push inside a reply. Events are
// injected in lockstep with the replies read (bounded, whatever the speed),
// while later replies are still being written.
func TestPushAtFrameBoundary(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	c := optedInClient(t, ep, "internal-ip")
	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	if r := c.do("SET", "big", string(big)); r != "+OK\r\n" {
		t.Fatalf("SET: %q", r)
	}
	const n = 200
	var pipeline []byte
	for i := 0; i < n; i++ {
		pipeline = append(pipeline, encodeCmd("GET", "big")...)
		pipeline = append(pipeline, encodeCmd("PING")...)
	}
	const noop = ">2\r\n$4\r\nNOOP\r\n:1\r\n"
	fired := 0
	fire := func() {
		switch fired % 3 {
		case 0:
			ep.Migrating(0, `["1"]`)
		case 1:
			ep.SendRaw([]byte(noop))
		case 2:
			ep.Migrated(`["1"]`)
		}
		fired++
	}
	written := make(chan error, 1)
	go func() { _, err := c.nc.Write(pipeline); written <- err }()
	fire()
	wantGet := string(resp.AppendBulk(nil, big))
	replies, pushes, between := 0, 0, 0
	for replies < 2*n {
		f := c.read()
		if f[0] == '>' {
			if _, err := resp.ParsePush([]byte(f)); err != nil && f != noop {
				t.Fatalf("bad push %q: %v", f, err)
			}
			pushes++
			if replies > 0 {
				between++
			}
			continue
		}
		want := wantGet
		if replies%2 == 1 {
			want = "+PONG\r\n"
		}
		if f != want {
			t.Fatalf("reply %d corrupted (len %d, want len %d)", replies, len(f), len(want))
		}
		replies++
		if replies < 2*n {
			fire()
		}
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	for pushes < fired { // the last ones may follow the last reply
		if f := c.read(); f[0] != '>' {
			t.Fatalf("unexpected %q", f)
		}
		pushes++
	}
	t.Logf("%d replies, %d pushes, %d of them between replies", replies, pushes, between)
	if between < n/4 {
		t.Fatalf("only %d pushes landed between replies", between)
	}
	// HELLO, SET and the pipeline; the handshake is not relayed.
	if s := ep.Stats(); s.Served != 2*n+2 {
		t.Fatalf("served %d, want %d", s.Served, 2*n+2)
	}
}
