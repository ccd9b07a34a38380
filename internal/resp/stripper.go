package resp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
)

// DefaultMaxStripped is the MaxStripped used when the field is 0.
const DefaultMaxStripped = 64 << 10

// maxNameLen is the longest push name given to Stripper.Strip. A push whose
// first element is longer (or is not a bulk or simple string) is never
// stripped. It bounds the bytes held back while a name is incomplete.
const maxNameLen = 64

// lenDigits is the most digits the Stripper accepts in a length or count:
// every int64 has at most 19. More digits, or a value above math.MaxInt64,
// is malformed. (ReadFrame has its own, tighter limits; the Stripper has
// none: it buffers nothing of the frames it passes on.)
const lenDigits = 19

// holdCap is the room for a held-back push prefix: '>' + 19 digits + CRLF,
// then '$' + 19 digits + CRLF + a name of maxNameLen + CRLF = 110 bytes at
// most.
const holdCap = 128

// holdCap holds the longest pending push prefix (compile-time check).
const _ = uint(holdCap - (2*(1+lenDigits+2) + maxNameLen + 2))

// workCap is the size of the staging buffer, allocated the first time the
// caller's buffer is too small to hold the held-back bytes and something
// new (a rare event: a read of a few bytes just after a push was cut).
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
	pushDrop                 // a reply removed by DropReply
)

// Handler receives a Stripper's events, synchronously inside Read. Every
// slice it is given aliases the Stripper's memory and is valid only during
// the call.
type Handler interface {
	// Strip reports whether a push with this name (first element of the
	// '>' frame) is removed from the stream. Called once per push frame.
	// Pushes whose first element is not a bulk or simple string of at most
	// 64 bytes are never stripped and Strip is not called, and neither are
	// pub/sub messages ("message", "smessage", "pmessage": see isMessage).
	Strip(name []byte) bool
	// Stripped receives each complete stripped frame.
	Stripped(frame []byte)
	// Oversize is called once for each stripped push larger than
	// MaxStripped, when its last byte has been read, with its name and its
	// size in bytes. Such a push is removed like any other, but Stripped is
	// not called for it; StrippedOversize counts them.
	Oversize(name []byte, size int64)
	// Dropped receives the reply removed by DropReply or TakeDropped, once
	// it is complete: the whole frame, or nil if it is larger than
	// MaxStripped (it is removed all the same). If the stream ends or turns
	// out malformed before the reply is complete, its bytes are passed
	// through as those of a stripped push are, and Dropped is not called.
	Dropped(frame []byte)
	// Malformed is called once if the stream cannot be framed: a byte that
	// cannot start a value, a bad or overflowing length, a missing CRLF.
	// After that the Stripper passes all bytes through unchanged and calls
	// nothing else. Bytes of a stripped push that were already discarded
	// because it exceeded MaxStripped cannot be given back.
	Malformed(err error)
}

// Stripper removes selected push frames from a RESP3 reply stream.
//
// It parses the stream incrementally, as it arrives in arbitrary chunks,
// and never buffers replies (but the one DropReply removes): bytes of
// frames it keeps are passed on as soon as they are read, except the first
// bytes of a push whose name is not complete yet (at most 110 bytes), which
// are held back until the name decides. Blob payloads are skipped by
// length, not scanned. In steady state it does not allocate.
//
// Every well-framed RESP3 stream is followed, whatever its sizes: aggregates
// of any element count and nesting depth, blobs and simple lines of any
// length (a length or count is at most math.MaxInt64). The parse state has a
// fixed size: nesting is tracked by one count of the values still expected,
// not by a stack. Only the frames the Stripper removes are buffered, up to
// MaxStripped each.
//
// The output is exactly the input minus whole stripped frames and the
// reply removed by DropReply. Top-level attributes ('|') and pushes that are
// not stripped pass through and are not counted as replies; pushes nested in
// other values are plain data.
//
// The zero value (with H set as needed) is ready to use.
// A Stripper must not be copied after first use and must not be used from
// several goroutines at once. Callbacks run synchronously inside Read.
type Stripper struct {
	// H receives the pushes and the events of the stream (see Handler);
	// nil strips nothing. An interface rather than a function per event:
	// a connection that is its own Handler costs no closure per event.
	H Handler
	// OnReply is called once per complete top-level frame that is not a
	// push and not an attribute (i.e. one reply to one command), except the
	// reply removed by DropReply. It is a field of its own, looked at on
	// every reply: nil (maint's case, which counts by Replies) costs no call.
	OnReply func()
	// MaxStripped is the largest push frame (or dropped reply) buffered
	// for stripping; 0 means DefaultMaxStripped. A larger matched push is
	// discarded as it streams: it is still removed, but Stripped is not
	// called (see Handler.Oversize).
	MaxStripped int

	// Parser state.
	st     uint8
	lf     uint8
	typ    byte  // type byte of the value being read
	top    byte  // type byte of the current top-level frame
	neg    bool  // the length being read started with '-'
	digits uint8 // digits of the length read so far
	num    int64 // length being read / blob bytes left / line length
	// want counts the values still expected to complete the current
	// top-level frame, beyond the one being read; it is 0 while the
	// top-level value itself is being read and between frames. An
	// aggregate adds its elements (minus itself), a nested attribute all
	// of its elements (it is not an element of its parent), a complete
	// value subtracts one. It saturates at math.MaxUint64: such a frame
	// would need more than 2^64 further values (over 50 EB) to end, so
	// framing stays exact for any real stream.
	want uint64

	// replies counts the replies seen (see Replies).
	replies uint64
	// dropIn is 0, or 1 + the number of replies to complete before the
	// reply DropReply asked to remove begins.
	dropIn int

	// The flags, side by side (a word between them all).
	// decided: wholeReplies asked Strip about the push the general parser
	// reads next, and Strip said to remove it.
	decided bool
	// untilDrop: ReadDrop is reading, and returns once the dropped reply
	// is removed.
	untilDrop bool
	dead      bool  // pass everything through unchanged
	push      uint8 // the current top-level push (or dropped reply): see pushNone
	oversize  bool  // the removed frame exceeded MaxStripped; sbuf dropped

	// The current top-level push (or dropped reply).
	start   int // offset of its first byte in the buffer being scanned
	nameAt  int // offset of its name in that buffer (while pending)
	nameLen int
	sbuf    []byte // bytes of a removed frame from earlier reads
	ssize   int64  // how many bytes of it came in earlier reads
	nOver   uint64
	nname   int // length of the stripped push's name in aux.name

	// Output bookkeeping of one scan: buf[:w] is output, buf[keep:] is not
	// yet decided.
	w, keep int

	nhold      int       // bytes held back in aux.hold
	aux        *pushBufs // allocated with the first push held back or stripped, then kept
	work       []byte    // staging when p is too small (workCap bytes, allocated on first use)
	qOff, qEnd int       // work[qOff:qEnd] is ready for the caller
	tail       []byte    // bytes to pass through after the queue
	err        error     // read error to return after queued bytes
	empty      int       // consecutive (0, nil) reads
}

// StrippedOversize returns how many matched pushes were larger than
// MaxStripped and so were discarded without calling Stripped.
func (s *Stripper) StrippedOversize() uint64 { return s.nOver }

// Replies returns how many replies the Stripper has seen complete: the
// frames OnReply is called for, since the start or the last Reset.
func (s *Stripper) Replies() uint64 { return s.replies }

// Passthrough reports whether the Stripper has stopped parsing and passes
// bytes through unchanged: after a framing error (Malformed was called),
// or after io.EOF arrived in the middle of a held-back or stripped push or
// a dropped reply.
func (s *Stripper) Passthrough() bool { return s.dead }

// Reset clears all stream state (including a pending drop), so the Stripper
// can serve a new connection. The callbacks, MaxStripped and the internal
// buffers are kept.
func (s *Stripper) Reset() {
	*s = Stripper{
		H: s.H, OnReply: s.OnReply, MaxStripped: s.MaxStripped, sbuf: s.sbuf[:0], work: s.work, aux: s.aux,
	}
}

// pushBufs are the Stripper's buffers for a push in the making, out of
// line: most connections never need them, and a Stripper is part of every
// connection's state.
type pushBufs struct {
	hold [holdCap]byte    // held-back prefix of a pending push
	name [maxNameLen]byte // name of the stripped push, for Oversize
}

// bufs returns the push buffers, allocating them the first time.
func (s *Stripper) bufs() *pushBufs {
	if s.aux == nil {
		s.aux = new(pushBufs)
	}
	return s.aux
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
	// The common case first, with the fewest checks and a small frame:
	// nothing queued, held back or stashed, the stream at a frame
	// boundary, and a read of whole replies (every Read of a command's
	// reply, while no push comes).
	if s.AtBoundary() && len(p) > 0 {
		m, err := r.Read(p)
		if m < 0 || m > len(p) {
			return 0, errInvalidCount
		}
		from := s.wholeReplies(p[:m])
		if from == m && m > 0 && err == nil {
			s.empty = 0
			return m, nil
		}
		if k, err, done := s.after(p, 0, m, from, false, err); done {
			return k, err
		}
	} else if s.st == stBlob && (s.push == pushNone || s.push == pushPass) && s.nothingPending() && len(p) > 0 {
		// Inside a blob that is passed on (a large value), and the read
		// ends before it does: nothing to look at but the count.
		m, err := r.Read(p)
		if m < 0 || m > len(p) {
			return 0, errInvalidCount
		}
		if m > 0 && int64(m) < s.num && err == nil {
			s.num -= int64(m)
			s.empty = 0
			return m, nil
		}
		if k, err, done := s.after(p, 0, m, 0, false, err); done {
			return k, err
		}
	}
	return s.read(r, p)
}

// errInvalidCount is Read's error for a reader that returned a count out
// of range.
var errInvalidCount = errors.New("resp: reader returned an invalid count")

// read is Read by the general rules.
func (s *Stripper) read(r io.Reader, p []byte) (int, error) {
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
		if s.untilDrop && !s.NextIsDropped() {
			return 0, nil
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
			if s.work == nil {
				s.work = make([]byte, workCap)
			}
			buf = s.work
		}
		h := 0
		if s.nhold > 0 {
			h = copy(buf, s.aux.hold[:s.nhold])
			s.nhold = 0
		}
		m, err := r.Read(buf[h:])
		if m < 0 || m > len(buf)-h {
			return 0, errInvalidCount
		}
		// Whole replies at a frame boundary are framed without the general
		// parser; a read of nothing else is returned as it came.
		from := 0
		if s.st == stType && s.want == 0 && s.push == pushNone {
			from = s.wholeReplies(buf[:h+m])
			if h == 0 && from == m && m > 0 && err == nil {
				s.empty = 0
				return m, nil
			}
		}
		if k, err, done := s.after(buf, h, m, from, staged, err); done {
			return k, err
		}
	}
}

// after finishes a read of m bytes into buf after h held-back ones, of
// which wholeReplies framed buf[:from], with the reader's error err: it
// scans the rest and reports what Read returns, or done false when Read
// must go round again (the output is queued in the staging buffer, or
// there is none yet).
func (s *Stripper) after(buf []byte, h, m, from int, staged bool, err error) (k int, _ error, done bool) {
	k = s.scan(buf[:h+m], from)
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
		return 0, nil, false
	}
	if k == 0 {
		if err != nil {
			s.err = err
		}
		return 0, nil, false
	}
	if err != nil && len(s.tail) > 0 {
		// The tail must come before the error.
		s.err = err
		err = nil
	}
	return k, err, true
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
// the middle of a pending or stripped push or a dropped reply.
func (s *Stripper) flushAtEOF() {
	if s.dead {
		return
	}
	if s.nhold > 0 {
		s.tail = append(s.tail, s.aux.hold[:s.nhold]...)
		s.nhold = 0
		s.dead = true
	}
	if s.push >= pushStrip {
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
	s.want = 0
	s.push = pushNone
}

// scan parses buf, which continues the stream, removes stripped frames
// from it in place and returns the length of the output left at buf[:n].
// buf[:from] are whole replies wholeReplies has framed already (passed
// through as they are).
func (s *Stripper) scan(buf []byte, from int) int {
	s.w, s.keep = 0, 0
	if s.push >= pushStrip {
		s.start = 0
	}
	i := from
	for i < len(buf) {
		c := buf[i]
		switch s.st {
		case stType:
			if s.want == 0 {
				// The top-level value: a new frame.
				s.top = c
				s.start = i
				s.push = pushNone
				if c == '>' {
					s.push = pushPending
				} else if s.dropIn == 1 && c != '|' {
					// The reply DropReply asked for.
					s.dropIn = 0
					s.flush(buf, i)
					s.remove(pushDrop)
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
						if s.want > 1 {
							s.want-- // s.done, inlined for the common case
							continue
						}
						s.done(buf, i)
						continue
					}
					n, err := parseLength(c, body)
					if err != nil {
						return s.fail(buf, err)
					}
					if cl == clBlob && n >= 0 && n <= int64(len(buf)-i-2) {
						// The whole blob is in buf too.
						i += int(n) + 2
						if buf[i-2] != '\r' || buf[i-1] != '\n' {
							return s.fail(buf, malformed("blob not followed by CRLF"))
						}
						if s.want > 1 {
							s.want--
							continue
						}
						s.done(buf, i)
						continue
					}
					s.neg, s.num = n < 0, max(n, 0)
					s.header(buf, i)
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
				d := int64(c - '0')
				if s.digits == lenDigits || s.num > (math.MaxInt64-d)/10 {
					return s.fail(buf, errTooLong(s.typ))
				}
				s.num = s.num*10 + d
				s.digits++
			case c == '-' && s.digits == 0 && !s.neg && nullable(s.typ):
				s.neg = true
			case c == '\r':
				if s.neg && (s.digits != 1 || s.num != 1) || !s.neg && s.digits == 0 {
					return s.fail(buf, malformed("bad length for type %q", s.typ))
				}
				s.st, s.lf = stLF, lfHeader
			default:
				return s.fail(buf, malformed("bad length for type %q", s.typ))
			}
			i++

		case stLine:
			// Scan the body up to its CR. Only a pending push's name needs
			// its length.
			body := buf[i:]
			cr := bytes.IndexByte(body, '\r')
			if cr >= 0 {
				body = body[:cr]
			}
			if bytes.IndexByte(body, '\n') >= 0 {
				return s.fail(buf, malformed("line not terminated by CRLF"))
			}
			if s.push == pushPending {
				s.num += int64(len(body)) // at most maxNameLen+len(buf)
				if s.num > maxNameLen {
					s.push = pushPass
				}
			}
			i += len(body)
			if cr >= 0 {
				s.st, s.lf = stLF, lfLine
				i++
			}

		case stLF:
			if c != '\n' {
				return s.fail(buf, malformed("CR not followed by LF"))
			}
			i++
			switch s.lf {
			case lfLine:
				if s.push == pushPending {
					// Only a name is read as a line while pending.
					s.nameLen = int(s.num)
				}
				s.done(buf, i)
			case lfBlob:
				s.done(buf, i)
			case lfHeader:
				s.header(buf, i)
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
			s.nhold = copy(s.bufs().hold[:], buf[s.start:])
			s.keep = len(buf)
			s.resetParser()
			return s.w
		}
		// Unreachable by construction (see holdCap); pass it on rather
		// than fail.
		s.push = pushPass
	case pushStrip, pushDrop:
		part := buf[s.start:]
		s.ssize += int64(len(part))
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

// wholeReplies frames the whole replies at the start of buf while the
// Stripper stands between two frames (the common case: a read that brings
// one or more complete replies), and returns the offset after the last of
// them. It keeps no state but what a reply changes (the reply count, a
// pending drop's countdown): the general parser of scan takes over at an
// attribute, the reply to drop, a push to strip, or a frame that is not
// complete in buf (or cannot be framed, or whose push name the general
// rules must judge), from that frame's first byte. A whole push that is
// not stripped (a pub/sub message) is passed over here, as the general
// parser passes it.
func (s *Stripper) wholeReplies(buf []byte) int {
	i := 0
	if s.dropIn == 0 && s.OnReply == nil {
		// Nothing to do per reply but count it: a run of bulk strings
		// (the replies to a pipeline of GETs) is framed in one loop.
		var n int
		i, n = bulkRun(buf)
		s.replies += uint64(n)
	}
	for i < len(buf) && s.dropIn != 1 {
		c := buf[i]
		if c == '|' {
			break
		}
		if c == '>' {
			if n := messageLen(buf[i:]); n > 0 {
				i += n // a pub/sub message: passed on, Strip not asked
				continue
			}
			n, name, ok := pushFrame(buf[i:])
			if !ok {
				break
			}
			if s.strips(name) {
				// The general parser removes it, without asking again.
				s.decided = true
				break
			}
			i += n
			continue
		}
		// A bulk string of a short length (a GET's reply, the replies of
		// a pipeline of GETs) is stepped over here, the rest by replyLen.
		n := -1
		if i <= len(buf)-8 {
			if hdr, size := shortBulk(binary.LittleEndian.Uint64(buf[i : i+8])); hdr != 0 {
				e := i + hdr + size
				if e > len(buf)-2 || binary.LittleEndian.Uint16(buf[e:e+2]) != crlf {
					break // not complete in buf, or no CRLF: the general parser decides
				}
				n = e + 2 - i
			}
		}
		if n < 0 && buf[i] == '$' {
			e, cut := s.longBulkReply(buf, i)
			if cut {
				i = len(buf)
				break
			}
			if e > 0 {
				n = e - i
			}
		}
		if n < 0 {
			if n = replyLen(buf[i:]); n < 0 {
				break
			}
		}
		i += n
		if s.dropIn > 1 {
			s.dropIn--
		}
		s.replies++
		if s.OnReply != nil {
			s.OnReply()
		}
	}
	return i
}

// longBulkReply frames the bulk string reply at buf[i] whose length has up to
// 18 digits: it returns the offset after it, or -1 if the general rules
// must decide (a null, a longer length, a header not whole in buf, a
// missing CRLF after the payload). If buf ends inside its payload (or
// before the CRLF after it), it hands the general parser the state scan
// would have after reading buf to its end, and reports cut. A value larger
// than a read always comes this way: its header is framed once, and the
// reads that bring the rest of it take Read's shortcut for a blob.
func (s *Stripper) longBulkReply(buf []byte, i int) (end int, cut bool) {
	at, n := bulkHeader(buf, i)
	if at < 0 {
		return -1, false
	}
	if e := at + n; e <= len(buf)-2 {
		if !crlfAt(buf, e) {
			return -1, false
		}
		return e + 2, false
	}
	left := int64(at+n) - int64(len(buf)) // payload bytes still to come
	switch {
	case left > 0:
		s.st, s.num = stBlob, left
	case left == 0:
		s.st = stBlobCR
	case left == -1 && buf[len(buf)-1] == '\r':
		s.st, s.lf = stLF, lfBlob
	default:
		return -1, false
	}
	s.typ, s.top, s.neg, s.start, s.push = '$', '$', false, i, pushNone
	return len(buf), true
}

// bulkRun frames the run of whole bulk strings with lengths of one or two
// digits (or null) at the start of b, and returns the offset after the
// last of them and how many there are. After the first, one load reads the
// CRLF that ends a payload and the next header (see replyLen).
func bulkRun(b []byte) (end, n int) {
	if len(b) < 8 {
		return 0, 0
	}
	hdr, size := shortBulk(binary.LittleEndian.Uint64(b[:8]))
	if hdr == 0 {
		return 0, 0
	}
	// c is the offset of the CRLF after a payload, end the offset after
	// the last bulk string counted. The common case, that CRLF and the
	// next header with a length of one or two digits, is decided first
	// and with the fewest checks. The step is written out here and in
	// bulkElems: as a function of its own, inlined, the compiler makes it
	// four instructions dearer per reply.
	c := hdr + size
	for uint(c) <= uint(len(b)-8) {
		v := binary.LittleEndian.Uint64(b[c : c+8])
		d1 := byte(v>>24) - '0'
		if uint32(v)&0xffffff == 0x240a0d && d1 <= 9 { // "\r\n$d"
			n++
			end = c + 2
			if uint16(v>>32) == crlf { // "\r\n$d\r\n"
				c += 6 + int(d1)
				continue
			}
			if d2 := byte(v>>32) - '0'; d2 <= 9 && uint16(v>>40) == crlf { // "\r\n$dd\r\n"
				c += 7 + int(d1)*10 + int(d2)
				continue
			}
			return end, n
		}
		if uint16(v) != crlf {
			return end, n
		}
		n++
		end = c + 2
		if !nullAfterCRLF(v) {
			return end, n
		}
		c += 5
	}
	if crlfAt(b, c) {
		n++
		end = c + 2
	}
	return end, n
}

// pushFrame returns the length of the whole push frame at the start of b
// and its name, when the frame is complete in b and its name is one the
// general parser would ask Strip about the same way: a first element that
// is a bulk string of at most maxNameLen bytes or a simple string, at most
// maxNameLen bytes long. Otherwise it reports false.
func pushFrame(b []byte) (n int, name []byte, ok bool) {
	// The common push, all of whose elements are bulk strings (a pub/sub
	// message, a MOVING's text fields aside), framed without frameLen.
	i, count := 4, 0
	if len(b) >= 9 && b[1]-'1' < 9 && b[2] == '\r' && b[3] == '\n' {
		count = int(b[1] - '0') // one digit, not 0: every pub/sub message
	} else {
		for i = 1; i < len(b); i++ {
			d := b[i] - '0'
			if d > 9 {
				break
			}
			count = count*10 + int(d)
		}
		if i == 1 || i > 19 || len(b)-i < 2 || b[i] != '\r' || b[i+1] != '\n' || count < 1 || count > len(b) {
			return pushFrameAny(b)
		}
		i += 2
	}
	// The name: a bulk string, not null.
	at, size := 0, 0
	if i <= len(b)-8 {
		if hdr, sz := shortBulk(binary.LittleEndian.Uint64(b[i : i+8])); hdr != 0 {
			at, size = i+hdr, sz
		}
	}
	if at == 0 {
		return pushFrameAny(b) // a longer length, or not a bulk string
	}
	if size > maxNameLen {
		return 0, nil, false
	}
	i = at + size
	if i > len(b)-2 || binary.LittleEndian.Uint16(b[i:i+2]) != crlf {
		return 0, nil, false
	}
	name = b[at:i]
	switch e := bulkElems(b, i, count-1); e {
	case -2:
		return pushFrameAny(b)
	case -1:
		return 0, nil, false
	default:
		return e, name, true
	}
}

// The first eight bytes of a pub/sub message push, and the next eight:
// its name (RESP3: ">3" then "$7" "message", ">3" "$8" "smessage", ">4"
// "$8" "pmessage"), read little-endian.
var (
	msgHead  = binary.LittleEndian.Uint64([]byte(">3\r\n$7\r\n"))
	msgName  = binary.LittleEndian.Uint64([]byte("message\r"))
	smsgHead = binary.LittleEndian.Uint64([]byte(">3\r\n$8\r\n"))
	smsgName = binary.LittleEndian.Uint64([]byte("smessage"))
	pmsgHead = binary.LittleEndian.Uint64([]byte(">4\r\n$8\r\n"))
	pmsgName = binary.LittleEndian.Uint64([]byte("pmessage"))
)

// isMessage reports whether a push name is that of a pub/sub message:
// "message", "smessage" or "pmessage". A subscriber receives one such push
// per message published, and none is a maintenance notification, so the
// Stripper passes them on without asking Strip (whose per-push cost would
// otherwise be paid on every message).
func isMessage(name []byte) bool {
	switch string(name) {
	case "message", "smessage", "pmessage":
		return true
	}
	return false
}

// messageLen returns the length of the whole pub/sub message push at the
// start of b ("message", "smessage" or "pmessage", every element after the
// name a bulk string of up to 18 length digits), or -1 if b does not start
// with one whole (the general rules then frame it). Strip is not asked
// about it (see isMessage).
func messageLen(b []byte) int {
	if len(b) < 16 {
		return -1
	}
	head, name := binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:16])
	var c, n int // the CRLF after the name, the elements after it
	switch {
	case head == msgHead && name == msgName:
		c, n = 15, 2
	case head == smsgHead && name == smsgName:
		c, n = 16, 2
	case head == pmsgHead && name == pmsgName:
		c, n = 16, 3
	default:
		return -1
	}
	if e := bulkElems(b, c, n); e > 0 {
		return e
	}
	return -1
}

// pushFrameAny is pushFrame for a push of any elements.
func pushFrameAny(b []byte) (n int, name []byte, ok bool) {
	n = frameLen(b)
	if n < 0 {
		return 0, nil, false
	}
	cr := lineEnd(b[:n], 1, clArray)
	if cr < 0 {
		return 0, nil, false
	}
	if count, err := parseLength('>', b[1:cr]); err != nil || count < 1 {
		return 0, nil, false
	}
	j := cr + 2
	switch b[j] {
	case '$':
		cr := lineEnd(b[:n], j+1, clBlob)
		if cr < 0 {
			return 0, nil, false
		}
		l, err := parseLength('$', b[j+1:cr])
		if err != nil || l < 0 || l > maxNameLen {
			return 0, nil, false
		}
		return n, b[cr+2 : cr+2+int(l)], true
	case '+':
		cr := lineEnd(b[:n], j+1, clLine)
		if cr < 0 || cr-(j+1) > maxNameLen {
			return 0, nil, false
		}
		return n, b[j+1 : cr], true
	}
	return 0, nil, false
}

// replyLen is frameLen, with shortcuts for the most common replies: a bulk
// string (GET) and an array of bulk strings (MGET, LRANGE), each of up to
// 18 length digits. The rest goes to frameLen.
func replyLen(b []byte) int {
	if len(b) < 4 {
		return frameLen(b)
	}
	switch b[0] {
	case '$':
		if e := bulkEnd(b, 0); e != -2 {
			return e
		}
	case '+', '-', ':':
		// A status, an error, an integer: a line (frameLen's rule for a
		// line at the top level).
		if cr := lineEnd(b, 1, clLine); cr >= 0 {
			return cr + 2
		}
		return -1
	case '*':
		n, i := int(b[1]-'0'), 4
		if n > 9 || b[2] != '\r' || b[3] != '\n' {
			for i, n = 1, 0; i < len(b); i++ {
				d := b[i] - '0'
				if d > 9 {
					break
				}
				n = n*10 + int(d)
			}
			if i == 1 || i > 19 || len(b)-i < 2 || b[i] != '\r' || b[i+1] != '\n' || n > len(b) {
				break
			}
			i += 2
		}
		if e := bulkElems(b, i-2, n); e != -2 {
			return e
		}
	}
	return frameLen(b)
}

// bulkElems frames n elements that are bulk strings, the CRLF before the
// first of them at b[c] (an array's header's, or the one after a push's
// name), and returns the offset after the last, -1 if they are not
// complete in b (or a CRLF is missing: the general parser reports that),
// or -2 if one is not a bulk string of up to 18 length digits: the caller
// then frames the whole by the general rules. Every element of an MGET's
// reply and of a pub/sub message comes through here: one load reads the
// CRLF before an element and its header, when it is a null or has a
// length of one or two digits, and the payload is stepped over by length.
func bulkElems(b []byte, c, n int) int {
	for ; n > 0; n-- {
		if c >= 0 && c <= len(b)-8 {
			v := binary.LittleEndian.Uint64(b[c : c+8])
			if d1 := byte(v>>24) - '0'; uint32(v)&0xffffff == 0x240a0d && d1 <= 9 { // "\r\n$d"
				if uint16(v>>32) == crlf { // "\r\n$d\r\n"
					c += 6 + int(d1)
					continue
				}
				if d2 := byte(v>>32) - '0'; d2 <= 9 && uint16(v>>40) == crlf { // "\r\n$dd\r\n"
					c += 7 + int(d1)*10 + int(d2)
					continue
				}
			}
			if nullAfterCRLF(v) {
				c += 5
				continue
			}
		}
		if !crlfAt(b, c) {
			return -1 // not complete in b, or no CRLF: the general parser decides
		}
		e := blobEnd(b, c+2)
		if e < 0 {
			return e // -2: an element of another kind
		}
		c = e - 2
	}
	if !crlfAt(b, c) {
		return -1
	}
	return c + 2
}

// nullAfterCRLF reports whether v, eight bytes read little-endian, starts
// with "\r\n$-1\r\n": a CRLF and a null bulk string. It compares with
// constants of 32 bits and less, which the compiler leaves in the
// instructions rather than keeping them in registers across a loop.
func nullAfterCRLF(v uint64) bool {
	return uint32(v>>16) == 0x0d312d24 && uint32(v)&0xffff == crlf && byte(v>>48) == '\n'
}

// nullBulk is "$-1\r\n" read as a little-endian uint64's five low bytes.
const nullBulk = 0x0a_0d312d24

// bulkEnd is blobEnd, with the common shapes read in one load: a length
// of one or two digits (see shortBulk), and the null bulk string, which
// it steps over (blobEnd leaves it to the general rules, which accept it).
func bulkEnd(b []byte, i int) int {
	if i >= 0 && i <= len(b)-8 {
		v := binary.LittleEndian.Uint64(b[i : i+8])
		if hdr, size := shortBulk(v); hdr != 0 {
			e := i + hdr + size
			if e < 0 || e > len(b)-2 || binary.LittleEndian.Uint16(b[e:e+2]) != crlf {
				return -1
			}
			return e + 2
		}
		if v&0xff_ffffffff == nullBulk {
			return i + 5
		}
	}
	return blobEnd(b, i)
}

// blobEnd returns the offset after the bulk string at b[i], -1 if it is
// not complete in b (or not followed by CRLF: the general parser reports
// that), or -2 if b[i] does not start a bulk string of up to 18 length
// digits (a null, another type, a length the general rules must judge).
func blobEnd(b []byte, i int) int {
	at, n := bulkHeader(b, i)
	if at < 0 {
		return at
	}
	if n > len(b)-at-2 {
		return -1 // not complete in b
	}
	e := at + n
	if b[e] != '\r' || b[e+1] != '\n' {
		return -1
	}
	return e + 2
}

// bulkHeader reads the header of a bulk string at b[i], a '$', 1 to 18
// digits and a CRLF, and returns the offset of its payload and its length;
// at is -1 if b ends before the header's CRLF is whole, -2 if b[i] does not
// start such a header (a null, another type, more digits).
func bulkHeader(b []byte, i int) (at, n int) {
	if i >= len(b) || b[i] != '$' {
		return -2, 0
	}
	i++
	d := i
	for ; i < len(b); i++ {
		c := b[i] - '0'
		if c > 9 {
			break
		}
		n = n*10 + int(c)
	}
	if i == d || i-d > 18 {
		return -2, 0
	}
	if len(b)-i < 2 {
		return -1, 0
	}
	if b[i] != '\r' || b[i+1] != '\n' {
		return -2, 0
	}
	return i + 2, n
}

// lineEnd returns the offset of the CR that ends the line whose body starts
// at buf[from], if the body and its CRLF are in buf, hold no other CR or
// LF, and (for a header of class cl) are short enough to be a length.
// Otherwise it returns -1 and the caller parses byte by byte.
func lineEnd(buf []byte, from int, cl uint8) int {
	end := len(buf) - 1 // the CR must have its LF in buf
	if cl != clLine {
		end = min(end, from+lenDigits+1)
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

// parseLength parses the length or count field of a blob or aggregate
// header of type t (the bytes between the type byte and the CR), by the
// Stripper's rules: up to lenDigits digits and at most math.MaxInt64, or
// -1 (a RESP2 null) for the types that allow it.
func parseLength(t byte, body []byte) (int64, error) {
	if len(body) == 0 || len(body) > lenDigits {
		return 0, errBadLength(t, body)
	}
	var n uint64 // 19 digits fit a uint64
	for _, c := range body {
		d := c - '0'
		if d > 9 {
			if len(body) == 2 && body[0] == '-' && body[1] == '1' && nullable(t) {
				return -1, nil
			}
			return 0, errBadLength(t, body)
		}
		n = n*10 + uint64(d)
	}
	if n > math.MaxInt64 {
		return 0, errTooLong(t)
	}
	return int64(n), nil
}

// errBadLength describes a length field that is not 1 to lenDigits digits.
func errBadLength(t byte, body []byte) error {
	if len(body) > lenDigits {
		for _, c := range body {
			if c < '0' || c > '9' {
				return malformed("bad length %q for type %q", body, t)
			}
		}
		return errTooLong(t)
	}
	return malformed("bad length %q for type %q", body, t)
}

func errTooLong(t byte) error {
	return malformed("length of type %q does not fit an int64", t)
}

// header acts on a complete blob or aggregate header (s.typ, s.neg,
// s.num) whose LF is at buf[i-1].
func (s *Stripper) header(buf []byte, i int) {
	if typeClass[s.typ] == clBlob {
		if s.push == pushPending {
			// Only a name is read as a blob while pending.
			if s.neg || s.num > maxNameLen {
				s.push = pushPass
			} else {
				s.nameAt, s.nameLen = i, int(s.num)
			}
		}
		switch {
		case s.neg:
			s.done(buf, i)
		case s.num == 0:
			s.st = stBlobCR
		default:
			s.st = stBlob
		}
		return
	}
	s.st = stType
	n := uint64(s.num) // s.num <= math.MaxInt64: 2*n fits
	if typeClass[s.typ] == clMap {
		n *= 2
	}
	nested := s.want != 0
	switch {
	case s.typ == '|' && nested:
		// A nested attribute: its elements come before the value it
		// annotates, which is still expected.
		s.add(n)
	case s.neg || n == 0:
		s.done(buf, i)
	case !nested:
		s.want = n
	default:
		s.add(n - 1)
	}
}

// add adds n values to s.want, saturating.
func (s *Stripper) add(n uint64) {
	if s.want > math.MaxUint64-n {
		s.want = math.MaxUint64
		return
	}
	s.want += n
}

// done records that a value ended at buf[:end].
func (s *Stripper) done(buf []byte, end int) {
	s.st = stType
	if s.want != 0 {
		if s.push == pushPending {
			// The only nested value completed while pending is the name.
			s.decide(buf)
		}
		s.want--
		if s.want != 0 {
			return
		}
	}
	s.topDone(buf, end)
}

// strips reports whether the push named name is removed: Strip's answer,
// never asked about a pub/sub message (see isMessage). The shortcut of
// wholeReplies and the general parser's decide both ask here.
func (s *Stripper) strips(name []byte) bool {
	return s.H != nil && !isMessage(name) && s.H.Strip(name)
}

// decide asks Strip about the pending push whose name just completed.
func (s *Stripper) decide(buf []byte) {
	name := buf[s.nameAt : s.nameAt+s.nameLen]
	strip := s.decided
	s.decided = false
	if !strip {
		strip = s.strips(name)
	}
	if strip {
		s.flush(buf, s.start)
		s.remove(pushStrip)
		s.nname = copy(s.bufs().name[:], name)
	} else {
		s.push = pushPass
	}
}

// remove starts removing the current top-level frame, from s.start: a
// stripped push or a dropped reply (how is pushStrip or pushDrop). The
// bytes before it must have been flushed.
func (s *Stripper) remove(how uint8) {
	s.push = how
	s.sbuf = s.sbuf[:0]
	s.ssize = 0
	s.oversize = false
}

// topDone handles the end of a top-level frame at buf[:end].
func (s *Stripper) topDone(buf []byte, end int) {
	switch s.push {
	case pushNone:
		if s.top != '|' {
			if s.dropIn > 1 {
				s.dropIn--
			}
			s.replies++
			if s.OnReply != nil {
				s.OnReply()
			}
		}
	case pushStrip, pushDrop:
		// The frame is removed: buf[s.start:end] and s.sbuf before it.
		size := s.ssize + int64(end-s.start)
		var frame []byte
		if !s.oversize && size <= int64(s.maxStripped()) {
			frame = buf[s.start:end]
			if len(s.sbuf) > 0 {
				s.sbuf = append(s.sbuf, frame...)
				frame = s.sbuf
			}
		}
		// Done with the frame before any callback runs.
		s.keep = end
		how := s.push
		s.push = pushNone
		s.sbuf = s.sbuf[:0]
		s.oversize = false
		switch {
		case how == pushDrop:
			if s.H != nil {
				s.H.Dropped(frame)
			}
		case frame == nil:
			s.nOver++
			if s.H != nil {
				s.H.Oversize(s.aux.name[:s.nname], size)
			}
		case s.H != nil:
			s.H.Stripped(frame)
		}
	}
	s.push = pushNone
}

// fail switches to pass-through after a framing error in buf: everything
// not yet returned, including held-back and stripped-so-far bytes, is
// passed on in stream order. It returns the output length of buf.
func (s *Stripper) fail(buf []byte, err error) int {
	s.dead = true
	if s.push >= pushStrip && len(s.sbuf) > 0 {
		s.tail = append(s.sbuf, buf[s.start:]...)
		s.sbuf = nil
	} else {
		if s.push >= pushStrip {
			s.keep = s.start
		}
		s.flush(buf, len(buf))
	}
	s.push = pushNone
	if s.H != nil {
		s.H.Malformed(err)
	}
	return s.w
}

// AtBoundary reports whether the Stripper stands between two top-level
// frames with nothing held back, queued or failed: the next byte of the
// stream starts a frame. A caller may then take whole frames off the stream
// itself without the Stripper losing its place.
func (s *Stripper) AtBoundary() bool {
	return s.nothingPending() && s.st == stType && s.want == 0 && s.push == pushNone
}

// nothingPending reports whether the Stripper holds nothing for the next
// Read to return before it reads again (no queued, held-back or tail bytes,
// no stashed error) and still parses the stream.
func (s *Stripper) nothingPending() bool {
	return s.qOff == s.qEnd && s.nhold == 0 && len(s.tail) == 0 && s.err == nil && !s.dead
}

// DropReply arranges for one reply to be removed from the stream: the first
// reply (a top-level frame that is neither a push nor an attribute) that
// begins after after more replies have completed, counting from now. A reply
// under way when DropReply is called counts as one of them when it
// completes, and is never dropped itself.
//
// The dropped reply is removed exactly as a stripped push is: the output
// is the input minus the whole frame; it is handed to Dropped (buffered up
// to MaxStripped) and does not call OnReply. Pushes before or after it are
// stripped or passed as usual; a top-level attribute just before it passes
// through (go-redis discards attributes).
//
// At most one drop is pending: a call replaces the pending one, and a
// negative after cancels it. A reply already being dropped is not affected.
// DropReply may be called from the callbacks.
func (s *Stripper) DropReply(after int) {
	if after < 0 {
		s.dropIn = 0
		return
	}
	s.dropIn = after + 1
}

// DropPending reports whether a drop asked for by DropReply is pending,
// and after how many more complete replies the dropped reply begins. It
// reports false once that reply has begun.
func (s *Stripper) DropPending() (after int, ok bool) {
	return s.dropIn - 1, s.dropIn > 0
}

// NextIsDropped reports whether the reply DropReply asked to remove is the
// next one, or is being removed: every reply before it is complete, and it
// is not yet removed whole.
func (s *Stripper) NextIsDropped() bool {
	return !s.dead && (s.dropIn == 1 || s.push == pushDrop)
}

// ReadDrop reads like Read, but only while NextIsDropped: it returns as soon
// as the dropped reply has been removed, with the output that came with it
// (0 bytes and a nil error when there was none), and at once when
// NextIsDropped is false. What the read brought behind the dropped reply is
// parsed as Read parses it: pushes there are stripped and reported.
func (s *Stripper) ReadDrop(r io.Reader, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.untilDrop = true
	defer func() { s.untilDrop = false }()
	return s.read(r, p) // the general rules: Read's shortcut reads without looking
}

// TakeDropped records frame as the dropped reply, for a caller that takes
// whole frames off the stream itself while the Stripper stands
// AtBoundary. If a drop is pending with after == 0, the Stripper is
// AtBoundary and frame is exactly one whole top-level frame that is not a
// push or an attribute, it clears the pending drop, calls Dropped (with
// nil if frame is larger than MaxStripped) and returns true. Otherwise it
// returns false and changes nothing.
func (s *Stripper) TakeDropped(frame []byte) bool {
	if s.dropIn != 1 || !s.AtBoundary() || len(frame) == 0 || frame[0] == '>' || frame[0] == '|' ||
		frameLen(frame) != len(frame) {
		return false
	}
	s.dropIn = 0
	if s.H != nil {
		if len(frame) > s.maxStripped() {
			frame = nil
		}
		s.H.Dropped(frame)
	}
	return true
}

// frameLen returns the length of the whole top-level frame at the start of
// b, by the Stripper's rules, or -1 if b holds only part of one or cannot
// be framed.
func frameLen(b []byte) int {
	var want uint64 // as Stripper.want
	i := 0
	for i < len(b) {
		t := b[i]
		cl := typeClass[t]
		if cl == clInvalid {
			return -1
		}
		cr := lineEnd(b, i+1, cl)
		if cr < 0 {
			return -1
		}
		body := b[i+1 : cr]
		i = cr + 2
		if cl != clLine {
			n, err := parseLength(t, body)
			if err != nil {
				return -1
			}
			if cl == clBlob {
				if n >= 0 {
					if n > int64(len(b)-i-2) || b[i+int(n)] != '\r' || b[i+int(n)+1] != '\n' {
						return -1
					}
					i += int(n) + 2
				}
			} else if n > 0 {
				if n > int64(len(b)) {
					return -1 // more elements than bytes
				}
				e := uint64(n)
				if cl == clMap {
					e *= 2
				}
				switch {
				case want == 0:
					want = e
				case t == '|':
					want += e
				default:
					want += e - 1
				}
				continue
			} else if t == '|' && want != 0 {
				continue // an empty nested attribute
			}
		}
		// A value is complete.
		if want == 0 {
			return i
		}
		want--
		if want == 0 {
			return i
		}
	}
	return -1
}
