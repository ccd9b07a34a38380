package resp

import (
	"errors"
	"testing"
)

// Nothing in package resp starts a goroutine, so its tests need no goroutine
// leak check (goleak).

// protocolExamples are the byte sequences of docs/protocol.md section 2, with
// the <placeholders> filled in. Other tests (ParsePush, fuzz seeds) reuse them.
var protocolExamples = []struct {
	name  string
	wire  string
	build func() []byte
}{
	{"MOVING", ">4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n$14\r\n10.0.0.2:12000\r\n",
		func() []byte { return AppendMoving(nil, 1, 15, "10.0.0.2:12000", false) }},
	{"MOVING null", ">4\r\n$6\r\nMOVING\r\n:2\r\n:15\r\n_\r\n",
		func() []byte { return AppendMoving(nil, 2, 15, "ignored", true) }},
	{"MIGRATING", ">4\r\n$9\r\nMIGRATING\r\n:3\r\n:5\r\n$5\r\n[\"1\"]\r\n",
		func() []byte { return AppendMigrating(nil, 3, 5, `["1"]`) }},
	{"MIGRATED", ">3\r\n$8\r\nMIGRATED\r\n:4\r\n$5\r\n[\"1\"]\r\n",
		func() []byte { return AppendMigrated(nil, 4, `["1"]`) }},
	{"FAILING_OVER", ">4\r\n$12\r\nFAILING_OVER\r\n:5\r\n:-2\r\n$9\r\n[\"1\",\"2\"]\r\n",
		func() []byte { return AppendFailingOver(nil, 5, -2, `["1","2"]`) }},
	{"FAILED_OVER", ">3\r\n$11\r\nFAILED_OVER\r\n:6\r\n$9\r\n[\"1\",\"2\"]\r\n",
		func() []byte { return AppendFailedOver(nil, 6, `["1","2"]`) }},
	{"SMIGRATING", ">3\r\n$10\r\nSMIGRATING\r\n:7\r\n$16\r\n123,456,789-1000\r\n",
		func() []byte { return AppendSMigrating(nil, 7, "123,456,789-1000") }},
	{"SMIGRATED", ">3\r\n$9\r\nSMIGRATED\r\n:8\r\n*1\r\n*3\r\n$13\r\n10.0.0.1:7000\r\n$13\r\n10.0.0.2:7001\r\n$5\r\n0-100\r\n",
		func() []byte {
			return AppendSMigrated(nil, 8, []SlotMove{{Src: "10.0.0.1:7000", Dst: "10.0.0.2:7001", Slots: "0-100"}})
		}},
}

func TestEncodersMatchProtocolDoc(t *testing.T) {
	for _, ex := range protocolExamples {
		if got := string(ex.build()); got != ex.wire {
			t.Errorf("%s:\n got %q\nwant %q", ex.name, got, ex.wire)
		}
	}
}

func TestAppendPushMatchesDedicatedEncoders(t *testing.T) {
	cases := []struct {
		got, want []byte
	}{
		{AppendPush(nil, "MOVING", 1, int64(15), "10.0.0.2:12000"), AppendMoving(nil, 1, 15, "10.0.0.2:12000", false)},
		{AppendPush(nil, "MOVING", 2, 15, nil), AppendMoving(nil, 2, 15, "", true)},
		{AppendPush(nil, "MIGRATED", 4, `["1"]`), AppendMigrated(nil, 4, `["1"]`)},
		{AppendPush(nil, "SMIGRATED", 8, []SlotMove{{"a", "b", "1"}}), AppendSMigrated(nil, 8, []SlotMove{{"a", "b", "1"}})},
	}
	for i, c := range cases {
		if string(c.got) != string(c.want) {
			t.Errorf("case %d: got %q want %q", i, c.got, c.want)
		}
	}
}

func TestAppendValue(t *testing.T) {
	cases := []struct {
		v    any
		want string
	}{
		{nil, "_\r\n"},
		{"", "$0\r\n\r\n"},
		{[]byte("ab"), "$2\r\nab\r\n"},
		{-7, ":-7\r\n"},
		{uint8(7), ":7\r\n"},
		{uint64(1 << 63), "(9223372036854775808\r\n"},
		{true, "#t\r\n"},
		{false, "#f\r\n"},
		{1.5, ",1.5\r\n"},
		{errors.New("ERR x\ny"), "-ERR x y\r\n"},
		{[]string{"a"}, "*1\r\n$1\r\na\r\n"},
		{[]any{1, []any{nil}}, "*2\r\n:1\r\n*1\r\n_\r\n"},
	}
	for _, c := range cases {
		if got := string(AppendValue(nil, c.v)); got != c.want {
			t.Errorf("AppendValue(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("AppendValue(struct{}{}) did not panic")
		}
	}()
	AppendValue(nil, struct{}{})
}

func TestAppendHelpers(t *testing.T) {
	cases := []struct{ got, want string }{
		{string(AppendBulk([]byte("x"), "hello")), "x$5\r\nhello\r\n"},
		{string(AppendBulk(nil, []byte{})), "$0\r\n\r\n"},
		{string(AppendSimple(nil, "OK")), "+OK\r\n"},
		{string(AppendSimple(nil, "a\r\nb")), "+a  b\r\n"},
		{string(AppendError(nil, "ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.")),
			"-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.\r\n"},
		{string(AppendInt(nil, 0)), ":0\r\n"},
		{string(AppendInt(nil, -9223372036854775808)), ":-9223372036854775808\r\n"},
		{string(AppendNull(nil)), "_\r\n"},
		{string(AppendArrayHeader(nil, 3)), "*3\r\n"},
		{string(AppendPushHeader(nil, 0)), ">0\r\n"},
		{string(AppendMapHeader(nil, 2)), "%2\r\n"},
	}
	for i, c := range cases {
		if c.got != c.want {
			t.Errorf("case %d: got %q want %q", i, c.got, c.want)
		}
	}
}
