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
	for _, in := range []string{
		"*3\r\n%9223372036854775807\r\n:1\r\n",
		"$0000000000000000003\r\nabc\r\n" + movingFrame,
		strings.Repeat("*1\r\n", 70) + ":1\r\n" + movingFrame,
		// Runs of bulk replies and arrays of bulk strings, the shapes
		// framed a header load at a time.
		"$1\r\na\r\n$12\r\nhello, world\r\n$-1\r\n$0\r\n\r\n$3\r\nabc\r\n" + movingFrame + "$1\r\nz\r\n",
		"*4\r\n$1\r\na\r\n$-1\r\n$10\r\n0123456789\r\n$100\r\n" + strings.Repeat("x", 100) + "\r\n$2\r\nok\r\n",
		"$2\r\nab\r\n$2\r\nab\n\r$1\r\nx\r\n",
		// Pushes of bulk strings (pub/sub messages), framed the same way.
		">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$-1\r\n>4\r\n$8\r\npmessage\r\n$1\r\np\r\n$2\r\nch\r\n$64\r\n" +
			strings.Repeat("x", 64) + "\r\n>1\r\n$7\r\nmessage\r\n" + movingFrame + ">3\r\n$7\r\nmessage\r\n:1\r\n$1\r\nx\r\n",
	} {
		f.Add([]byte(in), []byte{3}, uint16(7), uint16(0), false)
	}
	f.Fuzz(func(t *testing.T, in, chunks []byte, psize, max uint16, eofWithData bool) {
		// The output matches the reference whatever the chunking, and two
		// chunkings agree on everything the Stripper reports.
		a, exactA := checkStripper(t, in, fuzzChunks(chunks), int(psize)%600+1, int(max)%256, eofWithData)
		b, exactB := checkStripper(t, in, nil, 4096, int(max)%256, false)
		if exactA && exactB && (!bytes.Equal(a.out, b.out) || a.replies != b.replies ||
			!reflect.DeepEqual(a.stripped, b.stripped) || !reflect.DeepEqual(a.oversize, b.oversize)) ||
			a.malformed != b.malformed {
			t.Fatalf("chunking changes the result:\n%+v\n%+v", a, b)
		}
		checkRefAgainstReadFrame(t, in)
	})
}

// checkRefAgainstReadFrame checks the Stripper's reference framer against
// ReadFrame, where ReadFrame's limits allow: every frame ReadFrame reads,
// refValue frames alike, and a frame ReadFrame finds truncated, refValue
// does not accept.
func checkRefAgainstReadFrame(t *testing.T, in []byte) {
	br := bufio.NewReader(bytes.NewReader(in))
	for off := 0; ; {
		frame, err := ReadFrame(br, nil)
		if err == io.EOF {
			return
		}
		end, refErr := refValue(in, off, false)
		switch {
		case err == nil && (refErr != nil || end != off+len(frame)):
			t.Fatalf("at %d ReadFrame reads %q, refValue ends at %d (%v)", off, frame, end, refErr)
		case errors.Is(err, io.ErrUnexpectedEOF) && refErr == nil:
			t.Fatalf("at %d ReadFrame finds a truncated frame, refValue one of %d bytes", off, end-off)
		case err != nil:
			return
		}
		off = end
	}
}

func FuzzStripperDrop(f *testing.F) {
	for _, in := range dropCases {
		f.Add([]byte(in), []byte{5, 1}, uint16(7), uint16(0), uint8(0), uint8(1))
		f.Add([]byte(in), []byte{1}, uint16(4096), uint16(8), uint8(2), uint8(0))
	}
	for _, in := range stripperCases {
		f.Add([]byte(in), []byte{3}, uint16(4096), uint16(8), uint8(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, in, chunks []byte, psize, maxStripped uint16, read, after uint8) {
		// DropReply(after) before Read number read+1: the output matches
		// the reference whatever the chunking.
		drop := dropCall{read: int(read%6) + 1, after: int(after % 4)}
		a, exactA := checkRun(t, in, stripRun{sizes: fuzzChunks(chunks), psize: int(psize)%600 + 1, max: int(maxStripped) % 256, drop: drop})
		// Reading with ReadDrop while the dropped reply is next changes
		// only when the reads are made, not what they return.
		viaReadDrop := drop
		viaReadDrop.viaReadDrop = true
		c, _ := checkRun(t, in, stripRun{sizes: fuzzChunks(chunks), psize: int(psize)%600 + 1, max: int(maxStripped) % 256, drop: viaReadDrop})
		if !bytes.Equal(a.out, c.out) || !reflect.DeepEqual(a.dropped, c.dropped) || !reflect.DeepEqual(a.stripped, c.stripped) {
			t.Fatalf("ReadDrop changes the result:\n%+v\n%+v", a, c)
		}
		if drop.read == 1 {
			// Called before the first Read, the drop does not depend on
			// the chunking at all.
			b, exactB := checkRun(t, in, stripRun{psize: 4096, max: int(maxStripped) % 256, drop: drop})
			if exactA && exactB && (!bytes.Equal(a.out, b.out) || !reflect.DeepEqual(a.dropped, b.dropped)) {
				t.Fatalf("chunking changes the result:\n%+v\n%+v", a, b)
			}
		}

		// TakeDropped accepts exactly one whole frame that is a reply.
		checkFrameLen(t, in)
		end, err := refValue(in, 0, false)
		isReply := err == nil && in[0] != '>' && in[0] != '|'
		for _, frame := range [][]byte{in, in[:max(end, 0)]} {
			s := &Stripper{}
			var dropped [][]byte
			funcs(s).DroppedFunc = func(f []byte) { dropped = append(dropped, f) }
			s.DropReply(0)
			want := isReply && len(frame) == end
			if s.TakeDropped(frame) != want || len(dropped) != map[bool]int{true: 1}[want] {
				t.Fatalf("TakeDropped(%s): want %v, OnDropped %q", short(frame), want, dropped)
			}
			if _, pending := s.DropPending(); pending == want {
				t.Fatalf("TakeDropped(%s) = %v, DropPending %v", short(frame), want, pending)
			}
		}
	})
}
