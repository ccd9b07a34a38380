package resp

import (
	"bufio"
	"bytes"
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
		"$10000000000\r\n",      // 11 digits
		"*10000000000\r\n",
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

// TestReadFrameReplyLimits: a reply is as large as the server makes it
// (ReadFrame), a command keeps a server's limits (ReadCommand).
func TestReadFrameReplyLimits(t *testing.T) {
	// A complete reply over the command limits is read whole.
	var b strings.Builder
	b.WriteString("*1048577\r\n") // MaxAggregateLen+1
	for range MaxAggregateLen + 1 {
		b.WriteString(":1\r\n")
	}
	big := b.String()
	got, err := ReadFrame(bufio.NewReader(strings.NewReader(big+"+next\r\n")), nil)
	if err != nil || len(got) != len(big) {
		t.Fatalf("array of %d elements: %d bytes, %v", MaxAggregateLen+1, len(got), err)
	}
	// Headers over the command limits are accepted: the frame is only
	// truncated, and a lying length costs no memory up front.
	for _, f := range []string{"$536870913\r\nabc", "=600000000\r\ntxt:", "*1048577\r\n:1\r\n",
		"%1048577\r\n", "~9999999999\r\n", "$9999999999\r\n"} {
		got, err := ReadFrame(bufio.NewReader(strings.NewReader(f)), nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadFrame(%q): want ErrUnexpectedEOF, got %v", f, err)
		}
		if cap(got) > 4<<20 {
			t.Errorf("ReadFrame(%q): %d bytes allocated for a lying length", f, cap(got))
		}
	}
	// ReadCommand keeps the limits a server applies to its clients.
	for _, f := range []string{"*1048577\r\n", "*1\r\n$536870913\r\n", "*1\r\n*1048577\r\n", "*1\r\n%1048577\r\n"} {
		_, err := ReadCommand(bufio.NewReader(strings.NewReader(f)), nil)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("ReadCommand(%q): want ErrMalformed, got %v", f, err)
		}
	}
	if _, err := ReadCommand(bufio.NewReader(strings.NewReader("*1\r\n$3\r\nabc\r\n")), nil); err != nil {
		t.Errorf("ReadCommand: %v", err)
	}
}

// TestStripperTakesBigReplies: the Stripper frames replies under the same
// limits as ReadFrame, so a reply over the command limits (an LRANGE of
// more than 1<<20 elements) is one reply, not a malformed stream that
// would stop maint from seeing notifications on that connection.
func TestStripperTakesBigReplies(t *testing.T) {
	var b strings.Builder
	b.WriteString("*1048586\r\n")
	for range MaxAggregateLen + 10 {
		b.WriteString("$1\r\nx\r\n")
	}
	moving := ">4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n_\r\n"
	in := b.String() + moving + "$536870913\r\nabc" // a big blob's start
	replies, stripped, malformedErr := 0, 0, error(nil)
	s := &Stripper{
		H: &Funcs{
			StripFunc:     func(name []byte) bool { return string(name) == "MOVING" },
			StrippedFunc:  func([]byte) { stripped++ },
			MalformedFunc: func(err error) { malformedErr = err },
		},
		OnReply: func() { replies++ },
	}
	p := make([]byte, 32<<10)
	r := strings.NewReader(in)
	for {
		if _, err := s.Read(r, p); err != nil {
			break
		}
	}
	if malformedErr != nil || replies != 1 || stripped != 1 {
		t.Fatalf("Stripper over a reply of %d elements: %d replies, %d stripped, malformed %v", MaxAggregateLen+10, replies, stripped, malformedErr)
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

// FuzzReadCommand: what a client sends the emulator is framed into
// commands that are prefixes of the input, agree with ReadFrame where both
// apply, and split with CommandName or fail with ErrMalformed.
func FuzzReadCommand(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "ping\r\n", "  set  k\tv\n", "*2\r\n$5\r\nhello\r\n$1\r\n3\r\n",
		"*5\r\n$6\r\nclient\r\n$19\r\nmaint_notifications\r\n$2\r\non\r\n$20\r\nmoving-endpoint-type\r\n$11\r\ninternal-ip\r\n",
		"*0\r\n", "*-1\r\n", "*1\r\n:1\r\n", "*1048577\r\n", "*1\r\n$536870913\r\n", "\r\n", "a\r\nb\r\n",
	} {
		f.Add([]byte(s))
		f.Add([]byte(s + s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(in), 16)
		off := 0
		for {
			cmd, err := ReadCommand(r, nil)
			if err != nil {
				if err != io.EOF && !strings.HasPrefix(err.Error(), "resp: ") {
					t.Fatalf("error without resp: prefix: %v", err)
				}
				if err == io.EOF && off != len(in) {
					t.Fatalf("io.EOF at offset %d of %d", off, len(in))
				}
				return
			}
			if len(cmd) == 0 || !bytes.HasPrefix(in[off:], cmd) {
				t.Fatalf("command %q is not the input at %d", cmd, off)
			}
			if cmd[0] == '*' {
				fr, err := ReadFrame(bufio.NewReader(bytes.NewReader(cmd)), nil)
				if err != nil || !bytes.Equal(fr, cmd) {
					t.Fatalf("ReadFrame(%q) = %q, %v", cmd, fr, err)
				}
			}
			if _, _, err := CommandName(cmd); err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("CommandName(%q): %v", cmd, err)
			}
			off += len(cmd)
		}
	})
}
