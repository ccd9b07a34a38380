package resp

import (
	"bytes"
	"strings"
)

// CommandName splits one complete client command, as returned by
// ReadCommand, into its upper-cased name and its arguments (everything after
// the name, copied: they do not alias frame).
//
// A command is either a RESP array of bulk strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
// or an inline command: words separated by spaces or tabs, terminated by an
// optional CRLF or LF ("GET k\r\n"). Inline quoting is not supported. The
// frame must hold exactly one command; an empty or malformed command is an
// error wrapping ErrMalformed.
func CommandName(frame []byte) (name string, args [][]byte, err error) {
	var words [][]byte
	if len(frame) > 0 && frame[0] == '*' {
		words, err = splitArray(frame)
	} else {
		words, err = splitInline(frame)
	}
	if err != nil {
		return "", nil, err
	}
	if len(words) == 0 {
		return "", nil, malformed("empty command")
	}
	// One backing array for all the copied arguments.
	total := 0
	for _, w := range words[1:] {
		total += len(w)
	}
	backing := make([]byte, 0, total)
	args = make([][]byte, len(words)-1)
	for i, w := range words[1:] {
		start := len(backing)
		backing = append(backing, w...)
		args[i] = backing[start:len(backing):len(backing)]
	}
	return strings.ToUpper(string(words[0])), args, nil
}

// splitArray parses a RESP array of bulk strings that must fill frame.
// The returned slices alias frame.
func splitArray(frame []byte) ([][]byte, error) {
	line, rest, err := cutLine(frame)
	if err != nil {
		return nil, err
	}
	n, err := parseLen('*', line[1:])
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, malformed("null array is not a command")
	}
	// Each element needs at least 6 bytes ("$0\r\n\r\n"): reject counts the
	// frame cannot hold before allocating for them.
	if n > int64(len(rest)/6) {
		return nil, malformed("array of %d elements in %d bytes", n, len(rest))
	}
	words := make([][]byte, 0, n)
	for range n {
		line, rest, err = cutLine(rest)
		if err != nil {
			return nil, err
		}
		if line[0] != '$' {
			return nil, malformed("command argument of type %q, want bulk string", line[0])
		}
		l, err := parseLen('$', line[1:])
		if err != nil {
			return nil, err
		}
		if l < 0 {
			return nil, malformed("null command argument")
		}
		if int64(len(rest)) < l+2 {
			return nil, malformed("truncated command argument")
		}
		if rest[l] != '\r' || rest[l+1] != '\n' {
			return nil, malformed("command argument not followed by CRLF")
		}
		words = append(words, rest[:l])
		rest = rest[l+2:]
	}
	if len(rest) != 0 {
		return nil, malformed("%d trailing bytes after command", len(rest))
	}
	return words, nil
}

// cutLine returns the first CRLF-terminated line of b (without the CRLF,
// at least one byte long) and what follows it.
func cutLine(b []byte) (line, rest []byte, err error) {
	i := bytes.IndexByte(b, '\n')
	if i < 2 || b[i-1] != '\r' {
		return nil, nil, malformed("line not terminated by CRLF")
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, malformed("CR inside a line")
	}
	return line, b[i+1:], nil
}

// splitInline splits an inline command on spaces and tabs. The returned
// slices alias frame.
func splitInline(frame []byte) ([][]byte, error) {
	frame = bytes.TrimSuffix(frame, []byte("\n"))
	frame = bytes.TrimSuffix(frame, []byte("\r"))
	if bytes.ContainsAny(frame, "\r\n") {
		return nil, malformed("more than one line in an inline command")
	}
	return bytes.FieldsFunc(frame, func(r rune) bool { return r == ' ' || r == '\t' }), nil
}
