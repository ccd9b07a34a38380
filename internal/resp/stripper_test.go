package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

// stripMaint is the Strip predicate used by most tests: the seven
// maintenance names, plus "S" so that fuzzing finds stripped frames easily.
func stripMaint(name []byte) bool {
	_, ok := KindOf(name)
	return ok || string(name) == "S"
}

// refResult is what a Stripper must produce for an input stream.
type refResult struct {
	out      []byte
	replies  int
	stripped []string // stripped frames, in order
	dropped  []string // the dropped reply, if it is complete
	bad      bool     // the stream ends in a malformed or truncated frame
	good     int      // len(out) before the bad part was appended
}

// errRef is the reference framer's error for a frame that is malformed or
// truncated (the Stripper treats both alike: the rest passes through).
var errRef = errors.New("not a whole frame")

// refLine returns the body of the CRLF-terminated line that starts at
// in[off] and the offset after its LF.
func refLine(in []byte, off int) ([]byte, int, error) {
	i := bytes.IndexByte(in[off:], '\n')
	if i < 1 || in[off+i-1] != '\r' {
		return nil, 0, errRef
	}
	body := in[off : off+i-1]
	if bytes.IndexByte(body, '\r') >= 0 {
		return nil, 0, errRef
	}
	return body, off + i + 1, nil
}

// refLength parses a length by the Stripper's documented rules: 1 to 19
// decimal digits and at most math.MaxInt64, or -1 for '$' and '*'.
func refLength(t byte, body []byte) (int64, error) {
	if string(body) == "-1" && (t == '$' || t == '*') {
		return -1, nil
	}
	if len(body) == 0 || len(body) > 19 || strings.Trim(string(body), "0123456789") != "" {
		return 0, errRef
	}
	return strconv.ParseInt(string(body), 10, 64)
}

// refValue returns the offset after the value at in[off]. nested tells
// whether it is an element of an aggregate: a nested attribute is read
// together with the value it annotates, a top-level one is a frame of its
// own. It is a plain recursive descent, without any limit.
func refValue(in []byte, off int, nested bool) (int, error) {
	if off >= len(in) {
		return 0, errRef
	}
	t := in[off]
	body, next, err := refLine(in, off+1)
	if err != nil {
		return 0, err
	}
	switch t {
	case '+', '-', ':', '_', ',', '#', '(':
		return next, nil
	case '$', '=', '!':
		n, err := refLength(t, body)
		if err != nil || n < 0 {
			return next, err
		}
		if n > int64(len(in)-next-2) || in[next+int(n)] != '\r' || in[next+int(n)+1] != '\n' {
			return 0, errRef
		}
		return next + int(n) + 2, nil
	case '*', '~', '>', '%', '|':
		n, err := refLength(t, body)
		if err != nil {
			return 0, err
		}
		if n > int64(len(in)) {
			return 0, errRef // more elements than bytes: truncated
		}
		if t == '%' || t == '|' {
			n *= 2
		}
		for range n {
			if next, err = refValue(in, next, true); err != nil {
				return 0, err
			}
		}
		if t == '|' && nested {
			return refValue(in, next, true)
		}
		return next, nil
	}
	return 0, errRef
}

// refStrip is the reference implementation of Stripper, built on refValue:
// frame the whole input, drop matching pushes, and pass the rest through
// from the first frame that cannot be read.
func refStrip(in []byte, strip func([]byte) bool) refResult {
	return refStripDrop(in, strip, -1, 0)
}

// refStripDrop is refStrip with DropReply(after) called when the Stripper
// had consumed dropAt bytes of in (-1: never). The dropped reply is the
// first that starts at or after dropAt once after replies have completed
// after dropAt.
func refStripDrop(in []byte, strip func([]byte) bool, dropAt, after int) refResult {
	var res refResult
	dropping := dropAt >= 0
	for off := 0; off < len(in); {
		end, err := refValue(in, off, false)
		if err != nil {
			res.good = len(res.out)
			res.out = append(res.out, in[off:]...)
			res.bad = true
			return res
		}
		frame := in[off:end]
		start := off
		off = end
		switch frame[0] {
		case '>':
			if name, ok := refPushName(frame); ok && strip(name) {
				res.stripped = append(res.stripped, string(frame))
				continue
			}
		case '|':
		default:
			if dropping && start >= dropAt && after == 0 {
				res.dropped = append(res.dropped, string(frame))
				dropping = false
				continue
			}
			res.replies++
			if dropping && end > dropAt {
				after = max(after-1, 0)
			}
		}
		res.out = append(res.out, frame...)
	}
	return res
}

// refPushName returns the name of a well-formed push frame if it is a
// candidate for stripping: a bulk or simple string of at most maxNameLen.
func refPushName(frame []byte) ([]byte, bool) {
	_, off, err := refLine(frame, 1)
	if err != nil || off >= len(frame) {
		return nil, false
	}
	line, off, err := refLine(frame, off+1)
	if err != nil {
		return nil, false
	}
	switch frame[off-len(line)-3] {
	case '+':
		if len(line) <= maxNameLen {
			return line, true
		}
	case '$':
		n, err := refLength('$', line)
		if err == nil && n >= 0 && n <= maxNameLen {
			return frame[off : off+int(n)], true
		}
	}
	return nil, false
}

// chunkReader returns data in chunks whose sizes cycle through sizes; a
// size of 0 makes one Read return (0, nil). The last chunk comes with
// io.EOF when eofWithData is set.
type chunkReader struct {
	data        []byte
	sizes       []int
	k           int
	eofWithData bool
	consumed    int // bytes returned so far
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	size := 1 << 30
	if len(c.sizes) > 0 {
		size = c.sizes[c.k%len(c.sizes)]
		c.k++
	}
	n := copy(p, c.data[:min(size, len(c.data))])
	c.data = c.data[n:]
	c.consumed += n
	if len(c.data) == 0 && c.eofWithData {
		return n, io.EOF
	}
	return n, nil
}

// stripResult is what a Stripper actually produced.
type stripResult struct {
	out       []byte
	replies   int
	stripped  []string
	oversize  []string // "name size" per OnOversize call
	dropped   []string // per OnDropped call; "<nil>" for a nil frame
	dropAt    int      // bytes consumed when DropReply was called, or -1
	malformed int
	err       error
}

// dropCall asks runStripper to call DropReply(after) just before Read
// number read (counting from 1); read 0 means never.
type dropCall struct {
	read, after int
	// viaReadDrop: read with ReadDrop while NextIsDropped, as maint reads
	// the opt-in's reply behind HELLO's.
	viaReadDrop bool
}

// runStripper feeds in through a Stripper with the given chunking and Read
// buffer size, and collects everything it reports.
func runStripper(s *Stripper, r io.Reader, psize int) stripResult {
	return runStripperDrop(s, r, psize, dropCall{})
}

// runStripperDrop is runStripper with a call to DropReply; r must be a
// *chunkReader if drop.read > 0.
func runStripperDrop(s *Stripper, r io.Reader, psize int, drop dropCall) (res stripResult) {
	res = stripResult{dropAt: -1}
	funcs(s).StripFunc = stripMaint
	// With an odd psize replies are counted by OnReply, with an even one
	// by Replies alone (as maint counts them), which frames runs of bulk
	// replies its own way: both must count alike.
	r0, hook := s.Replies(), psize%2 == 1
	s.OnReply = nil
	if hook {
		s.OnReply = func() { res.replies++ }
	}
	defer func() {
		if got := int(s.Replies() - r0); !hook {
			res.replies = got
		} else if got != res.replies && res.err == nil {
			res.err = fmt.Errorf("Replies counts %d, OnReply %d", got, res.replies)
		}
	}()
	funcs(s).StrippedFunc = func(f []byte) { res.stripped = append(res.stripped, string(f)) }
	funcs(s).OversizeFunc = func(name []byte, size int64) {
		res.oversize = append(res.oversize, fmt.Sprintf("%s %d", name, size))
	}
	funcs(s).DroppedFunc = func(f []byte) {
		if f == nil {
			res.dropped = append(res.dropped, "<nil>")
		} else {
			res.dropped = append(res.dropped, string(f))
		}
	}
	funcs(s).MalformedFunc = func(error) { res.malformed++ }
	p := make([]byte, psize)
	for i := 1; ; i++ {
		if i == drop.read {
			s.DropReply(drop.after)
			res.dropAt = r.(*chunkReader).consumed
		}
		var n int
		var err error
		if drop.viaReadDrop && s.NextIsDropped() {
			if n, err = s.ReadDrop(r, p); n == 0 && err == nil {
				if s.NextIsDropped() {
					res.err = errors.New("ReadDrop returned (0, nil) before the dropped reply was removed")
					return res
				}
				continue
			}
		} else if n, err = s.Read(r, p); n == 0 && err == nil {
			res.err = errors.New("Read returned (0, nil)")
			return res
		}
		res.out = append(res.out, p[:n]...)
		if err != nil {
			if err != io.EOF {
				res.err = err
			}
			return res
		}
	}
}

// short quotes at most 200 bytes of b, for failure messages.
func short(b []byte) string {
	if len(b) > 200 {
		return fmt.Sprintf("%q... (%d bytes)", b[:200], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// stripRun is one way of feeding an input through a Stripper.
type stripRun struct {
	sizes []int // chunk sizes (see chunkReader)
	psize int   // Read buffer size
	max   int   // MaxStripped
	eof   bool  // io.EOF comes with the last chunk
	drop  dropCall
}

// checkStripper compares a Stripper run over in against the reference and
// returns what the Stripper produced. exact reports whether the result is
// fully determined by the input (it is not when a stripped push outgrew
// MaxStripped and then turned out malformed or truncated).
func checkStripper(t testing.TB, in []byte, sizes []int, psize, maxStripped int, eofWithData bool) (got stripResult, exact bool) {
	t.Helper()
	return checkRun(t, in, stripRun{sizes: sizes, psize: psize, max: maxStripped, eof: eofWithData})
}

// checkRun is checkStripper for any stripRun.
func checkRun(t testing.TB, in []byte, run stripRun) (got stripResult, exact bool) {
	t.Helper()
	s := &Stripper{MaxStripped: run.max}
	got = runStripperDrop(s, &chunkReader{data: in, sizes: run.sizes, eofWithData: run.eof}, run.psize, run.drop)
	want := refStripDrop(in, stripMaint, got.dropAt, run.drop.after)
	where := func() string {
		return fmt.Sprintf("input %s, %+v, dropped at %d", short(in), run, got.dropAt)
	}
	if got.err != nil {
		t.Fatalf("%s: error %v", where(), got.err)
	}
	max := s.maxStripped()
	exact = !want.bad || max >= len(in)
	if !exact {
		// A stripped push (or dropped reply) that outgrew MaxStripped was
		// discarded as it streamed; if it then turns out malformed or
		// truncated, the discarded bytes cannot come back. Only the good
		// prefix is certain.
		if !bytes.HasPrefix(got.out, want.out[:want.good]) || len(got.out) > len(want.out) {
			t.Fatalf("%s:\n out %s\nwant %s (good prefix %d)", where(), short(got.out), short(want.out), want.good)
		}
	} else if !bytes.Equal(got.out, want.out) {
		t.Fatalf("%s:\n out %s\nwant %s", where(), short(got.out), short(want.out))
	}
	if got.replies != want.replies {
		t.Fatalf("%s: %d replies, want %d", where(), got.replies, want.replies)
	}
	if got.malformed > 1 {
		t.Fatalf("%s: OnMalformed called %d times", where(), got.malformed)
	}
	if got.malformed == 1 && !want.bad {
		t.Fatalf("%s: OnMalformed called on a well-formed stream", where())
	}
	if !want.bad && s.Passthrough() {
		t.Fatalf("%s: Passthrough %v on a well-formed stream", where(), s.Passthrough())
	}
	// Which stripped frames are reported depends on MaxStripped.
	var wantStripped, wantOver, wantDropped []string
	for _, f := range want.stripped {
		if len(f) > max {
			name, _ := refPushName([]byte(f))
			wantOver = append(wantOver, fmt.Sprintf("%s %d", name, len(f)))
		} else {
			wantStripped = append(wantStripped, f)
		}
	}
	if fmt.Sprint(got.stripped) != fmt.Sprint(wantStripped) || fmt.Sprint(got.oversize) != fmt.Sprint(wantOver) ||
		s.StrippedOversize() != uint64(len(wantOver)) {
		t.Fatalf("%s: stripped %q (oversize %q, %d), want %q (oversize %q)", where(),
			got.stripped, got.oversize, s.StrippedOversize(), wantStripped, wantOver)
	}
	for _, f := range want.dropped {
		if len(f) > max {
			f = "<nil>"
		}
		wantDropped = append(wantDropped, f)
	}
	if fmt.Sprint(got.dropped) != fmt.Sprint(wantDropped) {
		t.Fatalf("%s: dropped %q, want %q", where(), got.dropped, wantDropped)
	}
	// The drop stays pending exactly as long as no reply was dropped (a
	// reply being dropped when the stream failed also clears it).
	if _, pending := s.DropPending(); got.dropAt >= 0 && !want.bad && pending != (len(want.dropped) == 0) {
		t.Fatalf("%s: DropPending %v after dropping %q", where(), pending, want.dropped)
	}
	return got, exact
}

var stripperCases = []string{
	"",
	"+OK\r\n",
	"+OK\r\n$5\r\nhello\r\n:12\r\n",
	">4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n$14\r\n10.0.0.2:12000\r\n",
	"+OK\r\n>4\r\n$6\r\nMOVING\r\n:2\r\n:15\r\n_\r\n+OK\r\n",
	">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nmsg\r\n",             // pub/sub push: passes
	">3\r\n$7\r\nMESSAGE\r\n$2\r\nch\r\n$3\r\nmsg\r\n>1\r\n+S\r\n", // simple-string name
	"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",                              // attribute then reply
	"*2\r\n>2\r\n$6\r\nMOVING\r\n:1\r\n:2\r\n",                     // nested push is data
	">0\r\n+OK\r\n",
	">1\r\n:1\r\n+OK\r\n",
	">2\r\n$-1\r\n:1\r\n",
	">1\r\n|1\r\n+a\r\n+b\r\n+S\r\n", // attribute first: not a name
	">2\r\n*1\r\n+S\r\n+S\r\n",       // aggregate first: not a name
	">2\r\n$65\r\n" + strings.Repeat("S", 65) + "\r\n:1\r\n", // name too long
	">1\r\n+" + strings.Repeat("S", 65) + "\r\n",
	">1\r\n$64\r\n" + strings.Repeat("A", 64) + "\r\n",
	">3\r\n$9\r\nSMIGRATED\r\n:8\r\n*1\r\n*3\r\n$13\r\n10.0.0.1:7000\r\n$13\r\n10.0.0.2:7001\r\n$5\r\n0-100\r\n*0\r\n",
	"%1\r\n+k\r\n*1\r\n|1\r\n+a\r\n+b\r\n_\r\n",
	// Lengths of up to 19 digits, also while a push is held back: the
	// longest held prefix (110 bytes) and a stripped push.
	">0000000000000000002\r\n$0000000000000000064\r\n" + strings.Repeat("N", 64) + "\r\n:1\r\n+OK\r\n",
	">0000000000000000004\r\n$0000000000000000006\r\nMOVING\r\n:1\r\n:15\r\n_\r\n+OK\r\n",
	"*0000000000000000002\r\n$0000000000000000001\r\nx\r\n:1\r\n",
	"%0000000000000000001\r\n+k\r\n+v\r\n>2\r\n+S\r\n:1\r\n",
	// Lengths no frame can complete: the stream is well framed so far and
	// passes unchanged.
	"$9223372036854775807\r\nabc",
	"*2\r\n%9223372036854775807\r\n*9223372036854775807\r\n:1\r\n:2\r\n",
	"|9223372036854775807\r\n+k\r\n",
	// Malformed streams: everything from the bad frame on passes unchanged.
	"$9223372036854775808\r\nabc",
	"*99999999999999999999\r\n:1\r\n",
	"*00000000000000000001\r\n:1\r\n",
	">2\r\n$00000000000000000006\r\nMOVING\r\n:1\r\n",
	"*-0\r\n",
	":1\r\n=-1\r\n",
	"+OK\r\nxyz",
	">2\r\n$6\r\nMOVING\r\n:1\r\nbad",
	">3\r\n$6\r\nMOVING\r\n:1\r\n:2\r\n+OK\r\n$",
	"$3\r\nabcd\r\n",
	"*1\r\n$?\r\n",
	">4\r\n$6\r\nMOVING\r\n:2\r\n:15\r\n_\r\n+O\rK\r\n",
	// Truncated streams.
	">4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n$14\r\n10.0.0.2",
	">4\r\n$6\r\nMOV",
	"$10\r\nabc",
}

func init() {
	for _, ex := range protocolExamples {
		stripperCases = append(stripperCases, ex.wire, "+OK\r\n"+ex.wire+"$3\r\nabc\r\n")
	}
}

func TestStripperMatchesReference(t *testing.T) {
	chunkings := [][]int{nil, {1}, {2}, {3}, {5}, {7}, {1, 0, 2}, {13, 1}}
	for _, in := range stripperCases {
		for _, sizes := range chunkings {
			for _, psize := range []int{1, 2, 5, 64, 4096} {
				for _, max := range []int{0, 8} {
					for _, eof := range []bool{false, true} {
						checkStripper(t, []byte(in), sizes, psize, max, eof)
					}
				}
			}
		}
	}
}

func TestStripperExamples(t *testing.T) {
	moving := ">4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n$14\r\n10.0.0.2:12000\r\n"
	in := "+OK\r\n" + moving + "$5\r\nhello\r\n" + moving + "*1\r\n:1\r\n"
	got := runStripper(&Stripper{}, strings.NewReader(in), 4096)
	if want := "+OK\r\n$5\r\nhello\r\n*1\r\n:1\r\n"; string(got.out) != want {
		t.Fatalf("out %q, want %q", got.out, want)
	}
	if got.replies != 3 || len(got.stripped) != 2 || got.stripped[0] != moving {
		t.Fatalf("replies %d, stripped %q", got.replies, got.stripped)
	}
}

func TestStripperMalformedPassesThrough(t *testing.T) {
	// A stripped push cut by a framing error after it spanned reads: the
	// bytes already set aside are given back in order.
	in := "+OK\r\n>4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n$14\r\n10.0.0.2:12000\rX+more\r\n"
	var errs []error
	s := &Stripper{H: &Funcs{MalformedFunc: func(err error) { errs = append(errs, err) }}}
	got := runStripper(s, &chunkReader{data: []byte(in), sizes: []int{30}}, 4096)
	if string(got.out) != in || got.malformed != 1 || got.replies != 1 || !s.Passthrough() {
		t.Fatalf("out %q, malformed %d, replies %d", got.out, got.malformed, got.replies)
	}
	s = &Stripper{}
	var gotErr error
	funcs(s).MalformedFunc = func(err error) { gotErr = err }
	p := make([]byte, 64)
	s.Read(strings.NewReader("&1\r\n"), p)
	if !errors.Is(gotErr, ErrMalformed) || !strings.HasPrefix(gotErr.Error(), "resp: ") {
		t.Fatalf("OnMalformed got %v", gotErr)
	}
}

// stepReader returns its steps one per Read; an error step returns it.
type stepReader struct {
	steps []any // string or error
}

func (r *stepReader) Read(p []byte) (int, error) {
	if len(r.steps) == 0 {
		return 0, io.EOF
	}
	switch v := r.steps[0].(type) {
	case error:
		r.steps = r.steps[1:]
		return 0, v
	case string:
		n := copy(p, v)
		if n == len(v) {
			r.steps = r.steps[1:]
		} else {
			r.steps[0] = v[n:]
		}
		return n, nil
	}
	panic("bad step")
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

func TestStripperErrorKeepsState(t *testing.T) {
	// A deadline expires in the middle of a push whose name is not known:
	// the held bytes stay held, and the next Read carries on.
	r := &stepReader{steps: []any{"+OK\r\n>4\r\n$6\r\nMOV", timeoutErr{}, "ING\r\n:1\r\n:15\r\n_\r\n:7\r\n"}}
	var stripped int
	s := &Stripper{H: &Funcs{StripFunc: stripMaint, StrippedFunc: func([]byte) { stripped++ }}}
	p := make([]byte, 100)
	n, err := s.Read(r, p)
	if string(p[:n]) != "+OK\r\n" || err != nil {
		t.Fatalf("first read %q %v", p[:n], err)
	}
	if n, err = s.Read(r, p); n != 0 || !errors.Is(err, timeoutErr{}) {
		t.Fatalf("second read %q %v", p[:n], err)
	}
	if n, err = s.Read(r, p); string(p[:n]) != ":7\r\n" || err != nil || stripped != 1 {
		t.Fatalf("third read %q %v, stripped %d", p[:n], err, stripped)
	}
	if n, err = s.Read(r, p); n != 0 || err != io.EOF {
		t.Fatalf("last read %q %v", p[:n], err)
	}
}

func TestStripperEOFReleasesHeldBytes(t *testing.T) {
	for _, in := range []string{">4\r\n$6\r\nMOV", ">4\r\n$6\r\nMOVING\r\n:1\r\n"} {
		r := &stepReader{steps: []any{"+OK\r\n", in}}
		s := &Stripper{H: &Funcs{StripFunc: stripMaint}}
		var out []byte
		p := make([]byte, 3)
		for {
			n, err := s.Read(r, p)
			out = append(out, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil || n == 0 {
				t.Fatalf("Read: %d, %v", n, err)
			}
		}
		if string(out) != "+OK\r\n"+in || !s.Passthrough() {
			t.Fatalf("out %q, passthrough %v", out, s.Passthrough())
		}
	}
}

func TestStripperNoProgress(t *testing.T) {
	s := &Stripper{}
	n, err := s.Read(&chunkReader{data: []byte("+OK\r\n"), sizes: []int{0}}, make([]byte, 10))
	if n != 0 || err != io.ErrNoProgress {
		t.Fatalf("got %d, %v", n, err)
	}
}

func TestStripperReset(t *testing.T) {
	replies := 0
	s := &Stripper{H: &Funcs{StripFunc: stripMaint}, OnReply: func() { replies++ }}
	p := make([]byte, 64)
	s.Read(strings.NewReader(">4\r\n$6\r\nMOV"), p) // leaves a pending push
	s.Reset()
	n, _ := s.Read(strings.NewReader("+OK\r\n"), p)
	if string(p[:n]) != "+OK\r\n" || replies != 1 {
		t.Fatalf("after Reset: %q, %d replies", p[:n], replies)
	}
}

// genReader produces an endless or bounded stream from a pattern without
// holding it in memory: a bulk header, size payload bytes, and the CRLF.
type bigBulkReader struct {
	head, tail string
	size, off  int64
}

func (r *bigBulkReader) Read(p []byte) (int, error) {
	total := int64(len(r.head)) + r.size + int64(len(r.tail))
	if r.off >= total {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.off < total {
		switch {
		case r.off < int64(len(r.head)):
			k := copy(p[n:], r.head[r.off:])
			n += k
			r.off += int64(k)
		case r.off < int64(len(r.head))+r.size:
			k := int(min(int64(len(p)-n), int64(len(r.head))+r.size-r.off))
			clear(p[n : n+k])
			n += k
			r.off += int64(k)
		default:
			k := copy(p[n:], r.tail[r.off-int64(len(r.head))-r.size:])
			n += k
			r.off += int64(k)
		}
	}
	return n, nil
}

func TestStripperStreamsLargeBulk(t *testing.T) {
	const size = 100 << 20
	moving := string(AppendMoving(nil, 1, 15, "h:1", false))
	r := &bigBulkReader{head: moving + fmt.Sprintf("$%d\r\n", size), tail: "\r\n" + moving + "+OK\r\n", size: size}
	replies, stripped := 0, 0
	s := &Stripper{H: &Funcs{StripFunc: stripMaint, StrippedFunc: func([]byte) { stripped++ }}, OnReply: func() { replies++ }}
	p := make([]byte, 32<<10)
	var total int64
	first := true
	for {
		n, err := s.Read(r, p)
		if first {
			// The bulk's first bytes come out with the first read, long
			// before the bulk is complete.
			if n != len(p)-len(moving) || string(p[:4]) != "$104" {
				t.Fatalf("first read returned %d bytes: %q", n, p[:min(n, 16)])
			}
			first = false
		}
		total += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := int64(len(fmt.Sprintf("$%d\r\n", size))) + size + 2 + 5
	if total != want || replies != 2 || stripped != 2 {
		t.Fatalf("got %d bytes (want %d), %d replies, %d stripped", total, want, replies, stripped)
	}
}

func TestStripperOversize(t *testing.T) {
	push := string(AppendPush(nil, "MOVING", 1, 2, strings.Repeat("x", 100)))
	in := push + "+OK\r\n" + push
	for _, sizes := range [][]int{nil, {7}} {
		s := &Stripper{MaxStripped: 50}
		got := runStripper(s, &chunkReader{data: []byte(in), sizes: sizes}, 4096)
		wantOver := fmt.Sprintf("MOVING %d", len(push))
		if string(got.out) != "+OK\r\n" || s.StrippedOversize() != 2 || len(got.stripped) != 0 ||
			len(got.oversize) != 2 || got.oversize[0] != wantOver || got.oversize[1] != wantOver {
			t.Fatalf("chunks %v: out %q, oversize %d %q, stripped %d", sizes, got.out, s.StrippedOversize(), got.oversize, len(got.stripped))
		}
	}
}

func TestStripperZeroAlloc(t *testing.T) {
	stream := replyMix(1 << 20)
	r := &loopReader{data: stream, chunk: 32 << 10}
	replies := 0
	s := &Stripper{H: &Funcs{StripFunc: stripMaint, StrippedFunc: func([]byte) {}}, OnReply: func() { replies++ }}
	p := make([]byte, 16<<10)
	// Warm up: the stripped-push buffer is allocated once.
	for range 200 {
		s.Read(r, p)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := s.Read(r, p); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || s.Passthrough() || replies == 0 {
		t.Fatalf("%v allocs per Read, passthrough %v, %d replies", allocs, s.Passthrough(), replies)
	}
}

// loopReader returns data over and over, chunk bytes at a time at most.
type loopReader struct {
	data  []byte
	off   int
	chunk int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p[:min(len(p), r.chunk)], r.data[r.off:])
	r.off += n
	if r.off == len(r.data) {
		r.off = 0
	}
	return n, nil
}

// replyMix returns about size bytes of a realistic reply stream: many small
// +OK and integers, bulk strings of 16 to 4096 bytes, arrays and nulls, with
// an occasional maintenance push (stripped) and pub/sub push (kept).
func replyMix(size int) []byte {
	var b []byte
	seed := uint32(1)
	rnd := func(n int) int {
		seed = seed*1664525 + 1013904223
		return int(seed>>8) % n
	}
	payload := bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz0123456789"), 120)
	for i := 0; len(b) < size; i++ {
		switch x := rnd(100); {
		case x < 40:
			b = append(b, "+OK\r\n"...)
		case x < 55:
			b = AppendInt(b, int64(rnd(100000)))
		case x < 85:
			b = AppendBulk(b, payload[:16+rnd(4096-16)])
		case x < 95:
			n := 1 + rnd(8)
			b = AppendArrayHeader(b, n)
			for range n {
				b = AppendBulk(b, payload[:1+rnd(64)])
			}
		case x < 98:
			b = append(b, "$-1\r\n"...)
		default:
			if rnd(2) == 0 {
				b = AppendMigrating(b, int64(i), 2, `["1"]`)
			} else {
				b = AppendPush(b, "message", "chan", "hello")
			}
		}
	}
	return b
}

func benchReader(b *testing.B, read func(r io.Reader, p []byte) (int, error)) {
	benchStream(b, replyMix(8<<20), read)
}

// benchStream reads stream through read, from a reader returning it in
// 32 KiB chunks, b.N times.
func benchStream(b *testing.B, stream []byte, read func(r io.Reader, p []byte) (int, error)) {
	r := &loopReader{data: stream, chunk: 32 << 10}
	p := make([]byte, 32<<10)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for got := 0; got < len(stream); {
			n, err := read(r, p)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}
}

// BenchmarkStripperThroughput measures Stripper.Read over a realistic reply
// mix delivered in 32 KiB chunks.
func BenchmarkStripperThroughput(b *testing.B) {
	s := &Stripper{H: &Funcs{StripFunc: stripMaint, StrippedFunc: func([]byte) {}}, OnReply: func() {}}
	benchReader(b, s.Read)
	if s.Passthrough() {
		b.Fatal("stream was found malformed")
	}
}

// BenchmarkPlainCopyThroughput is the baseline for
// BenchmarkStripperThroughput: the same stream read without a Stripper.
func BenchmarkPlainCopyThroughput(b *testing.B) {
	benchReader(b, func(r io.Reader, p []byte) (int, error) { return r.Read(p) })
}

// smallMix returns about size bytes of small replies only (+OK, integers,
// short bulks, short arrays): the Stripper's worst case per byte.
func smallMix(size int) []byte {
	var b []byte
	for i := 0; len(b) < size; i++ {
		switch i % 4 {
		case 0:
			b = append(b, "+OK\r\n"...)
		case 1:
			b = AppendInt(b, int64(i))
		case 2:
			b = AppendBulk(b, "value-of-some-key")
		case 3:
			b = AppendArrayHeader(b, 2)
			b = AppendBulk(b, "field")
			b = AppendInt(b, 42)
		}
	}
	return b
}

// BenchmarkStripperSmallReplies measures Stripper.Read over small replies
// only, in 32 KiB chunks.
func BenchmarkStripperSmallReplies(b *testing.B) {
	s := &Stripper{H: &Funcs{StripFunc: stripMaint}, OnReply: func() {}}
	benchStream(b, smallMix(1<<20), s.Read)
}

// BenchmarkPlainCopySmallReplies is the baseline for
// BenchmarkStripperSmallReplies.
func BenchmarkPlainCopySmallReplies(b *testing.B) {
	benchStream(b, smallMix(1<<20), func(r io.Reader, p []byte) (int, error) { return r.Read(p) })
}

// onceReader returns data whole on every Read, as a socket brings a reply
// that arrived in one segment.
type onceReader struct{ data []byte }

func (r *onceReader) Read(p []byte) (int, error) { return copy(p, r.data), nil }

// BenchmarkStripperReplies measures Stripper.Read per read of the replies a
// command gets, each arriving whole in one read: a GET's bulk string, MGETs
// of 100 keys (values of lengths of one digit, and of two), a pipeline of
// 100 GETs, a pub/sub message (a push that is not stripped), and 10 pub/sub
// messages in one read.
func BenchmarkStripperReplies(b *testing.B) {
	var mget, mgetLong, pipe []byte
	mget = AppendArrayHeader(mget, 100)
	mgetLong = AppendArrayHeader(mgetLong, 100)
	for i := range 100 {
		mget = AppendBulk(mget, fmt.Sprint("value:", i))
		mgetLong = AppendBulk(mgetLong, fmt.Sprint("a longer value, number ", i))
		pipe = AppendBulk(pipe, fmt.Sprint("value:", i))
	}
	msg := []byte(">3\r\n$7\r\nmessage\r\n$7\r\nchannel\r\n$12\r\nhello, world\r\n")
	for _, bc := range []struct {
		name    string
		in      []byte
		replies uint64
	}{
		{"get", AppendBulk(nil, "value"), 1},
		{"mget100", mget, 1},
		{"mget100Long", mgetLong, 1},
		{"pipeline100", pipe, 100},
		{"pubsub", msg, 0},
		{"pubsub10", bytes.Repeat(msg, 10), 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := &Stripper{H: &Funcs{StripFunc: stripMaint}} // no OnReply: maint counts by Replies
			r := &onceReader{data: bc.in}
			p := make([]byte, 32<<10)
			b.ReportAllocs()
			for b.Loop() {
				if n, err := s.Read(r, p); n != len(bc.in) || err != nil {
					b.Fatal(n, err)
				}
			}
			if s.Replies() != uint64(b.N)*bc.replies {
				b.Fatal("replies", s.Replies())
			}
		})
	}
}

// Funcs is a Handler made of functions, any of which may be nil: a nil
// Strip strips nothing, another nil function ignores its event.
type Funcs struct {
	StripFunc     func(name []byte) bool
	StrippedFunc  func(frame []byte)
	OversizeFunc  func(name []byte, size int64)
	DroppedFunc   func(frame []byte)
	MalformedFunc func(err error)
}

// Strip calls StripFunc, if set.
func (f *Funcs) Strip(name []byte) bool { return f.StripFunc != nil && f.StripFunc(name) }

// Stripped calls StrippedFunc, if set.
func (f *Funcs) Stripped(frame []byte) {
	if f.StrippedFunc != nil {
		f.StrippedFunc(frame)
	}
}

// Oversize calls OversizeFunc, if set.
func (f *Funcs) Oversize(name []byte, size int64) {
	if f.OversizeFunc != nil {
		f.OversizeFunc(name, size)
	}
}

// Dropped calls DroppedFunc, if set.
func (f *Funcs) Dropped(frame []byte) {
	if f.DroppedFunc != nil {
		f.DroppedFunc(frame)
	}
}

// Malformed calls MalformedFunc, if set.
func (f *Funcs) Malformed(err error) {
	if f.MalformedFunc != nil {
		f.MalformedFunc(err)
	}
}

// funcs returns s's Handler as the Funcs the tests set, making one if s has
// none.
func funcs(s *Stripper) *Funcs {
	if s.H == nil {
		s.H = &Funcs{}
	}
	return s.H.(*Funcs)
}
