package maint

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// FuzzConnRead feeds arbitrary server bytes through the connection wrapper:
// whatever a server or a proxy sends, reading never panics, maintenance
// pushes are acted on or ignored, and Close stops whatever they started.
// (The byte-exactness of the stripping is fuzzed in internal/resp.)
func FuzzConnRead(f *testing.F) {
	f.Add(resp.AppendMoving(nil, 1, 15, "10.0.0.2:12000", false))
	f.Add(resp.AppendMoving(nil, 2, 15, "", true))
	f.Add([]byte(">4\r\n$6\r\nMOVING\r\n:2\r\n:15\r\n$-1\r\n"))
	f.Add(resp.AppendMigrating(nil, 3, 0, `["1"]`))
	f.Add(resp.AppendMigrated(nil, 4, `["1"]`))
	f.Add(resp.AppendFailingOver(nil, 5, 2, `["1"]`))
	f.Add(resp.AppendFailedOver(nil, 6, `["1"]`))
	f.Add(resp.AppendSMigrating(nil, 7, "123,456,789-1000"))
	f.Add(resp.AppendSMigrated(nil, 8, []resp.SlotMove{{Src: "10.0.0.1:7000", Dst: "10.0.0.2:7001", Slots: "0-100"}}))
	f.Add([]byte("+OK\r\n>2\r\n$9\r\nMIGRATING\r\n:9\r\n$3\r\nbar\r\n"))
	f.Add([]byte(">3\r\n$6\r\nMOVING\r\n:1\r\n:-5\r\n"))
	f.Add([]byte("*2\r\n$1\r\na\r\n>1\r\n+MOVING\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := New(WithLogf(func(string, ...any) {}), WithRelaxCap(time.Millisecond))
		raw := &fakeConn{r: bytes.NewReader(data), remote: "127.0.0.2:6379"}
		c := m.wrap(m.target("redis.test:6379"), raw, raw.remote)
		_, _ = io.Copy(io.Discard, c)
		_, _ = c.SyscallConn()
		_ = c.Close()
		_ = m.Close()
	})
}
