package resp

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestKind(t *testing.T) {
	for k := KindMoving; k <= KindSMigrated; k++ {
		got, ok := KindOf([]byte(k.String()))
		if !ok || got != k {
			t.Errorf("KindOf(%q) = %v, %v", k.String(), got, ok)
		}
	}
	for _, name := range []string{"", "moving", "MOVED", "MOVING ", "message"} {
		if _, ok := KindOf([]byte(name)); ok {
			t.Errorf("KindOf(%q) matched", name)
		}
	}
	if s := Kind(0).String(); s != "Kind(0)" {
		t.Errorf("Kind(0).String() = %q", s)
	}
	name := []byte("FAILED_OVER")
	if a := testing.AllocsPerRun(100, func() { KindOf(name) }); a != 0 {
		t.Errorf("KindOf allocates %v times", a)
	}
}

func TestParsePushProtocolExamples(t *testing.T) {
	want := map[string]Notification{
		"MOVING":       {Kind: KindMoving, Seq: 1, Time: 15, HasTime: true, Endpoint: "10.0.0.2:12000"},
		"MOVING null":  {Kind: KindMoving, Seq: 2, Time: 15, HasTime: true, Null: true},
		"MIGRATING":    {Kind: KindMigrating, Seq: 3, Time: 5, HasTime: true, Shards: `["1"]`},
		"MIGRATED":     {Kind: KindMigrated, Seq: 4, Shards: `["1"]`},
		"FAILING_OVER": {Kind: KindFailingOver, Seq: 5, Time: -2, HasTime: true, Shards: `["1","2"]`},
		"FAILED_OVER":  {Kind: KindFailedOver, Seq: 6, Shards: `["1","2"]`},
		"SMIGRATING":   {Kind: KindSMigrating, Seq: 7, Slots: "123,456,789-1000"},
		"SMIGRATED": {Kind: KindSMigrated, Seq: 8,
			Moves: []SlotMove{{Src: "10.0.0.1:7000", Dst: "10.0.0.2:7001", Slots: "0-100"}}},
	}
	for _, ex := range protocolExamples {
		got, err := ParsePush([]byte(ex.wire))
		if err != nil {
			t.Errorf("%s: %v", ex.name, err)
			continue
		}
		if !reflect.DeepEqual(got, want[ex.name]) {
			t.Errorf("%s:\n got %+v\nwant %+v", ex.name, got, want[ex.name])
		}
	}
}

func TestParsePushVariants(t *testing.T) {
	cases := []struct {
		name, wire string
		want       Notification
	}{
		{"simple-string name", ">4\r\n+MOVING\r\n:1\r\n:15\r\n+h:1\r\n",
			Notification{Kind: KindMoving, Seq: 1, Time: 15, HasTime: true, Endpoint: "h:1"}},
		{"MOVING $-1 endpoint", ">4\r\n$6\r\nMOVING\r\n:9\r\n:0\r\n$-1\r\n",
			Notification{Kind: KindMoving, Seq: 9, HasTime: true, Null: true}},
		{"MOVING without endpoint", ">3\r\n$6\r\nMOVING\r\n:9\r\n:30\r\n",
			Notification{Kind: KindMoving, Seq: 9, Time: 30, HasTime: true, Null: true}},
		{"MOVING string integers", ">4\r\n$6\r\nMOVING\r\n$2\r\n12\r\n+-3\r\n$3\r\nh:1\r\n",
			Notification{Kind: KindMoving, Seq: 12, Time: -3, HasTime: true, Endpoint: "h:1"}},
		{"MOVING extra element ignored", ">5\r\n$6\r\nMOVING\r\n:1\r\n:2\r\n$3\r\nh:1\r\n*1\r\n:1\r\n",
			Notification{Kind: KindMoving, Seq: 1, Time: 2, HasTime: true, Endpoint: "h:1"}},
		{"MIGRATING name+seq", ">2\r\n$9\r\nMIGRATING\r\n:5\r\n",
			Notification{Kind: KindMigrating, Seq: 5}},
		{"MIGRATING name+seq+shards (go-redis e2e)", ">3\r\n$9\r\nMIGRATING\r\n:5\r\n$4\r\n1000\r\n",
			Notification{Kind: KindMigrating, Seq: 5, Shards: "1000"}},
		{"MIGRATING name+seq+time", ">3\r\n$9\r\nMIGRATING\r\n:5\r\n:0\r\n",
			Notification{Kind: KindMigrating, Seq: 5, HasTime: true}},
		{"FAILING_OVER name+seq (go-redis e2e)", ">2\r\n$12\r\nFAILING_OVER\r\n:8\r\n",
			Notification{Kind: KindFailingOver, Seq: 8}},
		{"FAILING_OVER shards array", ">4\r\n$12\r\nFAILING_OVER\r\n:8\r\n:1\r\n*2\r\n$1\r\n1\r\n:2\r\n",
			Notification{Kind: KindFailingOver, Seq: 8, Time: 1, HasTime: true, Shards: "1,2"}},
		{"MIGRATED name+seq", ">2\r\n+MIGRATED\r\n:5\r\n",
			Notification{Kind: KindMigrated, Seq: 5}},
		{"FAILED_OVER null shards", ">3\r\n$11\r\nFAILED_OVER\r\n:5\r\n_\r\n",
			Notification{Kind: KindFailedOver, Seq: 5}},
		{"SMIGRATING several slot strings (go-redis e2e)", ">4\r\n$10\r\nSMIGRATING\r\n:1\r\n$3\r\n123\r\n$5\r\n1-100\r\n",
			Notification{Kind: KindSMigrating, Seq: 1, Slots: "123,1-100"}},
		{"SMIGRATED simple strings, pair entry", ">3\r\n+SMIGRATED\r\n:2\r\n*2\r\n*3\r\n+a:1\r\n+b:2\r\n+1-5\r\n*2\r\n+c:3\r\n+7\r\n",
			Notification{Kind: KindSMigrated, Seq: 2, Moves: []SlotMove{{"a:1", "b:2", "1-5"}, {"", "c:3", "7"}}}},
		{"attribute before an element", ">3\r\n$8\r\nMIGRATED\r\n|1\r\n+k\r\n+v\r\n:5\r\n$1\r\nx\r\n",
			Notification{Kind: KindMigrated, Seq: 5, Shards: "x"}},
	}
	for _, c := range cases {
		got, err := ParsePush([]byte(c.wire))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestParsePushErrors(t *testing.T) {
	bad := []string{
		"",
		">",
		"*2\r\n$6\r\nMOVING\r\n:1\r\n",
		">0\r\n",
		">1\r\n:1\r\n",
		">1\r\n$6\r\nMOVING\r\n",
		">2\r\n$6\r\nMOVING\r\n:1\r\n",
		">3\r\n$6\r\nMOVING\r\n:1\r\n$2\r\nab\r\n",
		">3\r\n$6\r\nMOVING\r\n$1\r\nx\r\n:1\r\n",
		">4\r\n$6\r\nMOVING\r\n:1\r\n:1\r\n:1\r\n",
		">3\r\n$6\r\nMOVING\r\n:99999999999999999999\r\n:1\r\n",
		">4\r\n$9\r\nMIGRATING\r\n:1\r\n$1\r\nx\r\n$1\r\ny\r\n",
		">3\r\n$9\r\nMIGRATING\r\n:1\r\n#t\r\n",
		">3\r\n$9\r\nSMIGRATED\r\n:1\r\n$1\r\nx\r\n",
		">3\r\n$9\r\nSMIGRATED\r\n:1\r\n*1\r\n*1\r\n$1\r\nx\r\n",
		">3\r\n$9\r\nSMIGRATED\r\n:1\r\n*1\r\n*3\r\n$1\r\nx\r\n:1\r\n$1\r\nx\r\n",
		">2\r\n$6\r\nMOVING\r\n:1\r\n+trailing\r\n",
		">3\r\n$6\r\nMOVING\r\n:1\r\n", // truncated
		">2\r\n$6\r\nMOVING\r\n:1\r\nx",
	}
	for _, f := range bad {
		_, err := ParsePush([]byte(f))
		if err == nil || !strings.HasPrefix(err.Error(), "resp: ") || !errors.Is(err, ErrMalformed) {
			t.Errorf("ParsePush(%q): want malformed error, got %v", f, err)
		}
	}
	for _, f := range []string{">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", ">2\r\n$6\r\nmoving\r\n:1\r\n"} {
		_, err := ParsePush([]byte(f))
		if !errors.Is(err, ErrUnknownPush) || !strings.HasPrefix(err.Error(), "resp: ") {
			t.Errorf("ParsePush(%q): want ErrUnknownPush, got %v", f, err)
		}
	}
}

func TestFrameLenAndPushName(t *testing.T) {
	mv := AppendMoving(nil, 1, 15, "10.0.0.2:12000", false)
	both := append(append([]byte{}, mv...), "+OK\r\n"...)
	if n := FrameLen(both); n != len(mv) {
		t.Fatalf("FrameLen = %d, want %d", n, len(mv))
	}
	if n := FrameLen(mv[:len(mv)-1]); n != 0 {
		t.Fatalf("FrameLen of a partial frame = %d, want 0", n)
	}
	if n := FrameLen([]byte("?garbage")); n != 0 {
		t.Fatalf("FrameLen of garbage = %d", n)
	}
	if name, ok := PushName(mv); !ok || string(name) != "MOVING" {
		t.Fatalf("PushName = %q, %v", name, ok)
	}
	for _, f := range []string{"+OK\r\n", ">0\r\n", ">1\r\n:1\r\n", ""} {
		if _, ok := PushName([]byte(f)); ok {
			t.Fatalf("PushName(%q) reported a name", f)
		}
	}
	if name, ok := PushName([]byte(">2\r\n+invalidate\r\n*1\r\n$3\r\nfoo\r\n")); !ok || string(name) != "invalidate" {
		t.Fatalf("simple-string name: %q %v", name, ok)
	}
}

func TestStripperAtBoundary(t *testing.T) {
	var s Stripper
	if !s.AtBoundary() {
		t.Fatal("a new Stripper is at a boundary")
	}
	buf := make([]byte, 64)
	funcs(&s).StripFunc = func([]byte) bool { return true }
	// A whole reply: back at a boundary.
	if _, err := s.Read(bytes.NewReader([]byte("+OK\r\n")), buf); err != nil {
		t.Fatal(err)
	}
	if !s.AtBoundary() {
		t.Fatal("after a whole reply")
	}
	// Half a bulk: not at a boundary.
	if _, err := s.Read(bytes.NewReader([]byte("$5\r\nab")), buf); err != nil {
		t.Fatal(err)
	}
	if s.AtBoundary() {
		t.Fatal("inside a bulk")
	}
}
