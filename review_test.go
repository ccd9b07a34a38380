package maint

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/handoff"
	"github.com/maintkit/maint/internal/resp"
)

// Regression: onMoving and register took the Maint's and the node's locks in
// opposite orders; a MOVING handled while a connection to the same node
// registered deadlocked the client.
func TestMovingWhileConnectionsRegisterDoesNotDeadlock(t *testing.T) {
	m := New(WithLogf(func(string, ...any) {}))
	const addr = "10.0.0.1:6379"
	tg := m.target("redis.test:6379")
	first := m.wrap(tg, &fakeConn{remote: addr}, addr)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for seq := int64(1); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			m.onMoving(first, resp.Notification{Kind: resp.KindMoving, Seq: seq, Time: 15, HasTime: true, Null: true})
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = m.wrap(tg, &fakeConn{remote: addr}, addr).Close()
		}
	}()
	done := make(chan struct{})
	go func() {
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		_ = m.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("deadlock between MOVING handling and connection registration")
	}
}

// Regression: a replacement seen by a dial between the driver's Tick (which
// returned Retire|Hold) and its apply left the hold in force for good.
func TestReplacementSeenAtTheLastCallReleasesTheHold(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	m.hooked.Store(true)
	tg := m.target("redis.test:6379")
	const old = "10.0.0.1:6379"
	c := m.wrap(tg, &fakeConn{remote: old}, old)
	h, _ := handoff.New(handoff.Params{Gen: 1, Seq: 1, Node: old, Start: time.Now(), Window: 4 * time.Second,
		RelaxedTimeout: 10 * time.Second, HoldBudget: 10 * time.Second, Identifying: true})
	r := &run{m: m, n: c.n, t: tg, h: h, gen: 1, seq: 1, kick: make(chan struct{}, 1), stop: make(chan struct{}), changed: make(chan struct{})}
	c.n.run.Store(r)
	m.ho.mu.Lock()
	swapIn(&m.ho.runs, nil, r)
	m.ho.mu.Unlock()

	act := h.Tick(h.LastCall()) // the driver: Retire|Hold, not applied yet
	require.Equal(t, handoff.Retire|handoff.Hold, act)
	r.sawReplacement("10.0.0.2:6379") // a dial, meanwhile
	r.apply(act)                      // the driver applies what it had
	r.apply(r.advance(time.Now()))    // and steps again, woken by the kick
	assert.Nil(t, m.ho.holds.Load(), "the hold is released")
	assert.Equal(t, handoff.Draining, h.Phase())
	assert.Equal(t, stateRetired, c.state.Load(), "the fenced connection is refused once a replacement can be had")
}

// Regression: a late copy of an older MOVING (another connection read it
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

// Regression: a connection that registered just after the retire took its
// snapshot stayed active, and the server closed it at the window's end.
func TestConnectionJoiningARetiredNodeIsRetired(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	tg := m.target("redis.test:6379")
	const old = "10.0.0.1:6379"
	c1 := m.wrap(tg, &fakeConn{remote: old}, old)
	m.onMoving(c1, resp.Notification{Kind: resp.KindMoving, Seq: 1, Time: 15, HasTime: true, Endpoint: "10.0.0.3:6379"})
	require.Equal(t, stateRetired, c1.state.Load())
	late := m.wrap(tg, &fakeConn{remote: old}, old) // judged before the handoff, registered after
	assert.Equal(t, stateRetired, late.state.Load())
}
