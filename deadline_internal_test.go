package maint

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// A connection opened to a node during its MIGRATING gets the same
// floor as the node's older connections.
func TestNewConnectionOfARelaxedNodeIsRelaxed(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
	defer m.Close()
	old, _ := wrapDL(t, m, "127.0.0.2:6379", nil)
	m.relax(old.n, notif(resp.KindMigrating, 1, ""))
	c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
	require.Same(t, old.n, c.n)
	oweReply(t, c)
	require.NoError(t, c.SetReadDeadline(goRedisDeadline(100*time.Millisecond)))
	got, _ := raw.lastRead()
	assert.Greater(t, time.Until(got), time.Second)
}

// A deadline that has already passed is never re-applied to a
// socket, and a MOVING never shortens a relaxed wait.
func TestRefloorNeverRearmsNorShortens(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
	defer m.Close()
	c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
	require.NoError(t, c.SetReadDeadline(goRedisDeadline(time.Millisecond)))
	time.Sleep(5 * time.Millisecond)
	_, before := raw.lastRead()
	m.relax(c.n, notif(resp.KindMigrating, 1, ""))
	_, after := raw.lastRead()
	assert.Equal(t, before, after, "a passed deadline is not applied again")

	// A command waits on a relaxed deadline; a MOVING then retires the
	// connection: the wait may grow, never shrink.
	oweReply(t, c)
	require.NoError(t, c.SetReadDeadline(goRedisDeadline(500*time.Millisecond)))
	relaxed, _ := raw.lastRead()
	assert.Greater(t, time.Until(relaxed), time.Second, "relaxed to the floor")
	time.Sleep(20 * time.Millisecond)
	require.True(t, m.retireConn(c, true))
	got, _ := raw.lastRead()
	assert.False(t, got.Before(relaxed), "a retire never shortens the wait: %v < %v", got, relaxed)
}

// Deadlines put on the socket carry a monotonic reading, even when
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

// A deadline setter keeps go-redis's wall-clock deadlines as they are and
// converts any other time at once; either way the deadline read back on
// the monotonic clock is the one asked for.
func TestAskedIsTheDeadlineAskedFor(t *testing.T) {
	now := time.Now()
	wall := time.Unix(0, now.UnixNano()).Add(3 * time.Second) // go-redis's shape
	assert.Equal(t, -wall.UnixNano(), askedOf(wall), "a wall-clock deadline is kept as it is")
	assert.Equal(t, wall, (&deadline{}).withAsked(askedOf(wall)).socket(), "and given back as it came")
	for _, tc := range []struct {
		name string
		t    time.Time
		want time.Duration // from now
	}{
		{"go-redis's read deadline", wall, 3 * time.Second},
		{"a context's deadline", now.Add(2 * time.Second), 2 * time.Second},
		{"a wall-clock time in UTC", wall.UTC(), 3 * time.Second},
		{"a wall-clock time elsewhere", wall.In(time.FixedZone("x", 3600)), 3 * time.Second},
	} {
		got := time.Duration(clockNow().of(askedOf(tc.t)) - monoNow())
		assert.InDelta(t, tc.want, got, float64(100*time.Millisecond), tc.name)
	}
	assert.Zero(t, askedOf(time.Time{}))
	for _, past := range []time.Time{time.Unix(0, 0), time.Unix(-5, 0), monoBase.Round(0).Add(-time.Second), monoBase.Add(-time.Second)} {
		assert.Equal(t, mono(1), clockNow().of(askedOf(past)), "%v: long passed", past)
	}
	far := clockNow().of(askedOf(time.Date(9999, 1, 1, 0, 0, 0, 0, time.Local)))
	assert.Greater(t, far, monoNow()+int64(100*365*24*time.Hour), "centuries ahead stays centuries ahead")
}

// withAsked records a as asked, for the tests.
func (d *deadline) withAsked(a mono) *deadline {
	d.asked.Store(a)
	d.applied.Store(asAsked)
	return d
}

// A step of the wall clock since the process started moves no deadline
// maint puts on a socket: go-redis's deadline, read off the stepped wall
// clock, is relaxed to the relaxed timeout from now, whether it was set
// during the maintenance or before it (refloor), not to an hour more or
// less; one that needs no floor goes to the socket as go-redis gave it
// (the stepped clock is the test's alone: the socket's time.Until reads
// the real one, hence got.Add(-step) there).
func TestWallClockStepMovesNoDeadline(t *testing.T) {
	real := clockNow
	t.Cleanup(func() { clockNow = real }) // after the Maints' Close (cleanups run last first)
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		clockNow = func() clock { k := real(); k.wall += int64(step); return k }
		stepped := func() time.Time { return time.Unix(0, clockNow().wall) } // what go-redis reads

		m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
		t.Cleanup(func() { _ = m.Close() })
		c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
		oweReply(t, c)
		require.NoError(t, c.SetReadDeadline(stepped().Add(time.Second))) // quiet: as asked
		got, _ := raw.lastRead()
		assert.InDelta(t, time.Second, time.Until(got.Add(-step)), float64(500*time.Millisecond), "step %v: as asked", step)

		m.relax(c.n, notif(resp.KindMigrating, 1, "")) // refloor
		got, _ = raw.lastRead()
		assert.InDelta(t, 2*time.Second, time.Until(got), float64(500*time.Millisecond), "step %v: refloored", step)

		require.NoError(t, c.SetReadDeadline(stepped().Add(time.Second))) // during the maintenance
		got, _ = raw.lastRead()
		assert.InDelta(t, 2*time.Second, time.Until(got), float64(500*time.Millisecond), "step %v: relaxed", step)
		assert.True(t, c.rdl.raised(), "step %v", step)

		require.NoError(t, c.SetReadDeadline(stepped().Add(time.Minute))) // longer than the floor
		got, _ = raw.lastRead()
		assert.InDelta(t, time.Minute, time.Until(got.Add(-step)), float64(time.Second), "step %v: a longer deadline as asked", step)
		assert.False(t, c.rdl.raised(), "step %v", step)
		_ = m.Close()
	}
}

// A context's deadline is kept by its monotonic reading: a step of the wall
// clock since the context was made does not make a refloor shorten it (a
// 30 s deadline left 30 s, not cut to the 10 s relaxed floor after a 25 s
// step), and one set during maintenance reaches the socket with its
// monotonic reading, which no later step moves.
func TestContextDeadlineSurvivesAWallClockStep(t *testing.T) {
	real := clockNow
	t.Cleanup(func() { clockNow = real }) // after the Maint's Close (cleanups run last first)
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(10*time.Second))
	t.Cleanup(func() { _ = m.Close() })
	c, raw := wrapDL(t, m, "127.0.0.2:6379", nil)
	oweReply(t, c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second))) // a context's: monotonic
	clockNow = func() clock { k := real(); k.wall += int64(25 * time.Second); return k }
	m.relax(c.n, notif(resp.KindMigrating, 1, "")) // refloor
	got, _ := raw.lastRead()
	assert.InDelta(t, 30*time.Second, time.Until(got), float64(time.Second), "refloored after a step: not shortened")

	clockNow = func() clock { k := real(); k.wall -= int64(time.Hour); return k }
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second))) // during the maintenance
	got, _ = raw.lastRead()
	assert.InDelta(t, 30*time.Second, time.Until(got), float64(time.Second), "set during the maintenance")
	assert.Contains(t, got.String(), "m=", "the socket's deadline keeps its monotonic reading")
}

// A timeout names the relaxation only when one was applied to the deadline
// that expired; a probe's deadline (no reply owed) is never relaxed, however
// short, and a reply's always is.
func TestTimeoutErrorNamesTheMaintenance(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
	defer m.Close()
	c, _ := wrapScript(t, m, nil)
	plain := &net.OpError{Op: "read", Err: osTimeout{}}
	require.NoError(t, c.SetReadDeadline(goRedisDeadline(50*time.Millisecond)))
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "no maintenance: the error as it was")
	m.relax(c.n, resp.Notification{Kind: resp.KindMigrating, Seq: 5})

	require.NoError(t, c.SetReadDeadline(goRedisDeadline(time.Millisecond)))
	assert.False(t, c.rdl.raised(), "a probe's deadline (no reply owed) is left as asked")
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "a probe's timeout names no relaxation")

	_, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetWriteDeadline(goRedisDeadline(time.Millisecond)))
	assert.True(t, c.wdl.raised(), "a 1 ms write deadline is relaxed")
	require.NoError(t, c.SetReadDeadline(goRedisDeadline(50*time.Millisecond)))
	require.True(t, c.rdl.raised(), "a 50 ms reply deadline is relaxed")
	assert.GreaterOrEqual(t, time.Until(fromMono(c.rdl.applied.Load())), 1900*time.Millisecond)
	err = c.ioErr(plain, &c.rdl)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.Contains(t, err.Error(), "during maintenance (deadline relaxed to at least 2s)")
	assert.True(t, errors.Is(err, plain))

	require.NoError(t, c.SetReadDeadline(goRedisDeadline(time.Minute)))
	assert.False(t, c.rdl.raised(), "a deadline past the relaxed one is left as asked")
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "and its timeout names no relaxation")
}

// goRedisDeadline is a deadline d from now in go-redis's form: a wall-clock
// time with no monotonic reading (pool.Conn.deadline), which relaxation
// floors; a context's deadline, with its monotonic reading, it does not.
func goRedisDeadline(d time.Duration) time.Time { return time.Unix(0, time.Now().Add(d).UnixNano()) }
