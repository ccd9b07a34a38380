package maint_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// One Maint given to two clients works for both. Its state is
// keyed by the address each client dials and by the node each connection
// reached: a MOVING of one client's node retires that node's connections
// only, and the other client's keep serving.
func TestOneMaintServesTwoClients(t *testing.T) {
	e1, e2 := newEnv(t), newEnv(t)
	ev := &eventLog{}
	m := maint.New(maint.WithOnEvent(ev.add), maint.WithLogf(t.Logf))
	rdb1 := m.NewClient(e1.options(8))
	rdb2 := m.NewClient(e2.options(8))
	t.Cleanup(func() {
		_ = rdb1.Close()
		_ = rdb2.Close()
		_ = m.Close()
	})
	l1, l2 := startLoad(rdb1, 8), startLoad(rdb2, 8)
	waitFor(t, "load", 10*time.Second, func() bool {
		return e1.old.Stats().Served > 200 && e2.old.Stats().Served > 200
	})
	window := 2 * time.Second
	e1.old.Moving(mainttest.Moving{Window: window, To: e1.new})
	e1.waitEvent(e1.old, mainttest.KindWindowEndClose, window+10*time.Second)
	waitFor(t, "client 1 on its new node", 10*time.Second, func() bool { return e1.new.Stats().Served > 200 })
	served2 := e2.old.Stats().Served
	waitFor(t, "client 2 still on its node", 10*time.Second, func() bool { return e2.old.Stats().Served > served2+200 })
	l1.stop()
	l2.stop()
	t.Logf("client 1 ok=%d failed=%d, client 2 ok=%d failed=%d; events:\n%s", l1.ok.Load(), l1.failed.Load(), l2.ok.Load(), l2.failed.Load(), ev)
	assert.Zero(t, l1.failed.Load(), "client 1: %v", l1.errs)
	assert.Zero(t, l2.failed.Load(), "client 2: %v", l2.errs)
	assert.Zero(t, e1.old.Stats().ClosedAtWindowEnd)
	assert.Zero(t, e2.new.Stats().Opened, "client 2 never moved")
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, x := range ev.evs {
		if x.Kind == maint.EventRetire {
			require.Equal(t, e1.old.Addr(), x.Node, "only client 1's node is retired")
		}
	}
}
