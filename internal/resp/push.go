package resp

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
)

// Kind identifies a maintenance notification by its push name.
type Kind uint8

// The maintenance notification kinds. The zero Kind is not a valid kind.
const (
	KindMoving      Kind = iota + 1 // MOVING: the endpoint moves; reconnect within the window
	KindMigrating                   // MIGRATING: a shard migration starts
	KindMigrated                    // MIGRATED: a shard migration finished
	KindFailingOver                 // FAILING_OVER: a failover starts
	KindFailedOver                  // FAILED_OVER: a failover finished
	KindSMigrating                  // SMIGRATING: cluster slots start migrating
	KindSMigrated                   // SMIGRATED: cluster slots moved
)

var kindNames = [...]string{
	KindMoving:      "MOVING",
	KindMigrating:   "MIGRATING",
	KindMigrated:    "MIGRATED",
	KindFailingOver: "FAILING_OVER",
	KindFailedOver:  "FAILED_OVER",
	KindSMigrating:  "SMIGRATING",
	KindSMigrated:   "SMIGRATED",
}

// String returns the push name of k as sent on the wire ("MOVING"), or
// "Kind(n)" for an invalid kind.
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// KindOf returns the kind of a push named name. Names are matched exactly
// (upper case, as sent on the wire). It does not allocate.
func KindOf(name []byte) (Kind, bool) {
	switch string(name) {
	case "MOVING":
		return KindMoving, true
	case "MIGRATING":
		return KindMigrating, true
	case "MIGRATED":
		return KindMigrated, true
	case "FAILING_OVER":
		return KindFailingOver, true
	case "FAILED_OVER":
		return KindFailedOver, true
	case "SMIGRATING":
		return KindSMigrating, true
	case "SMIGRATED":
		return KindSMigrated, true
	}
	return 0, false
}

// Notification is a decoded maintenance push notification.
type Notification struct {
	Kind Kind
	// Seq is the sequence id (per database, shared across kinds).
	Seq int64
	// Time is, for MOVING, the window in seconds; for MIGRATING and
	// FAILING_OVER the "starts in" seconds, which may be 0 or negative.
	// HasTime reports whether the frame carried it.
	Time    int64
	HasTime bool
	// Endpoint is the new "host:port" of a MOVING, unvalidated. It is ""
	// with Null set when the endpoint is null ("_" or "$-1") or absent.
	Endpoint string
	Null     bool
	// Shards lists the affected shards of MIGRATING, MIGRATED,
	// FAILING_OVER and FAILED_OVER as sent (one string); "" when absent.
	Shards string
	// Slots is the slot list of an SMIGRATING, such as "123,456-789".
	Slots string
	// Moves are the slot moves of an SMIGRATED.
	Moves []SlotMove
}

// ErrUnknownPush is wrapped by ParsePush's error for a well-formed push whose
// name is not one of the maintenance notifications.
var ErrUnknownPush = errors.New("resp: not a maintenance notification")

// ParsePush decodes one complete push frame (">...") holding a maintenance
// notification. The frame must contain exactly one value.
//
// It is lenient where servers and proxies differ: the name may be a bulk or
// a simple string; seq and time may be RESP integers or strings holding
// decimal integers; short forms are accepted (MIGRATING, MIGRATED,
// FAILING_OVER, FAILED_OVER, SMIGRATING and SMIGRATED need only name and
// seq); elements after the known ones are ignored. MOVING needs name, seq
// and time; an absent endpoint is reported as null.
//
// In a three-element MIGRATING or FAILING_OVER the third element is the time
// if it is a RESP integer and the shards if it is a string (go-redis's own
// test emulator sends [name, seq, shards]). SMIGRATING slots given as
// several strings are joined with commas. An SMIGRATED move with two
// elements is read as [dst, slots]. Shards given as an array are joined
// with commas.
//
// Anything else is an error wrapping ErrMalformed, or ErrUnknownPush for an
// unknown name. The work done is linear in len(frame).
func ParsePush(frame []byte) (Notification, error) {
	var n Notification
	end, err := skipValue(frame, 0)
	if err != nil {
		return n, err
	}
	if end != len(frame) {
		return n, malformed("%d bytes after the push frame", len(frame)-end)
	}
	if frame[0] != '>' {
		return n, malformed("not a push frame (type %q)", frame[0])
	}
	top, _, err := readElem(frame, 0)
	if err != nil {
		return n, err
	}
	elems := make([]elem, 0, 4)
	pos := top.body
	for i := int64(0); i < top.n; i++ {
		var e elem
		e, pos, err = readElem(frame, pos)
		if err != nil {
			return n, err
		}
		// Keep only what a notification can use; skip the rest.
		if i < 4 || elems[0].isString() && string(elems[0].data) == "SMIGRATING" {
			elems = append(elems, e)
		}
	}
	if len(elems) == 0 {
		return n, malformed("empty push")
	}
	if !elems[0].isString() {
		return n, malformed("push name of type %q", elems[0].t)
	}
	kind, ok := KindOf(elems[0].data)
	if !ok {
		return n, &unknownPushError{name: string(elems[0].data)}
	}
	n.Kind = kind
	if len(elems) < 2 {
		return n, malformed("%s without a sequence id", kind)
	}
	if n.Seq, err = elems[1].int(); err != nil {
		return n, pushErr(kind, "seq", err)
	}
	rest := elems[2:]
	switch kind {
	case KindMoving:
		if len(rest) == 0 {
			return n, malformed("MOVING without a time")
		}
		if n.Time, err = rest[0].int(); err != nil {
			return n, pushErr(kind, "time", err)
		}
		n.HasTime = true
		n.Null = true
		if len(rest) > 1 {
			switch {
			case rest[1].null:
			case rest[1].isString():
				n.Endpoint, n.Null = string(rest[1].data), false
			default:
				return n, malformed("MOVING endpoint of type %q", rest[1].t)
			}
		}
	case KindMigrating, KindFailingOver:
		if len(rest) == 1 && rest[0].t == ':' || len(rest) >= 2 {
			if n.Time, err = rest[0].int(); err != nil {
				return n, pushErr(kind, "time", err)
			}
			n.HasTime = true
			rest = rest[1:]
		}
		if len(rest) > 0 {
			if n.Shards, err = rest[0].text(frame); err != nil {
				return n, pushErr(kind, "shards", err)
			}
		}
	case KindMigrated, KindFailedOver:
		if len(rest) > 0 {
			if n.Shards, err = rest[0].text(frame); err != nil {
				return n, pushErr(kind, "shards", err)
			}
		}
	case KindSMigrating:
		var b strings.Builder
		for i, e := range rest {
			s, err := e.text(frame)
			if err != nil {
				return n, pushErr(kind, "slots", err)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(s)
		}
		n.Slots = b.String()
	case KindSMigrated:
		if len(rest) > 0 {
			if n.Moves, err = parseMoves(frame, rest[0]); err != nil {
				return n, pushErr(kind, "moves", err)
			}
		}
	}
	return n, nil
}

type unknownPushError struct{ name string }

func (e *unknownPushError) Error() string {
	return "resp: push " + strconv.Quote(e.name) + " is not a maintenance notification"
}

func (e *unknownPushError) Unwrap() error { return ErrUnknownPush }

func pushErr(k Kind, field string, err error) error {
	return malformed("%s %s: %v", k, field, err)
}

// parseMoves decodes the SMIGRATED array of [src, dst, slots] triplets.
func parseMoves(frame []byte, arr elem) ([]SlotMove, error) {
	if arr.t != '*' && arr.t != '~' {
		if arr.null {
			return nil, nil
		}
		return nil, errors.New("not an array")
	}
	moves := make([]SlotMove, 0, min(arr.n, 64))
	pos := arr.body
	for i := int64(0); i < arr.n; i++ {
		var entry elem
		var err error
		entry, pos, err = readElem(frame, pos)
		if err != nil {
			return nil, err
		}
		if entry.t != '*' || entry.n < 2 || entry.n > 3 {
			return nil, errors.New("move is not an array of 2 or 3 strings")
		}
		var f [3]string
		p := entry.body
		for j := int64(0); j < entry.n; j++ {
			var e elem
			e, p, err = readElem(frame, p)
			if err != nil {
				return nil, err
			}
			if !e.isString() {
				return nil, errors.New("move element is not a string")
			}
			f[j] = string(e.data)
		}
		if entry.n == 2 {
			f = [3]string{"", f[0], f[1]}
		}
		moves = append(moves, SlotMove{Src: f[0], Dst: f[1], Slots: f[2]})
	}
	return moves, nil
}

// elem is one value inside a complete, already validated frame.
type elem struct {
	t    byte
	null bool   // "_", "$-1" or "*-1"
	data []byte // line body or blob payload
	n    int64  // aggregate: number of elements (2 per map entry)
	body int    // aggregate: offset of its first element
}

func (e elem) isString() bool { return (e.t == '$' || e.t == '+') && !e.null }

// int returns the integer held by e: a RESP integer, or a bulk or simple
// string holding a decimal integer.
func (e elem) int() (int64, error) {
	if e.t != ':' && !e.isString() {
		return 0, errors.New("not an integer (type " + strconv.QuoteRune(rune(e.t)) + ")")
	}
	return parseInt(e.data)
}

// text returns e as a string: a bulk or simple string as is, a null as "",
// an array of strings or integers joined with commas.
func (e elem) text(frame []byte) (string, error) {
	switch {
	case e.null:
		return "", nil
	case e.isString():
		return string(e.data), nil
	case e.t == '*':
		var b strings.Builder
		pos := e.body
		for i := int64(0); i < e.n; i++ {
			c, next, err := readElem(frame, pos)
			if err != nil {
				return "", err
			}
			if !c.isString() && c.t != ':' {
				return "", errors.New("array element is not a string")
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(c.data)
			pos = next
		}
		return b.String(), nil
	}
	return "", errors.New("not a string (type " + strconv.QuoteRune(rune(e.t)) + ")")
}

// parseInt parses an optionally signed decimal int64 without allocating.
func parseInt(b []byte) (int64, error) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, errors.New("bad integer " + strconv.Quote(string(b)))
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errors.New("bad integer " + strconv.Quote(string(b)))
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, errors.New("integer out of range")
		}
		return -int64(u), nil
	}
	if u > 1<<63-1 {
		return 0, errors.New("integer out of range")
	}
	return int64(u), nil
}

// readElem decodes the value at pos in an already validated frame and
// returns it with the offset just past it. Attributes before the value are
// skipped, as RESP3 says they are not values of their own.
func readElem(frame []byte, pos int) (elem, int, error) {
	for {
		end, err := skipValue(frame, pos)
		if err != nil {
			return elem{}, 0, err
		}
		t := frame[pos]
		i := pos + 1
		for frame[i] != '\r' {
			i++
		}
		line := frame[pos+1 : i]
		body := i + 2
		e := elem{t: t}
		switch typeClass[t] {
		case clLine:
			e.data = line
			e.null = t == '_'
		case clBlob:
			n, _ := parseLen(t, line)
			if n < 0 {
				e.null = true
			} else {
				e.data = frame[body : body+int(n)]
			}
		case clArray, clMap:
			n, _ := parseLen(t, line)
			if t == '|' {
				pos = end
				continue
			}
			if n < 0 {
				e.null = true
				n = 0
			}
			if typeClass[t] == clMap {
				n *= 2
			}
			e.n, e.body = n, body
		}
		return e, end, nil
	}
}

// skipValue returns the offset just past the value that starts at pos in b,
// with the framing rules of ReadFrame (an attribute at pos is one value).
// It is an error if b ends before the value does.
func skipValue(b []byte, pos int) (int, error) {
	var nst nesting
	for {
		if pos >= len(b) {
			return 0, malformed("truncated frame")
		}
		t := b[pos]
		cl := typeClass[t]
		if cl == clInvalid {
			return 0, errBadType(t)
		}
		line, rest, err := cutLine(b[pos:])
		if err != nil {
			return 0, err
		}
		if len(line)-1 > MaxBulkLen {
			return 0, malformed("line longer than %d bytes", MaxBulkLen)
		}
		pos = len(b) - len(rest)
		isAttr := false
		switch cl {
		case clBlob:
			n, err := parseLen(t, line[1:])
			if err != nil {
				return 0, err
			}
			if n >= 0 {
				if int64(len(rest)) < n+2 {
					return 0, malformed("truncated frame")
				}
				if rest[n] != '\r' || rest[n+1] != '\n' {
					return 0, malformed("blob of %d bytes not followed by CRLF", n)
				}
				pos += int(n) + 2
			}
		case clArray, clMap:
			n, err := parseLen(t, line[1:])
			if err != nil {
				return 0, err
			}
			if cl == clMap {
				n *= 2
			}
			if n > 0 {
				if err := nst.open(t, n); err != nil {
					return 0, err
				}
				continue
			}
			isAttr = t == '|'
		}
		if nst.complete(isAttr) {
			return pos, nil
		}
	}
}

// FrameLen returns the length of the complete top-level frame at the start
// of b (an attribute counts as a frame of its own), or 0 when b holds only
// part of one or cannot be framed.
func FrameLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	end, err := skipValue(b, 0)
	if err != nil {
		return 0
	}
	return end
}

// PushName returns the name of a complete push frame: its first element,
// when that is a bulk or simple string. It reports false for anything else.
func PushName(frame []byte) ([]byte, bool) {
	if len(frame) == 0 || frame[0] != '>' {
		return nil, false
	}
	i := bytes.IndexByte(frame, '\n')
	if i < 0 || i+1 >= len(frame) {
		return nil, false
	}
	e, _, err := readElem(frame, i+1)
	if err != nil || !e.isString() {
		return nil, false
	}
	return e.data, true
}
