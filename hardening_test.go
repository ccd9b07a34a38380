package maint

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/handoff"
	"github.com/maintkit/maint/internal/resp"
)

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

func notif(k resp.Kind, seq int64, shards string) resp.Notification {
	return resp.Notification{Kind: k, Seq: seq, Shards: shards}
}

// Item 3: relaxation per operation. MIGRATING 10, FAILING_OVER 11,
// MIGRATED 12: the node stays relaxed until FAILED_OVER 13 plus the tail.
func TestRelaxationPerOperation(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTail(50*time.Millisecond))
	defer m.Close()
	c, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	n := c.n
	m.relax(n, notif(resp.KindMigrating, 10, `["1"]`))
	m.relax(n, notif(resp.KindFailingOver, 11, `["1"]`))
	m.relaxEnd(n, notif(resp.KindMigrated, 12, `["1"]`))
	time.Sleep(120 * time.Millisecond) // past the tail of the MIGRATED
	assert.True(t, n.relaxing(), "the failover is still open")

	m.relaxEnd(n, notif(resp.KindMigrated, 9, `["1"]`)) // a replay: older than anything open
	m.relaxEnd(n, notif(resp.KindMigrated, 14, `["1"]`))
	assert.True(t, n.relaxing(), "a MIGRATED with no migration open ends nothing")

	m.relaxEnd(n, notif(resp.KindFailedOver, 13, `["1"]`))
	assert.True(t, n.relaxing(), "relaxed for the tail")
	require.Eventually(t, func() bool { return !n.relaxing() }, 5*time.Second, 5*time.Millisecond,
		"relaxation ends after the tail of the last completion")

	m.relax(n, notif(resp.KindMigrating, 10, `["1"]`))
	assert.False(t, n.relaxing(), "a late copy of a migration that completed starts nothing")
}

// Two migrations of different shards: each completion ends its own.
func TestRelaxationCompletionEndsItsOwnShards(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTail(time.Millisecond))
	defer m.Close()
	c, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	n := c.n
	m.relax(n, notif(resp.KindMigrating, 1, `["1"]`))
	m.relax(n, notif(resp.KindMigrating, 2, `["2"]`))
	m.relaxEnd(n, notif(resp.KindMigrated, 3, `["2"]`))
	n.mu.Lock()
	require.Len(t, n.ops, 1)
	assert.EqualValues(t, 1, n.ops[0].seq, "MIGRATED of shard 2 ended the migration of shard 2")
	n.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	assert.True(t, n.relaxing())
}

// Item 6: the health check's peek leaves the next read's deadline exactly
// as go-redis set it.
func TestPeekLeavesNoTrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		dl   time.Time
	}{
		{"deadline set", time.Now().Add(3 * time.Second)},
		{"ReadTimeout -2: none ever set", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(WithLogf(t.Logf))
			defer m.Close()
			c, raw := wrapDL(t, m, "127.0.0.2:6379", []byte("+OK\r\n"))
			if !tc.dl.IsZero() {
				require.NoError(t, c.SetReadDeadline(tc.dl))
			}
			_, _ = c.SyscallConn() // the pool's health check
			var b [8]byte
			_, err := c.Read(b[:]) // go-redis's peek of what the check found
			require.NoError(t, err)
			got, _ := raw.lastRead()
			assert.True(t, got.Equal(tc.dl), "the socket's read deadline after the peek: %v, want %v", got, tc.dl)
		})
	}
}

// Item 16: a deadline that has already passed is never re-applied to a
// socket, and a MOVING never shortens a relaxed wait.
func TestRefloorNeverRearmsNorShortens(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
	defer m.Close()
	c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Millisecond)))
	time.Sleep(5 * time.Millisecond)
	_, before := raw.lastRead()
	m.relax(c.n, notif(resp.KindMigrating, 1, ""))
	_, after := raw.lastRead()
	assert.Equal(t, before, after, "a passed deadline is not applied again")

	// A command waits on a relaxed deadline; a MOVING then retires the
	// connection: the wait may grow, never shrink.
	oweReply(t, c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
	relaxed, _ := raw.lastRead()
	assert.Greater(t, time.Until(relaxed), time.Second, "relaxed to the floor")
	time.Sleep(20 * time.Millisecond)
	require.True(t, m.retireConn(c, true))
	got, _ := raw.lastRead()
	assert.False(t, got.Before(relaxed), "a retire never shortens the wait: %v < %v", got, relaxed)
}

// Item 12: deadlines put on the socket carry a monotonic reading, even when
// the one go-redis asked for had only a wall-clock one.
func TestDeadlinesAreMonotonic(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
	defer m.Close()
	c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
	m.relax(c.n, notif(resp.KindMigrating, 1, ""))
	oweReply(t, c)
	wall := time.Now().Add(time.Second).Round(0) // no monotonic reading
	require.NoError(t, c.SetReadDeadline(wall))
	got, _ := raw.lastRead()
	assert.Contains(t, got.String(), "m=+", "the socket's deadline is on the monotonic clock")
	assert.InDelta(t, 2*time.Second, time.Until(got), float64(500*time.Millisecond))
	assert.True(t, c.n.relaxUntil.Load() > monoNow(), "relaxation is kept on the monotonic clock")
}

// oweReply writes a PING on c: c owes a reply, so the read deadline set next
// is a reply's (relaxed), not a probe's.
func oweReply(t *testing.T, c *conn) {
	t.Helper()
	_, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
}

// Item 18: a connection opened to a node during its MIGRATING gets the same
// floor as the node's older connections.
func TestNewConnectionOfARelaxedNodeIsRelaxed(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
	defer m.Close()
	old, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	m.relax(old.n, notif(resp.KindMigrating, 1, ""))
	c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
	require.Same(t, old.n, c.n)
	oweReply(t, c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	got, _ := raw.lastRead()
	assert.Greater(t, time.Until(got), time.Second)
}

// Item 7: a negative MOVING window is malformed: counted, logged, ignored.
func TestNegativeMovingWindowIsMalformed(t *testing.T) {
	logs := &logSink{}
	m := New(WithLogf(logs.logf))
	defer m.Close()
	c, _ := wrapScript(t, m, append(resp.AppendMoving(nil, 1, -5, "", true), "+OK\r\n"...))
	assert.Equal(t, "+OK\r\n", string(readAll(t, c)))
	assert.EqualValues(t, 0, m.Stats().Handoffs)
	assert.EqualValues(t, 1, m.Stats().Malformed)
	assert.NotZero(t, logs.count())
	assert.Nil(t, c.n.run.Load())
}

// Item 15: a late copy of an older MOVING changes nothing, whichever node
// delivers it and whether or not a handoff is running there.
func TestLateCopyFromAnotherNodeChangesNothing(t *testing.T) {
	m := New(WithLogf(t.Logf), WithHoldBudget(-1))
	defer m.Close()
	a, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	b, _ := wrapDL(t, m, "127.0.0.3:6379", nil)
	mv := resp.Notification{Kind: resp.KindMoving, Seq: 5, Time: 30, HasTime: true, Null: true}
	a.onNotification(resp.AppendMoving(nil, 5, 30, "", true))
	require.NotNil(t, a.n.run.Load())
	b.onNotification(resp.AppendMoving(nil, mv.Seq, mv.Time, "", true))
	assert.Nil(t, b.n.run.Load(), "node B starts no handoff for A's MOVING")
	assert.Equal(t, stateActive, b.state.Load())
	assert.EqualValues(t, 1, m.Stats().Handoffs)
	assert.EqualValues(t, 1, m.Stats().Replayed)

	// B has a handoff of its own, newer: a copy of 5 read there changes nothing.
	b.onNotification(resp.AppendMoving(nil, 7, 30, "", true))
	rb := b.n.run.Load()
	require.NotNil(t, rb)
	b2, _ := wrapDL(t, m, "127.0.0.3:6379", nil)
	b2.onNotification(resp.AppendMoving(nil, 5, 30, "", true))
	assert.Same(t, rb, b.n.run.Load())
	assert.EqualValues(t, 2, m.Stats().Handoffs)
}

// Item 17: a connection that reached a node after its handoff ended, and
// reads the MOVING replayed at its opt-in, is retired at once.
func TestConnectionJoiningAMovedNodeIsRetired(t *testing.T) {
	m := New(WithLogf(t.Logf), WithHoldBudget(-1))
	defer m.Close()
	a, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	a.onNotification(resp.AppendMoving(nil, 5, 0, "", true))
	require.Eventually(t, func() bool { return a.n.run.Load() == nil }, 5*time.Second, time.Millisecond, "the zero-second handoff ends")
	late, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	late.onNotification(resp.AppendMoving(nil, 5, 0, "", true)) // the replay at its opt-in
	assert.Equal(t, stateRetired, late.state.Load())
	_, err := late.SyscallConn()
	assert.ErrorIs(t, err, ErrRetired, "the pool will not hand it out")
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

// Item 4: a new connection is judged against every node being retired. In
// an A→B named move followed by a null move of B, a dial landing on A is
// doomed, not a replacement for B.
func TestDialJudgedAgainstEveryRetiringNode(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	const A, B, C = "127.0.0.2:6379", "127.0.0.3:6379", "127.0.0.4:6379"
	d := &fakeDialer{remotes: []string{A}}
	dial := m.dialVia(d.dial)
	ctx := context.Background()
	ca, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	ca.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, B, false))
	d.mu.Lock()
	d.remotes = []string{B}
	d.mu.Unlock()
	cb, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	require.Equal(t, B, cb.(*conn).remote)
	cb.(*conn).onNotification(resp.AppendMoving(nil, 2, 30, "", true))
	rb := cb.(*conn).n.run.Load()
	require.NotNil(t, rb)

	// Stale DNS lands on A first, then on C.
	d.mu.Lock()
	d.remotes = []string{A, C}
	d.mu.Unlock()
	cc, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	assert.Equal(t, C, cc.(*conn).remote)
	assert.EqualValues(t, 1, m.Stats().Doomed, "the landing on A was doomed")
	assert.True(t, rb.replaced.Load(), "the landing on C is a replacement for B's handoff")
}

// Item 4: two nodes holding at once; releasing one never releases the other.
func TestTwoHoldsAreIndependent(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	m.hooked.Store(true)
	const A, B, C = "127.0.0.2:6379", "127.0.0.3:6379", "127.0.0.4:6379"
	da := &fakeDialer{remotes: []string{A}}
	db := &fakeDialer{remotes: []string{B}}
	dialA, dialB := m.dialVia(da.dial), m.dialVia(db.dial)
	ctx := context.Background()
	ca, err := dialA(ctx, "tcp", "a.test:6379")
	require.NoError(t, err)
	cb, err := dialB(ctx, "tcp", "b.test:6379")
	require.NoError(t, err)
	ca.(*conn).onNotification(resp.AppendMoving(nil, 1, 1, "", true))
	cb.(*conn).onNotification(resp.AppendMoving(nil, 2, 1, "", true))
	require.Eventually(t, func() bool {
		hs := m.ho.holds.Load()
		return hs != nil && len(*hs) == 2
	}, 5*time.Second, time.Millisecond, "both nodes hold at their last call")

	da.mu.Lock()
	da.remotes = []string{C}
	da.mu.Unlock()
	_, err = dialA(ctx, "tcp", "a.test:6379") // DNS names another node for a.test
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		hs := m.ho.holds.Load()
		return hs != nil && len(*hs) == 1 && (*hs)[0].node == B
	}, 5*time.Second, time.Millisecond, "A's hold is released, B's stays")
}

// Item 10: a black-holed DNS probe never moves the last call.
func TestSlowProbeDoesNotDelayTheLastCall(t *testing.T) {
	var mu sync.Mutex
	var handoffAt, holdAt time.Time
	m := New(WithLogf(t.Logf), WithOnEvent(func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case EventHandoff:
			handoffAt = e.At
		case EventHold:
			holdAt = e.At
		}
	}))
	defer m.Close()
	m.hooked.Store(true)
	c, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	blackhole := dialFunc(func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	c.t.next.Store(&blackhole)
	c.onNotification(resp.AppendMoving(nil, 1, 2, "", true))
	lead := handoff.LastCallLead(2 * time.Second)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !holdAt.IsZero()
	}, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	late := holdAt.Sub(handoffAt) - (2*time.Second - lead)
	mu.Unlock()
	assert.Less(t, late, 400*time.Millisecond, "the last call came %v late", late)
}

// Item 8: with no AllowSuccessor, a remote node may not send the client to a
// local address; a local node (a test, a tunnel) may.
func TestSafeSuccessorsByDefault(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		ok       bool
	}{
		{"192.0.2.10:6379", "127.0.0.9:1", false},
		{"192.0.2.10:6379", "169.254.169.254:80", false},
		{"192.0.2.10:6379", "[fe80::1]:6379", false},
		{"192.0.2.10:6379", "0.0.0.0:6379", false},
		{"192.0.2.10:6379", "localhost:6379", false},
		{"192.0.2.10:6379", "192.0.2.11:6379", true},
		{"127.0.0.2:6379", "127.0.0.3:6379", true},
	} {
		t.Run(tc.from+"->"+tc.to, func(t *testing.T) {
			m := New(WithLogf(t.Logf))
			defer m.Close()
			c, _ := wrapDL(t, m, tc.from, nil)
			c.onNotification(resp.AppendMoving(nil, 1, 30, tc.to, false))
			r := c.n.run.Load()
			require.NotNil(t, r)
			if tc.ok {
				assert.Equal(t, tc.to, r.h.Params().Successor)
				assert.NotNil(t, c.t.pin.Load())
			} else {
				assert.Equal(t, "", r.h.Params().Successor, "treated as null")
				assert.Nil(t, c.t.pin.Load())
				assert.EqualValues(t, 1, m.Stats().RefusedSuccessors)
			}
		})
	}
}

// Item 8: a successor host name that resolves to a local address, named by
// a remote node, is refused where the dial lands.
func TestSuccessorNameLandingLocallyIsRefused(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	d := &fakeDialer{remotes: []string{"192.0.2.10:6379"}}
	dial := m.dialVia(d.dial)
	c, err := dial(context.Background(), "tcp", "redis.test:6379")
	require.NoError(t, err)
	c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, "next.example:6379", false))
	require.NotNil(t, c.(*conn).t.pin.Load())
	d.mu.Lock()
	d.remotes = []string{"127.0.0.9:6379"}
	d.mu.Unlock()
	_, err = dial(context.Background(), "tcp", "redis.test:6379")
	require.ErrorIs(t, err, ErrSuccessorRejected)
	assert.Nil(t, c.(*conn).t.pin.Load(), "the pin is dropped")
}

// Item 8: over TLS, connections whose TLS state is hidden make successors
// unverifiable: maint does not pin to them, and says so once.
func TestOpaqueTLSIsNotPinned(t *testing.T) {
	logs := &logSink{}
	m := New(WithLogf(logs.logf))
	defer m.Close()
	d := &fakeDialer{remotes: []string{"127.0.0.2:6379"}}
	dial := m.dialVia(d.dial)
	m.target("redis.test:6379").tlsOn.Store(true) // as Configure does for opt.TLSConfig
	c, err := dial(context.Background(), "tcp", "redis.test:6379")
	require.NoError(t, err)
	c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, "127.0.0.3:6379", false))
	c.(*conn).onNotification(resp.AppendMoving(nil, 2, 30, "127.0.0.3:6379", false))
	assert.Nil(t, c.(*conn).t.pin.Load())
	n := 0
	logs.mu.Lock()
	for _, l := range logs.lines {
		if strings.Contains(l, "hide their TLS state") {
			n++
		}
	}
	logs.mu.Unlock()
	assert.Equal(t, 1, n, "logged once")
}

// Item 5: 10 000 MOVINGs across 10 000 node addresses leave the registry and
// the heap at the size of the live nodes.
func TestMemoryStaysBoundedOverALongUptime(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	m := New(WithLogf(func(string, ...any) {}), WithHoldBudget(-1))
	defer m.Close()
	tg := m.target("redis.test:6379")
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	live := m.wrap(tg, &fakeConn{r: bytes.NewReader(nil), remote: "127.0.0.1:1"}, "127.0.0.1:1")
	defer live.Close()
	step := func(i int) {
		remote := net.JoinHostPort(net.IPv4(127, byte(1+i>>16), byte(i>>8), byte(i)).String(), "6379")
		c := m.wrap(tg, &fakeConn{r: bytes.NewReader(nil), remote: remote}, remote)
		c.onNotification(resp.AppendMoving(nil, int64(i+1), 0, "", true))
		_ = c.Close()
	}
	for i := range 1000 { // warm up: maps and pools at their working size
		step(i)
	}
	waitIdle(t, m)
	before := heap()
	for i := 1000; i < 11000; i++ {
		step(i)
	}
	waitIdle(t, m)
	after := heap()
	m.reg.mu.Lock()
	nodes, targets := len(m.reg.nodes), len(m.reg.targets)
	m.reg.mu.Unlock()
	m.ho.mu.Lock()
	seen := m.ho.seen.len()
	m.ho.mu.Unlock()
	assert.Equal(t, 1, nodes, "only the live node is remembered")
	assert.Equal(t, 1, targets)
	assert.LessOrEqual(t, seen, maxSeen)
	assert.Nil(t, m.ho.runs.Load())
	assert.Nil(t, m.ho.holds.Load())
	assert.Less(t, int64(after)-int64(before), int64(1<<20), "heap grew by %d bytes", int64(after)-int64(before))
}

func waitIdle(t *testing.T, m *Maint) {
	t.Helper()
	require.Eventually(t, func() bool { return m.ho.runs.Load() == nil }, 30*time.Second, 5*time.Millisecond)
}

// Item 11: MONITOR makes a connection a subscriber: retired, it is closed at
// once (it owes nothing; go-redis reconnects it).
func TestMonitorIsASubscriber(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
	_, err := c.Write([]byte("*1\r\n$7\r\nmonitor\r\n"))
	require.NoError(t, err)
	assert.True(t, c.sub.Load())
	require.True(t, m.retireConn(c, true))
	assert.True(t, raw.closed, "closed at once")
	assert.False(t, isMonitor([]byte("*1\r\n$7\r\nMONITOX\r\n")))
	assert.True(t, isMonitor([]byte("*1\r\n$7\r\nMONITOR\r\n")))
}

// Items 7 and 19: a zero-second window never closes a connection whose
// reply is still owed before that reply arrives; once it has, the pool
// refuses the connection.
func TestZeroWindowNeverClosesAnOwedReply(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, raw := wrapDL(t, m, "127.0.0.2:6379", []byte("$1\r\n1\r\n"))
	_, err := c.Write([]byte("*2\r\n$4\r\nincr\r\n$1\r\nk\r\n"))
	require.NoError(t, err)
	idle, idleRaw := wrapDL(t, m, "127.0.0.2:6379", nil)
	c.onNotification(resp.AppendMoving(nil, 1, 0, "127.0.0.3:6379", false))
	require.Eventually(t, func() bool { return c.n.run.Load() == nil }, 5*time.Second, time.Millisecond, "the handoff ends")
	assert.True(t, idleRaw.closed, "an idle connection is closed at the cap")
	assert.False(t, raw.closed, "the connection owed a reply is left open")
	assert.EqualValues(t, 1, m.Stats().OwedAtCap)
	var b [16]byte
	n, err := c.Read(b[:])
	require.NoError(t, err)
	assert.Equal(t, "$1\r\n1\r\n", string(b[:n]), "the reply arrives")
	_, err = c.SyscallConn()
	assert.ErrorIs(t, err, ErrRetired, "then the pool refuses it")
	_ = idle
}

// At the cap maint closes only what owes no reply: a blocking command in
// flight, alone or in a pipeline, is left to its reply or to the server's
// close, as an ordinary one is.
func TestClosableAtTheCap(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	for _, tc := range []struct {
		name  string
		write string
		ok    bool
	}{
		{"idle", "", true},
		{"BLPOP alone", "*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n", false},
		{"INCR", "*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n", false},
		{"INCR then BLPOP", "*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n", false},
		{"inline, uncountable", "PING\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
			if tc.write != "" {
				_, err := c.Write([]byte(tc.write))
				require.NoError(t, err)
			}
			assert.Equal(t, tc.ok, c.closable())
			_ = c.Close()
		})
	}
}

// Item 10: while a replacement can be had (DNS names several nodes, one of
// them retiring), a dial that lands on the retiring node is redialled at
// once instead of waiting a probe interval.
func TestDoomedLandingWhileDrainingRedialsAtOnce(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	const A, C = "127.0.0.2:6379", "127.0.0.4:6379"
	d := &fakeDialer{remotes: []string{A}}
	dial := m.dialVia(d.dial)
	ctx := context.Background()
	ca, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	ca.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, "", true))
	r := ca.(*conn).n.run.Load()
	require.NotNil(t, r)
	d.mu.Lock()
	d.remotes = []string{C}
	d.mu.Unlock()
	_, err = dial(ctx, "tcp", "redis.test:6379") // DNS names another node too
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.h.Phase() == handoff.Draining }, 5*time.Second, time.Millisecond)

	d.mu.Lock()
	d.remotes = []string{A, A, C} // round robin lands on the retiring node first
	d.mu.Unlock()
	start := time.Now()
	c, err := dial(ctx, "tcp", "redis.test:6379")
	require.NoError(t, err)
	assert.Equal(t, C, c.(*conn).remote)
	assert.EqualValues(t, 2, m.Stats().Doomed)
	assert.Less(t, time.Since(start), 500*time.Millisecond, "no probe interval (1s for a 30s window) waited")
}

// Should go-redis ever write HELLO together with other commands, the reply
// dropped is still maint's own: the one after all of the write's replies.
func TestInjectedReplyFollowsEveryReplyOfTheFirstWrite(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	script := "%1\r\n+proto\r\n:3\r\n" + "+PONG\r\n" + "+OK\r\n" + "$1\r\nv\r\n"
	c, raw := wrapDL(t, m, "127.0.0.2:6379", []byte(script))
	c.prepareHandshake(context.Background(), false)
	_, err := c.Write([]byte("*2\r\n$5\r\nhello\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	assert.Contains(t, raw.w.String(), "MAINT_NOTIFICATIONS", "the opt-in was written behind the first write")
	_, err = c.Write([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"))
	require.NoError(t, err)
	out := readAll(t, c)
	assert.Equal(t, "%1\r\n+proto\r\n:3\r\n+PONG\r\n$1\r\nv\r\n", string(out), "HELLO's and PING's replies reach go-redis; the +OK was maint's")
	assert.True(t, c.optedIn.Load())
}
