package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
)

// Limits of client commands. ReadCommand enforces them as a Redis server
// does for what its clients send. The readers of replies (ReadFrame, the
// Stripper, the push parsers) do not: a reply is as large as the server
// makes it (see ReadFrame); they only keep MaxBulkLen for simple lines and
// MaxDepth.
const (
	// MaxBulkLen is the largest accepted blob length ($, =, !) of a command
	// argument (Redis's proto-max-bulk-len default) and the largest accepted
	// body of a simple line (+, -, :, ...), in bytes, in commands and replies.
	MaxBulkLen = 512 << 20
	// MaxAggregateLen is the largest accepted element count of an
	// aggregate in a command; for maps and attributes it counts entries
	// (key/value pairs).
	MaxAggregateLen = 1 << 20
	// MaxDepth is the deepest accepted nesting of aggregates (a flat
	// array has depth 1), in commands and replies.
	MaxDepth = 64
)

// maxReplyLen is the largest blob length or element count accepted in a
// reply: whatever a length field of maxLenDigits digits can say, as long as
// the blob's length plus its CRLF fits in an int.
const maxReplyLen int64 = min(math.MaxInt-2, 9_999_999_999)

// limits are the largest blob length and element count a framer accepts.
type limits struct{ blob, count int64 }

var (
	commandLimits = limits{blob: MaxBulkLen, count: MaxAggregateLen}
	replyLimits   = limits{blob: maxReplyLen, count: maxReplyLen}
)

// maxLenDigits bounds the number of digits of a length or count field; it
// keeps header lines short and the arithmetic free of overflow.
const maxLenDigits = 10

// ErrMalformed is wrapped by every framing error: a bad type byte, a bad
// length, a missing CRLF or a violated limit.
var ErrMalformed = errors.New("resp: malformed frame")

// Type classes, indexed by the type byte of a RESP value.
const (
	clInvalid uint8 = iota
	clLine          // + - : _ , # ( : a single CRLF-terminated line
	clBlob          // $ = ! : length line, payload, CRLF
	clArray         // * ~ > : count line, count elements
	clMap           // % | : count line, 2*count elements
)

var typeClass = [256]uint8{
	'+': clLine, '-': clLine, ':': clLine, '_': clLine, ',': clLine, '#': clLine, '(': clLine,
	'$': clBlob, '=': clBlob, '!': clBlob,
	'*': clArray, '~': clArray, '>': clArray,
	'%': clMap, '|': clMap,
}

// nullable reports whether a length of -1 (a RESP2 null) is accepted for
// the type byte t.
func nullable(t byte) bool { return t == '$' || t == '*' }

// limitFor returns the largest length or count of a reply accepted for
// type byte t (the Stripper's limit).
func limitFor(t byte) int64 { return replyLimits.of(t) }

// of returns the largest length or count accepted for type byte t.
func (l limits) of(t byte) int64 {
	if typeClass[t] == clBlob {
		return l.blob
	}
	return l.count
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// errBadType describes an unusable type byte.
func errBadType(b byte) error {
	if b == '?' {
		return malformed("streamed aggregates and strings (length '?') are not supported")
	}
	return malformed("invalid type byte %q", b)
}

// parseLen parses the length or count field of a blob or aggregate header
// (the bytes between the type byte and the CR) under the reply limits, as
// the Stripper, the push parsers and CommandName (whose input ReadCommand
// has already held to the command limits) need. It returns -1 for a RESP2
// null. The rules are the same as the incremental ones in Stripper.
func parseLen(t byte, body []byte) (int64, error) {
	return parseLenMax(t, body, replyLimits)
}

// parseLenMax is parseLen under the limits lim.
func parseLenMax(t byte, body []byte, lim limits) (int64, error) {
	if len(body) == 2 && body[0] == '-' && body[1] == '1' && nullable(t) {
		return -1, nil
	}
	if len(body) == 0 || len(body) > maxLenDigits {
		return 0, malformed("bad length %q for type %q", body, t)
	}
	var n int64
	for _, c := range body {
		if c < '0' || c > '9' {
			return 0, malformed("bad length %q for type %q", body, t)
		}
		n = n*10 + int64(c-'0')
	}
	if max := lim.of(t); n > max {
		return 0, malformed("length %d for type %q exceeds limit %d", n, t, max)
	}
	return n, nil
}

// readErr converts an error from the underlying reader. started tells
// whether part of the frame was already consumed.
func readErr(err error, started bool) error {
	if err == io.EOF {
		if !started {
			return io.EOF
		}
		return fmt.Errorf("resp: truncated frame: %w", io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("resp: read: %w", err)
}

// readLineRest appends the rest of a line (after its type byte) up to and
// including the LF to dst, and checks that it ends in CRLF, contains no
// other CR and has a body of at most max bytes. It returns dst and the body
// (between type byte and CR).
func readLineRest(r *bufio.Reader, dst []byte, max int) ([]byte, []byte, error) {
	start := len(dst)
	for {
		chunk, err := r.ReadSlice('\n')
		dst = append(dst, chunk...)
		if len(dst)-start > max+2 {
			// Too long whatever follows: fail now rather than buffer on.
			return dst, nil, malformed("line longer than %d bytes", max)
		}
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			return dst, nil, readErr(err, true)
		}
	}
	rest := dst[start:]
	if len(rest) < 2 || rest[len(rest)-2] != '\r' {
		return dst, nil, malformed("line not terminated by CRLF")
	}
	body := rest[:len(rest)-2]
	if bytes.IndexByte(body, '\r') >= 0 {
		return dst, nil, malformed("CR inside a line")
	}
	if len(body) > max {
		return dst, nil, malformed("line longer than %d bytes", max)
	}
	return dst, body, nil
}

// ReadFrame reads exactly one complete top-level RESP2/RESP3 value from r,
// appends its raw bytes to dst and returns the extended slice.
//
// All RESP3 types are supported: + - : $ * % ~ > _ , # ! = ( |. Aggregates
// may nest up to MaxDepth; maps and attributes hold two elements per entry.
// "$-1" and "*-1" (RESP2 nulls) are accepted. Streamed types (a '?' length)
// are rejected.
//
// ReadFrame frames replies, which are as large as the server makes them: it
// accepts any blob length and element count a 10-digit length field can
// say (an LRANGE of millions of elements, a value larger than 512 MB from a
// server configured for it), and grows dst only as bytes actually arrive,
// so a lying length costs no memory up front. Simple lines are limited to
// MaxBulkLen bytes and nesting to MaxDepth. Client commands are read with
// ReadCommand, which keeps a server's limits.
//
// An attribute ('|') at top level is returned as a frame of its own: the
// value it annotates is returned by the next call. An attribute nested in an
// aggregate is part of that aggregate and does not count as one of its
// elements.
//
// ReadFrame checks the framing (type bytes, lengths, CRLFs, limits), not the
// content of simple lines: ":abc\r\n" is a well-framed integer line.
//
// It returns io.EOF, unwrapped, if r is at EOF before the first byte; an
// error wrapping io.ErrUnexpectedEOF if the frame is truncated; an error
// wrapping ErrMalformed for a framing error; and other read errors wrapped.
// On error dst is returned with the bytes consumed so far appended.
func ReadFrame(r *bufio.Reader, dst []byte) ([]byte, error) {
	return readFrame(r, dst, replyLimits)
}

// readFrame is ReadFrame under the limits lim.
func readFrame(r *bufio.Reader, dst []byte, lim limits) ([]byte, error) {
	var nst nesting
	started := false
	for {
		t, err := r.ReadByte()
		if err != nil {
			return dst, readErr(err, started)
		}
		started = true
		dst = append(dst, t)
		cl := typeClass[t]
		if cl == clInvalid {
			return dst, errBadType(t)
		}
		maxLine := MaxBulkLen
		if cl != clLine {
			maxLine = maxLenDigits
		}
		var body []byte
		dst, body, err = readLineRest(r, dst, maxLine)
		if err != nil {
			return dst, err
		}
		isAttr := false
		switch cl {
		case clBlob:
			n, err := parseLenMax(t, body, lim)
			if err != nil {
				return dst, err
			}
			if n >= 0 {
				dst, err = readN(r, dst, int(n)+2)
				if err != nil {
					return dst, err
				}
				if dst[len(dst)-2] != '\r' || dst[len(dst)-1] != '\n' {
					return dst, malformed("blob of %d bytes not followed by CRLF", n)
				}
			}
		case clArray, clMap:
			n, err := parseLenMax(t, body, lim)
			if err != nil {
				return dst, err
			}
			if cl == clMap {
				n *= 2
			}
			if n > 0 {
				if err := nst.open(t, n); err != nil {
					return dst, err
				}
				continue
			}
			isAttr = t == '|'
		}
		// One value is complete: close every aggregate it completes.
		if nst.complete(isAttr) {
			return dst, nil
		}
	}
}

// nesting tracks the aggregates a frame walker is inside: left[d] counts
// the elements still expected by the aggregate at depth d+1, and attr has
// bit d set when that aggregate is an attribute (whose entries do not count
// as elements of the aggregate around it). ReadFrame and skipValue share it.
type nesting struct {
	left  [MaxDepth]int64
	attr  uint64
	depth int
}

// open enters an aggregate of type t expecting n (> 0) elements.
func (s *nesting) open(t byte, n int64) error {
	if s.depth == MaxDepth {
		return malformed("aggregates nested deeper than %d", MaxDepth)
	}
	s.left[s.depth] = n
	if t == '|' {
		s.attr |= 1 << s.depth
	} else {
		s.attr &^= 1 << s.depth
	}
	s.depth++
	return nil
}

// complete records that one value (an attribute if isAttr) is complete,
// closes every aggregate it completes, and reports whether the top-level
// value is complete.
func (s *nesting) complete(isAttr bool) bool {
	for {
		if s.depth == 0 {
			return true
		}
		if !isAttr {
			s.left[s.depth-1]--
		}
		if s.left[s.depth-1] > 0 {
			return false
		}
		s.depth--
		isAttr = s.attr&(1<<s.depth) != 0
	}
}

// readN appends exactly n bytes from r to dst, growing dst in bounded steps
// so that a lying length cannot force a huge allocation up front.
func readN(r *bufio.Reader, dst []byte, n int) ([]byte, error) {
	const step = 1 << 20
	for n > 0 {
		k := min(n, step)
		start := len(dst)
		dst = append(dst, make([]byte, k)...)
		got, err := io.ReadFull(r, dst[start:])
		dst = dst[:start+got]
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = io.EOF
			}
			return dst, readErr(err, true)
		}
		n -= k
	}
	return dst, nil
}

// MaxInlineLen is the longest inline command ReadCommand accepts.
const MaxInlineLen = 64 << 10

// ReadCommand reads one client command from r and appends its raw bytes to
// dst. A command that starts with '*' is a RESP array, framed as ReadFrame
// does but under the limits a Redis server applies to its clients: blobs of
// at most MaxBulkLen bytes (proto-max-bulk-len's default), aggregates of at
// most MaxAggregateLen elements (a real server accepts up to 2^31-1
// arguments; an emulator needs fewer), nesting up to MaxDepth. Anything else
// is an inline command (as typed into telnet or nc): one line up to and
// including its LF, at most MaxInlineLen bytes. Pass the result to
// CommandName. Errors are those of ReadFrame.
func ReadCommand(r *bufio.Reader, dst []byte) ([]byte, error) {
	b, err := r.Peek(1)
	if err != nil {
		return dst, readErr(err, false)
	}
	if b[0] == '*' {
		return readFrame(r, dst, commandLimits)
	}
	start := len(dst)
	for {
		chunk, err := r.ReadSlice('\n')
		dst = append(dst, chunk...)
		if len(dst)-start > MaxInlineLen {
			return dst, malformed("inline command longer than %d bytes", MaxInlineLen)
		}
		if err == nil {
			return dst, nil
		}
		if err != bufio.ErrBufferFull {
			return dst, readErr(err, true)
		}
	}
}
