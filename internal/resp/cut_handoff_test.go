package resp

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A value larger than one write or one read is framed once: the command
// counter and the framer take over the cut command or reply where their
// whole-frame loops stopped, and the bytes of its payload that later
// writes and reads bring are counted off, not parsed. These tests pin the
// state each handoff sets, at every kind of cut (inside the payload, at
// its CR, between CR and LF): it must be the state the byte-wise readers
// reach from the frame's start, or what follows is misframed. What they
// save is measured, not asserted (BenchmarkWrittenFeed/set1MB, the
// instruction table of docs/performance.md); what they report is checked against the
// references by TestWrittenSplitAnywhere and FuzzStripper.

func TestWrittenTakesOverACommandCutInItsPayload(t *testing.T) {
	value := strings.Repeat("v", 100_000)
	in := append(cmd("SET", "key", value), cmd("GET", "key")...)
	head := bytes.Index(in, []byte(value)) // the first byte of the payload
	for _, at := range []int{head + 1, head + 50_000, head + len(value), head + len(value) + 1} {
		t.Run(fmt.Sprint(at-head), func(t *testing.T) {
			var w Written
			require.Equal(t, 0, w.Feed(in[:at]))
			switch left := head + len(value) - at; {
			case left > 0:
				assert.Equal(t, wsData, w.st, "inside the payload")
				assert.Equal(t, int64(left), w.num, "payload bytes still to come")
			case left == 0:
				assert.Equal(t, wsDataR, w.st)
			default:
				assert.Equal(t, wsDataL, w.st)
			}
			assert.Equal(t, int64(1), w.left, "the value is the last argument")
			assert.Equal(t, 2, w.Feed(in[at:]))
			assert.False(t, w.Lost())
		})
	}
}

func TestStripperTakesOverAReplyCutInItsPayload(t *testing.T) {
	value := strings.Repeat("v", 100_000)
	header := "$" + fmt.Sprint(len(value)) + "\r\n"
	stream := header + value + "\r\n" + movingFrame + "+OK\r\n"
	want := strings.Replace(stream, movingFrame, "", 1)
	end := len(header) + len(value) // the payload's end: its CR
	for _, tc := range []struct {
		first int   // the first read's size: where the reply is cut
		st    uint8 // the state after it
	}{{16 << 10, stBlob}, {end, stBlobCR}, {end + 1, stLF}} {
		t.Run(fmt.Sprint(tc.first), func(t *testing.T) {
			s := &Stripper{H: &Funcs{StripFunc: stripMaint}}
			r := &chunkReader{data: []byte(stream), sizes: []int{tc.first, 16 << 10}}
			buf := make([]byte, 128<<10)
			var out bytes.Buffer
			n, err := s.Read(r, buf)
			require.NoError(t, err)
			out.Write(buf[:n])
			require.Equal(t, stblob(tc.st), stblob(s.st))
			if tc.st == stBlob {
				require.Equal(t, int64(end-tc.first), s.num, "payload bytes still to come")
			}
			for reads := 1; ; reads++ {
				before, inside := s.num, s.st == stBlob && s.num > 16<<10
				n, err = s.Read(r, buf)
				if inside {
					require.NoError(t, err)
					assert.Equal(t, before-int64(n), s.num, "a read inside the payload is counted off")
				}
				out.Write(buf[:n])
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				require.Less(t, reads, 100)
			}
			assert.Equal(t, want, out.String())
			assert.Equal(t, uint64(2), s.Replies())
		})
	}
}

// stblob names a parser state in a failure message.
type stblob uint8

func (s stblob) String() string {
	return [...]string{"stType", "stNum", "stLine", "stLF", "stBlob", "stBlobCR"}[s]
}
