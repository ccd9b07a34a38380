package resp

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// cmdOf encodes args as a RESP command.
func cmdOf(args ...string) string {
	b := AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = AppendBulk(b, a)
	}
	return string(b)
}

// seenCmd is a copy of a Cmd taken in OnCommand.
type seenCmd struct {
	Kind CmdKind
	Argc int
	Name string
	Args []string
}

func (c seenCmd) String() string { return fmt.Sprintf("%v %d %q %q", c.Kind, c.Argc, c.Name, c.Args) }

func copyCmd(c *Cmd) seenCmd {
	s := seenCmd{Kind: c.Kind, Argc: c.Argc, Name: string(c.Name())}
	for i := 0; c.Arg(i) != nil; i++ {
		s.Args = append(s.Args, string(c.Arg(i)))
	}
	return s
}

// scanAll feeds in to a new CmdScanner in chunks of the given size (0 means
// all at once) and returns what it reported.
func scanAll(in []byte, chunk int) (cmds []seenCmd, malformed int) {
	s := &CmdScanner{
		OnCommand:   func(c *Cmd) { cmds = append(cmds, copyCmd(c)) },
		OnMalformed: func(error) { malformed++ },
	}
	if chunk <= 0 {
		chunk = len(in) + 1
	}
	for len(in) > 0 {
		n := min(chunk, len(in))
		s.Scan(in[:n])
		in = in[n:]
	}
	return cmds, malformed
}

func TestCmdScanner(t *testing.T) {
	long := strings.Repeat("k", 40)
	cases := []struct {
		in   string
		want seenCmd
	}{
		{cmdOf("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip"),
			seenCmd{CmdClient, 4, "client", []string{"maint_notifications", "on", "moving-endpoint-type", "internal-ip"}}},
		{cmdOf("GET", long), seenCmd{CmdOther, 1, "GET", []string{long[:CmdArgMax]}}},
		{cmdOf("mset", "a", "1", "b", "2", "c", "3"), seenCmd{CmdOther, 6, "mset", []string{"a", "1", "b", "2"}}},
		{cmdOf("PING"), seenCmd{CmdOther, 0, "PING", nil}},
		{cmdOf("subscribe", "c"), seenCmd{CmdSubscribe, 1, "subscribe", []string{"c"}}},
		{cmdOf("PSUBSCRIBE", "c*"), seenCmd{CmdSubscribe, 1, "PSUBSCRIBE", []string{"c*"}}},
		{cmdOf("ssubscribe", "c"), seenCmd{CmdSubscribe, 1, "ssubscribe", []string{"c"}}},
		{cmdOf("unsubscribe"), seenCmd{CmdUnsubscribe, 0, "unsubscribe", nil}},
		{cmdOf("PUNSUBSCRIBE"), seenCmd{CmdUnsubscribe, 0, "PUNSUBSCRIBE", nil}},
		{cmdOf("SUnsubscribe"), seenCmd{CmdUnsubscribe, 0, "SUnsubscribe", nil}},
		{cmdOf("multi"), seenCmd{CmdMulti, 0, "multi", nil}},
		{cmdOf("exec"), seenCmd{CmdExec, 0, "exec", nil}},
		{cmdOf("discard"), seenCmd{CmdDiscard, 0, "discard", nil}},
		{cmdOf("watch", "k"), seenCmd{CmdWatch, 1, "watch", []string{"k"}}},
		{cmdOf("unwatch"), seenCmd{CmdUnwatch, 0, "unwatch", nil}},
		{cmdOf("hello", "3"), seenCmd{CmdHello, 1, "hello", []string{"3"}}},
		{cmdOf("quit"), seenCmd{CmdQuit, 0, "quit", nil}},
		{cmdOf("reset"), seenCmd{CmdReset, 0, "reset", nil}},
		{cmdOf("monitor"), seenCmd{CmdMonitor, 0, "monitor", nil}},
		{cmdOf("blpop", "q", "0"), seenCmd{CmdBlocking, 2, "blpop", []string{"q", "0"}}},
		{cmdOf("BRPOPLPUSH", "a", "b", "0"), seenCmd{CmdBlocking, 3, "BRPOPLPUSH", []string{"a", "b", "0"}}},
		{cmdOf("wait", "1", "0"), seenCmd{CmdBlocking, 2, "wait", []string{"1", "0"}}},
		{cmdOf("WAITAOF", "1", "0", "0"), seenCmd{CmdBlocking, 3, "WAITAOF", []string{"1", "0", "0"}}},
		{cmdOf("xread", "count", "1", "block", "0", "streams", "s", "$"),
			seenCmd{CmdBlocking, 7, "xread", []string{"count", "1", "block", "0"}}},
		{cmdOf("XREAD", "STREAMS", "block", "0"), seenCmd{CmdOther, 3, "XREAD", []string{"STREAMS", "block", "0"}}},
		{cmdOf("XREAD", "COUNT", "block", "STREAMS", "s", "0"), seenCmd{CmdOther, 5, "XREAD", []string{"COUNT", "block", "STREAMS", "s"}}},
		{cmdOf("xreadgroup", "GROUP", "block", "c", "NOACK", "BLOCK", "10", "STREAMS", "s", ">"),
			seenCmd{CmdBlocking, 9, "xreadgroup", []string{"GROUP", "block", "c", "NOACK"}}},
		{cmdOf("XREADGROUP", "GROUP", "block", "block", "STREAMS", "s", ">"),
			seenCmd{CmdOther, 6, "XREADGROUP", []string{"GROUP", "block", "block", "STREAMS"}}},
		{cmdOf("set", "k", ""), seenCmd{CmdOther, 2, "set", []string{"k", ""}}},
		{cmdOf(strings.Repeat("b", 40)), seenCmd{CmdOther, 0, strings.Repeat("b", CmdArgMax), nil}},
	}
	var all string
	var want []string
	for _, c := range cases {
		all += c.in + "*0\r\n"
		want = append(want, c.want.String())
	}
	for _, chunk := range []int{0, 1, 2, 3, 7, 64} {
		got, bad := scanAll([]byte(all), chunk)
		if bad != 0 || len(got) != len(want) {
			t.Fatalf("chunk %d: %d commands, %d malformed", chunk, len(got), bad)
		}
		for i := range got {
			if got[i].String() != want[i] {
				t.Errorf("chunk %d: got %s, want %s", chunk, got[i], want[i])
			}
		}
	}
}

func TestCmdScannerMalformed(t *testing.T) {
	for _, in := range []string{
		"PING\r\n",
		"*1\r\n+PING\r\n",
		"*-1\r\n",
		"*1\r\n$-1\r\n",
		"*1\r\n$4\r\nPINGX\r\n",
		"*1\r\n$4\r\nPING\n",
		"*1\r\n$4\r\nPING\r\r",
		"*\r\n",
		"*1\n",
		"*99999999999\r\n",
		"*1\r\n$536870913\r\n",
	} {
		var errs []error
		s := &CmdScanner{
			OnCommand:   func(*Cmd) { t.Errorf("%q: OnCommand called", in) },
			OnMalformed: func(err error) { errs = append(errs, err) },
		}
		s.Scan([]byte(in))
		s.Scan([]byte(cmdOf("PING") + "garbage"))
		if len(errs) != 1 || !errors.Is(errs[0], ErrMalformed) || !strings.HasPrefix(errs[0].Error(), "resp: ") {
			t.Errorf("%q: OnMalformed got %v", in, errs)
		}
	}
}

func TestCmdScannerZeroAlloc(t *testing.T) {
	in := []byte(cmdOf("xreadgroup", "GROUP", "g", "c", "BLOCK", "10", "STREAMS", "s", ">") + cmdOf("set", "key", strings.Repeat("v", 100)))
	n := 0
	s := &CmdScanner{OnCommand: func(*Cmd) { n++ }}
	if a := testing.AllocsPerRun(100, func() { s.Scan(in[:7]); s.Scan(in[7:]) }); a != 0 {
		t.Fatalf("%v allocs per Scan", a)
	}
	if n == 0 {
		t.Fatal("no command seen")
	}
}

func TestKindStrings(t *testing.T) {
	if CmdBlocking.String() != "blocking" || CmdKind(200).String() != "CmdKind(200)" {
		t.Fatal(CmdBlocking.String(), CmdKind(200).String())
	}
}
