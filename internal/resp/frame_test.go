package resp

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadFrame(t *testing.T) {
	valid := []string{
		"+OK\r\n",
		"-ERR boom\r\n",
		":-12\r\n",
		"_\r\n",
		",1.5\r\n",
		"#t\r\n",
		"(12345678901234567890\r\n",
		"+\r\n",
		"$0\r\n\r\n",
		"$-1\r\n",
		"*-1\r\n",
		"$5\r\nhe\r\no\r\n", // payload may hold CRLF
		"=7\r\ntxt:abc\r\n",
		"!3\r\nERR\r\n",
		"*0\r\n",
		"*2\r\n$1\r\na\r\n:1\r\n",
		"%1\r\n+k\r\n*1\r\n_\r\n",
		"~2\r\n#t\r\n#f\r\n",
		">2\r\n$7\r\nmessage\r\n*0\r\n",
		"*1\r\n*1\r\n*1\r\n:1\r\n",
		// An attribute inside an aggregate is not one of its elements.
		"*1\r\n|1\r\n+k\r\n+v\r\n:1\r\n",
		"*2\r\n:1\r\n|0\r\n:2\r\n",
		// A top-level attribute is a frame of its own.
		"|1\r\n+ttl\r\n:3\r\n",
		"|0\r\n",
	}
	for _, ex := range protocolExamples {
		valid = append(valid, ex.wire)
	}
	for _, f := range valid {
		// Follow each frame by another so that over-reading shows.
		r := bufio.NewReaderSize(strings.NewReader(f+"+next\r\n"), 16)
		got, err := ReadFrame(r, []byte("pre"))
		if err != nil || string(got) != "pre"+f {
			t.Errorf("ReadFrame(%q) = %q, %v", f, got, err)
			continue
		}
		next, err := ReadFrame(r, nil)
		if err != nil || string(next) != "+next\r\n" {
			t.Errorf("after %q: next frame %q, %v", f, next, err)
		}
		if _, err := ReadFrame(r, nil); err != io.EOF {
			t.Errorf("after %q: want io.EOF, got %v", f, err)
		}
	}

	deep := strings.Repeat("*1\r\n", MaxDepth) + ":1\r\n"
	if _, err := ReadFrame(bufio.NewReader(strings.NewReader(deep)), nil); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}

	malformedFrames := []string{
		"x\r\n",
		"?\r\n",
		"$?\r\n",
		"*?\r\n",
		"$-2\r\n",
		"%-1\r\n",
		">-1\r\n",
		"$+1\r\na\r\n",
		"$\r\n",
		"$1a\r\n",
		"$00000000001\r\nx\r\n", // 11 digits
		"$536870913\r\n",        // MaxBulkLen+1
		"*1048577\r\n",          // MaxAggregateLen+1
		"%1048577\r\n",
		"+OK\n",
		"+O\rK\r\n",
		"$1\r\nab\r\n",
		"$1\r\na\n\n",
		"*1\r\n$1\r\na\r\r",
		strings.Repeat("*1\r\n", MaxDepth+1) + ":1\r\n",
	}
	for _, f := range malformedFrames {
		_, err := ReadFrame(bufio.NewReader(strings.NewReader(f)), nil)
		if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "resp: ") {
			t.Errorf("ReadFrame(%q): want ErrMalformed, got %v", f, err)
		}
	}

	truncated := []string{"+OK", "+OK\r", "$3\r\nab", "$3\r\nabc\r", "*2\r\n:1\r\n", ">4\r\n$6\r\nMOVING\r\n"}
	for _, f := range truncated {
		_, err := ReadFrame(bufio.NewReader(strings.NewReader(f)), nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.HasPrefix(err.Error(), "resp: ") {
			t.Errorf("ReadFrame(%q): want ErrUnexpectedEOF, got %v", f, err)
		}
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestReadFrameWrapsReadErrors(t *testing.T) {
	boom := errors.New("boom")
	_, err := ReadFrame(bufio.NewReader(errReader{boom}), nil)
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "resp: ") {
		t.Fatalf("got %v", err)
	}
}

func TestReadCommandAndCommandName(t *testing.T) {
	in := "*5\r\n$6\r\nclient\r\n$19\r\nmaint_notifications\r\n$2\r\non\r\n$20\r\nmoving-endpoint-type\r\n$11\r\ninternal-ip\r\n" +
		"ping\r\n" +
		"  set  k\tv\n" +
		"*1\r\n$4\r\nPING\r\n"
	want := []struct {
		name string
		args []string
	}{
		{"CLIENT", []string{"maint_notifications", "on", "moving-endpoint-type", "internal-ip"}},
		{"PING", nil},
		{"SET", []string{"k", "v"}},
		{"PING", nil},
	}
	r := bufio.NewReader(strings.NewReader(in))
	for _, w := range want {
		frame, err := ReadCommand(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		name, args, err := CommandName(frame)
		if err != nil || name != w.name || len(args) != len(w.args) {
			t.Fatalf("CommandName(%q) = %q, %q, %v", frame, name, args, err)
		}
		for i := range args {
			if string(args[i]) != w.args[i] {
				t.Fatalf("CommandName(%q) arg %d = %q", frame, i, args[i])
			}
		}
	}
	if _, err := ReadCommand(r, nil); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}

	bad := []string{"", "\r\n", "*0\r\n", "*-1\r\n", "*1\r\n:1\r\n", "*1\r\n$-1\r\n", "*1\r\n$3\r\nab\r\n",
		"*1\r\n$1\r\nab\r\n", "*2\r\n$1\r\na\r\n", "*1\r\n$1\r\na\r\nextra", "*9999999\r\n$1\r\na\r\n", "a\r\nb\r\n"}
	for _, f := range bad {
		if _, _, err := CommandName([]byte(f)); !errors.Is(err, ErrMalformed) {
			t.Errorf("CommandName(%q): want ErrMalformed, got %v", f, err)
		}
	}
}
