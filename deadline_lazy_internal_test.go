package maint

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// On plain TCP a deadline within lazySlack after the socket's, and the
// health check's clear, stay off the socket; an earlier one, or one
// further ahead, goes on it. That is what spares go-redis's three calls
// into the runtime's poller per command.
func TestLazyDeadlineStaysOffTheSocketWithinTheSlack(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	cl, _ := tcpPair(t)
	c := m.wrap(m.target("redis.test:6379"), cl, cl.RemoteAddr().String())
	require.True(t, c.lazy, "plain TCP arms lazily")

	t0 := time.Unix(0, time.Now().UnixNano()).Add(3 * time.Second) // go-redis's form
	require.NoError(t, c.SetWriteDeadline(t0))
	assert.Equal(t, askedOf(t0), c.wdl.applied.Load(), "the first goes on the socket")
	require.NoError(t, c.SetWriteDeadline(t0.Add(10*time.Millisecond)))
	assert.Equal(t, askedOf(t0), c.wdl.applied.Load(), "10 ms later: the socket's covers it")
	require.NoError(t, c.SetDeadline(time.Time{}))
	assert.Equal(t, askedOf(t0), c.wdl.applied.Load(), "the health check's clear: covered")
	assert.Zero(t, c.rdl.applied.Load(), "the read side had none, and has none")
	later := t0.Add(time.Duration(lazySlack) + time.Millisecond)
	require.NoError(t, c.SetWriteDeadline(later))
	assert.Equal(t, askedOf(later), c.wdl.applied.Load(), "beyond the slack: on the socket")
	earlier := later.Add(-time.Millisecond)
	require.NoError(t, c.SetWriteDeadline(earlier))
	assert.Equal(t, askedOf(earlier), c.wdl.applied.Load(), "earlier than the socket's: on the socket")
	require.NoError(t, c.SetReadDeadline(t0))
	assert.Equal(t, askedOf(t0), c.rdl.applied.Load(), "a deadline where there was none: on the socket")

	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	dl, _ := ctx.Deadline() // a monotonic reading: put on the socket, and covers nothing
	require.NoError(t, c.SetReadDeadline(dl))
	assert.Equal(t, asAsked, c.rdl.applied.Load())
	assert.False(t, c.rdl.covers(askedOf(dl)))
}

// A read whose lazily armed deadline fires before the one asked for goes
// on, and times out when asked, never before.
func TestLazyReadTimesOutWhenAskedNeverBefore(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	cl, _ := tcpPair(t) // a server that never answers
	c := m.wrap(m.target("redis.test:6379"), cl, cl.RemoteAddr().String())

	start := time.Now()
	require.NoError(t, c.SetReadDeadline(start.Round(0).Add(30*time.Millisecond)))
	asked := start.Round(0).Add(120 * time.Millisecond)
	require.NoError(t, c.SetReadDeadline(asked))
	require.Equal(t, askedOf(start.Round(0).Add(30*time.Millisecond)), c.rdl.applied.Load(), "the socket keeps the earlier one")

	_, err := c.Read(make([]byte, 16))
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.False(t, time.Now().Before(asked), "timed out %v before the deadline asked for", time.Until(asked))
	assert.EqualValues(t, 1, m.Stats().Rearms, "the early firing went on once")
}

// A relaxed deadline, put on the socket as floored, is final: its timeout
// is the command's, and is not rearmed (a rearm would floor it again from
// now, and a slow reply would outlast the relaxed timeout several times).
func TestLazyRelaxedTimeoutIsFinal(t *testing.T) {
	const relaxed = 300 * time.Millisecond
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(relaxed))
	defer m.Close()
	cl, sv := tcpPair(t) // a server that reads the command and never answers
	go func() { _, _ = io.Copy(io.Discard, sv) }()
	c := m.wrap(m.target("redis.test:6379"), cl, cl.RemoteAddr().String())
	_, err := c.Write([]byte("*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n"))
	require.NoError(t, err)
	c.n.relaxUntil.Store(monoNow() + int64(time.Minute)) // a MIGRATING
	start := time.Now()
	require.NoError(t, c.SetReadDeadline(start.Round(0).Add(50*time.Millisecond)))

	_, err = c.Read(make([]byte, 16))
	took := time.Since(start)
	var te *TimeoutError
	require.ErrorAs(t, err, &te, "a relaxed timeout")
	assert.GreaterOrEqual(t, took, relaxed, "not before the relaxed deadline")
	assert.Less(t, took, 2*relaxed, "timed out after %v: the relaxed deadline was stretched", took)
	assert.Zero(t, m.Stats().Rearms, "a floored deadline is never rearmed")
}

// A read with no deadline asked for outlives the stale one the socket kept.
func TestLazyReadWithNoDeadlineOutlivesTheStaleOne(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	cl, sv := tcpPair(t)
	c := m.wrap(m.target("redis.test:6379"), cl, cl.RemoteAddr().String())
	require.NoError(t, c.SetReadDeadline(time.Now().Round(0).Add(20*time.Millisecond)))
	require.NoError(t, c.SetReadDeadline(time.Time{})) // a blocking command's: none
	got := make(chan error, 1)
	go func() {
		b := make([]byte, 16)
		n, err := io.ReadFull(c, b[:5])
		if err == nil && string(b[:n]) != "+OK\r\n" {
			err = errors.New("read " + string(b[:n]))
		}
		got <- err
	}()
	waitFor(t, func() bool { return m.Stats().Rearms > 0 }) // the stale deadline fired
	_, err := sv.Write([]byte("+OK\r\n"))
	require.NoError(t, err)
	require.NoError(t, <-got, "the reply came after the stale deadline: read, not a timeout")
}

// A write cut short by a lazily armed deadline goes on from where it
// stopped: every byte reaches the server once, and a timeout, if any,
// comes when asked.
func TestLazyWriteCutShortGoesOn(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	cl, sv := tcpPair(t)
	require.NoError(t, cl.(*net.TCPConn).SetWriteBuffer(16<<10))
	require.NoError(t, sv.(*net.TCPConn).SetReadBuffer(16<<10))
	c := m.wrap(m.target("redis.test:6379"), cl, cl.RemoteAddr().String())

	payload := make([]byte, 4<<20) // far more than the socket buffers hold
	for i := range payload {
		payload[i] = byte(i)
	}
	start := time.Now().Round(0)
	require.NoError(t, c.SetWriteDeadline(start.Add(20*time.Millisecond)))
	asked := start.Add(110 * time.Millisecond)
	require.NoError(t, c.SetWriteDeadline(asked))

	received := make(chan []byte, 1)
	go func() {
		// Read once the write was cut at 20 ms (or after 5 s: the test
		// then fails on Rearms below).
		for end := time.Now().Add(5 * time.Second); m.Stats().Rearms == 0 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		b, _ := io.ReadAll(sv)
		received <- b
	}()
	n, err := c.Write(payload)
	if err != nil {
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		assert.False(t, time.Now().Before(asked), "timed out %v before the deadline asked for", time.Until(asked))
	}
	require.NoError(t, cl.Close())
	b := <-received
	assert.Equal(t, n, len(b), "the server received what the write reports, once")
	assert.Equal(t, payload[:len(b)], b, "in order, nothing lost or repeated")
	assert.GreaterOrEqual(t, m.Stats().Rearms, uint64(1))
}

// Through go-redis's pool: a connection idle past its read deadline is
// healthy at the next command (the health check's peek, which the runtime
// refuses past the socket's deadline, is given the one asked for: none),
// and a blocking command with no timeout outlives the deadline the
// socket kept from the command before it.
func TestLazyDeadlinesThroughThePool(t *testing.T) {
	mr := miniredis.RunT(t)
	m := New(WithLogf(t.Logf))
	defer m.Close()
	opt := &redis.Options{Addr: mr.Addr(), ReadTimeout: 40 * time.Millisecond, WriteTimeout: 40 * time.Millisecond,
		PoolSize: 1, MaxRetries: -1, Protocol: 3}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	rdb.AddHook(m)
	ctx := context.Background()

	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	time.Sleep(150 * time.Millisecond) // the connection idles past both deadlines
	require.NoError(t, rdb.Get(ctx, "k").Err())
	st := rdb.PoolStats()
	assert.EqualValues(t, 1, st.TotalConns, "the idle connection was kept")
	assert.EqualValues(t, 1, st.Misses, "one dial, for the first command")
	assert.Zero(t, st.StaleConns)

	before := m.Stats().Rearms
	popped := make(chan error, 1)
	go func() {
		v, err := rdb.BLPop(ctx, 0, "q").Result()
		if err == nil && (len(v) != 2 || v[1] != "x") {
			err = errors.New("popped " + v[1])
		}
		popped <- err
	}()
	waitFor(t, func() bool { return m.Stats().Rearms > before }) // the socket's stale deadline fired under BLPOP
	other := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer other.Close()
	require.NoError(t, other.LPush(ctx, "q", "x").Err())
	require.NoError(t, <-popped, "BLPOP q 0 waits until the push")
}

// deadlineCounter is a socket that counts the deadlines put on it: a
// wrapper whose reads, writes and deadlines go straight to the socket, as
// the tests' armsLazily accepts (export_test.go).
type deadlineCounter struct {
	net.Conn
	set atomic.Int64
}

func (d *deadlineCounter) NetConn() net.Conn { return d.Conn }
func (d *deadlineCounter) SetDeadline(t time.Time) error {
	d.set.Add(1)
	return d.Conn.SetDeadline(t)
}
func (d *deadlineCounter) SetReadDeadline(t time.Time) error {
	d.set.Add(1)
	return d.Conn.SetReadDeadline(t)
}
func (d *deadlineCounter) SetWriteDeadline(t time.Time) error {
	d.set.Add(1)
	return d.Conn.SetWriteDeadline(t)
}

// The saving itself, through go-redis's pool: go-redis asks for three
// deadlines per command (its health check's clear, the write's, the
// read's); while commands follow each other within lazySlack, nearly none
// reaches the socket. Counted, not timed: the bound allows a gap of more
// than lazySlack after every tenth command, which only a machine stalled
// for minutes would exceed.
func TestLazyDeadlinesStayOffTheSocketPerCommand(t *testing.T) {
	mr := miniredis.RunT(t)
	m := New(WithLogf(t.Logf))
	defer m.Close()
	var sock atomic.Pointer[deadlineCounter]
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), PoolSize: 1, Protocol: 3,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			d := &deadlineCounter{Conn: c}
			sock.Store(d)
			return d, nil
		}})
	defer rdb.Close()
	rdb.AddHook(m)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	before := sock.Load().set.Load()
	const commands = 1000
	for range commands {
		require.NoError(t, rdb.Get(ctx, "k").Err())
	}
	onSocket := sock.Load().set.Load() - before
	t.Logf("%d commands: %d deadlines on the socket, of %d asked for", commands, onSocket, 3*commands)
	assert.LessOrEqual(t, onSocket, int64(3*commands/10), "deadlines reached the socket: the lazy arming is off")
	assert.EqualValues(t, 1, rdb.PoolStats().TotalConns, "one connection throughout")
}

// earlyFiring is a socket that runs a function in the instant after a read
// met the socket's deadline, before maint sees the error: the window in
// which another goroutine (a MIGRATING read on another connection of the
// node, a retirement) may change the connection's deadline.
type earlyFiring struct {
	net.Conn
	then func()
}

func (e *earlyFiring) NetConn() net.Conn { return e.Conn }
func (e *earlyFiring) Read(p []byte) (int, error) {
	n, err := e.Conn.Read(p)
	if f := e.then; f != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		e.then = nil
		f()
	}
	return n, err
}

// lazyWaiter is a connection owing one reply (its server reads and never
// answers) whose read deadline, asked 120 ms from start, is covered by the
// one 30 ms from start that the socket keeps: it fires early, at 30 ms.
func lazyWaiter(t *testing.T, m *Maint, then func(c *conn)) (c *conn, start, asked time.Time) {
	cl, sv := tcpPair(t)
	go func() { _, _ = io.Copy(io.Discard, sv) }()
	e := &earlyFiring{Conn: cl}
	c = m.wrap(m.target("redis.test:6379"), e, cl.RemoteAddr().String())
	require.True(t, c.lazy)
	if then != nil {
		e.then = func() { then(c) }
	}
	_, err := c.Write([]byte("*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n"))
	require.NoError(t, err)
	start = time.Now().Round(0)
	require.NoError(t, c.SetReadDeadline(start.Add(30*time.Millisecond))) // the command before's
	asked = start.Add(120 * time.Millisecond)
	require.NoError(t, c.SetReadDeadline(asked)) // covered: stays off the socket
	return c, start, asked
}

// A relaxation that starts in the instant the socket's lazily armed
// deadline fires (relaxStart's refloor, from another goroutine, replaces
// the lazily armed time with the floor before rearm looks): the wait goes
// on until the floor. It timed out at the early firing, 90 ms before the
// deadline asked for, with an error naming a relaxation that never
// applied.
func TestLazyEarlyFiringRacingARelaxationWaitsForTheFloor(t *testing.T) {
	const relaxed = 500 * time.Millisecond
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(relaxed))
	defer m.Close()
	c, start, _ := lazyWaiter(t, m, func(c *conn) {
		c.n.relaxUntil.Store(monoNow() + int64(time.Minute)) // what relaxStart does
		c.n.epoch.Add(1)
		c.refloor()
	})
	_, err := c.Read(make([]byte, 16))
	took := time.Since(start)
	var te *TimeoutError
	require.ErrorAs(t, err, &te, "a relaxed timeout")
	assert.GreaterOrEqual(t, took, relaxed, "timed out after %v: the floor put under the wait was not waited for", took)
}

// The same race with a retirement, which floors a read that owes a reply:
// never a timeout before the deadline asked for.
func TestLazyEarlyFiringRacingARetirementIsNotEarly(t *testing.T) {
	const relaxed = 300 * time.Millisecond
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(relaxed))
	defer m.Close()
	c, start, asked := lazyWaiter(t, m, func(c *conn) { c.m.retireConn(c, true) })
	_, err := c.Read(make([]byte, 16))
	took := time.Since(start)
	require.Error(t, err)
	assert.False(t, time.Now().Before(asked), "timed out %v before the deadline asked for", time.Until(asked))
	assert.GreaterOrEqual(t, took, relaxed, "a retired connection's owed read is floored")
}

// A step of the wall clock after go-redis set its deadline moves the
// deadline no more than it moves the socket's own, which the runtime took
// onto its monotonic clock when it was set: the lazily armed one is
// anchored the same way. With the clock stepped an hour ahead (NTP), the
// early firing at 30 ms took the deadline asked for at 120 ms for long
// passed.
func TestLazyEarlyFiringIgnoresAWallClockStep(t *testing.T) {
	real := clockNow
	t.Cleanup(func() { clockNow = real })
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, _, asked := lazyWaiter(t, m, nil)
	clockNow = func() clock { k := real(); k.wall += int64(time.Hour); return k }
	_, err := c.Read(make([]byte, 16))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.False(t, time.Now().Before(asked), "timed out %v before the deadline asked for", time.Until(asked))
	assert.GreaterOrEqual(t, m.Stats().Rearms, uint64(1), "the early firing went on")
}

// A command already waiting for its reply when a MOVING of its node
// arrives, on another connection of the node, is relaxed as at a
// MIGRATING (guarantees T4, "as in T1"), whether its deadline was on the
// socket exactly or armed lazily: it timed out at the deadline asked for.
func TestWaitingCommandIsRelaxedAtAMoving(t *testing.T) {
	const relaxed = 500 * time.Millisecond
	for _, lazy := range []bool{false, true} {
		t.Run(map[bool]string{false: "exact", true: "lazy"}[lazy], func(t *testing.T) {
			m := New(WithLogf(t.Logf), WithRelaxedTimeout(relaxed))
			defer m.Close()
			cl, sv := tcpPair(t)
			go func() { _, _ = io.Copy(io.Discard, sv) }()
			var raw net.Conn = cl
			if !lazy {
				raw = struct{ net.Conn }{cl} // a dialer's own wrapper: every deadline as asked
			}
			node, tg := cl.RemoteAddr().String(), m.target("redis.test:6379")
			c := m.wrap(tg, raw, node)
			require.Equal(t, lazy, c.lazy)
			other, _ := tcpPair(t)
			reader := m.wrap(tg, other, node) // another connection of the node
			_, err := c.Write([]byte("*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n"))
			require.NoError(t, err)
			start := time.Now().Round(0)
			if lazy {
				require.NoError(t, c.SetReadDeadline(start.Add(30*time.Millisecond)))
			}
			require.NoError(t, c.SetReadDeadline(start.Add(120*time.Millisecond)))
			reader.onNotification(resp.AppendMoving(nil, 1, 15, "", true))
			_, err = c.Read(make([]byte, 16))
			took := time.Since(start)
			var te *TimeoutError
			require.ErrorAs(t, err, &te, "a relaxed timeout, after %v", took)
			assert.GreaterOrEqual(t, took, relaxed)
		})
	}
}
