package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// fuzzFrames are real frames used to seed the fuzzers.
func fuzzFrames() []string {
	frames := []string{
		"+OK\r\n", "-ERR x\r\n", ":1\r\n", "$5\r\nhello\r\n", "$-1\r\n", "*-1\r\n", "_\r\n",
		",3.14\r\n", "#t\r\n", "(1\r\n", "=7\r\ntxt:abc\r\n", "!3\r\nERR\r\n",
		"*2\r\n$1\r\na\r\n:1\r\n", "%1\r\n+k\r\n+v\r\n", "~1\r\n+a\r\n", "|1\r\n+a\r\n+b\r\n",
		"*1\r\n|1\r\n+k\r\n+v\r\n:1\r\n",
		">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nmsg\r\n",
		">2\r\n+S\r\n:1\r\n",
		">2\r\n$9\r\nMIGRATING\r\n:5\r\n",
		">3\r\n$9\r\nMIGRATING\r\n:5\r\n$4\r\n1000\r\n",
		">2\r\n$12\r\nFAILING_OVER\r\n:8\r\n",
		">4\r\n$10\r\nSMIGRATING\r\n:1\r\n$3\r\n123\r\n$5\r\n1-100\r\n",
		">3\r\n+SMIGRATED\r\n:2\r\n*1\r\n*2\r\n+c:3\r\n+7\r\n",
	}
	for _, ex := range protocolExamples {
		frames = append(frames, ex.wire)
	}
	return frames
}

func FuzzReadFrame(f *testing.F) {
	for _, fr := range fuzzFrames() {
		f.Add([]byte(fr))
		f.Add([]byte(fr + fr))
		f.Add([]byte(fr[:len(fr)/2]))
	}
	for _, in := range stripperCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// Frame the whole input twice, through a tiny and a large buffer:
		// the results must agree.
		small := bufio.NewReaderSize(bytes.NewReader(in), 16)
		large := bufio.NewReaderSize(bytes.NewReader(in), 4096)
		off := 0
		for {
			a, errA := ReadFrame(small, nil)
			b, errB := ReadFrame(large, nil)
			// On error the partial bytes may differ, the kind of error not.
			if (errA == nil) != (errB == nil) || errA == nil && !bytes.Equal(a, b) ||
				errors.Is(errA, ErrMalformed) != errors.Is(errB, ErrMalformed) ||
				errors.Is(errA, io.ErrUnexpectedEOF) != errors.Is(errB, io.ErrUnexpectedEOF) {
				t.Fatalf("buffer size changes the result: %q %v / %q %v", a, errA, b, errB)
			}
			if errA != nil {
				if errA != io.EOF && !strings.HasPrefix(errA.Error(), "resp: ") {
					t.Fatalf("error without resp: prefix: %v", errA)
				}
				if errA == io.EOF && off != len(in) {
					t.Fatalf("io.EOF at offset %d of %d", off, len(in))
				}
				return
			}
			if !bytes.HasPrefix(in[off:], a) {
				t.Fatalf("frame %q is not the input at %d", a, off)
			}
			// The in-memory framer agrees on where the frame ends.
			if end, err := skipValue(a, 0); err != nil || end != len(a) {
				t.Fatalf("skipValue(%q) = %d, %v", a, end, err)
			}
			off += len(a)
		}
	})
}

func FuzzParsePush(f *testing.F) {
	for _, fr := range fuzzFrames() {
		f.Add([]byte(fr))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		n, err := ParsePush(in)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "resp: ") {
				t.Fatalf("error without resp: prefix: %v", err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownPush) {
				t.Fatalf("error wraps neither ErrMalformed nor ErrUnknownPush: %v", err)
			}
			return
		}
		// Round-trip through the encoders where the full form applies.
		var enc []byte
		switch n.Kind {
		case KindMoving:
			enc = AppendMoving(nil, n.Seq, n.Time, n.Endpoint, n.Null)
		case KindMigrating:
			if n.HasTime {
				enc = AppendMigrating(nil, n.Seq, n.Time, n.Shards)
			}
		case KindFailingOver:
			if n.HasTime {
				enc = AppendFailingOver(nil, n.Seq, n.Time, n.Shards)
			}
		case KindMigrated:
			enc = AppendMigrated(nil, n.Seq, n.Shards)
		case KindFailedOver:
			enc = AppendFailedOver(nil, n.Seq, n.Shards)
		case KindSMigrating:
			enc = AppendSMigrating(nil, n.Seq, n.Slots)
		case KindSMigrated:
			enc = AppendSMigrated(nil, n.Seq, n.Moves)
		default:
			t.Fatalf("invalid kind %v", n.Kind)
		}
		if enc == nil {
			return
		}
		back, err := ParsePush(enc)
		if err != nil {
			t.Fatalf("re-encoded %+v as %q: %v", n, enc, err)
		}
		if len(back.Moves) == 0 && len(n.Moves) == 0 {
			back.Moves, n.Moves = nil, nil
		}
		if !reflect.DeepEqual(back, n) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", back, n)
		}
	})
}

// fuzzChunks turns fuzz bytes into a chunking for chunkReader: sizes 0 to
// 39 (0 is a (0, nil) read), at most 64 of them, nil when all are 0.
func fuzzChunks(b []byte) []int {
	var sizes []int
	nonzero := false
	for _, c := range b[:min(len(b), 64)] {
		sizes = append(sizes, int(c)%40)
		nonzero = nonzero || c%40 != 0
	}
	if !nonzero {
		return nil
	}
	return sizes
}

func FuzzStripper(f *testing.F) {
	for _, fr := range fuzzFrames() {
		f.Add([]byte("+OK\r\n"+fr+"$3\r\nabc\r\n"), []byte{3, 1, 7}, uint16(5), uint16(0), false)
	}
	for _, in := range stripperCases {
		f.Add([]byte(in), []byte{1}, uint16(4096), uint16(8), true)
		f.Add([]byte(in), []byte{13, 0, 2}, uint16(1), uint16(0), false)
	}
	f.Fuzz(func(t *testing.T, in, chunks []byte, psize, max uint16, eofWithData bool) {
		checkStripper(t, in, fuzzChunks(chunks), int(psize)%600+1, int(max)%256, eofWithData)
	})
}

// Outcomes of refCmds at the end of its input.
const (
	refClean   = iota // every command was complete and well-formed
	refBad            // a command is malformed: CmdScanner must say so
	refUnknown        // truncated, or over ReadFrame's count limit: either way
)

// refCmds is the reference for CmdScanner, built on ReadFrame and
// CommandName.
func refCmds(in []byte) (cmds []seenCmd, outcome int) {
	br := bufio.NewReader(bytes.NewReader(in))
	for {
		if b, err := br.Peek(1); err == nil && b[0] != '*' {
			return cmds, refBad
		}
		frame, err := ReadFrame(br, nil)
		switch {
		case err == io.EOF:
			return cmds, refClean
		case err != nil && strings.Contains(err.Error(), "for type '*' exceeds limit"):
			// CmdScanner allows more arguments than a reply has elements.
			return cmds, refUnknown
		case errors.Is(err, ErrMalformed):
			return cmds, refBad
		case err != nil:
			// Truncated: CmdScanner may or may not have seen a bad
			// element type already.
			return cmds, refUnknown
		}
		if line, _, _ := cutLine(frame); line != nil {
			if n, err := parseLen('*', line[1:]); err == nil && n == 0 {
				continue // an empty array ("*0", "*00") is ignored
			}
		}
		name, args, err := CommandName(frame)
		if err != nil {
			return cmds, refBad
		}
		words, _ := splitArray(frame)
		c := seenCmd{Kind: refKind(name, args), Argc: len(args), Name: string(trunc(words[0]))}
		for i := 0; i < len(args) && i < 4; i++ {
			c.Args = append(c.Args, string(trunc(args[i])))
		}
		cmds = append(cmds, c)
	}
}

func trunc(b []byte) []byte { return b[:min(len(b), CmdArgMax)] }

// refKind classifies a command independently of classify.
func refKind(name string, args [][]byte) CmdKind {
	kinds := map[string]CmdKind{
		"SUBSCRIBE": CmdSubscribe, "PSUBSCRIBE": CmdSubscribe, "SSUBSCRIBE": CmdSubscribe,
		"UNSUBSCRIBE": CmdUnsubscribe, "PUNSUBSCRIBE": CmdUnsubscribe, "SUNSUBSCRIBE": CmdUnsubscribe,
		"MULTI": CmdMulti, "EXEC": CmdExec, "DISCARD": CmdDiscard, "WATCH": CmdWatch,
		"UNWATCH": CmdUnwatch, "HELLO": CmdHello, "CLIENT": CmdClient, "QUIT": CmdQuit,
		"RESET": CmdReset, "MONITOR": CmdMonitor,
	}
	for _, b := range strings.Fields("BLPOP BRPOP BLMOVE BRPOPLPUSH BZPOPMIN BZPOPMAX BLMPOP BZMPOP WAIT WAITAOF") {
		kinds[b] = CmdBlocking
	}
	if k, ok := kinds[name]; ok {
		return k
	}
	var opts [][]byte
	switch name {
	case "XREAD":
		opts = args
	case "XREADGROUP":
		opts = args[min(3, len(args)):]
	default:
		return CmdOther
	}
	for i := 0; i < len(opts); i++ {
		switch strings.ToUpper(string(opts[i])) {
		case "STREAMS":
			return CmdOther
		case "BLOCK":
			return CmdBlocking
		case "COUNT", "CLAIM":
			i++
		}
	}
	return CmdOther
}

func FuzzCmdScanner(f *testing.F) {
	f.Add([]byte(cmdOf("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip")), uint8(3))
	f.Add([]byte(cmdOf("xreadgroup", "GROUP", "g", "c", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", ">")), uint8(1))
	f.Add([]byte(cmdOf("XREAD", "BLOCK", "0", "STREAMS", "s", "$")+cmdOf("subscribe", "a", "b")), uint8(7))
	f.Add([]byte(cmdOf("MULTI")+cmdOf("SET", "k", "v")+cmdOf("EXEC")+"*0\r\n"), uint8(0))
	f.Add([]byte("*1\r\n+PING\r\n"), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		got, bad := scanAll(in, int(chunk))
		whole, wholeBad := scanAll(in, 0)
		if bad > 1 || wholeBad != bad || len(whole) != len(got) {
			t.Fatalf("chunking changes the result: %v %d / %v %d", got, bad, whole, wholeBad)
		}
		want, outcome := refCmds(in)
		if len(got) != len(want) {
			t.Fatalf("commands %v, want %v", got, want)
		}
		for i := range got {
			if got[i].String() != want[i].String() || whole[i].String() != want[i].String() {
				t.Fatalf("command %d: %v, want %v", i, got[i], want[i])
			}
		}
		if outcome == refBad && bad == 0 {
			t.Fatalf("malformed input not reported: %q", in)
		}
		if outcome == refClean && bad != 0 {
			t.Fatalf("well-formed input reported malformed: %q", in)
		}
	})
}
