package resp

import "encoding/binary"

// The scanners of commands (Written) and replies (Stripper) share these
// steps for the common shape of both, bulk strings of short length: they
// read a header's bytes in one load and step over the payload by its
// length, never reading it.

// crlf is "\r\n" read as a little-endian uint16.
const crlf = 0x0a0d

// shortBulk reads the header of a bulk string whose length has one or two
// digits ("$5\r\n", "$12\r\n") from v, the eight bytes that start it read
// little-endian (see word), and returns the header's length and the
// payload's. It returns hdr 0 if v does not start with such a header: the
// caller then reads it by the general rules.
func shortBulk(v uint64) (hdr, size int) {
	d1 := byte(v>>8) - '0'
	if v&0xffff00ff == 0x0a0d0024 && d1 <= 9 {
		return 4, int(d1) // "$d\r\n"
	}
	d2 := byte(v>>16) - '0'
	if v&0xffff0000ff == 0x0a0d000024 && d1 <= 9 && d2 <= 9 {
		return 5, int(d1)*10 + int(d2) // "$dd\r\n"
	}
	return 0, 0
}

// word returns the eight bytes of b at i read little-endian, or 0 (which
// starts no header) if b holds fewer than eight bytes from i: the shortest
// bulk strings at the very end of b are read by the general rules.
func word(b []byte, i int) uint64 {
	if uint(i)+8 > uint(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[i : i+8 : i+8])
}

// crlfAt reports whether b holds "\r\n" at e.
func crlfAt(b []byte, e int) bool {
	return uint(e)+2 <= uint(len(b)) && binary.LittleEndian.Uint16(b[e:e+2:e+2]) == crlf
}
