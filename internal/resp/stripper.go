package resp

import (
	"errors"
	"io"
)

// DefaultMaxStripped is the MaxStripped used when the field is 0.
const DefaultMaxStripped = 64 << 10

// maxNameLen is the longest push name given to Stripper.Strip. A push whose
// first element is longer (or is not a bulk or simple string) is never
// stripped. It bounds the bytes held back while a name is incomplete.
const maxNameLen = 64

// holdCap is the room for a held-back push prefix: '>' + 10 digits + CRLF,
// then '$' + 10 digits + CRLF + a name of maxNameLen + CRLF = 92 bytes at
// most.
const holdCap = 128

// workCap is the staging buffer used when the caller's buffer is too small
// to hold the held-back bytes and something new.
const workCap = 512

// Parser states: what the next input byte is.
const (
	stType   uint8 = iota // the type byte of a value
	stNum                 // a digit (or '-') of a length/count, or the CR after it
	stLine                // a byte of a simple line's body, or the CR after it
	stLF                  // the LF after a CR
	stBlob                // a payload byte of a blob; num bytes remain
	stBlobCR              // the CR after a blob's payload
)

// What the LF in state stLF ends.
const (
	lfHeader uint8 = iota // a length/count line of a blob or aggregate
	lfLine                // a simple line
	lfBlob                // a blob's trailing CRLF
)

// Top-level push handling.
const (
	pushNone    uint8 = iota // the current top-level frame is not a push
	pushPending              // a push whose name is not known yet: held back
	pushPass                 // a push that is passed through
	pushStrip                // a push that is removed from the stream
)

// Stripper removes selected push frames from a RESP3 reply stream.
//
// It parses the stream incrementally, as it arrives in arbitrary chunks,
// and never buffers replies: bytes of non-stripped frames are passed on as
// soon as they are read, except the first bytes of a push whose name is not
// complete yet (at most about 100 bytes), which are held back until the name
// decides. Blob payloads are skipped by length, not scanned. In steady state
// it does not allocate.
//
// The output is exactly the input minus whole stripped frames. Top-level
// attributes ('|') and pushes that are not stripped pass through and are
// not counted as replies; pushes nested in other values are plain data.
//
// The zero value (with the callback fields set as needed) is ready to use.
// A Stripper must not be copied after first use and must not be used from
// several goroutines at once. Callbacks run synchronously inside Read.
type Stripper struct {
	// Strip reports whether a push with this name (first element of the
	// '>' frame) is removed from the stream. Called once per push frame;
	// name aliases internal memory (do not retain). A nil Strip strips
	// nothing. Pushes whose first element is not a bulk or simple string
	// of at most 64 bytes are never stripped and Strip is not called.
	Strip func(name []byte) bool
	// OnStripped receives each complete stripped frame (aliases internal
	// memory, valid only during the call).
	OnStripped func(frame []byte)
	// OnReply is called once per complete top-level frame that is not a
	// push and not an attribute (i.e. one reply to one command).
	OnReply func()
	// OnMalformed is called once if the stream cannot be framed; after that
	// the Stripper passes all bytes through unchanged and calls nothing
	// else. Bytes of a stripped push that were already discarded because
	// it exceeded MaxStripped cannot be given back.
	OnMalformed func(err error)
	// MaxStripped is the largest push frame buffered for stripping; 0 means
	// DefaultMaxStripped. A larger matched push is discarded as it streams:
	// it is still removed, but OnStripped is not called (see
	// StrippedOversize).
	MaxStripped int

	// Parser state.
	st     uint8
	lf     uint8
	typ    byte  // type byte of the value being read
	top    byte  // type byte of the current top-level frame
	neg    bool  // the length being read started with '-'
	digits uint8 // digits of the length read so far
	num    int64 // length being read / blob bytes left / line length
	depth  int
	left   [MaxDepth]int64 // elements still expected at each depth
	attr   uint64          // bit d: the aggregate at depth d+1 is an attribute

	// The current top-level push.
	push     uint8
	start    int // offset of its first byte in the buffer being scanned
	nameAt   int // offset of its name in that buffer (while pending)
	nameLen  int
	sbuf     []byte // bytes of a stripped push from earlier reads
	oversize bool   // the stripped push exceeded MaxStripped; sbuf dropped
	nOver    uint64

	// Output bookkeeping of one scan: buf[:w] is output, buf[keep:] is not
	// yet decided.
	w, keep int

	hold       [holdCap]byte // held-back prefix of a pending push
	nhold      int
	work       [workCap]byte // staging when p is too small
	qOff, qEnd int           // work[qOff:qEnd] is ready for the caller
	tail       []byte        // bytes to pass through after the queue
	err        error         // read error to return after queued bytes
	dead       bool          // pass everything through unchanged
	empty      int           // consecutive (0, nil) reads
}

// StrippedOversize returns how many matched pushes were larger than
// MaxStripped and so were discarded without calling OnStripped.
func (s *Stripper) StrippedOversize() uint64 { return s.nOver }

// Passthrough reports whether the Stripper has stopped parsing and passes
// bytes through unchanged: after a framing error (OnMalformed was called),
// or after io.EOF arrived in the middle of a held-back or stripped push.
func (s *Stripper) Passthrough() bool { return s.dead }

// Reset clears all stream state, so the Stripper can serve a new
// connection. The callbacks, MaxStripped and the internal buffers are kept.
func (s *Stripper) Reset() {
	*s = Stripper{
		Strip: s.Strip, OnStripped: s.OnStripped, OnReply: s.OnReply,
		OnMalformed: s.OnMalformed, MaxStripped: s.MaxStripped,
		sbuf: s.sbuf[:0],
	}
}

// Read reads from r into p and returns bytes of the stream with stripped
// frames removed. It never returns (0, nil) unless len(p)==0: it keeps
// reading from r until it can return at least one byte or r returns an
// error.
//
// An error from r is returned after every byte that can be returned. On
// io.EOF the bytes still held back (a push cut short) are passed through
// before the error, and the Stripper passes everything through from then
// on. Any other error leaves the parse state intact, so a Read after, say, a
// deadline timeout carries on where the stream stopped.
func (s *Stripper) Read(r io.Reader, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		// Deliver what is already decided, then a stashed error.
		if s.qOff < s.qEnd {
			n := copy(p, s.work[s.qOff:s.qEnd])
			s.qOff += n
			return n, nil
		}
		if len(s.tail) > 0 {
			n := copy(p, s.tail)
			s.tail = s.tail[n:]
			return n, nil
		}
		if s.err != nil {
			err := s.err
			s.err = nil
			return 0, err
		}
		if s.dead {
			n, err := r.Read(p)
			if n == 0 && err == nil {
				if err = s.noProgress(); err == nil {
					continue
				}
			}
			s.empty = 0
			return n, err
		}

		// Scan in place in p if the held-back bytes leave room, else in
		// the staging buffer.
		buf := p
		staged := len(p) <= s.nhold
		if staged {
			buf = s.work[:]
		}
		h := copy(buf, s.hold[:s.nhold])
		s.nhold = 0
		m, err := r.Read(buf[h:])
		if m < 0 || m > len(buf)-h {
			return 0, errors.New("resp: reader returned an invalid count")
		}
		k := s.scan(buf[:h+m])
		if err == io.EOF {
			s.flushAtEOF()
		}
		if m == 0 && err == nil {
			if err = s.noProgress(); err != nil {
				s.err = err
			}
		} else {
			s.empty = 0
		}
		if staged {
			s.qOff, s.qEnd = 0, k
			if err != nil {
				s.err = err
			}
			continue
		}
		if k == 0 {
			if err != nil {
				s.err = err
			}
			continue
		}
		if err != nil && len(s.tail) > 0 {
			// The tail must come before the error.
			s.err = err
			err = nil
		}
		return k, err
	}
}

// noProgress counts reads that returned (0, nil), and gives up like
// bufio.Reader does.
func (s *Stripper) noProgress() error {
	s.empty++
	if s.empty >= 100 {
		s.empty = 0
		return io.ErrNoProgress
	}
	return nil
}

// flushAtEOF passes through whatever is held back when the stream ends in
// the middle of a pending or stripped push.
func (s *Stripper) flushAtEOF() {
	if s.dead {
		return
	}
	if s.nhold > 0 {
		s.tail = append(s.tail, s.hold[:s.nhold]...)
		s.nhold = 0
		s.dead = true
	}
	if s.push == pushStrip {
		s.tail = append(s.tail, s.sbuf...)
		s.sbuf = s.sbuf[:0]
		s.dead = true
	}
}

func (s *Stripper) maxStripped() int {
	if s.MaxStripped > 0 {
		return s.MaxStripped
	}
	return DefaultMaxStripped
}

// flush moves the undecided bytes buf[keep:end] down to the output
// buf[:w], as they are passed through.
func (s *Stripper) flush(buf []byte, end int) {
	if s.keep < end {
		if s.w != s.keep {
			copy(buf[s.w:], buf[s.keep:end])
		}
		s.w += end - s.keep
	}
	s.keep = end
}

// resetParser forgets the frame being parsed: it is used when a pending
// push is moved to the hold buffer, to be parsed again from its start.
func (s *Stripper) resetParser() {
	s.st = stType
	s.depth = 0
	s.push = pushNone
}

// scan parses buf, which continues the stream, removes stripped frames
// from it in place and returns the length of the output left at buf[:n].
func (s *Stripper) scan(buf []byte) int {
	s.w, s.keep = 0, 0
	if s.push == pushStrip {
		s.start = 0
	}
	i := 0
	for i < len(buf) {
		c := buf[i]
		switch s.st {
		case stType:
			if s.depth == 0 {
				s.top = c
				s.start = i
				s.push = pushNone
				if c == '>' {
					s.push = pushPending
				}
			} else if s.push == pushPending {
				// The first element of a pending push: its name.
				switch c {
				case '+':
					s.nameAt = i + 1
				case '$':
				default:
					s.push = pushPass
				}
			}
			s.typ = c
			s.num = 0
			cl := typeClass[c]
			if cl == clInvalid {
				return s.fail(buf, errBadType(c))
			}
			if s.push != pushPending {
				// Fast path: the value's whole first line is in buf.
				if cr := lineEnd(buf, i+1, cl); cr >= 0 {
					body := buf[i+1 : cr]
					i = cr + 2
					if cl == clLine {
						if len(body) > MaxBulkLen {
							return s.fail(buf, malformed("line longer than %d bytes", MaxBulkLen))
						}
						s.done(buf, i, false)
						continue
					}
					n, err := parseLen(c, body)
					if err != nil {
						return s.fail(buf, err)
					}
					if cl == clBlob && n >= 0 && i+int(n)+2 <= len(buf) {
						// The whole blob is in buf too.
						i += int(n) + 2
						if buf[i-2] != '\r' || buf[i-1] != '\n' {
							return s.fail(buf, malformed("blob not followed by CRLF"))
						}
						s.done(buf, i, false)
						continue
					}
					s.neg, s.num = n < 0, max(n, 0)
					if err := s.header(buf, i); err != nil {
						return s.fail(buf, err)
					}
					continue
				}
			}
			switch cl {
			case clLine:
				s.st = stLine
			default:
				s.st = stNum
				s.neg = false
				s.digits = 0
			}
			i++

		case stNum:
			switch {
			case c >= '0' && c <= '9':
				if s.digits == maxLenDigits {
					return s.fail(buf, malformed("length of type %q longer than %d digits", s.typ, maxLenDigits))
				}
				s.num = s.num*10 + int64(c-'0')
				s.digits++
			case c == '-' && s.digits == 0 && !s.neg && nullable(s.typ):
				s.neg = true
			case c == '\r':
				if s.neg && (s.digits != 1 || s.num != 1) || !s.neg && s.digits == 0 {
					return s.fail(buf, malformed("bad length for type %q", s.typ))
				}
				if !s.neg && s.num > limitFor(s.typ) {
					return s.fail(buf, malformed("length %d for type %q exceeds limit %d", s.num, s.typ, limitFor(s.typ)))
				}
				s.st, s.lf = stLF, lfHeader
			default:
				return s.fail(buf, malformed("bad length for type %q", s.typ))
			}
			i++

		case stLine:
			// Scan the body up to its CR.
			for ; i < len(buf); i++ {
				c = buf[i]
				if c == '\r' {
					s.st, s.lf = stLF, lfLine
					i++
					break
				}
				if c == '\n' {
					return s.fail(buf, malformed("line not terminated by CRLF"))
				}
				s.num++
				if s.num > MaxBulkLen {
					return s.fail(buf, malformed("line longer than %d bytes", MaxBulkLen))
				}
				if s.push == pushPending && s.num > maxNameLen {
					s.push = pushPass
				}
			}

		case stLF:
			if c != '\n' {
				return s.fail(buf, malformed("CR not followed by LF"))
			}
			i++
			switch s.lf {
			case lfLine:
				if s.push == pushPending && s.depth == 1 {
					s.nameLen = int(s.num)
				}
				s.done(buf, i, false)
			case lfBlob:
				s.done(buf, i, false)
			case lfHeader:
				if err := s.header(buf, i); err != nil {
					return s.fail(buf, err)
				}
			}

		case stBlob:
			k := min(s.num, int64(len(buf)-i))
			i += int(k)
			s.num -= k
			if s.num == 0 {
				s.st = stBlobCR
			}

		case stBlobCR:
			if c != '\r' {
				return s.fail(buf, malformed("blob not followed by CRLF"))
			}
			s.st, s.lf = stLF, lfBlob
			i++
		}
	}

	// End of the buffer: decide what happens to the undecided bytes.
	switch s.push {
	case pushPending:
		if len(buf)-s.start <= holdCap {
			s.flush(buf, s.start)
			s.nhold = copy(s.hold[:], buf[s.start:])
			s.keep = len(buf)
			s.resetParser()
			return s.w
		}
		// Unreachable by construction (see holdCap); pass it on rather
		// than fail.
		s.push = pushPass
	case pushStrip:
		part := buf[s.start:]
		if !s.oversize && len(s.sbuf)+len(part) <= s.maxStripped() {
			s.sbuf = append(s.sbuf, part...)
		} else {
			s.oversize = true
			s.sbuf = s.sbuf[:0]
		}
		return s.w
	}
	s.flush(buf, len(buf))
	return s.w
}

// lineEnd returns the offset of the CR that ends the line whose body starts
// at buf[from], if the body and its CRLF are in buf, hold no other CR or
// LF, and (for a header of class cl) are short enough to be a length.
// Otherwise it returns -1 and the caller parses byte by byte.
func lineEnd(buf []byte, from int, cl uint8) int {
	end := len(buf) - 1 // the CR must have its LF in buf
	if cl != clLine {
		end = min(end, from+maxLenDigits+1)
	}
	for j := from; j < end; j++ {
		switch buf[j] {
		case '\r':
			if buf[j+1] == '\n' {
				return j
			}
			return -1
		case '\n':
			return -1
		}
	}
	return -1
}

// header acts on a complete blob or aggregate header (s.typ, s.neg,
// s.num) whose LF is at buf[i-1].
func (s *Stripper) header(buf []byte, i int) error {
	if typeClass[s.typ] == clBlob {
		if s.push == pushPending && s.depth == 1 {
			if s.neg || s.num > maxNameLen {
				s.push = pushPass
			} else {
				s.nameAt, s.nameLen = i, int(s.num)
			}
		}
		switch {
		case s.neg:
			s.done(buf, i, false)
		case s.num == 0:
			s.st = stBlobCR
		default:
			s.st = stBlob
		}
		return nil
	}
	n := s.num
	if typeClass[s.typ] == clMap {
		n *= 2
	}
	if s.neg || n == 0 {
		s.done(buf, i, s.typ == '|')
		return nil
	}
	if s.depth == MaxDepth {
		return malformed("aggregates nested deeper than %d", MaxDepth)
	}
	s.left[s.depth] = n
	if s.typ == '|' {
		s.attr |= 1 << s.depth
	} else {
		s.attr &^= 1 << s.depth
	}
	s.depth++
	s.st = stType
	return nil
}

// done records that a value ended at buf[:end]. isAttr tells whether it was
// an attribute, which does not count as an element of its parent.
func (s *Stripper) done(buf []byte, end int, isAttr bool) {
	s.st = stType
	if s.depth == 0 {
		s.topDone(buf, end)
		return
	}
	if s.push == pushPending && s.depth == 1 {
		s.decide(buf)
	}
	for {
		if !isAttr {
			s.left[s.depth-1]--
		}
		if s.left[s.depth-1] > 0 {
			return
		}
		s.depth--
		if s.depth == 0 {
			s.topDone(buf, end)
			return
		}
		isAttr = s.attr&(1<<s.depth) != 0
	}
}

// decide asks Strip about the pending push whose name just completed.
func (s *Stripper) decide(buf []byte) {
	name := buf[s.nameAt : s.nameAt+s.nameLen]
	if s.Strip != nil && s.Strip(name) {
		s.flush(buf, s.start)
		s.push = pushStrip
		s.sbuf = s.sbuf[:0]
		s.oversize = false
	} else {
		s.push = pushPass
	}
}

// topDone handles the end of a top-level frame at buf[:end].
func (s *Stripper) topDone(buf []byte, end int) {
	switch s.push {
	case pushStrip:
		size := len(s.sbuf) + end - s.start
		switch {
		case s.oversize || size > s.maxStripped():
			s.nOver++
		case s.OnStripped == nil:
		case len(s.sbuf) == 0:
			s.OnStripped(buf[s.start:end])
		default:
			s.sbuf = append(s.sbuf, buf[s.start:end]...)
			s.OnStripped(s.sbuf)
		}
		s.sbuf = s.sbuf[:0]
		s.oversize = false
		s.keep = end
	case pushNone:
		if s.top != '|' && s.OnReply != nil {
			s.OnReply()
		}
	}
	s.push = pushNone
}

// fail switches to pass-through after a framing error in buf: everything
// not yet returned, including held-back and stripped-so-far bytes, is
// passed on in stream order. It returns the output length of buf.
func (s *Stripper) fail(buf []byte, err error) int {
	s.dead = true
	if s.push == pushStrip && len(s.sbuf) > 0 {
		s.tail = append(s.sbuf, buf[s.start:]...)
		s.sbuf = nil
	} else {
		if s.push == pushStrip {
			s.keep = s.start
		}
		s.flush(buf, len(buf))
	}
	s.push = pushNone
	if s.OnMalformed != nil {
		s.OnMalformed(err)
	}
	return s.w
}

// AtBoundary reports whether the Stripper stands between two top-level
// frames with nothing held back, queued or failed: the next byte of the
// stream starts a frame. A caller may then take whole frames off the stream
// itself without the Stripper losing its place.
func (s *Stripper) AtBoundary() bool {
	return !s.dead && s.st == stType && s.depth == 0 && s.push == pushNone &&
		s.nhold == 0 && s.qOff == s.qEnd && len(s.tail) == 0 && s.err == nil
}
