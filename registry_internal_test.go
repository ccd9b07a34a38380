package maint

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// One Maint serving two clients (M14). A client whose pool is stable
// dials nothing for ten minutes while the other keeps dialling (and so
// sweeping the registry): the idle-looking target of the first was forgotten
// although its connections were alive. A MOVING read on one of them then
// pinned the successor on the forgotten target, and the client's new dials,
// through a fresh target, never went to the successor: they landed on the
// retiring node, doomed, for the whole window.
func TestTargetWithLiveConnectionsIsNotForgotten(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	const A, B, succ = "127.0.0.2:6379", "127.0.0.3:6379", "127.0.0.5:6379"
	ta := m.target("a.test:6379")
	ca := m.wrap(ta, &fakeConn{remote: A}, A) // the stable client's pool
	ta.lastUse.Store(monoNow() - int64(targetIdle) - int64(time.Minute))
	for i := 0; i < 64; i++ { // the other client churns: the registry is swept
		_ = m.wrap(m.target("b.test:6379"), &fakeConn{remote: B}, B).Close()
	}
	ca.onNotification(resp.AppendMoving(nil, 1, 30, succ, false))
	require.NotNil(t, ca.n.run.Load())

	d := &fakeDialer{remotes: []string{succ}}
	c, err := m.dialVia(d.dial)(context.Background(), "tcp", "a.test:6379")
	require.NoError(t, err)
	defer c.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	assert.Equal(t, []string{succ}, d.addrs, "the new connection goes to the successor the MOVING named")
}

// 10 000 MOVINGs across 10 000 node addresses leave the registry and
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
