package maint

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/handoff"
	"github.com/maintkit/maint/internal/resp"
)

// Bad input from the network is ignored with a log line and a counter: never
// a panic, never a desynchronised connection.
func TestBadNotificationsAreIgnored(t *testing.T) {
	cases := []struct {
		name   string
		push   []byte
		malfor bool // counted as malformed
	}{
		{"MOVING without time", []byte(">2\r\n$6\r\nMOVING\r\n:1\r\n"), true},
		{"MOVING seq not a number", []byte(">4\r\n$6\r\nMOVING\r\n$3\r\nabc\r\n:15\r\n_\r\n"), true},
		{"absurd window", resp.AppendMoving(nil, 7, 1<<40, "10.0.0.2:1", false), true},
		{"garbage endpoint", resp.AppendMoving(nil, 8, 5, "not an endpoint", false), true},
		{"port out of range", resp.AppendMoving(nil, 9, 5, "10.0.0.2:99999", false), true},
		{"endpoint with a slash", resp.AppendMoving(nil, 10, 5, "evil/x:1", false), true},
		{"MIGRATING as a map", []byte(">2\r\n$9\r\nMIGRATING\r\n%1\r\n+a\r\n+b\r\n"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logSink{}
			m := New(WithLogf(logs.logf))
			defer m.Close()
			reply := []byte("+OK\r\n$3\r\nbar\r\n")
			script := append(append([]byte("+FIRST\r\n"), tc.push...), reply...)
			c, _ := wrapScript(t, m, script)
			out := readAll(t, c)
			assert.Equal(t, "+FIRST\r\n"+string(reply), string(out), "the stream around the bad push is intact")
			if tc.malfor {
				assert.NotZero(t, m.Stats().Malformed, "counted")
				assert.NotZero(t, logs.count(), "logged")
			}
		})
	}
}

func TestAbsurdWindowIsCapped(t *testing.T) {
	m := New(WithLogf(t.Logf), WithMaxWindow(3*time.Second))
	defer m.Close()
	c, _ := wrapScript(t, m, resp.AppendMoving(nil, 1, 1<<40, "10.0.0.9:1", false))
	readAll(t, c)
	r := c.n.run.Load()
	require.NotNil(t, r)
	assert.Equal(t, 3*time.Second, r.h.Params().Window)
}

// A negative MOVING window is malformed: counted, logged, ignored.
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

// A later MOVING wins over an earlier one, and the earlier handoff's end never
// clears the later pin; another connection's copy of a MOVING starts nothing.
func TestLaterMovingWins(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	first := resp.AppendMoving(nil, 1, 5, "10.0.0.2:6379", false)
	second := resp.AppendMoving(nil, 2, 5, "10.0.0.3:6379", false)
	c, _ := wrapScript(t, m, append(first, second...))
	readAll(t, c)
	p := c.t.pin.Load()
	require.NotNil(t, p)
	assert.Equal(t, "10.0.0.3:6379", p.addr, "the later MOVING's successor")
	r := c.n.run.Load()
	require.NotNil(t, r)
	assert.EqualValues(t, 2, r.seq)
	assert.EqualValues(t, 2, m.Stats().Handoffs)

	// The first handoff's late decisions do not touch the newer pin.
	c.t.unpin(p.gen - 1)
	assert.Same(t, p, c.t.pin.Load())

	// A copy of the second MOVING on another connection to the node starts nothing.
	c2, _ := wrapScript(t, m, second)
	readAll(t, c2)
	assert.EqualValues(t, 2, m.Stats().Handoffs)
	assert.Same(t, r, c.n.run.Load())
}

// OnMoving and register took the Maint's and the node's locks in
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

// A connection that registered just after the retire took its
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

// A connection that reached a node after its handoff ended, and
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

// Two nodes holding at once; releasing one never releases the other.
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
	require.Eventually(t, func() bool { return holdsInForce(m) == 2 }, 5*time.Second, time.Millisecond,
		"both nodes hold at their last call")

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

// holdsInForce counts the holds a command meets now: released ones and
// ones whose last call has not come are not.
func holdsInForce(m *Maint) int {
	hs := m.ho.holds.Load()
	if hs == nil {
		return 0
	}
	n, now := 0, time.Now()
	for _, h := range *hs {
		if h.inForce(now) {
			n++
		}
	}
	return n
}

// A handoff that awaits its last call arms its hold when it starts, in
// force from the last call by the clock: commands wait from that moment
// whenever the driver wakes. Under load the driver was once scheduled 350
// ms after the last call, commands went on reaching the moving node
// meanwhile, and the node's close at the window's end cut seven INCRs,
// which go-redis ran again (maintdemo's chained soak, seed 16). A MOVING
// naming its successor retires at once and holds nothing; neither does a
// Maint without its process hooks (nothing to hold commands with).
func TestHandoffArmsItsHoldForTheLastCall(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	m.hooked.Store(true)
	c, _ := wrapScript(t, m, nil)
	c.onNotification(resp.AppendMoving(nil, 1, 3, "", true))
	r := c.n.run.Load()
	require.NotNil(t, r)
	hs := m.ho.holds.Load()
	require.NotNil(t, hs, "no hold armed at the MOVING")
	require.Len(t, *hs, 1)
	assert.Equal(t, r.h.LastCall(), (*hs)[0].from, "armed for the last call")
	assert.Zero(t, holdsInForce(m), "in force before the last call")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	require.NoError(t, m.waitHolds(ctx), "a command before the last call does not wait")

	named := New(WithLogf(t.Logf))
	defer named.Close()
	named.hooked.Store(true)
	cn, _ := wrapScript(t, named, nil)
	cn.onNotification(resp.AppendMoving(nil, 1, 3, "127.0.0.3:6379", false))
	require.NotNil(t, cn.n.run.Load())
	assert.Nil(t, named.ho.holds.Load(), "a MOVING naming its successor holds nothing")

	unhooked := New(WithLogf(t.Logf))
	defer unhooked.Close()
	cu, _ := wrapScript(t, unhooked, nil)
	cu.onNotification(resp.AppendMoving(nil, 1, 3, "", true))
	require.NotNil(t, cu.n.run.Load())
	assert.Nil(t, unhooked.ho.holds.Load(), "without the process hooks nothing is held")
}

// A hold armed for a last call that has passed makes commands wait though
// no driver has put it in force, and one whose last call is to come does
// not.
func TestArmedHoldIsInForceByTheClock(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	now := time.Now()
	later := &hold{node: "a", released: make(chan struct{}), from: now.Add(time.Hour), until: now.Add(2 * time.Hour)}
	m.addHold(later)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	require.NoError(t, m.waitHolds(ctx), "a last call to come holds nothing")
	passed := &hold{node: "b", released: make(chan struct{}), from: now.Add(-time.Millisecond), until: now.Add(time.Hour)}
	m.addHold(passed)
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	assert.ErrorIs(t, m.waitHolds(short), ErrHeld, "a passed last call holds the command")
	done := make(chan error, 1)
	go func() { done <- m.waitHolds(ctx) }()
	m.releaseHold(passed)
	require.NoError(t, <-done, "released, the command goes on")
}

func TestHeldCommandHonoursItsContext(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	h := &hold{released: make(chan struct{}), until: time.Now().Add(time.Hour)}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := m.waitHold(ctx, h)
	require.ErrorIs(t, err, ErrHeld)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.EqualValues(t, 1, m.Stats().HeldTimeouts)
}

// A handoff whose hold budget runs out (DNS never moved) ends with
// the old connections fenced. One that owed a reply at the cap and at the end
// stayed fenced for good: the pool kept handing out a connection to a node
// past its window, and every deadline of it stayed floored to the relaxed
// timeout (an application's 1s timeout became 10s) for the connection's life.
func TestConnectionFencedAtAnExpiredHoldDoesNotStayFenced(t *testing.T) {
	m := New(WithLogf(t.Logf), WithHoldBudget(50*time.Millisecond))
	defer m.Close()
	m.hooked.Store(true) // commands can be held: the old connections are fenced
	c, _ := wrapScript(t, m, nil)
	_, err := c.Write([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")) // its reply never comes
	require.NoError(t, err)
	c.onNotification(resp.AppendMoving(nil, 1, 1, "", true))
	r := c.n.run.Load()
	require.NotNil(t, r)
	require.Eventually(t, func() bool { return c.n.run.Load() == nil }, 10*time.Second, 5*time.Millisecond,
		"the handoff ends when the hold budget is spent")
	assert.NotEqual(t, stateFenced, c.state.Load(), "left fenced after the handoff ended")
	_, err = c.SyscallConn()
	assert.ErrorIs(t, err, ErrRetired, "the pool does not hand it out again once its reply came")
}

// A black-holed DNS probe never moves the last call.
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

// testRun is a run of handoff h (generation and sequence 1) on c's node,
// dialled as tg, with no driver: the test steps it.
func testRun(m *Maint, c *conn, tg *target, h *handoff.Handoff) *run {
	return &run{m: m, n: c.n, t: tg, h: h, gen: 1, seq: 1, kick: make(chan struct{}, 1), stop: make(chan struct{}), changed: make(chan struct{})}
}

// A replacement seen by a dial between the driver's Tick (which
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
	r := testRun(m, c, tg, h)
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

// While a replacement can be had (DNS names several nodes, one of
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
			assert.Equal(t, tc.ok, c.closable(c.owed()))
			_ = c.Close()
		})
	}
}

// Closing a retired connection at the drain cap is decided on what it
// owes at that instant. A command written between that decision and the
// socket's close (a caller that took a fenced connection from the pool, or
// holds a retired one with Conn()) reaches the server, its reply is cut, and
// go-redis retries it: a write run twice (M11). The close must either see the
// command or keep it off the wire.
func TestDrainCapCloseNeverCutsACommandWrittenMeanwhile(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, raw := wrapScript(t, m, nil)
	require.True(t, m.retireConn(c, true))

	// Hold the handshake table's lock so that the close stops between its
	// decision and the socket's close (closeWith takes it on the way).
	m.hs.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.closeRetired(c.n, false)
	}()
	require.Eventually(t, func() bool { return c.state.Load() == stateClosed }, 5*time.Second, time.Millisecond,
		"the close decided")
	_, werr := c.Write([]byte("*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n"))
	m.hs.mu.Unlock()
	<-done

	raw.mu.Lock()
	sent := raw.w.Len() > 0
	raw.mu.Unlock()
	if sent {
		assert.NoError(t, werr)
		assert.False(t, raw.closed, "the INCR reached the server and maint closed the connection under its reply: go-redis runs it again")
	} else {
		assert.ErrorIs(t, werr, errNotWritten, "a command kept off the wire says so: the process hooks run it again")
	}
}

// TestDrainCapCloseOfATakenConnectionIsRunAgain: go-redis took an idle
// retired connection from the pool just before the drain cap closed it
// (its health check passed, the command not yet written). The write
// deadline go-redis sets first and the write both fail as errNotWritten,
// nothing reaches the server, and the process hook runs the command again
// rather than fail it (with MaxRetries -1 go-redis would not).
func TestDrainCapCloseOfATakenConnectionIsRunAgain(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		sc, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer sc.Close()
		b, _ := io.ReadAll(sc) // until the client's close
		got <- len(b)
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := m.wrap(m.target("redis.test:6379"), raw, raw.RemoteAddr().String())
	require.True(t, m.retireConn(c, true))
	closed, _, _ := m.closeRetired(c.n, false)
	require.Equal(t, 1, closed, "an idle retired connection is closed at the cap")

	derr := c.SetWriteDeadline(time.Now().Add(time.Second))
	require.Error(t, derr)
	assert.ErrorIs(t, derr, errNotWritten, "the write deadline of a connection closed idle")
	_, werr := c.Write([]byte("*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n"))
	assert.ErrorIs(t, werr, errNotWritten, "the write on a connection closed idle")
	assert.Zero(t, <-got, "nothing reached the server")

	calls := 0
	hook := m.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		calls++
		if calls == 1 {
			return werr
		}
		return nil
	})
	require.NoError(t, hook(context.Background(), redis.NewIntCmd(context.Background(), "incr", "k")))
	assert.Equal(t, 2, calls, "run again once, on another connection")
}

func TestCloseDuringHandoffIsPrompt(t *testing.T) {
	m := New(WithLogf(t.Logf))
	c, _ := wrapScript(t, m, resp.AppendMoving(nil, 1, 3600, "", true))
	readAll(t, c)
	require.NotNil(t, c.n.run.Load())
	start := time.Now()
	require.NoError(t, m.Close())
	assert.Less(t, time.Since(start), time.Second)
	require.NoError(t, m.Close(), "idempotent")
}

// A connection that reads its copy of the MOVING between the driver's Tick
// (the node is retired from then on) and its walk of the node is retired
// by the copy, and the walk skips it: it is still counted, in the retire
// events (what maintotel's redis.client.connections retired reads) and in
// the report.
func TestConnectionRetiredByItsCopyDuringTheWalkIsCounted(t *testing.T) {
	var mu sync.Mutex
	retired := 0
	m := New(WithLogf(t.Logf), WithOnEvent(func(e Event) {
		if e.Kind == EventRetire {
			mu.Lock()
			retired += e.Count
			mu.Unlock()
		}
	}))
	defer m.Close()
	m.hooked.Store(true)
	tg := m.target("redis.test:6379")
	const old = "10.0.0.1:6379"
	c1 := m.wrap(tg, &fakeConn{remote: old}, old)
	c2 := m.wrap(tg, &fakeConn{remote: old}, old)
	h, _ := handoff.New(handoff.Params{Gen: 1, Seq: 1, Node: old, Start: time.Now(),
		Window: 4 * time.Second, RelaxedTimeout: 10 * time.Second, HoldBudget: 10 * time.Second, Identifying: true})
	r := testRun(m, c1, tg, h)
	c1.n.run.Store(r)

	act := h.Tick(h.LastCall()) // the driver: Retire|Hold, not applied yet
	require.Equal(t, handoff.Retire|handoff.Hold, act)
	r.adopt(c2) // c2 reads its copy meanwhile
	r.apply(act)
	assert.Equal(t, stateFenced, c1.state.Load())
	assert.Equal(t, stateFenced, c2.state.Load())
	mu.Lock()
	assert.Equal(t, 2, retired, "both connections counted by the retire events")
	mu.Unlock()
	assert.EqualValues(t, 2, r.tally.retired.Load(), "and by the report")
}
