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
// push frame, whether a read brings whole frames or cuts them anywhere.
func TestShortcutAsksStripOncePerPush(t *testing.T) {
	msg := ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"
	mget := "*3\r\n$1\r\na\r\n$-1\r\n$2\r\nbc\r\n"
	stream := "$3\r\nabc\r\n" + msg + movingFrame + mget + "*2\r\n$1\r\na\r\n:1\r\n" + msg + "+OK\r\n" + movingFrame + "*0\r\n"
	want := strings.ReplaceAll(stream, movingFrame, "")
	for _, size := range []int{len(stream), 64, 17, 5, 1} {
		var asked, stripped int
		s := &Stripper{H: &Funcs{StripFunc: func(name []byte) bool { asked++; return stripMaint(name) }, StrippedFunc: func([]byte) { stripped++ }}}
		var out bytes.Buffer
		r := &chunkReader{data: []byte(stream), sizes: []int{size}}
		buf := make([]byte, 4096)
		for {
			n, err := s.Read(r, buf)
			out.Write(buf[:n])
			if err != nil {
				break
			}
		}
		assert.Equal(t, want, out.String(), "reads of %d", size)
		assert.Equal(t, 4, asked, "Strip asked once per push, reads of %d", size)
		assert.Equal(t, 2, stripped, "reads of %d", size)
		assert.EqualValues(t, 5, s.Replies(), "reads of %d", size)
	}
}
