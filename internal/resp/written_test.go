package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

// cmd encodes one command as a client writes it: an array of bulk strings.
func cmd(args ...string) []byte {
	b := AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = AppendBulk(b, a)
	}
	return b
}

// cmds concatenates commands into one stream.
func cmds(cs ...[]byte) []byte { return bytes.Join(cs, nil) }

// mixedCase returns s with every other letter upper-cased, starting with
// the second: "blpop" becomes "bLpOp".
func mixedCase(s string) string {
	b := []byte(strings.ToLower(s))
	for i := 1; i < len(b); i += 2 {
		if b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

// blockingNames are the commands that always block outside MULTI, with
// arguments that make them valid.
var blockingNames = [][]string{
	{"BLPOP", "q", "0"},
	{"BRPOP", "q", "0"},
	{"BRPOPLPUSH", "a", "b", "0"},
	{"BLMOVE", "a", "b", "LEFT", "RIGHT", "0"},
	{"BLMPOP", "0", "1", "q", "LEFT"},
	{"BZPOPMIN", "z", "0"},
	{"BZPOPMAX", "z", "0"},
	{"BZMPOP", "0", "1", "z", "MIN"},
	{"WAIT", "1", "0"},
	{"WAITAOF", "1", "0", "0"},
}

func TestWrittenBlockingNamesInAnyCase(t *testing.T) {
	for _, args := range blockingNames {
		for _, name := range []string{args[0], strings.ToLower(args[0]), mixedCase(args[0])} {
			var w Written
			in := cmd(append([]string{name}, args[1:]...)...)
			if n := w.Feed(in); n != 1 || !w.LastBlocking() || w.Lost() {
				t.Errorf("%q: Feed = %d, blocking %v, lost %v; want 1, true, false", in, n, w.LastBlocking(), w.Lost())
			}
			// A GET after it is not blocking.
			if n := w.Feed(cmd("get", "k")); n != 1 || w.LastBlocking() {
				t.Errorf("%s then GET: Feed = %d, blocking %v", name, n, w.LastBlocking())
			}
		}
	}
}

func TestWrittenNotBlocking(t *testing.T) {
	for _, name := range []string{
		"GET", "SET", "LPOP", "BLPO", "BLPOPX", "XBLPOP", "WAITA", "WAITAOFX", "BZPOPMINX",
		"BRPOPLPUS", "BRPOPLPUSHX", "XREADGROUPS", "B", "", "BL@OP", "BLPOP\x00",
		"BLP\xcf\x80P", "wa\xc4\xb1t", // non-ASCII bytes never fold to letters
		strings.Repeat("BLPOP", 4), // longer than 16
		"BRPOPLPUSH" + strings.Repeat("x", 7),
	} {
		var w Written
		if n := w.Feed(cmd(name, "q", "0")); n != 1 || w.LastBlocking() || w.Lost() {
			t.Errorf("%q: Feed = %d, blocking %v, lost %v; want 1, false, false", name, n, w.LastBlocking(), w.Lost())
		}
	}
}

func TestWrittenXRead(t *testing.T) {
	for _, tc := range []struct {
		args     string
		blocking bool
	}{
		{"XREAD STREAMS s 0", false},
		{"XREAD COUNT 10 STREAMS s 0", false},
		{"XREAD BLOCK 0 STREAMS s $", true},
		{"xread block 0 streams s $", true},
		{"XrEaD COUNT 5 bLoCk 100 STREAMS a b 0 0", true},
		{"XREAD STREAMS block $", false},         // a key named block
		{"XREAD STREAMS s block", false},         // an ID named block
		{"XREAD COUNT block STREAMS s 0", false}, // the value of COUNT
		{"XREAD BLOCKING 0 STREAMS s 0", false},
		{"XREAD BLOC 0 STREAMS s 0", false},
		{"XREAD HELLO BLOCK 0 STREAMS s 0", false}, // an unknown option ends the options
		{"XREAD", false},
		{"XREAD BLOCK", true},
		{"XREADGROUP GROUP g c STREAMS s >", false},
		{"XREADGROUP GROUP g c BLOCK 100 STREAMS s >", true},
		{"xreadgroup group g c count 1 noack block 0 streams s >", true},
		{"XREADGROUP GROUP block c STREAMS s >", false}, // a group named block
		{"XREADGROUP GROUP g block STREAMS s >", false}, // a consumer named block
		{"XREADGROUP GROUP g c CLAIM block STREAMS s >", false},
		{"XREADGROUP GROUP g c CLAIM 10 BLOCK 0 STREAMS s >", true},
		{"XREADGROUP GROUP g c NOACK NOACK BLOCK 0 STREAMS s >", true},
		{"XRANGE s - + BLOCK", false},
		{"GET BLOCK", false},
	} {
		in := cmd(strings.Fields(tc.args)...)
		for _, split := range []int{0, 1, len(in) / 2, len(in) - 1} {
			var w Written
			n := w.Feed(in[:split]) + w.Feed(in[split:])
			if n != 1 || w.LastBlocking() != tc.blocking || w.Lost() {
				t.Errorf("%s (split at %d): %d commands, blocking %v, lost %v; want 1, %v, false",
					tc.args, split, n, w.LastBlocking(), w.Lost(), tc.blocking)
			}
		}
	}
}

func TestWrittenGetAndPipelines(t *testing.T) {
	get := cmd("GET", "key")
	if string(get) != "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n" {
		t.Fatalf("cmd encodes GET as %q", get)
	}
	for _, n := range []int{1, 2, 10, 100, 1000} {
		var p [][]byte
		for i := range n {
			p = append(p, cmd("incr", fmt.Sprint("counter:", i)))
		}
		in := cmds(p...)
		var w Written
		if got := w.Feed(in); got != n || w.LastBlocking() || w.Lost() {
			t.Errorf("pipeline of %d: Feed = %d, blocking %v, lost %v", n, got, w.LastBlocking(), w.Lost())
		}
		// The same in 7-byte writes.
		w = Written{}
		got := 0
		for off := 0; off < len(in); off += 7 {
			got += w.Feed(in[off:min(off+7, len(in))])
		}
		if got != n || w.Lost() {
			t.Errorf("pipeline of %d in 7-byte writes: %d commands, lost %v", n, got, w.Lost())
		}
	}
	// A pipeline that ends in a blocking command.
	var w Written
	if n := w.Feed(cmds(cmd("SET", "k", "v"), cmd("GET", "k"), cmd("BLPOP", "q", "0"))); n != 3 || !w.LastBlocking() {
		t.Errorf("SET GET BLPOP: Feed = %d, blocking %v", n, w.LastBlocking())
	}
}

func TestWrittenMulti(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       []byte
		n        int
		blocking bool
	}{
		{"MULTI INCR EXEC", cmds(cmd("MULTI"), cmd("INCR", "a"), cmd("EXEC")), 3, false},
		{"queued BLPOP", cmds(cmd("MULTI"), cmd("BLPOP", "q", "0")), 2, false},
		{"queued XREAD BLOCK", cmds(cmd("multi"), cmd("xread", "block", "0", "streams", "s", "$")), 2, false},
		{"BLPOP after EXEC", cmds(cmd("MULTI"), cmd("BLPOP", "q", "0"), cmd("EXEC"), cmd("BLPOP", "q", "0")), 4, true},
		{"BLPOP after DISCARD", cmds(cmd("MULTI"), cmd("discard"), cmd("blpop", "q", "0")), 3, true},
		{"BLPOP after RESET", cmds(cmd("MULTI"), cmd("Reset"), cmd("WAIT", "0", "0")), 3, true},
		{"nested MULTI stays queued", cmds(cmd("MULTI"), cmd("MULTI"), cmd("BLPOP", "q", "0")), 3, false},
		{"EXEC without MULTI", cmds(cmd("EXEC"), cmd("BLPOP", "q", "0")), 2, true},
	} {
		var w Written
		if n := w.Feed(tc.in); n != tc.n || w.LastBlocking() != tc.blocking || w.Lost() {
			t.Errorf("%s: Feed = %d, blocking %v, lost %v; want %d, %v, false",
				tc.name, n, w.LastBlocking(), w.Lost(), tc.n, tc.blocking)
		}
	}
}

// TestWrittenBigValues feeds 1 MB values made of valid-looking commands:
// a counter that looked at payloads would see thousands of them.
func TestWrittenBigValues(t *testing.T) {
	inner := cmds(cmd("BLPOP", "q", "0"), []byte("*1\r\n$4\r\nWAIT\r\n"))
	big := string(bytes.Repeat(inner, (1<<20)/len(inner)+1)[:1<<20])
	in := cmds(cmd("SET", "k", big), cmd("GET", "k"), cmd("SET", "j", big, "EX", "10"), cmd("BLPOP", big, "0"))
	for _, chunk := range []int{len(in), 32 << 10, 4096, 1000, 7} {
		var w Written
		n := 0
		for off := 0; off < len(in); off += chunk {
			n += w.Feed(in[off:min(off+chunk, len(in))])
		}
		if n != 4 || !w.LastBlocking() || w.Lost() {
			t.Errorf("chunks of %d: %d commands, blocking %v, lost %v; want 4, true, false", chunk, n, w.LastBlocking(), w.Lost())
		}
	}
}

func TestWrittenEmptyArrays(t *testing.T) {
	var w Written
	if n := w.Feed(cmd("BLPOP", "q", "0")); n != 1 || !w.LastBlocking() {
		t.Fatalf("BLPOP: Feed = %d, blocking %v", n, w.LastBlocking())
	}
	// Empty and null arrays are skipped, as Redis skips them: no command,
	// and the last command is still the BLPOP.
	for _, in := range []string{"*0\r\n", "*-1\r\n", "*00\r\n", "*0\r\n*-1\r\n*0\r\n"} {
		if n := w.Feed([]byte(in)); n != 0 || !w.LastBlocking() || w.Lost() {
			t.Errorf("%q: Feed = %d, blocking %v, lost %v; want 0, true, false", in, n, w.LastBlocking(), w.Lost())
		}
	}
	if n := w.Feed([]byte("*0\r\n*1\r\n$4\r\nPING\r\n*-1\r\n")); n != 1 || w.LastBlocking() || w.Lost() {
		t.Errorf("PING between empty arrays: Feed = %d, blocking %v, lost %v", n, w.LastBlocking(), w.Lost())
	}
}

func TestWrittenLost(t *testing.T) {
	ok := string(cmd("GET", "k"))
	for _, tc := range []struct {
		in     string
		before int // commands completed before the fault
	}{
		{"PING\r\n", 0}, // inline
		{ok + "PING\r\n", 1},
		{ok + ok + "\r\n", 2},
		{"*1\r\n:1\r\n", 0},
		{"*1\r\n+PING\r\n", 0},
		{"*1\r\n*1\r\n$4\r\nPING\r\n", 0},
		{"$4\r\nPING\r\n", 0},
		{"*1\r\n$-1\r\n", 0},
		{"*1\r\n$4\r\nPINGG\r\n", 0},
		{"*1\r\n$4\r\nPIN\r\n", 0},
		{"*1\r\n$4\r\nPING\n\n", 0},
		{"*1\r\n$4\r\nPING\r\r", 0},
		{"*1\r\n$4\rPING\r\n", 0},
		{"*1\n$4\r\nPING\r\n", 0},
		{"*\r\n", 0},
		{"*x\r\n", 0},
		{"*-\r\n", 0},
		{"*-2\r\n", 0},
		{"*-10\r\n", 0},
		{"*1 \r\n", 0},
		{"*+1\r\n", 0},
		{"*1\r\n$\r\n", 0},
		{"*1\r\n$-0\r\n", 0},
		{"*00000000001\r\n", 0}, // 11 digits
		{"*00000000001\r\n$4\r\nPING\r\n", 0},
		{"*1\r\n$\r\n\r\n", 0},
		{"*\r\n$4\r\nPING\r\n", 0},
		{fmt.Sprintf("*%d\r\n", MaxAggregateLen+1), 0},  // too many arguments
		{fmt.Sprintf("*1\r\n$%d\r\n", MaxBulkLen+1), 0}, // too long an argument
		{"*1\r\n$99999999999\r\n", 0},
		{"*1\r\n$00000000004\r\nPING\r\n", 0}, // 11 digits
	} {
		for _, split := range []int{len(tc.in), 1, len(tc.in) / 2} {
			var w Written
			n := w.Feed([]byte(tc.in[:split]))
			n += w.Feed([]byte(tc.in[split:]))
			if n != tc.before || !w.Lost() {
				t.Errorf("%q (split at %d): %d commands, lost %v; want %d, true", tc.in, split, n, w.Lost(), tc.before)
			}
			if n := w.Feed([]byte(ok)); n != 0 || !w.Lost() {
				t.Errorf("%q: after the loss, Feed = %d, lost %v; want 0, true", tc.in, n, w.Lost())
			}
		}
	}
	// MaxAggregateLen arguments are accepted, one more is not.
	for _, n := range []int{MaxAggregateLen, MaxAggregateLen + 1} {
		in := append(AppendArrayHeader(nil, n), bytes.Repeat([]byte("$0\r\n\r\n"), n)...)
		var w Written
		if got := w.Feed(in); (got == 1) != (n == MaxAggregateLen) || w.Lost() != (n > MaxAggregateLen) {
			t.Errorf("%d arguments: Feed = %d, lost %v", n, got, w.Lost())
		}
	}
	// Leading zeros and 10-digit lengths are accepted, as ReadFrame does.
	var w Written
	if n := w.Feed([]byte("*0000000002\r\n$03\r\nGET\r\n$0000000001\r\nk\r\n")); n != 1 || w.Lost() {
		t.Errorf("leading zeros: Feed = %d, lost %v", n, w.Lost())
	}
	// An incomplete command is not lost.
	w = Written{}
	if n := w.Feed([]byte(ok[:len(ok)-1])); n != 0 || w.Lost() {
		t.Errorf("a GET without its last LF: Feed = %d, lost %v", n, w.Lost())
	}
}

// splitStream is a stream of varied commands, for the split tests.
func splitStream() ([]byte, []int, []bool) {
	parts := []struct {
		b        []byte
		blocking bool
	}{
		{cmd("GET", "key"), false},
		{cmd("set", "key", strings.Repeat("v", 100)), false},
		{cmd("BLPOP", "q", "0"), true},
		{cmd("MULTI"), false},
		{cmd("INCR", "n"), false},
		{cmd("BLPOP", "q", "0"), false},
		{cmd("EXEC"), false},
		{[]byte("*0\r\n"), false}, // no command
		{cmd("xread", "count", "1", "block", "5", "streams", "s", "$"), true},
		{cmd("XREAD", "STREAMS", "block", "0"), false},
		{cmd("brpoplpush", "a", "b", "0"), true},
		{cmd("APPEND", "k", strings.Repeat("\r\n*1\r\n$4\r\nWAIT", 25)), false},
		{cmd("WAIT", "1", "100"), true},
		{cmd("PING"), false},
	}
	var in []byte
	var ends []int
	var blocking []bool
	for _, p := range parts {
		in = append(in, p.b...)
		if p.b[1] != '0' {
			ends = append(ends, len(in))
			blocking = append(blocking, p.blocking)
		}
	}
	return in, ends, blocking
}

// TestWrittenCountsAtLastByte feeds a stream one byte at a time: each
// command must count in the call that brings its last byte, and only then.
func TestWrittenCountsAtLastByte(t *testing.T) {
	in, ends, blocking := splitStream()
	var w Written
	total, k := 0, 0
	for i := range in {
		total += w.Feed(in[i : i+1])
		if k < len(ends) && ends[k] == i+1 {
			k++
		}
		if total != k {
			t.Fatalf("after byte %d: %d commands, want %d", i+1, total, k)
		}
		if k > 0 && w.LastBlocking() != blocking[k-1] {
			t.Fatalf("after byte %d: blocking %v, want %v", i+1, w.LastBlocking(), blocking[k-1])
		}
	}
	if w.Lost() || total != len(ends) {
		t.Fatalf("lost %v, %d commands of %d", w.Lost(), total, len(ends))
	}
}

// TestWrittenSplitAnywhere splits the stream in three at every pair of
// offsets: the total and the last command's class must not change.
func TestWrittenSplitAnywhere(t *testing.T) {
	in, ends, blocking := splitStream()
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			var w Written
			a := w.Feed(in[:i])
			b := w.Feed(in[i:j])
			c := w.Feed(in[j:])
			if a+b+c != len(ends) || w.Lost() || w.LastBlocking() != blocking[len(blocking)-1] {
				t.Fatalf("split at %d, %d: %d+%d+%d commands, lost %v", i, j, a, b, c, w.Lost())
			}
			// The first call counts exactly the commands that end in it.
			want := 0
			for _, e := range ends {
				if e <= i {
					want++
				}
			}
			if a != want {
				t.Fatalf("split at %d: first Feed = %d, want %d", i, a, want)
			}
		}
	}
}

func TestWrittenZeroAlloc(t *testing.T) {
	in, _, _ := splitStream()
	var w Written
	allocs := testing.AllocsPerRun(100, func() {
		w.Feed(in)
		for i := 0; i < len(in); i += 5 {
			w.Feed(in[i:min(i+5, len(in))])
		}
	})
	if allocs != 0 || w.Lost() {
		t.Fatalf("%v allocs per run, lost %v", allocs, w.Lost())
	}
}

// refCmd is one command of the reference: the offset just after its last
// byte, and whether it is blocking.
type refCmd struct {
	end      int
	blocking bool
}

// refWritten is what a Written must report for a stream.
type refWritten struct {
	cmds []refCmd
	bad  int // offset of the first byte no well-formed stream continues with; -1 if none
}

// completed returns how many commands end within the first off bytes.
func (r refWritten) completed(off int) int {
	n := 0
	for n < len(r.cmds) && r.cmds[n].end <= off {
		n++
	}
	return n
}

// refWrite is the reference for Written: it frames the whole stream with
// ReadCommand and CommandName, classifies each command with plain string
// comparisons, and finds where a stream goes wrong with refPrefix.
func refWrite(t *testing.T, in []byte) refWritten {
	res := refWritten{bad: -1}
	br := bufio.NewReader(bytes.NewReader(in))
	multi := false
	for off := 0; ; {
		frame, err := ReadCommand(br, nil)
		if err == io.EOF {
			return res
		}
		if err == nil && frame[0] == '*' {
			name, args, nameErr := CommandName(frame)
			empty := false
			if nameErr != nil {
				// An empty or null array is no command; anything else
				// is not one either.
				line, _, _ := cutLine(frame)
				n, _ := parseLen('*', line[1:])
				empty = n <= 0
			}
			if nameErr == nil || empty {
				// The two halves of the reference agree on the frame.
				if ok, done, end := refPrefix(in[off:]); !ok || !done || end != len(frame) {
					t.Fatalf("reference: ReadCommand frames %q at %d; refPrefix says ok %v done %v end %d",
						frame, off, ok, done, end)
				}
				off += len(frame)
				if !empty {
					words, _ := splitArray(frame)
					if name != strings.ToUpper(string(words[0])) {
						t.Fatalf("reference: CommandName %q for %q", name, words[0])
					}
					res.cmds = append(res.cmds, refCmd{off, refBlocking(words[0], args, &multi)})
				}
				continue
			}
		}
		// Not a command, malformed or cut short: find the first byte that
		// cannot continue a well-formed stream.
		rest := in[off:]
		for k := 1; k <= len(rest); k++ {
			ok, done, _ := refPrefix(rest[:k])
			if done {
				t.Fatalf("reference: %q at %d fails ReadCommand/CommandName (%v) but refPrefix completes it", rest[:k], off, err)
			}
			if !ok {
				res.bad = off + k - 1
				return res
			}
		}
		if err == nil || errors.Is(err, ErrMalformed) {
			t.Fatalf("reference: %q at %d is malformed (%v) but refPrefix accepts it", rest, off, err)
		}
		return res
	}
}

// refUpper upper-cases the ASCII letters of b, and nothing else.
func refUpper(b []byte) string {
	out := []byte(string(b))
	for i, c := range out {
		if c >= 'a' && c <= 'z' {
			out[i] = c - 'a' + 'A'
		}
	}
	return string(out)
}

// refBlocking classifies a command by the rules of Written; multi tracks
// MULTI across commands.
func refBlocking(rawName []byte, args [][]byte, multi *bool) bool {
	switch refUpper(rawName) {
	case "MULTI":
		*multi = true
	case "EXEC", "DISCARD", "RESET":
		*multi = false
	case "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP", "WAIT", "WAITAOF":
		return !*multi
	case "XREAD", "XREADGROUP":
		for i := 0; i < len(args) && !*multi; i++ {
			switch refUpper(args[i]) {
			case "BLOCK":
				return true
			case "COUNT", "CLAIM":
				i++
			case "GROUP":
				i += 2
			case "NOACK":
			default:
				return false
			}
		}
	}
	return false
}

// refPrefix reports whether b is a prefix of a well-formed command stream
// (ok). If one command (or empty array) is complete in b, done is set and
// end is its length; what follows is not looked at.
func refPrefix(b []byte) (ok, done bool, end int) {
	if len(b) == 0 {
		return true, false, 0
	}
	if b[0] != '*' {
		return false, false, 0
	}
	n, rest, ok, full := refNum(b[1:], true, MaxAggregateLen)
	if !ok || !full {
		return ok, false, 0
	}
	for range max(n, 0) {
		if len(rest) == 0 {
			return true, false, 0
		}
		if rest[0] != '$' {
			return false, false, 0
		}
		size, r, ok, full := refNum(rest[1:], false, MaxBulkLen)
		if !ok || !full {
			return ok, false, 0
		}
		switch {
		case int64(len(r)) <= size:
			return true, false, 0
		case r[size] != '\r':
			return false, false, 0
		case int64(len(r)) == size+1:
			return true, false, 0
		case r[size+1] != '\n':
			return false, false, 0
		}
		rest = r[size+2:]
	}
	return true, true, len(b) - len(rest)
}

// refNum checks the number at the start of b, up to its CRLF: digits (or
// "-1" for a count) making at most 10 digits and a value of at most max.
// ok tells whether b can still be such a number; full whether its CRLF is
// in b, and then rest follows it.
func refNum(b []byte, count bool, max int64) (n int64, rest []byte, ok, full bool) {
	body, tail, cr := bytes.Cut(b, []byte("\r"))
	switch {
	case count && string(body) == "-" && !cr:
		return 0, nil, true, false
	case count && string(body) == "-1":
		n = -1
	default:
		if len(body) > maxLenDigits || strings.Trim(string(body), "0123456789") != "" {
			return 0, nil, false, false
		}
		if len(body) > 0 {
			v, err := strconv.ParseInt(string(body), 10, 64)
			if err != nil || v > max {
				return 0, nil, false, false
			}
			n = v
		} else if cr {
			return 0, nil, false, false
		}
	}
	if !cr {
		return n, nil, true, false
	}
	if len(tail) == 0 {
		return n, nil, true, false
	}
	if tail[0] != '\n' {
		return 0, nil, false, false
	}
	return n, tail[1:], true, true
}

// checkWritten feeds in to a Written in chunks whose sizes cycle through
// sizes (nil: one chunk) and compares it with the reference after each.
func checkWritten(t *testing.T, in []byte, sizes []int) {
	t.Helper()
	ref := refWrite(t, in)
	var w Written
	total := 0
	for off, k := 0, 0; off < len(in); k++ {
		end := len(in)
		if len(sizes) > 0 {
			end = min(off+sizes[k%len(sizes)], len(in))
		}
		wasLost := w.Lost()
		n := w.Feed(in[off:end])
		off = end
		if wasLost && n != 0 {
			t.Fatalf("%q: Feed returned %d after the stream was lost", in, n)
		}
		total += n
		want := ref.completed(off)
		lost := ref.bad >= 0 && off > ref.bad
		if total != want || w.Lost() != lost {
			t.Fatalf("%q chunked %v, after %d bytes: %d commands, lost %v; want %d, %v (bad at %d)",
				in, sizes, off, total, w.Lost(), want, lost, ref.bad)
		}
		if !lost && w.LastBlocking() != (want > 0 && ref.cmds[want-1].blocking) {
			t.Fatalf("%q chunked %v, after %d bytes: blocking %v after %d commands", in, sizes, off, w.LastBlocking(), want)
		}
	}
}

func TestWrittenMatchesReference(t *testing.T) {
	in, _, _ := splitStream()
	inputs := [][]byte{in}
	for _, tc := range []string{"PING\r\n", "*1\r\n$-1\r\n", "*-1\r\n*0\r\n", "*1\r\n$4\r\nPIN", "*2\r\n$3\r\nGET\r\n:1\r\n"} {
		inputs = append(inputs, append(append([]byte{}, in[:50]...), tc...))
	}
	for _, in := range inputs {
		for _, sizes := range [][]int{nil, {1}, {3, 0, 17}, {64}} {
			checkWritten(t, in, sizes)
		}
	}
}

func FuzzWritten(f *testing.F) {
	in, _, _ := splitStream()
	f.Add(in, []byte{1})
	f.Add(in, []byte{13, 0, 2})
	for _, args := range blockingNames {
		f.Add(cmd(args...), []byte{})
	}
	for _, s := range []string{
		"*0\r\n*-1\r\n", "*1\r\n$-1\r\n", "PING\r\n", "*1\r\n:1\r\n", "*00001\r\n$4\r\nexec\r\n",
		"*3\r\n$5\r\nxread\r\n$5\r\nblock\r\n$1\r\n0\r\n", "*2\r\n$5\r\nMULTI\r\n",
	} {
		f.Add([]byte(s), []byte{2, 5})
	}
	f.Fuzz(func(t *testing.T, in, chunks []byte) {
		checkWritten(t, in, fuzzChunks(chunks))
	})
}

// commandMix returns about size bytes of commands as go-redis writes them:
// GET, SET with 16 to 4096-byte values, INCR, HSET, a few MULTI/EXEC
// blocks and blocking reads.
func commandMix(size int) []byte {
	var b []byte
	seed := uint32(1)
	rnd := func(n int) int {
		seed = seed*1664525 + 1013904223
		return int(seed>>8) % n
	}
	payload := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 120)
	for i := 0; len(b) < size; i++ {
		key := fmt.Sprint("key:", rnd(100000))
		switch x := rnd(100); {
		case x < 45:
			b = append(b, cmd("get", key)...)
		case x < 75:
			b = append(b, cmd("set", key, payload[:16+rnd(4096-16)])...)
		case x < 85:
			b = append(b, cmd("incr", key)...)
		case x < 95:
			b = append(b, cmd("hset", key, "field", payload[:1+rnd(64)])...)
		case x < 98:
			b = append(b, cmds(cmd("multi"), cmd("incr", key), cmd("expire", key, "60"), cmd("exec"))...)
		default:
			b = append(b, cmd("xread", "count", "10", "block", "100", "streams", key, "$")...)
		}
	}
	return b
}

// pipeline100 is a pipeline of 100 GETs, as go-redis writes it.
func pipeline100() []byte {
	var b []byte
	for i := range 100 {
		b = append(b, cmd("get", fmt.Sprint("key:", i))...)
	}
	return b
}

// mget100 is an MGET of 100 keys of 5 and 6 bytes (lengths of one digit).
func mget100() []byte {
	args := []string{"mget"}
	for i := range 100 {
		args = append(args, fmt.Sprint("key:", i))
	}
	return cmd(args...)
}

// mget100Mixed is an MGET of 100 keys each of whose length differs from
// the one before it.
func mget100Mixed() []byte {
	args := []string{"mget"}
	for i := range 100 {
		args = append(args, fmt.Sprint("key:", strings.Repeat("x", i%2*8), i))
	}
	return cmd(args...)
}

// mget100Long is an MGET of 100 keys of 16 and 17 bytes (lengths of two
// digits, as most keys have).
func mget100Long() []byte {
	args := []string{"mget"}
	for i := range 100 {
		args = append(args, fmt.Sprint("user:session:id:", i))
	}
	return cmd(args...)
}

// BenchmarkWrittenFeed measures Feed per write, as go-redis writes
// commands: one GET, one SET of 100 bytes, pipelines of 10 and 100, MGETs
// of 100 keys (short ones, longer ones, and ones whose length changes from
// each key to the next: a step that remembers the last key's header pays
// there, see docs/design.md), a SET of 1 MB
// (the same cost as 100 bytes: payloads are skipped by length), a GET cut
// in two writes (the byte-wise path), and a stream of mixed commands in
// 32 KiB writes (MB/s, to compare with BenchmarkStripperThroughput).
func BenchmarkWrittenFeed(b *testing.B) {
	var pipe [][]byte
	for i := range 10 {
		if i%2 == 0 {
			pipe = append(pipe, cmd("get", fmt.Sprint("key:", i)))
		} else {
			pipe = append(pipe, cmd("set", fmt.Sprint("key:", i), strings.Repeat("v", 100)))
		}
	}
	for _, bc := range []struct {
		name string
		in   []byte
		n    int // commands per write
	}{
		{"get", cmd("get", "key"), 1},
		{"set100", cmd("set", "key", strings.Repeat("v", 100)), 1},
		{"pipeline10", cmds(pipe...), 10},
		{"pipeline100", pipeline100(), 100},
		{"mget100", mget100(), 1},
		{"mget100Long", mget100Long(), 1},
		{"mget100Mixed", mget100Mixed(), 1},
		{"set1MB", cmd("set", "key", strings.Repeat("v", 1<<20)), 1},
		{"blpop", cmd("blpop", "queue", "0"), 1},
		{"xreadBlock", cmd("xread", "count", "10", "block", "100", "streams", "s", "$"), 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var w Written
			b.ReportAllocs()
			for b.Loop() {
				if w.Feed(bc.in) != bc.n {
					b.Fatal("wrong count")
				}
			}
		})
	}
	b.Run("getSplit", func(b *testing.B) {
		in := cmd("get", "key")
		var w Written
		b.ReportAllocs()
		for b.Loop() {
			if w.Feed(in[:9])+w.Feed(in[9:]) != 1 {
				b.Fatal("wrong count")
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		stream := commandMix(8 << 20)
		var w Written
		n := 0
		b.SetBytes(int64(len(stream)))
		b.ReportAllocs()
		for b.Loop() {
			for off := 0; off < len(stream); off += 32 << 10 {
				n += w.Feed(stream[off:min(off+32<<10, len(stream))])
			}
		}
		if w.Lost() || n == 0 {
			b.Fatal("stream lost")
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/cmd")
	})
}
