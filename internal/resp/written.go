package resp

import "encoding/binary"

// maxKeptName is the longest command name a Written keeps to recognise it.
// Longer names are never blocking (the longest blocking name has 10 bytes).
const maxKeptName = 16

// Written states (slow path): what the next byte of the stream is.
const (
	wsStart  uint8 = iota // the '*' that starts a command
	wsCount               // a digit of the argument count ('-' first), or the CR after it
	wsCountL              // the LF after the count
	wsBulk                // the '$' of an argument
	wsLen                 // a digit of the argument length, or the CR after it
	wsLenL                // the LF after the length
	wsData                // a payload byte; num bytes remain
	wsDataR               // the CR after the payload
	wsDataL               // the LF after the payload
)

// Command classes, as far as a Written cares.
const (
	cmdOther    uint8 = iota
	cmdBlocking       // always blocks (outside MULTI)
	cmdXRead          // XREAD, XREADGROUP: blocks with a BLOCK option
	cmdMulti          // MULTI: later commands are queued, not run
	cmdEndMulti       // EXEC, DISCARD, RESET: the end of a MULTI
)

// Written counts the commands in the byte stream a client writes to a
// server (RESP arrays of bulk strings), fed in arbitrary chunks, and tells
// whether the last of them is one that blocks server-side.
//
// It reads the headers of a command and steps over every payload by its
// length: the only payloads it looks at are command names of at most 16
// bytes, and the 5-byte option words of XREAD and XREADGROUP. Its cost is
// proportional to the number of arguments, not to the bytes written. It
// never allocates and takes no lock.
//
// The blocking commands are BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP,
// BZPOPMIN, BZPOPMAX, BZMPOP, WAIT, WAITAOF, and XREAD or XREADGROUP with a
// BLOCK option among the options before STREAMS (COUNT, BLOCK and CLAIM
// take one value, GROUP two, NOACK none; an argument there that is none of
// these ends the options). Names and options match in any letter case. A
// command sent between MULTI and EXEC, DISCARD or RESET is queued, not run,
// so it is not blocking.
//
// The framing rules are those of ReadFrame: lengths of at most 10 digits,
// at most MaxAggregateLen arguments of at most MaxBulkLen bytes. An empty or
// null array ("*0\r\n", "*-1\r\n") is skipped, as a Redis server skips it
// without a reply. Anything else (an inline command, an argument that is
// not a bulk string, a null bulk, a missing CRLF) loses the stream: see
// Lost.
//
// The zero value is ready to use. A Written belongs to one connection and
// must not be used from several goroutines at once.
type Written struct {
	st     uint8
	kind   uint8 // class of the command being read, once its name is read
	digits uint8 // digits of the number being read
	nkept  uint8 // payload bytes kept in kept
	neg    bool  // the count being read started with '-'
	name   bool  // the argument being read is the command name
	keep   bool  // the payload being read is kept in kept
	lost   bool
	last   bool // the last complete command is blocking
	multi  bool // inside MULTI
	x      xwalk
	num    int64 // number being read; then payload bytes left
	size   int64 // length of the argument being read
	left   int64 // arguments left in the command, the one being read included
	kept   [maxKeptName]byte
}

// Feed consumes p, the next bytes written to the server, and returns how
// many commands it completed: a command counts once, in the call that
// brings its last byte. If p makes the stream unreadable, Feed returns the
// commands completed before the fault, and Lost reports true from then on.
// Once the stream is lost, Feed returns 0.
func (w *Written) Feed(p []byte) int {
	if w.st != wsStart || w.lost {
		return w.feed(p, 0, 0)
	}
	// The common write: whole commands of the common shape, framed by
	// plainRun (a pipeline of GETs or SETs, all of it) and wholes.
	n, i, e, left := plainRun(p, 0)
	if n > 0 {
		w.last = false // a plain command is not blocking
		if i == len(p) {
			return n
		}
	}
	if e >= 0 && w.cut(p, e, left, cmdOther) {
		return n // a plain command cut in a payload: a value larger than the write
	}
	k, i := w.wholes(p, i)
	if i == len(p) {
		return n + k
	}
	return w.feed(p, i, n+k)
}

// feed is Feed from p[i:], n commands already completed in p.
func (w *Written) feed(p []byte, i, n int) int {
	for i < len(p) && !w.lost {
		if w.st == wsStart {
			k, j := w.wholes(p, i)
			n, i = n+k, j
			if i == len(p) {
				break
			}
		}
		var done bool
		i, done = w.slow(p, i)
		if done {
			n++
		}
	}
	return n
}

// LastBlocking reports whether the most recently completed command is a
// blocking one (see Written). It is false before the first command, and
// means nothing once the stream is lost.
func (w *Written) LastBlocking() bool { return w.last }

// Lost reports that the stream could not be framed as RESP arrays of bulk
// strings (an inline command, garbage, a null argument, a violated limit).
// It is reported at the first byte that no well-formed stream could
// continue with. From then on Feed returns 0, and the caller must treat the
// number of replies owed as unknown.
func (w *Written) Lost() bool { return w.lost }

// wholes frames the complete commands of the common shape that start at
// b[i], where the stream stands at a command's start, and returns how many
// and the offset after the last of them. A command of the common shape is a
// count of at least one argument, and arguments that are all bulk strings,
// within the limits: the steps over every argument are a few instructions
// (shortBulk reads its header in one load, crlfAt the CRLF after its
// payload, which is stepped over by length and never read) and the
// command's state stays in locals, stored once per call. It stops at the
// first command that is not complete in b or not of that shape; slow reads
// that one from its first byte and decides.
func (w *Written) wholes(b []byte, i int) (n, next int) {
	last, multi := w.last, w.multi
cmds:
	for i >= 0 && i <= len(b)-10 { // a complete command has ten bytes or more
		// The count and the name's header: in the common case (a count
		// and a name length of one digit each, "*2\r\n$3\r\n") both in
		// the one load, else by the general rules.
		v := binary.LittleEndian.Uint64(b[i : i+8])
		if byte(v) != '*' {
			break
		}
		args, a, at, size := int(byte(v>>8)-'0'), i+4, i+8, int(byte(v>>40)-'0')
		if v&0xffff00ff_ffff00ff != 0x0a0d0024_0a0d002a || uint(args-1) > 8 || uint(size) > 9 {
			if args == 0 || args > 9 || uint16(v>>16) != crlf {
				// n == 0 also covers an empty count: slow decides.
				args, a = lenField(b, i+1)
				if a == 0 || args == 0 || args > MaxAggregateLen {
					break
				}
			}
			// The name.
			at, size = 0, 0
			if a >= 0 && a <= len(b)-8 {
				if hdr, sz := shortBulk(binary.LittleEndian.Uint64(b[a : a+8])); hdr != 0 {
					at, size = a+hdr, sz
				}
			}
			if at == 0 {
				at, size = longBulk(b, a)
			}
		}
		e := at + size
		if at == 0 || !crlfAt(b, e) {
			break
		}
		kind := cmdOther
		if uint(size-minClassified) <= maxClassified-minClassified {
			kind = classify(b[at:e])
		}
		blk := false
		if kind == cmdXRead {
			if a, blk = xArgs(b, e+2, args-1); a == 0 {
				break
			}
		} else {
			// The other arguments: every one of every command written
			// comes through here. e is the offset of the CRLF after the
			// previous argument's payload: one load reads that CRLF and
			// the next argument's header, when its length has one or two
			// digits, and the payload is stepped over by that length.
			for args--; args > 0; args-- {
				if e >= 0 && e <= len(b)-8 {
					v := binary.LittleEndian.Uint64(b[e : e+8])
					d1, d2 := byte(v>>24)-'0', byte(v>>32)-'0'
					if v&0xffff00ffffff == 0x0a0d00240a0d && d1 <= 9 { // "\r\n$d\r\n"
						e += 6 + int(d1)
						continue
					}
					if v&0xffff0000ffffff == 0x0a0d0000240a0d && d1 <= 9 && d2 <= 9 { // "\r\n$dd\r\n"
						e += 7 + int(d1)*10 + int(d2)
						continue
					}
				}
				if !crlfAt(b, e) {
					if w.cut(b, e, args, kind) {
						i = len(b)
					}
					break cmds
				}
				at, size := longBulk(b, e+2)
				if at == 0 {
					break cmds
				}
				e = at + size
			}
			if !crlfAt(b, e) {
				if w.cut(b, e, 0, kind) {
					i = len(b)
				}
				break
			}
			a = e + 2
		}
		last, multi = commandDone(kind, blk, multi)
		n++
		i = a
	}
	w.last, w.multi = last, multi
	return n, i
}

// plainRun frames the run of whole plain commands at b[i:] and returns
// how many and the offset after the last of them. A plain command has one
// to nine arguments within the limits and a name of at most nine bytes
// that classify would not single out (see special): every command of a
// pipeline of GETs or SETs, MGETs and MSETs of up to eight keys. It is
// neither blocking nor a MULTI's bracket, so after it the last command is
// not blocking and the MULTI state is what it was. The loop calls nothing,
// so the compiler keeps its state in registers; anything else (or a
// command not whole in b) ends the run, at that command's first byte, for
// wholes to frame by its rules. A plain command that b ends inside a
// payload (or before a CRLF) is reported with where that payload ends and
// how many arguments follow it (see cut); cutEnd is -1 otherwise.
func plainRun(b []byte, i int) (n, next, cutEnd, cutLeft int) {
	for uint(i)+10 <= uint(len(b)) {
		v := binary.LittleEndian.Uint64(b[i : i+8])
		args, size := int(byte(v>>8)-'0'), uint(byte(v>>40)-'0')
		if v&0xffff00ff_ffff00ff != 0x0a0d0024_0a0d002a || uint(args-1) > 8 || size > 9 ||
			special[size]>>((b[i+8]|0x20)&31)&1 != 0 {
			break
		}
		e := i + 8 + int(size) // the CRLF after the name
		for args--; args > 0; args-- {
			if uint(e)+8 > uint(len(b)) {
				return n, i, e, args
			}
			// The step of wholes's loop, written out in both: as a function
			// of its own, inlined, the compiler makes it 2 to 5 instructions
			// dearer per argument (callgrind, BenchmarkWrittenFeed).
			v := binary.LittleEndian.Uint64(b[e : e+8])
			d1, d2 := byte(v>>24)-'0', byte(v>>32)-'0'
			if v&0xffff00ffffff == 0x0a0d00240a0d && d1 <= 9 { // "\r\n$d\r\n"
				e += 6 + int(d1)
				continue
			}
			if v&0xffff0000ffffff == 0x0a0d0000240a0d && d1 <= 9 && d2 <= 9 { // "\r\n$dd\r\n"
				e += 7 + int(d1)*10 + int(d2)
				continue
			}
			// A longer length (a value of 100 bytes or more).
			if uint32(v)&0xffffff != 0x240a0d { // "\r\n$"
				return n, i, -1, 0
			}
			size, at := lenField(b, e+3)
			if at == 0 || size > MaxBulkLen {
				return n, i, -1, 0 // wholes decides, or slow
			}
			e = at + size
		}
		if !crlfAt(b, e) {
			return n, i, e, 0
		}
		n++
		i = e + 2
	}
	return n, i, -1, 0
}

// special[size] has bit c set when a command name of size bytes whose
// first letter is c (its low five bits: 'a' and 'A' are 1) may be one
// classify singles out, up to nine bytes: WAIT, EXEC; BLPOP, BRPOP,
// XREAD, MULTI, RESET; BLMOVE, BLMPOP, BZMPOP; WAITAOF, DISCARD;
// BZPOPMIN, BZPOPMAX. A first byte that is not a letter may share its low
// five bits with one: such a name is framed by wholes's rules, as a
// classified one is.
var special = [10]uint32{
	4: 1<<('w'&31) | 1<<('e'&31),
	5: 1<<('b'&31) | 1<<('x'&31) | 1<<('m'&31) | 1<<('r'&31),
	6: 1 << ('b' & 31),
	7: 1<<('w'&31) | 1<<('d'&31),
	8: 1 << ('b' & 31),
}

// cut hands slow a command that b ends inside: wholes has read its count,
// its name (of class kind) and the headers of its arguments up to one
// whose payload ends at e, at or past the end of b (or whose CR is b's
// last byte), with left arguments after it. It sets the state slow would
// have after reading b to its end, and reports whether it did; if not (b
// ends elsewhere, or the byte at e is not a CR), slow reads the command
// again from its first byte and decides. A value larger than go-redis's
// write buffer always comes this way: the write that brings its header
// ends inside its payload, and its bytes are neither read nor framed twice.
func (w *Written) cut(b []byte, e, left int, kind uint8) bool {
	switch {
	case e >= len(b):
		w.st, w.num = wsDataR, 0
		if e > len(b) {
			w.st, w.num = wsData, int64(e-len(b))
		}
	case e == len(b)-1 && b[e] == '\r':
		w.st = wsDataL
	default:
		return false
	}
	w.left = int64(left) + 1
	w.kind = kind
	w.name, w.keep, w.nkept = false, false, 0
	w.x = xwalk{}
	return true
}

// bulkAt reads the header of a bulk string argument at b[a:] and returns
// the offset of its payload and its length, or at 0 if b[a:] does not
// start with a whole header within the limits.
func bulkAt(b []byte, a int) (at, size int) {
	if a >= 0 && a <= len(b)-8 {
		if hdr, size := shortBulk(binary.LittleEndian.Uint64(b[a : a+8])); hdr != 0 {
			return a + hdr, size
		}
	}
	return longBulk(b, a)
}

// longBulk is bulkAt by the general rules (lenField): for the lengths of
// three digits and more, and the headers at the very end of b.
func longBulk(b []byte, a int) (at, size int) {
	if a >= len(b) || b[a] != '$' {
		return 0, 0
	}
	size, at = lenField(b, a+1)
	if size > MaxBulkLen {
		return 0, 0
	}
	return at, size
}

// xArgs steps over the n arguments after the name of an XREAD or
// XREADGROUP at b[a:], following its options, and returns the offset after
// them and whether BLOCK is among the options; next is 0 if they are not
// all whole bulk strings within the limits.
func xArgs(b []byte, a, n int) (next int, blk bool) {
	x := xwalk{on: true}
	for ; n > 0; n-- {
		at, size := bulkAt(b, a)
		e := at + size
		if at == 0 || !crlfAt(b, e) {
			return 0, false
		}
		if x.on {
			x.step(b[at:e], int64(size))
		}
		a = e + 2
	}
	return a, x.blk
}

// lenField reads a length or count at b[i:]: 1 to maxLenDigits digits and
// a CRLF. It returns the value and the offset after the LF, or next 0 if
// b[i:] does not start with such a field, whole.
func lenField(b []byte, i int) (v, next int) {
	for j := i; j < len(b); j++ {
		c := b[j] - '0'
		if c <= 9 {
			v = v*10 + int(c)
			continue
		}
		if j == i || j-i > maxLenDigits || b[j] != '\r' || j+1 >= len(b) || b[j+1] != '\n' {
			return 0, 0
		}
		return v, j + 2
	}
	return 0, 0
}

// slow advances the stream one step at a time over p[i:] until a command
// completes (done is true), the stream is lost, or p is used up. It
// returns the offset of the first byte not consumed. Payloads are stepped
// over by their length.
func (w *Written) slow(p []byte, i int) (next int, done bool) {
	for i < len(p) {
		c := p[i]
		switch w.st {
		case wsStart:
			if c != '*' {
				return w.lose()
			}
			w.st, w.num, w.digits, w.neg = wsCount, 0, 0, false
		case wsCount:
			switch {
			case w.neg:
				// Only "-1" is a count below zero.
				if c == '1' && w.digits == 0 {
					w.digits = 1
				} else if c == '\r' && w.digits == 1 {
					w.st = wsCountL
				} else {
					return w.lose()
				}
			case c >= '0' && c <= '9':
				w.num = w.num*10 + int64(c-'0')
				w.digits++
				if w.digits > maxLenDigits || w.num > MaxAggregateLen {
					return w.lose()
				}
			case c == '-' && w.digits == 0:
				w.neg = true
			case c == '\r' && w.digits > 0:
				w.st = wsCountL
			default:
				return w.lose()
			}
		case wsCountL:
			if c != '\n' {
				return w.lose()
			}
			if w.neg || w.num == 0 {
				// An empty or null array: no command, no reply.
				w.st = wsStart
				return i + 1, false
			}
			w.left, w.name, w.st = w.num, true, wsBulk
		case wsBulk:
			if c != '$' {
				return w.lose()
			}
			w.st, w.num, w.digits = wsLen, 0, 0
		case wsLen:
			switch {
			case c >= '0' && c <= '9':
				w.num = w.num*10 + int64(c-'0')
				w.digits++
				if w.digits > maxLenDigits || w.num > MaxBulkLen {
					return w.lose()
				}
			case c == '\r' && w.digits > 0:
				w.st = wsLenL
			default:
				return w.lose()
			}
		case wsLenL:
			if c != '\n' {
				return w.lose()
			}
			w.size, w.nkept = w.num, 0
			if w.name {
				w.keep = w.num <= maxKeptName
			} else {
				w.keep = w.x.on && w.x.skip == 0 && w.num == xOptionLen
			}
			w.st = wsData
			if w.num == 0 {
				w.st = wsDataR
			}
		case wsData:
			k := min(w.num, int64(len(p)-i))
			if w.keep {
				w.nkept += uint8(copy(w.kept[w.nkept:], p[i:i+int(k)]))
			}
			w.num -= k
			if w.num == 0 {
				w.st = wsDataR
			}
			i += int(k)
			continue
		case wsDataR:
			if c != '\r' {
				return w.lose()
			}
			w.st = wsDataL
		case wsDataL:
			if c != '\n' {
				return w.lose()
			}
			w.argDone()
			w.left--
			if w.left == 0 {
				w.done(w.kind, w.x.blk)
				w.st = wsStart
				return i + 1, true
			}
			w.st = wsBulk
		}
		i++
	}
	return i, false
}

// argDone takes note of a complete argument in the slow path.
func (w *Written) argDone() {
	var arg []byte
	if w.keep {
		arg = w.kept[:w.nkept]
	}
	if w.name {
		w.name = false
		w.kind = cmdOther
		if w.keep {
			w.kind = classify(arg)
		}
		w.x = xwalk{on: w.kind == cmdXRead}
		return
	}
	if w.x.on {
		w.x.step(arg, w.size)
	}
}

// lose marks the stream lost; it returns what slow returns then.
func (w *Written) lose() (int, bool) {
	w.lost = true
	return 0, false
}

// done records a complete command of class kind; blk tells whether an
// XREAD carried BLOCK.
func (w *Written) done(kind uint8, blk bool) {
	w.last, w.multi = commandDone(kind, blk, w.multi)
}

// commandDone returns, after a complete command of class kind (blk: an
// XREAD carried BLOCK) sent while inMulti or not, whether it is blocking
// and whether the connection is inside MULTI after it.
func commandDone(kind uint8, blk, inMulti bool) (last, multi bool) {
	switch kind {
	case cmdBlocking:
		return !inMulti, inMulti
	case cmdXRead:
		return blk && !inMulti, inMulti
	case cmdMulti:
		return false, true
	case cmdEndMulti:
		return false, false
	}
	return false, inMulti
}

// xOptionLen is the length of the XREAD and XREADGROUP option words that
// matter before STREAMS: BLOCK, COUNT, CLAIM, GROUP, NOACK.
const xOptionLen = 5

// xwalk follows the options of an XREAD or XREADGROUP, one argument at a
// time, until BLOCK, STREAMS or an unknown word.
type xwalk struct {
	on   bool  // still reading options
	blk  bool  // BLOCK seen
	skip uint8 // option values still to step over
}

// step takes the next argument: size is its length; arg holds it when it
// may be an option word (size xOptionLen, not a value).
func (x *xwalk) step(arg []byte, size int64) {
	if x.skip > 0 {
		x.skip--
		return
	}
	if size != xOptionLen {
		x.on = false // STREAMS, or no option at all
		return
	}
	switch {
	case eqFold(arg, "block"):
		x.blk, x.on = true, false
	case eqFold(arg, "count"), eqFold(arg, "claim"):
		x.skip = 1
	case eqFold(arg, "group"):
		x.skip = 2
	case eqFold(arg, "noack"):
	default:
		x.on = false
	}
}

// The lengths of the names classify recognises.
const (
	minClassified = 4  // WAIT, EXEC
	maxClassified = 10 // BRPOPLPUSH, XREADGROUP
)

// classify returns the class of a command name, in any letter case.
func classify(name []byte) uint8 {
	switch len(name) {
	case 4:
		if eqFold(name, "wait") {
			return cmdBlocking
		}
		if eqFold(name, "exec") {
			return cmdEndMulti
		}
	case 5:
		if eqFold(name, "blpop") || eqFold(name, "brpop") {
			return cmdBlocking
		}
		if eqFold(name, "xread") {
			return cmdXRead
		}
		if eqFold(name, "multi") {
			return cmdMulti
		}
		if eqFold(name, "reset") {
			return cmdEndMulti
		}
	case 6:
		if eqFold(name, "blmove") || eqFold(name, "blmpop") || eqFold(name, "bzmpop") {
			return cmdBlocking
		}
	case 7:
		if eqFold(name, "waitaof") {
			return cmdBlocking
		}
		if eqFold(name, "discard") {
			return cmdEndMulti
		}
	case 8:
		if eqFold(name, "bzpopmin") || eqFold(name, "bzpopmax") {
			return cmdBlocking
		}
	case 10:
		if eqFold(name, "brpoplpush") {
			return cmdBlocking
		}
		if eqFold(name, "xreadgroup") {
			return cmdXRead
		}
	}
	return cmdOther
}

// eqFold reports whether b equals lower in any letter case. lower must be
// lower-case letters only: then b[i]|0x20 == lower[i] holds exactly when
// b[i] is that letter in either case.
func eqFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range len(b) {
		if b[i]|0x20 != lower[i] {
			return false
		}
	}
	return true
}
