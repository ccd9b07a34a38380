package maint

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// Sequence ids are per database. One Maint serving two clients of two
// databases (M14) sees the same id from both; the second database's MOVING
// is genuine and must be acted on, not taken for a copy of the first's.
func TestSameSeqFromAnotherDatabaseIsActedOn(t *testing.T) {
	m := New(WithLogf(t.Logf), WithHoldBudget(-1))
	defer m.Close()
	const A, B = "127.0.0.2:6379", "127.0.0.3:6380"
	ca := m.wrap(m.target("db1.test:6379"), &fakeConn{remote: A}, A)
	cb := m.wrap(m.target("db2.test:6380"), &fakeConn{remote: B}, B)
	ca.onNotification(resp.AppendMoving(nil, 5, 30, "", true))
	require.NotNil(t, ca.n.run.Load())
	cb.onNotification(resp.AppendMoving(nil, 5, 30, "", true))
	assert.NotNil(t, cb.n.run.Load(), "db2's own MOVING starts a handoff of its node")
	assert.EqualValues(t, 2, m.Stats().Handoffs)
}

// A late copy of an older MOVING (another connection read it
// after the newer one was acted on) superseded the newer one.
func TestLateCopyOfAnOlderMovingIsIgnored(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	tg := m.target("redis.test:6379")
	const old = "10.0.0.1:6379"
	c1 := m.wrap(tg, &fakeConn{remote: old}, old)
	c2 := m.wrap(tg, &fakeConn{remote: old}, old)
	m.onMoving(c1, resp.Notification{Kind: resp.KindMoving, Seq: 6, Time: 15, HasTime: true, Endpoint: "10.0.0.3:6379"})
	m.onMoving(c2, resp.Notification{Kind: resp.KindMoving, Seq: 5, Time: 15, HasTime: true, Endpoint: "10.0.0.2:6379"})
	p := tg.pin.Load()
	require.NotNil(t, p)
	assert.Equal(t, "10.0.0.3:6379", p.addr)
	assert.EqualValues(t, 1, m.Stats().Handoffs)
}

// A late copy of an older MOVING changes nothing, whichever node
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
