package maint

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// fakeConn is a net.Conn whose server side is a byte script.
type fakeConn struct {
	r      io.Reader
	mu     sync.Mutex
	w      bytes.Buffer
	remote string
	closed bool
}

func (f *fakeConn) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *fakeConn) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Write(p)
}
func (f *fakeConn) Close() error                     { f.closed = true; return nil }
func (f *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (f *fakeConn) RemoteAddr() net.Addr             { a, _ := net.ResolveTCPAddr("tcp", f.remote); return a }
func (f *fakeConn) SetDeadline(time.Time) error      { return nil }
func (f *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fakeConn) SetWriteDeadline(time.Time) error { return nil }

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(strings.ReplaceAll(format, "%", "")))
}

func (l *logSink) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// wrapScript wraps a fake connection to 127.0.0.2:6379 whose server sends script.
func wrapScript(t *testing.T, m *Maint, script []byte) (*conn, *fakeConn) {
	t.Helper()
	raw := &fakeConn{r: bytes.NewReader(script), remote: "127.0.0.2:6379"}
	tg := m.target("redis.test:6379")
	c := m.wrap(tg, raw, raw.remote)
	return c, raw
}

func readAll(t *testing.T, c *conn) []byte {
	t.Helper()
	out, err := io.ReadAll(c)
	require.NoError(t, err)
	return out
}

type osTimeout struct{}

func (osTimeout) Error() string   { return "i/o timeout" }
func (osTimeout) Timeout() bool   { return true }
func (osTimeout) Temporary() bool { return true }

func notif(k resp.Kind, seq int64, shards string) resp.Notification {
	return resp.Notification{Kind: k, Seq: seq, Shards: shards}
}

// oweReply writes a PING on c: c owes a reply, so the read deadline set next
// is a reply's (relaxed), not a probe's.
func oweReply(t *testing.T, c *conn) {
	t.Helper()
	_, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
}

// fakeDialer returns fake connections landing on the given remotes in turn
// (the last one repeats).
type fakeDialer struct {
	mu      sync.Mutex
	remotes []string
	addrs   []string
}

func (d *fakeDialer) dial(_ context.Context, _, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.remotes[0]
	if len(d.remotes) > 1 {
		d.remotes = d.remotes[1:]
	}
	d.addrs = append(d.addrs, addr)
	return &fakeConn{r: bytes.NewReader(nil), remote: r}, nil
}

func waitIdle(t *testing.T, m *Maint) {
	t.Helper()
	require.Eventually(t, func() bool { return m.ho.runs.Load() == nil }, 30*time.Second, 5*time.Millisecond)
}

// dlConn is a fakeConn that records the deadlines put on the socket.
type dlConn struct {
	fakeConn
	dmu         sync.Mutex
	reads       []time.Time
	writes      []time.Time
	readSetters int
}

func (d *dlConn) SetDeadline(t time.Time) error {
	d.dmu.Lock()
	defer d.dmu.Unlock()
	d.reads = append(d.reads, t)
	d.writes = append(d.writes, t)
	d.readSetters++
	return nil
}

func (d *dlConn) SetReadDeadline(t time.Time) error {
	d.dmu.Lock()
	defer d.dmu.Unlock()
	d.reads = append(d.reads, t)
	d.readSetters++
	return nil
}

func (d *dlConn) SetWriteDeadline(t time.Time) error {
	d.dmu.Lock()
	defer d.dmu.Unlock()
	d.writes = append(d.writes, t)
	return nil
}

func (d *dlConn) lastRead() (time.Time, int) {
	d.dmu.Lock()
	defer d.dmu.Unlock()
	if len(d.reads) == 0 {
		return time.Time{}, 0
	}
	return d.reads[len(d.reads)-1], d.readSetters
}

func wrapDL(t *testing.T, m *Maint, remote string, script []byte) (*conn, *dlConn) {
	t.Helper()
	raw := &dlConn{fakeConn: fakeConn{r: bytes.NewReader(script), remote: remote}}
	return m.wrap(m.target("redis.test:6379"), raw, remote), raw
}

// sawSlots hands cs a CLUSTER SLOTS reply read from the cluster through m's
// node client.
func sawSlots(cs *clusterState, m *Maint, slots []redis.ClusterSlot) {
	own := slotsLoad{redis.NewClusterSlotsCmd(context.Background(), "cluster", "slots")}
	own.SetVal(slots)
	cs.sawSlotMap(m, own, own)
}
