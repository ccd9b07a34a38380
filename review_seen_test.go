package maint

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// Review: sequence ids are per database. One Maint serving two clients of two
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
