// Package resp holds the byte-level RESP3 code shared by the client-side
// connection wrapper and the in-process server emulator (mainttest).
//
// It has three parts:
//
//   - ReadFrame and ReadCommand frame whole RESP2/RESP3 values from a
//     bufio.Reader (emulator side; allocation is acceptable there).
//   - Append* encoders produce the exact bytes of the maintenance push
//     notifications described in docs/protocol.md, section 2.
//   - ParsePush decodes one complete maintenance push frame into a
//     Notification.
//   - Stripper is the client hot path: it removes selected push frames from
//     the byte stream a server sends, and counts replies, incrementally on
//     arbitrarily chunked input, without allocating in steady state.
//
// Nothing in this package starts goroutines or takes locks; a Stripper
// belongs to one connection and must not be used concurrently.
//
// All errors returned by this package are prefixed "resp:". Framing errors
// wrap ErrMalformed.
package resp
