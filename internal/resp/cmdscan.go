package resp

import (
	"math"
	"strconv"
)

// CmdKind classifies a command a client sends, for the connection wrapper's
// bookkeeping (pub/sub mode, transactions, blocking calls, ...).
type CmdKind uint8

// The command kinds. Names are matched case-insensitively.
const (
	CmdOther       CmdKind = iota // any other command
	CmdSubscribe                  // SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE
	CmdUnsubscribe                // UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE
	CmdMulti                      // MULTI
	CmdExec                       // EXEC
	CmdDiscard                    // DISCARD
	CmdWatch                      // WATCH
	CmdUnwatch                    // UNWATCH
	CmdHello                      // HELLO
	CmdClient                     // CLIENT (the subcommand is Arg(0))
	CmdQuit                       // QUIT
	CmdReset                      // RESET
	CmdMonitor                    // MONITOR
	// CmdBlocking is a command that may block server-side: BLPOP, BRPOP,
	// BLMOVE, BRPOPLPUSH, BZPOPMIN, BZPOPMAX, BLMPOP, BZMPOP, WAIT,
	// WAITAOF, and XREAD / XREADGROUP when they carry a BLOCK option.
	CmdBlocking
)

var cmdKindNames = [...]string{
	CmdOther: "other", CmdSubscribe: "subscribe", CmdUnsubscribe: "unsubscribe",
	CmdMulti: "multi", CmdExec: "exec", CmdDiscard: "discard", CmdWatch: "watch",
	CmdUnwatch: "unwatch", CmdHello: "hello", CmdClient: "client", CmdQuit: "quit",
	CmdReset: "reset", CmdMonitor: "monitor", CmdBlocking: "blocking",
}

// String returns a lower-case name for k, such as "subscribe".
func (k CmdKind) String() string {
	if int(k) < len(cmdKindNames) {
		return cmdKindNames[k]
	}
	return "CmdKind(" + strconv.Itoa(int(k)) + ")"
}

// CmdArgMax is the number of bytes of the name and of each argument that a
// Cmd keeps; longer values are truncated.
const CmdArgMax = 32

// cmdArgs is the number of arguments (after the name) a Cmd keeps.
const cmdArgs = 4

// Cmd describes one command seen by a CmdScanner. It holds the name and
// the first four arguments, truncated to CmdArgMax bytes, in fixed arrays.
type Cmd struct {
	// Kind classifies the command.
	Kind CmdKind
	// Argc is the number of arguments after the name (all of them, not
	// only the ones kept).
	Argc int

	name    [CmdArgMax]byte
	nameLen uint8
	args    [cmdArgs][CmdArgMax]byte
	argLen  [cmdArgs]uint8
}

// Name returns the command name as sent (not case-folded), truncated to
// CmdArgMax bytes. It aliases c.
func (c *Cmd) Name() []byte { return c.name[:c.nameLen] }

// Arg returns the i-th argument after the name (from 0), truncated to
// CmdArgMax bytes, or nil if the command has no such argument or it is not
// kept (i >= 4). It aliases c.
func (c *Cmd) Arg(i int) []byte {
	if i < 0 || i >= cmdArgs || i >= c.Argc {
		return nil
	}
	return c.args[i][:c.argLen[i]]
}

// CmdScanner classifies the commands a client writes, as the bytes are
// written. Commands must be RESP arrays of bulk strings (go-redis never
// writes inline commands); anything else is reported once to OnMalformed,
// after which all input is ignored. An empty array ("*0\r\n") is ignored.
//
// The zero value (with the callbacks set as needed) is ready to use. A
// CmdScanner must not be used from several goroutines at once. It does not
// allocate.
type CmdScanner struct {
	// OnCommand is called once per complete command. c is only valid
	// during the call.
	OnCommand func(c *Cmd)
	// OnMalformed is called once, on the first input that is not a
	// well-formed command.
	OnMalformed func(err error)

	st     uint8
	dead   bool
	digits uint8
	num    int64 // number being read / payload bytes left
	left   int64 // arguments left in the current command
	ai     int   // index of the current argument (0 = name)
	cur    [CmdArgMax]byte
	curLen int   // bytes of the current argument kept in cur
	full   int64 // full length of the current argument
	xopt   uint8 // XREAD option walk: see xread* below
	cmd    Cmd
}

// CmdScanner states.
const (
	csArray     uint8 = iota // '*'
	csArrayNum               // digits of the argument count, or CR
	csArrayLF                // LF
	csBulk                   // '$'
	csBulkNum                // digits of the argument length, or CR
	csBulkLF                 // LF
	csPayload                // argument bytes; num left
	csPayloadCR              // CR
	csPayloadLF              // LF
)

// XREAD / XREADGROUP option walk.
const (
	xreadNone  uint8 = iota // not an XREAD command, or STREAMS reached
	xreadSkip               // the next argument is skipped (GROUP's names)
	xreadToken              // the next argument is an option token
	xreadValue              // the next argument is an option's value
)

// maxCmdArgs bounds the argument count of one command.
const maxCmdArgs = math.MaxInt32

// Scan feeds bytes as they are written, in any chunking. It calls OnCommand
// once per complete command.
func (s *CmdScanner) Scan(p []byte) {
	for i := 0; i < len(p) && !s.dead; {
		c := p[i]
		switch s.st {
		case csArray, csBulk:
			want := byte('*')
			if s.st == csBulk {
				want = '$'
			}
			if c != want {
				s.fail("expected %q, got %q", want, c)
				return
			}
			s.st++
			s.num, s.digits = 0, 0
			i++
		case csArrayNum, csBulkNum:
			switch {
			case c >= '0' && c <= '9' && s.digits < maxLenDigits:
				s.num = s.num*10 + int64(c-'0')
				s.digits++
			case c == '\r' && s.digits > 0:
				limit := int64(MaxBulkLen)
				if s.st == csArrayNum {
					limit = maxCmdArgs
				}
				if s.num > limit {
					s.fail("length %d exceeds limit %d", s.num, limit)
					return
				}
				s.st++
			default:
				s.fail("bad length byte %q", c)
				return
			}
			i++
		case csArrayLF, csBulkLF, csPayloadLF:
			if c != '\n' {
				s.fail("CR not followed by LF")
				return
			}
			i++
			switch s.st {
			case csArrayLF:
				if s.num == 0 {
					s.st = csArray // "*0": nothing to do
					break
				}
				s.left, s.ai = s.num, 0
				s.cmd = Cmd{Argc: int(s.num - 1)}
				s.st = csBulk
			case csBulkLF:
				s.full, s.curLen = s.num, 0
				s.st = csPayload
				if s.num == 0 {
					s.st = csPayloadCR
				}
			case csPayloadLF:
				s.argDone()
				s.left--
				s.ai++
				s.st = csBulk
				if s.left == 0 {
					s.st = csArray
					if s.OnCommand != nil {
						s.OnCommand(&s.cmd)
					}
				}
			}
		case csPayload:
			k := min(s.num, int64(len(p)-i))
			if room := CmdArgMax - s.curLen; room > 0 {
				s.curLen += copy(s.cur[s.curLen:], p[i:i+int(min(k, int64(room)))])
			}
			i += int(k)
			s.num -= k
			if s.num == 0 {
				s.st = csPayloadCR
			}
		case csPayloadCR:
			if c != '\r' {
				s.fail("argument not followed by CRLF")
				return
			}
			s.st = csPayloadLF
			i++
		}
	}
}

func (s *CmdScanner) fail(format string, args ...any) {
	s.dead = true
	if s.OnMalformed != nil {
		s.OnMalformed(malformed("command: "+format, args...))
	}
}

// argDone files the argument just read (in cur) into the Cmd.
func (s *CmdScanner) argDone() {
	arg := s.cur[:s.curLen]
	c := &s.cmd
	if s.ai == 0 {
		c.nameLen = uint8(copy(c.name[:], arg))
		c.Kind, s.xopt = classify(arg, s.full)
		return
	}
	if s.ai <= cmdArgs {
		c.argLen[s.ai-1] = uint8(copy(c.args[s.ai-1][:], arg))
	}
	switch s.xopt {
	case xreadSkip:
		if s.ai == 3 { // XREADGROUP GROUP <group> <consumer>: options follow
			s.xopt = xreadToken
		}
	case xreadValue:
		s.xopt = xreadToken
	case xreadToken:
		switch {
		case equalFold(arg, s.full, "BLOCK"):
			c.Kind = CmdBlocking
			s.xopt = xreadValue
		case equalFold(arg, s.full, "COUNT"), equalFold(arg, s.full, "CLAIM"):
			s.xopt = xreadValue
		case equalFold(arg, s.full, "STREAMS"):
			s.xopt = xreadNone
		}
	}
}

// equalFold reports whether the argument arg (full bytes long, possibly
// truncated in arg) equals the upper-case word w, ignoring ASCII case.
func equalFold(arg []byte, full int64, w string) bool {
	if full != int64(len(w)) || len(arg) != len(w) {
		return false
	}
	for i := range len(w) {
		if upper(arg[i]) != w[i] {
			return false
		}
	}
	return true
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// classify returns the kind of a command from its name (full bytes long),
// and how to walk its options if it is XREAD or XREADGROUP.
func classify(name []byte, full int64) (CmdKind, uint8) {
	if full > 16 {
		return CmdOther, xreadNone
	}
	var up [16]byte
	for i, c := range name {
		up[i] = upper(c)
	}
	switch string(up[:len(name)]) {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE":
		return CmdSubscribe, xreadNone
	case "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE":
		return CmdUnsubscribe, xreadNone
	case "MULTI":
		return CmdMulti, xreadNone
	case "EXEC":
		return CmdExec, xreadNone
	case "DISCARD":
		return CmdDiscard, xreadNone
	case "WATCH":
		return CmdWatch, xreadNone
	case "UNWATCH":
		return CmdUnwatch, xreadNone
	case "HELLO":
		return CmdHello, xreadNone
	case "CLIENT":
		return CmdClient, xreadNone
	case "QUIT":
		return CmdQuit, xreadNone
	case "RESET":
		return CmdReset, xreadNone
	case "MONITOR":
		return CmdMonitor, xreadNone
	case "BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BZPOPMIN", "BZPOPMAX",
		"BLMPOP", "BZMPOP", "WAIT", "WAITAOF":
		return CmdBlocking, xreadNone
	case "XREAD":
		return CmdOther, xreadToken
	case "XREADGROUP":
		return CmdOther, xreadSkip
	}
	return CmdOther, xreadNone
}
