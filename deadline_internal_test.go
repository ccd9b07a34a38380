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
	require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	got, _ := raw.lastRead()
	assert.Greater(t, time.Until(got), time.Second)
}

// A deadline that has already passed is never re-applied to a
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

// toMono's fast path (go-redis's deadlines: wall-clock times in Local)
// gives what the general rules give, and a time with a monotonic reading
// (a context's deadline) is converted by that reading, as Sub does.
func TestToMonoMatchesTheGeneralRules(t *testing.T) {
	now := time.Now()
	wall := time.Unix(0, now.UnixNano())
	for _, tc := range []struct {
		name string
		t    time.Time
	}{
		{"zero", time.Time{}},
		{"go-redis's read deadline", wall.Add(3 * time.Second)},
		{"a wall-clock time in UTC", wall.Add(time.Second).UTC()},
		{"a wall-clock time elsewhere", wall.Add(time.Second).In(time.FixedZone("x", 3600))},
		{"monoBase on the wall clock", monoBase.Round(0)},
		{"one nanosecond after monoBase", monoBase.Round(0).Add(1)},
		{"one nanosecond before monoBase", monoBase.Round(0).Add(-1)},
		{"a second before monoBase", monoBase.Round(0).Add(-time.Second)},
		{"the Unix epoch", time.Unix(0, 0)},
		{"before the Unix epoch", time.Unix(-5, 0)},
		{"in a hundred years", wall.AddDate(100, 0, 0)},
		{"the fast path's last second", time.Unix(monoBaseSec+maxMonoSec-1, 999999999)},
		{"past the fast path", time.Unix(monoBaseSec+maxMonoSec, 0)},
		{"the year 9999", time.Date(9999, 1, 1, 0, 0, 0, 0, time.Local)},
		{"a context's deadline", now.Add(2 * time.Second)},
		{"a monotonic reading before monoBase", monoBase.Add(-time.Second)},
	} {
		assert.Equal(t, toMonoSlow(tc.t), toMono(tc.t), tc.name)
		assert.Equal(t, toMonoSlow(tc.t), askedOf(tc.t), tc.name)
	}
	ctx := now.Add(2 * time.Second)
	assert.Equal(t, int64(ctx.Sub(monoBase)), toMono(ctx), "a monotonic reading is used as Sub uses it")
	assert.Equal(t, wall.Add(3*time.Second).Sub(monoBase.Round(0)), time.Duration(toMono(wall.Add(3*time.Second))),
		"a wall-clock time is taken on the wall clock")
}

// A timeout names the relaxation only when one was applied to the deadline
// that expired; a probe's deadline (no reply owed) is never relaxed, however
// short, and a reply's always is.
func TestTimeoutErrorNamesTheMaintenance(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
	defer m.Close()
	c, _ := wrapScript(t, m, nil)
	plain := &net.OpError{Op: "read", Err: osTimeout{}}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "no maintenance: the error as it was")
	m.relax(c.n, resp.Notification{Kind: resp.KindMigrating, Seq: 5})

	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Millisecond)))
	assert.False(t, c.rdl.raised(), "a probe's deadline (no reply owed) is left as asked")
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "a probe's timeout names no relaxation")

	_, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Millisecond)))
	assert.True(t, c.wdl.raised(), "a 1 ms write deadline is relaxed")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
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

	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
	assert.False(t, c.rdl.raised(), "a deadline past the relaxed one is left as asked")
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "and its timeout names no relaxation")
}
