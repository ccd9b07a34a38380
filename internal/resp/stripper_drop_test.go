package resp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// helloReply is a HELLO 3 reply as Redis sends it (shortened).
const helloReply = "%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n"

var dropCases = []string{
	helloReply + "+OK\r\n" + movingFrame + "+PONG\r\n",
	movingFrame + helloReply + movingFrame + "-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.\r\n" + movingFrame + ":1\r\n",
	helloReply + "|1\r\n+k\r\n+v\r\n+OK\r\n+PONG\r\n", // attribute before the dropped reply
	helloReply + "*2\r\n$3\r\nabc\r\n>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nmsg\r\n" + "+OK\r\n:2\r\n",
	helloReply + "$20\r\n" + strings.Repeat("x", 20) + "\r\n+OK\r\n", // larger than MaxStripped 8
	"+OK\r\n*3\r\n:1\r\n", // dropped reply cut short
	"+OK\r\n*3\r\n:1\r\n" + movingFrame,
	"+OK\r\n*3\r\nX\r\n",         // dropped reply malformed
	"+OK\r\n" + movingFrame[:20], // EOF in a held push
}

func TestStripperDropMatchesReference(t *testing.T) {
	chunkings := [][]int{nil, {1}, {2}, {3}, {7}, {1, 0, 2}, {13, 1}}
	for _, in := range append(dropCases, stripperCases...) {
		for _, sizes := range chunkings {
			for _, psize := range []int{1, 5, 4096} {
				for _, max := range []int{0, 8} {
					for _, drop := range []dropCall{{1, 0, false}, {1, 1, true}, {1, 2, false}, {2, 0, true}, {3, 1, false}, {4, 0, true}, {1, 0, true}, {2, 0, false}} {
						checkRun(t, []byte(in), stripRun{sizes: sizes, psize: psize, max: max, eof: drop.read%2 == 0, drop: drop})
					}
				}
			}
		}
	}
}

// dropOutcome is what a run of dropStream must produce.
type dropOutcome struct {
	out, dropped    string
	replies, strips int
}

// checkDropEverySplit reads in through a Stripper told DropReply(after)
// before the first Read, cut into two and into three chunks at every pair
// of offsets, and checks the outcome of each.
func checkDropEverySplit(t *testing.T, in string, after, max int, want dropOutcome) {
	t.Helper()
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			for _, psize := range []int{1, 3, 4096} {
				if psize != 4096 && j != i {
					continue // every two-chunk split with small buffers
				}
				s := &Stripper{MaxStripped: max}
				s.DropReply(after)
				r := &stepReader{steps: []any{in[:i], in[i:j], in[j:]}}
				got := runStripper(s, r, psize)
				dropped := strings.Join(got.dropped, "|")
				if string(got.out) != want.out || dropped != want.dropped || got.replies != want.replies ||
					len(got.stripped) != want.strips || got.malformed != 0 || got.err != nil {
					t.Fatalf("split %d,%d p %d: out %q dropped %q, %d replies, %d stripped, %d malformed, %v; want %+v",
						i, j, psize, got.out, dropped, got.replies, len(got.stripped), got.malformed, got.err, want)
				}
				if _, ok := s.DropPending(); ok || !s.AtBoundary() {
					t.Fatalf("split %d,%d: drop still pending %v, at boundary %v", i, j, ok, s.AtBoundary())
				}
			}
		}
	}
}

func TestStripperDropReplyEverySplit(t *testing.T) {
	t.Run("opt-in reply after HELLO", func(t *testing.T) {
		in := movingFrame + helloReply + movingFrame + "+OK\r\n" + movingFrame + "+PONG\r\n"
		checkDropEverySplit(t, in, 1, 0, dropOutcome{helloReply + "+PONG\r\n", "+OK\r\n", 2, 3})
	})
	t.Run("error reply, pushes that pass", func(t *testing.T) {
		msg := ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nmsg\r\n"
		errReply := "-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.\r\n"
		in := helloReply + msg + errReply + msg + ":1\r\n"
		checkDropEverySplit(t, in, 1, 0, dropOutcome{helloReply + msg + msg + ":1\r\n", errReply, 2, 0})
	})
	t.Run("first reply", func(t *testing.T) {
		in := movingFrame + "*2\r\n$1\r\na\r\n%1\r\n+k\r\n_\r\n" + movingFrame + "+OK\r\n"
		checkDropEverySplit(t, in, 0, 0, dropOutcome{"+OK\r\n", "*2\r\n$1\r\na\r\n%1\r\n+k\r\n_\r\n", 1, 2})
	})
	t.Run("larger than MaxStripped", func(t *testing.T) {
		big := "$40\r\n" + strings.Repeat("y", 40) + "\r\n"
		in := "+OK\r\n" + big + movingFrame + "+PONG\r\n"
		checkDropEverySplit(t, in, 1, 20, dropOutcome{"+OK\r\n+PONG\r\n", "<nil>", 2, 0})
	})
}

func TestStripperDropPending(t *testing.T) {
	var s Stripper
	if after, ok := s.DropPending(); ok || after != -1 {
		t.Fatalf("new Stripper: DropPending %d, %v", after, ok)
	}
	var dropped []string
	funcs(&s).DroppedFunc = func(f []byte) { dropped = append(dropped, string(f)) }
	p := make([]byte, 64)
	s.DropReply(2)
	if after, ok := s.DropPending(); !ok || after != 2 {
		t.Fatalf("after DropReply(2): %d, %v", after, ok)
	}
	s.Read(strings.NewReader("+A\r\n"+movingFrame), p)
	if after, ok := s.DropPending(); !ok || after != 1 {
		t.Fatalf("one reply later: %d, %v", after, ok)
	}
	s.DropReply(0) // replaces
	n, _ := s.Read(strings.NewReader("+B\r\n+C\r\n"), p)
	if string(p[:n]) != "+C\r\n" || len(dropped) != 1 || dropped[0] != "+B\r\n" {
		t.Fatalf("out %q, dropped %q", p[:n], dropped)
	}
	if _, ok := s.DropPending(); ok {
		t.Fatal("still pending after the drop")
	}
	s.DropReply(0)
	s.DropReply(-1) // cancels
	if _, ok := s.DropPending(); ok {
		t.Fatal("pending after DropReply(-1)")
	}
	n, _ = s.Read(strings.NewReader("+D\r\n"), p)
	if string(p[:n]) != "+D\r\n" {
		t.Fatalf("out %q after a cancelled drop", p[:n])
	}
	s.DropReply(3)
	s.Reset()
	if _, ok := s.DropPending(); ok {
		t.Fatal("pending after Reset")
	}
	if s.H == nil || funcs(&s).DroppedFunc == nil {
		t.Fatal("Reset dropped the Handler")
	}
}

func TestStripperDropReplyMidReply(t *testing.T) {
	// A reply under way is never the dropped one: DropReply(0) and
	// DropReply(1) both drop the next.
	for _, after := range []int{0, 1} {
		var dropped []string
		s := &Stripper{H: &Funcs{DroppedFunc: func(f []byte) { dropped = append(dropped, string(f)) }}}
		r := &stepReader{steps: []any{"*2\r\n:1\r\n", "+x\r\n+OK\r\n+PONG\r\n"}}
		p := make([]byte, 64)
		n, _ := s.Read(r, p)
		out := string(p[:n])
		s.DropReply(after)
		n, _ = s.Read(r, p)
		out += string(p[:n])
		if out != "*2\r\n:1\r\n+x\r\n+PONG\r\n" || len(dropped) != 1 || dropped[0] != "+OK\r\n" {
			t.Fatalf("after %d: out %q, dropped %q", after, out, dropped)
		}
	}
}

func TestStripperDropReplyFromCallback(t *testing.T) {
	// The HELLO reply's OnReply asks to drop the next reply.
	var dropped []string
	s := &Stripper{H: &Funcs{StripFunc: stripMaint, DroppedFunc: func(f []byte) { dropped = append(dropped, string(f)) }}}
	first := true
	s.OnReply = func() {
		if first {
			s.DropReply(0)
			first = false
		}
	}
	in := helloReply + movingFrame + "+OK\r\n+PONG\r\n"
	got := make([]byte, 0, len(in))
	p := make([]byte, 4096)
	for _, chunk := range []string{in[:10], in[10:]} {
		n, _ := s.Read(strings.NewReader(chunk), p)
		got = append(got, p[:n]...)
	}
	if string(got) != helloReply+"+PONG\r\n" || len(dropped) != 1 || dropped[0] != "+OK\r\n" {
		t.Fatalf("out %q, dropped %q", got, dropped)
	}
}

func TestStripperTakeDropped(t *testing.T) {
	ok := "+OK\r\n"
	for _, tc := range []struct {
		name  string
		setup func(s *Stripper)
		frame string
		want  bool
	}{
		{"reply", func(s *Stripper) { s.DropReply(0) }, ok, true},
		{"aggregate", func(s *Stripper) { s.DropReply(0) }, "*2\r\n$1\r\na\r\n|1\r\n+k\r\n+v\r\n%0\r\n", true},
		{"error", func(s *Stripper) { s.DropReply(0) }, "-ERR unknown subcommand\r\n", true},
		{"larger than MaxStripped", func(s *Stripper) { s.DropReply(0); s.MaxStripped = 4 }, ok, true},
		{"no drop", func(*Stripper) {}, ok, false},
		{"cancelled", func(s *Stripper) { s.DropReply(0); s.DropReply(-1) }, ok, false},
		{"not yet", func(s *Stripper) { s.DropReply(1) }, ok, false},
		{"push", func(s *Stripper) { s.DropReply(0) }, movingFrame, false},
		{"attribute", func(s *Stripper) { s.DropReply(0) }, "|1\r\n+k\r\n+v\r\n", false},
		{"part of a frame", func(s *Stripper) { s.DropReply(0) }, "*2\r\n:1\r\n", false},
		{"two frames", func(s *Stripper) { s.DropReply(0) }, ok + ok, false},
		{"frame and push", func(s *Stripper) { s.DropReply(0) }, ok + movingFrame, false},
		{"malformed", func(s *Stripper) { s.DropReply(0) }, "$2\r\nabc\r\n", false},
		{"empty", func(s *Stripper) { s.DropReply(0) }, "", false},
		{"not at a boundary", func(s *Stripper) {
			s.Read(strings.NewReader("$5\r\nab"), make([]byte, 64))
			s.DropReply(0)
		}, ok, false},
		{"passthrough", func(s *Stripper) {
			s.Read(strings.NewReader("X"), make([]byte, 64))
			s.DropReply(0)
		}, ok, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dropped []string
			s := &Stripper{H: &Funcs{DroppedFunc: func(f []byte) {
				if f == nil {
					dropped = append(dropped, "<nil>")
				} else {
					dropped = append(dropped, string(f))
				}
			}}}
			tc.setup(s)
			after0, pending0 := s.DropPending()
			if got := s.TakeDropped([]byte(tc.frame)); got != tc.want {
				t.Fatalf("TakeDropped(%q) = %v", tc.frame, got)
			}
			after, pending := s.DropPending()
			if !tc.want {
				if len(dropped) != 0 || after != after0 || pending != pending0 {
					t.Fatalf("refused, yet OnDropped %q, DropPending %d %v (was %d %v)", dropped, after, pending, after0, pending0)
				}
				return
			}
			want := tc.frame
			if len(want) > s.maxStripped() {
				want = "<nil>"
			}
			if len(dropped) != 1 || dropped[0] != want || pending {
				t.Fatalf("OnDropped %q (want %q), still pending %v", dropped, want, pending)
			}
			// The stream carries on, and nothing else is dropped.
			replies := 0
			s.OnReply = func() { replies++ }
			p := make([]byte, 64)
			n, _ := s.Read(strings.NewReader(ok), p)
			if string(p[:n]) != ok || replies != 1 || len(dropped) != 1 {
				t.Fatalf("next Read %q, %d replies, dropped %q", p[:n], replies, dropped)
			}
		})
	}
}

// TestFrameLen checks the slice framer of TakeDropped against the
// reference on the test streams, at every prefix.
func TestFrameLen(t *testing.T) {
	for _, in := range append(dropCases, stripperCases...) {
		b := []byte(in)
		for k := 0; k <= len(b); k++ {
			checkFrameLen(t, b[:k])
		}
	}
	deep := strings.Repeat("*1\r\n|1\r\n+k\r\n+v\r\n", 300) + ":1\r\n"
	if n := frameLen([]byte(deep + "+OK\r\n")); n != len(deep) {
		t.Fatalf("frameLen of a deep frame = %d, want %d", n, len(deep))
	}
}

func checkFrameLen(t *testing.T, b []byte) {
	end, err := refValue(b, 0, false)
	if err != nil {
		end = -1
	}
	if got := frameLen(b); got != end {
		t.Fatalf("frameLen(%s) = %d, reference %d", short(b), got, end)
	}
}

func TestStripperDropReplyDoesNotAllocate(t *testing.T) {
	in := []byte(strings.Repeat(helloReply+"+OK\r\n"+movingFrame, 4))
	s := &Stripper{H: &Funcs{StripFunc: stripMaint, DroppedFunc: func([]byte) {}, StrippedFunc: func([]byte) {}}}
	p := make([]byte, 16)
	r := bytes.NewReader(in)
	// Warm up the buffer of removed frames.
	for range 3 {
		r.Reset(in)
		s.DropReply(1)
		for r.Len() > 0 {
			s.Read(r, p)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(in)
		s.DropReply(1)
		for r.Len() > 0 {
			if _, err := s.Read(r, p); err != nil && err != io.EOF {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per stream", allocs)
	}
}

// errNoMore ends a stepReader that a ReadDrop must not read past.
var errNoMore = errors.New("read past the dropped reply")

// ReadDrop reads until the dropped reply is removed, strips the pushes that
// came with it, and returns without another read: after HELLO's reply, the
// opt-in's +OK and a MOVING behind it, in any chunking, nothing is read
// once +OK and what came with it are parsed, and the MOVING is reported.
func TestReadDropReturnsOnceTheDroppedReplyIsRemoved(t *testing.T) {
	in := helloReply + "+OK\r\n" + movingFrame
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			s := &Stripper{}
			var stripped []string
			funcs(s).StripFunc = func([]byte) bool { return true }
			funcs(s).StrippedFunc = func(f []byte) { stripped = append(stripped, string(f)) }
			s.DropReply(1)
			r := &stepReader{steps: []any{in[:i], in[i:j], in[j:], errNoMore}}
			p := make([]byte, 4096)
			var out []byte
			for len(out) < len(helloReply) {
				n, err := s.Read(r, p)
				if err != nil {
					t.Fatalf("split %d,%d: Read: %v", i, j, err)
				}
				out = append(out, p[:n]...)
			}
			for s.NextIsDropped() {
				n, err := s.ReadDrop(r, p)
				if err != nil {
					t.Fatalf("split %d,%d: ReadDrop: %v", i, j, err)
				}
				out = append(out, p[:n]...)
			}
			if string(out) != helloReply {
				t.Fatalf("split %d,%d: output %q, want HELLO's reply alone", i, j, out)
			}
			chunk := func(at int) int { // which read brings in[at]
				switch {
				case at < i:
					return 0
				case at < j:
					return 1
				}
				return 2
			}
			okEnd := len(helloReply) + len("+OK\r\n")
			if chunk(okEnd-1) != chunk(len(in)-1) {
				continue // the MOVING comes in a later read, which the next Read makes
			}
			if len(stripped) != 1 {
				t.Fatalf("split %d,%d: stripped %q, want the MOVING that came with +OK", i, j, stripped)
			}
			if n, err := s.ReadDrop(r, p); n != 0 || err != nil {
				t.Fatalf("split %d,%d: ReadDrop after the drop: %d, %v; want 0, nil without a read", i, j, n, err)
			}
		}
	}
}
