package resp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The shortcut for whole replies and whole pushes at a frame boundary
// (wholeReplies) changes nothing the Stripper reports: the output, the
// replies counted, the frames stripped, and Strip asked exactly once per
// push frame but a pub/sub message (never asked), whether a read brings
// whole frames or cuts them anywhere.
func TestShortcutAsksStripOncePerPush(t *testing.T) {
	msg := ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"
	mget := "*3\r\n$1\r\na\r\n$-1\r\n$2\r\nbc\r\n"
	stream := "$3\r\nabc\r\n" + msg + movingFrame + mget + "*2\r\n$1\r\na\r\n:1\r\n" + msg + "+OK\r\n" + movingFrame + "*0\r\n"
	want := strings.ReplaceAll(stream, movingFrame, "")
	for _, size := range []int{len(stream), 64, 17, 5, 1} {
		var asked, stripped int
		s := &Stripper{H: &Funcs{StripFunc: func(name []byte) bool { asked++; return stripMaint(name) }, StrippedFunc: func([]byte) { stripped++ }}}
		assert.Equal(t, want, readThrough(s, stream, size), "reads of %d", size)
		assert.Equal(t, 2, asked, "Strip asked once per MOVING, never about a message, reads of %d", size)
		assert.Equal(t, 2, stripped, "reads of %d", size)
		assert.EqualValues(t, 5, s.Replies(), "reads of %d", size)
	}
}

// A pub/sub message ("message", "smessage", "pmessage") is passed on
// without asking Strip, in the shortcut and in the general parser alike,
// whatever the chunking: a Strip that would remove every push removes the
// other pushes and not one message, and is asked only about the others.
func TestMessagesPassWithoutAskingStrip(t *testing.T) {
	msg := ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"
	smsg := ">3\r\n$8\r\nsmessage\r\n$2\r\nch\r\n$-1\r\n"
	pmsg := ">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$100\r\n" + strings.Repeat("x", 100) + "\r\n"
	odd := ">3\r\n$7\r\nmessage\r\n:1\r\n$1\r\nx\r\n" // a message of another shape: the general rules
	other := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
	stream := msg + "$1\r\na\r\n" + smsg + other + pmsg + odd + msg + other + "+OK\r\n"
	want := strings.ReplaceAll(stream, other, "")
	for _, size := range []int{len(stream), 64, 17, 5, 1} {
		var asked []string
		s := &Stripper{H: &Funcs{StripFunc: func(name []byte) bool { asked = append(asked, string(name)); return true }}}
		assert.Equal(t, want, readThrough(s, stream, size), "reads of %d", size)
		assert.Equal(t, []string{"invalidate", "invalidate"}, asked, "reads of %d", size)
		assert.EqualValues(t, 2, s.Replies(), "reads of %d", size)
	}
}

// readThrough reads stream through s in reads of size bytes (a 4 KiB
// buffer) until its end, and returns what s passed on.
func readThrough(s *Stripper, stream string, size int) string {
	var out bytes.Buffer
	r := &chunkReader{data: []byte(stream), sizes: []int{size}}
	buf := make([]byte, 4096)
	for {
		n, err := s.Read(r, buf)
		out.Write(buf[:n])
		if err != nil {
			return out.String()
		}
	}
}
