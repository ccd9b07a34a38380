package maint

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// Review: one Maint serving two clients (M14). A client whose pool is stable
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
