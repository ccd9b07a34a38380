package resp

import (
	"fmt"
	"strconv"
)

// SlotMove is one entry of an SMIGRATED notification: slots moved from the
// node Src to the node Dst. Slots is a comma-separated list of slots and
// ranges such as "0-100,200".
type SlotMove struct {
	Src, Dst, Slots string
}

// AppendMoving appends a MOVING push: seq, the window in seconds and the
// new endpoint ("host:port"). With null set the endpoint is encoded as the
// RESP3 null "_" and endpoint is ignored.
//
//	>4\r\n$6\r\nMOVING\r\n:1\r\n:15\r\n$14\r\n10.0.0.2:12000\r\n
func AppendMoving(dst []byte, seq, timeS int64, endpoint string, null bool) []byte {
	dst = append(dst, ">4\r\n$6\r\nMOVING\r\n"...)
	dst = AppendInt(dst, seq)
	dst = AppendInt(dst, timeS)
	if null {
		return AppendNull(dst)
	}
	return AppendBulk(dst, endpoint)
}

// AppendMigrating appends the full four-element MIGRATING push.
func AppendMigrating(dst []byte, seq, startsInS int64, shards string) []byte {
	return appendStarting(dst, ">4\r\n$9\r\nMIGRATING\r\n", seq, startsInS, shards)
}

// AppendMigrated appends the three-element MIGRATED push.
func AppendMigrated(dst []byte, seq int64, shards string) []byte {
	return appendSeqText(dst, ">3\r\n$8\r\nMIGRATED\r\n", seq, shards)
}

// AppendFailingOver appends the full four-element FAILING_OVER push.
func AppendFailingOver(dst []byte, seq, startsInS int64, shards string) []byte {
	return appendStarting(dst, ">4\r\n$12\r\nFAILING_OVER\r\n", seq, startsInS, shards)
}

// AppendFailedOver appends the three-element FAILED_OVER push.
func AppendFailedOver(dst []byte, seq int64, shards string) []byte {
	return appendSeqText(dst, ">3\r\n$11\r\nFAILED_OVER\r\n", seq, shards)
}

// AppendSMigrating appends an SMIGRATING push carrying one slots string
// such as "123,456,789-1000".
func AppendSMigrating(dst []byte, seq int64, slots string) []byte {
	return appendSeqText(dst, ">3\r\n$10\r\nSMIGRATING\r\n", seq, slots)
}

// appendStarting appends a push header (the push length and the name) and
// the seq, starts-in and shards elements of a MIGRATING or FAILING_OVER.
func appendStarting(dst []byte, header string, seq, startsInS int64, shards string) []byte {
	dst = append(dst, header...)
	dst = AppendInt(dst, seq)
	dst = AppendInt(dst, startsInS)
	return AppendBulk(dst, shards)
}

// appendSeqText appends a push header and the seq and text elements of a
// completion or an SMIGRATING.
func appendSeqText(dst []byte, header string, seq int64, text string) []byte {
	dst = append(dst, header...)
	dst = AppendInt(dst, seq)
	return AppendBulk(dst, text)
}

// AppendSMigrated appends an SMIGRATED push: seq and an array of
// [src, dst, slots] triplets, one per move.
func AppendSMigrated(dst []byte, seq int64, moves []SlotMove) []byte {
	dst = append(dst, ">3\r\n$9\r\nSMIGRATED\r\n"...)
	dst = AppendInt(dst, seq)
	dst = AppendArrayHeader(dst, len(moves))
	for _, m := range moves {
		dst = append(dst, "*3\r\n"...)
		dst = AppendBulk(dst, m.Src)
		dst = AppendBulk(dst, m.Dst)
		dst = AppendBulk(dst, m.Slots)
	}
	return dst
}

// AppendPush appends a push frame (">") with the given elements; see
// AppendValue for how each element is encoded. It panics on an element of
// an unsupported type, like a programming error in a format string would.
func AppendPush(dst []byte, elems ...any) []byte {
	dst = AppendPushHeader(dst, len(elems))
	for _, e := range elems {
		dst = AppendValue(dst, e)
	}
	return dst
}

// AppendValue appends v as one RESP3 value:
// string and []byte as a bulk string, signed and unsigned integers as an
// integer, bool as a boolean, float64 as a double, nil as the null "_",
// []string and []any as an array (recursively), []SlotMove as an array of
// [src, dst, slots] triplets, and error as a simple error (its text must
// start with an error code such as "ERR"). It panics on any other type.
func AppendValue(dst []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return AppendNull(dst)
	case string:
		return AppendBulk(dst, v)
	case []byte:
		return AppendBulk(dst, v)
	case int:
		return AppendInt(dst, int64(v))
	case int64:
		return AppendInt(dst, v)
	case int32:
		return AppendInt(dst, int64(v))
	case int16:
		return AppendInt(dst, int64(v))
	case int8:
		return AppendInt(dst, int64(v))
	case uint:
		return appendUint(dst, uint64(v))
	case uint64:
		return appendUint(dst, v)
	case uint32:
		return AppendInt(dst, int64(v))
	case uint16:
		return AppendInt(dst, int64(v))
	case uint8:
		return AppendInt(dst, int64(v))
	case bool:
		if v {
			return append(dst, "#t\r\n"...)
		}
		return append(dst, "#f\r\n"...)
	case float64:
		dst = append(dst, ',')
		dst = strconv.AppendFloat(dst, v, 'g', -1, 64)
		return append(dst, '\r', '\n')
	case error:
		return AppendError(dst, v.Error())
	case []string:
		dst = AppendArrayHeader(dst, len(v))
		for _, s := range v {
			dst = AppendBulk(dst, s)
		}
		return dst
	case []any:
		dst = AppendArrayHeader(dst, len(v))
		for _, e := range v {
			dst = AppendValue(dst, e)
		}
		return dst
	case []SlotMove:
		dst = AppendArrayHeader(dst, len(v))
		for _, m := range v {
			dst = append(dst, "*3\r\n"...)
			dst = AppendBulk(dst, m.Src)
			dst = AppendBulk(dst, m.Dst)
			dst = AppendBulk(dst, m.Slots)
		}
		return dst
	}
	panic(fmt.Sprintf("resp: AppendValue: unsupported type %T", v))
}

// appendUint encodes a uint64 as a RESP integer, or as a big number when it
// does not fit in an int64.
func appendUint(dst []byte, v uint64) []byte {
	if v <= 1<<63-1 {
		return AppendInt(dst, int64(v))
	}
	dst = append(dst, '(')
	dst = strconv.AppendUint(dst, v, 10)
	return append(dst, '\r', '\n')
}

// AppendBulk appends s as a bulk string: $<len>\r\n<s>\r\n.
func AppendBulk[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

// AppendSimple appends s as a simple string: +<s>\r\n. A simple string
// cannot hold CR or LF; any such byte in s is written as a space so the
// output always stays well framed.
func AppendSimple[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, '+')
	return appendLineBody(dst, s)
}

// AppendError appends msg as a simple error: -<msg>\r\n. By convention msg
// starts with an error code ("ERR unknown command"). CR and LF are written
// as spaces, as in AppendSimple.
func AppendError[S ~string | ~[]byte](dst []byte, msg S) []byte {
	dst = append(dst, '-')
	return appendLineBody(dst, msg)
}

func appendLineBody[S ~string | ~[]byte](dst []byte, s S) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, '\r', '\n')
}

// AppendInt appends n as a RESP integer: :<n>\r\n.
func AppendInt(dst []byte, n int64) []byte {
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '\r', '\n')
}

// AppendNull appends the RESP3 null: _\r\n.
func AppendNull(dst []byte) []byte {
	return append(dst, '_', '\r', '\n')
}

// AppendArrayHeader appends the header of an array of n elements:
// *<n>\r\n. The caller appends the n elements.
func AppendArrayHeader(dst []byte, n int) []byte {
	return appendHeader(dst, '*', n)
}

// AppendPushHeader appends the header of a push of n elements: ><n>\r\n.
// The caller appends the n elements.
func AppendPushHeader(dst []byte, n int) []byte {
	return appendHeader(dst, '>', n)
}

// AppendMapHeader appends the header of a map of n entries: %<n>\r\n. The
// caller appends 2*n elements (key, value, key, value, ...).
func AppendMapHeader(dst []byte, n int) []byte {
	return appendHeader(dst, '%', n)
}

func appendHeader(dst []byte, t byte, n int) []byte {
	dst = append(dst, t)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}
