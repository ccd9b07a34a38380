package resp

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// The Stripper follows legal replies of any size; these tests use sizes
// beyond every limit of ReadFrame (MaxAggregateLen, MaxBulkLen, MaxDepth,
// maxLenDigits), each followed by a MOVING push that must still be stripped.

var movingFrame = ">4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n$14\r\n10.0.0.2:12000\r\n"

// checkBig runs in through a Stripper with a few chunkings and checks the
// output is exactly want, that the MOVING frames were stripped and handed
// to OnStripped, and that replies complete replies were counted.
func checkBig(t *testing.T, in, want string, stripped, replies int) {
	t.Helper()
	for _, run := range []struct {
		sizes []int
		psize int
	}{{nil, 32 << 10}, {[]int{4093, 7, 1}, 1000}} {
		s := &Stripper{}
		got := runStripper(s, &chunkReader{data: []byte(in), sizes: run.sizes}, run.psize)
		where := fmt.Sprintf("chunks %v, p %d", run.sizes, run.psize)
		if got.err != nil || got.malformed != 0 || s.Passthrough() {
			t.Fatalf("%s: err %v, malformed %d, passthrough %v", where, got.err, got.malformed, s.Passthrough())
		}
		if string(got.out) != want {
			t.Fatalf("%s: output of %d bytes differs from the %d expected", where, len(got.out), len(want))
		}
		if len(got.stripped) != stripped || got.replies != replies {
			t.Fatalf("%s: %d stripped (want %d), %d replies (want %d)", where, len(got.stripped), stripped, got.replies, replies)
		}
		for _, f := range got.stripped {
			if f != movingFrame {
				t.Fatalf("stripped %s", short([]byte(f)))
			}
		}
		if !s.AtBoundary() {
			t.Fatalf("%s: not at a boundary after whole frames", where)
		}
	}
}

func TestStripperHugeAggregates(t *testing.T) {
	const n = 1<<20 + 5
	elems := strings.Repeat(":1\r\n", n)
	for _, tc := range []struct {
		name, frame string
		replies     int
	}{
		{"array", fmt.Sprintf("*%d\r\n", n) + elems, 1},
		{"set", fmt.Sprintf("~%d\r\n", n) + elems, 1},
		{"map", fmt.Sprintf("%%%d\r\n", n) + elems + elems, 1},
		{"attribute", fmt.Sprintf("|%d\r\n", n) + elems + elems, 0},
		{"nested attribute", fmt.Sprintf("*1\r\n|%d\r\n", n) + elems + elems + ":2\r\n", 1},
		{"push", fmt.Sprintf(">%d\r\n", n+1) + "$7\r\nmessage\r\n" + elems, 0},
		{"nested", fmt.Sprintf("*2\r\n*%d\r\n", n) + elems + "$3\r\nabc\r\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := movingFrame + tc.frame + movingFrame + "+OK\r\n" + movingFrame
			checkBig(t, in, tc.frame+"+OK\r\n", 3, tc.replies+1)
			// The reference agrees.
			checkStripper(t, []byte(in), []int{4096}, 32<<10, 0, false)
		})
	}
}

func TestStripperDeepNesting(t *testing.T) {
	for _, depth := range []int{65, 200, 100000} {
		var b strings.Builder
		for i := range depth {
			switch i % 4 {
			case 0:
				b.WriteString("*1\r\n")
			case 1:
				b.WriteString("%1\r\n+k\r\n") // the next aggregate is the value
			case 2:
				b.WriteString("|1\r\n+a\r\n*0\r\n~1\r\n") // attribute, then a set
			case 3:
				b.WriteString(">1\r\n") // a nested push is plain data
			}
		}
		b.WriteString("$6\r\nMOVING\r\n")
		frame := b.String()
		in := frame + movingFrame + frame + "+OK\r\n" + movingFrame
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			checkBig(t, in, frame+frame+"+OK\r\n", 2, 3)
			checkStripper(t, []byte(in), []int{1000}, 512, 0, false)
			if depth <= 200 {
				for _, size := range []int{1, 3} {
					checkStripper(t, []byte(in), []int{size}, 64, 0, true)
				}
			}
		})
	}
}

func TestStripperDeepNestingDoesNotAllocate(t *testing.T) {
	frame := strings.Repeat("*1\r\n", 100000) + ":1\r\n" + movingFrame
	r := &loopReader{data: []byte(frame), chunk: 32 << 10}
	replies := 0
	s := &Stripper{H: &Funcs{StripFunc: stripMaint, StrippedFunc: func([]byte) {}}, OnReply: func() { replies++ }}
	p := make([]byte, 32<<10)
	for range 100 {
		s.Read(r, p)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := s.Read(r, p); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || s.Passthrough() || replies == 0 {
		t.Fatalf("%v allocs per Read, passthrough %v, %d replies", allocs, s.Passthrough(), replies)
	}
}

// segment is part of a generated stream: a literal, or size bytes of a
// repeating pattern.
type segment struct {
	lit     string
	pattern string
	size    int64
}

func (g segment) len() int64 {
	if g.pattern == "" {
		return int64(len(g.lit))
	}
	return g.size
}

// genReader produces a stream of segments without holding it in memory.
type genReader struct {
	segs  []segment
	off   int64  // in segs[0]
	block []byte // the pattern of segs[0], repeated
}

func (r *genReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && len(r.segs) > 0 {
		g := r.segs[0]
		if g.pattern == "" {
			k := copy(p[n:], g.lit[r.off:])
			n += k
			r.off += int64(k)
		} else {
			if len(r.block) == 0 || !bytes.HasPrefix(r.block, []byte(g.pattern)) {
				r.block = bytes.Repeat([]byte(g.pattern), (64<<10)/len(g.pattern)+1)
			}
			k := int(min(int64(len(p)-n), g.size-r.off, int64(len(r.block)-len(g.pattern))))
			at := int(r.off % int64(len(g.pattern)))
			copy(p[n:n+k], r.block[at:])
			n += k
			r.off += int64(k)
		}
		if r.off == g.len() {
			r.segs, r.off = r.segs[1:], 0
		}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// TestStripperHugeValues streams values above 512 MB (a blob of each type,
// a simple line) announced by their headers and generated on the fly, each
// followed by a MOVING push that is stripped, and compares the output with
// the input minus the pushes as both stream.
func TestStripperHugeValues(t *testing.T) {
	const size = 600 << 20
	// The payload is full of CRLFs and type bytes, to be skipped by length.
	const blobPattern = "\r\n>4\r\n$6\r\nMOVING\r\n*"
	const linePattern = "a>*$:%|"
	for _, tc := range []struct {
		name       string
		head, tail string
		pattern    string
		replies    int
	}{
		{"bulk", fmt.Sprintf("$%d\r\n", size), "\r\n", blobPattern, 1},
		{"verbatim", fmt.Sprintf("=%d\r\n", size), "\r\n", blobPattern, 1},
		{"blob error", fmt.Sprintf("!%d\r\n", size), "\r\n", blobPattern, 1},
		{"bulk in a push", fmt.Sprintf(">2\r\n$7\r\nmessage\r\n$%d\r\n", size), "\r\n", blobPattern, 0},
		{"simple string", "+", "\r\n", linePattern, 1},
		{"error line", "*2\r\n-", "\r\n:1\r\n", linePattern, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &genReader{segs: []segment{
				{lit: movingFrame + tc.head}, {pattern: tc.pattern, size: size},
				{lit: tc.tail + movingFrame + "+OK\r\n" + movingFrame},
			}}
			want := &genReader{segs: []segment{
				{lit: tc.head}, {pattern: tc.pattern, size: size}, {lit: tc.tail + "+OK\r\n"},
			}}
			replies, stripped := 0, 0
			s := &Stripper{
				H: &Funcs{
					StripFunc:     stripMaint,
					StrippedFunc:  func(f []byte) { stripped++; checkFrame(t, f) },
					MalformedFunc: func(err error) { t.Fatal(err) },
				},
				OnReply: func() { replies++ },
			}
			p := make([]byte, 32<<10)
			wbuf := make([]byte, 32<<10)
			var total int64
			for {
				n, err := s.Read(in, p)
				if n > 0 {
					if _, werr := io.ReadFull(want, wbuf[:n]); werr != nil || !bytes.Equal(p[:n], wbuf[:n]) {
						t.Fatalf("output differs at offset %d (%v)", total, werr)
					}
					total += int64(n)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if m, _ := want.Read(wbuf); m != 0 {
				t.Fatalf("output ends at %d, %d bytes short", total, m)
			}
			if wantTotal := int64(len(tc.head)+len(tc.tail)+len("+OK\r\n")) + size; total != wantTotal {
				t.Fatalf("output of %d bytes, want %d", total, wantTotal)
			}
			if replies != tc.replies+1 || stripped != 3 || s.Passthrough() {
				t.Fatalf("%d replies, %d stripped, passthrough %v", replies, stripped, s.Passthrough())
			}
		})
	}
}

func checkFrame(t *testing.T, f []byte) {
	if string(f) != movingFrame {
		t.Errorf("stripped %q", short(f))
	}
}

// TestStripperLengths checks the edges of length fields: every length an
// int64 holds is accepted (and, here, waits for its bytes); one more, or a
// 20th digit, is malformed.
func TestStripperLengths(t *testing.T) {
	for _, tc := range []struct {
		in  string
		bad bool
	}{
		{"$9223372036854775807\r\nabc", false},
		{"*9223372036854775807\r\n:1\r\n", false},
		{"%9223372036854775807\r\n:1\r\n", false},
		{"*3\r\n%9223372036854775807\r\n%9223372036854775807\r\n%9223372036854775807\r\n:1\r\n", false},
		{"+" + strings.Repeat("x", 100000), false},
		{"$9223372036854775808\r\n", true},
		{"*10000000000000000000\r\n", true},
		{"~09223372036854775807\r\n", true},
		{"$-2\r\n", true},
		{"%-1\r\n", true},
	} {
		for _, sizes := range [][]int{nil, {1}, {5}} {
			s := &Stripper{}
			got := runStripper(s, &chunkReader{data: []byte("+OK\r\n" + tc.in), sizes: sizes}, 64)
			if string(got.out) != "+OK\r\n"+tc.in || got.replies != 1 || (got.malformed == 1) != tc.bad {
				t.Fatalf("%q, chunks %v: out %q, %d replies, malformed %d", tc.in, sizes, got.out, got.replies, got.malformed)
			}
			// A well-framed but unfinished frame leaves the Stripper in it.
			if !tc.bad && (s.AtBoundary() || s.Passthrough()) {
				t.Fatalf("%q: at boundary %v, passthrough %v", tc.in, s.AtBoundary(), s.Passthrough())
			}
		}
	}
}
