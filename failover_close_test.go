package maint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closeFlagConn is a fakeConn whose Close may run on a timer.
type closeFlagConn struct {
	*fakeConn
	shut atomic.Bool
}

func (c *closeFlagConn) Close() error { c.shut.Store(true); return nil }

func (c *closeFlagConn) SetWriteDeadline(time.Time) error {
	if c.shut.Load() {
		return net.ErrClosed
	}
	return nil
}

// wrapFlag wraps a fake connection whose server sends script.
func wrapFlag(t *testing.T, m *Maint, script []byte) (*conn, *closeFlagConn) {
	t.Helper()
	raw := &closeFlagConn{fakeConn: &fakeConn{r: bytes.NewReader(script), remote: "127.0.0.2:6379"}}
	return m.wrap(m.target(failoverTarget), raw, raw.remote), raw
}

func closedRaw(raw *closeFlagConn) bool { return raw.shut.Load() }

// A failover connection that go-redis closes while a reply is owed closes
// once the reply is read; one that owes nothing, or whose read failed,
// closes at once; one whose reply never comes closes at failoverCloseCap.
func TestFailoverConnDefersCloseWhileOwed(t *testing.T) {
	m := New()
	defer m.Close()
	ping := []byte("*1\r\n$4\r\nPING\r\n")

	c, raw := wrapFlag(t, m, []byte("+PONG\r\n"))
	f := &failoverConn{conn: c}
	_, err := f.Write(ping)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.False(t, closedRaw(raw), "closed under the command")
	buf := make([]byte, 64)
	n, err := f.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", string(buf[:n]), "the reply reaches go-redis")
	assert.True(t, closedRaw(raw), "closed once the reply was read")

	c, raw = wrapFlag(t, m, nil)
	f = &failoverConn{conn: c}
	require.NoError(t, f.Close())
	assert.True(t, closedRaw(raw), "idle: closed at once")

	c, raw = wrapFlag(t, m, nil) // the reply never comes: the read fails
	f = &failoverConn{conn: c}
	_, err = f.Write(ping)
	require.NoError(t, err)
	_, err = f.Read(buf)
	require.Error(t, err)
	require.NoError(t, f.Close())
	assert.True(t, closedRaw(raw), "a read failed (go-redis gave up on it): closed at once")

	defer func(d time.Duration) { failoverCloseCap = d }(failoverCloseCap)
	failoverCloseCap = 50 * time.Millisecond
	c, raw = wrapFlag(t, m, nil)
	f = &failoverConn{conn: c}
	_, err = f.Write(ping)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.False(t, closedRaw(raw))
	deadline := time.Now().Add(5 * time.Second)
	for !closedRaw(raw) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.True(t, closedRaw(raw), "closed at the cap though the reply never came")
}

// A write on a failover connection that go-redis closed while it owed
// nothing (at once, or once its replies were read) fails before it reaches
// the wire and says so (errNotWritten); one closed with a reply owed (a
// read failed on it) does not, nor does a write on a connection go-redis
// did not close.
func TestFailoverConnSaysWhatWasNotWritten(t *testing.T) {
	m := New()
	defer m.Close()
	ping := []byte("*1\r\n$4\r\nPING\r\n")

	c, raw := wrapFlag(t, m, nil)
	f := &failoverConn{conn: c}
	require.NoError(t, f.Close())
	require.True(t, closedRaw(raw))
	err := f.SetWriteDeadline(time.Now().Add(time.Second))
	assert.ErrorIs(t, err, errNotWritten, "the write deadline of a command after the close")
	n, err := f.Write(ping)
	assert.Zero(t, n)
	assert.ErrorIs(t, err, errNotWritten, "a command written after the close")
	assert.Zero(t, raw.w.Len(), "bytes on the wire after the close")

	// Closed while a reply is owed; go-redis goes on with the connection
	// once the reply is read (initConn hands it out).
	c, raw = wrapFlag(t, m, []byte("+PONG\r\n"))
	f = &failoverConn{conn: c}
	_, err = f.Write(ping)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = f.Read(make([]byte, 64))
	require.NoError(t, err)
	require.True(t, closedRaw(raw))
	assert.False(t, f.timer.Load().Stop(), "the cap's timer stopped by the close")
	_, err = f.Write(ping)
	assert.ErrorIs(t, err, errNotWritten, "a command written after the deferred close")

	// A read failed with a reply owed: closed at once, what was written
	// may have run.
	c, _ = wrapFlag(t, m, nil)
	f = &failoverConn{conn: c}
	_, err = f.Write(ping)
	require.NoError(t, err)
	_, err = f.Read(make([]byte, 64))
	require.Error(t, err)
	require.NoError(t, f.Close())
	err = f.SetWriteDeadline(time.Now())
	require.Error(t, err)
	assert.NotErrorIs(t, err, errNotWritten, "closed with a reply owed")

	c, _ = wrapFlag(t, m, nil)
	f = &failoverConn{conn: c}
	require.NoError(t, f.conn.Close()) // not go-redis's close
	_, err = f.Write(ping)
	require.Error(t, err)
	assert.NotErrorIs(t, err, errNotWritten, "a connection go-redis did not close")
}

// The ProcessHook runs a command again when its error is errNotWritten, at
// most maxNotWrittenReruns times, and never for another error.
func TestProcessHookRerunsWhatWasNotWritten(t *testing.T) {
	m := New()
	defer m.Close()
	calls := 0
	var fail []error
	next := m.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		calls++
		if len(fail) > 0 {
			err := fail[0]
			fail = fail[1:]
			return err
		}
		return nil
	})
	notWritten := fmt.Errorf("%w (%w)", errNotWritten, net.ErrClosed)
	ctx := context.Background()

	fail = []error{notWritten, notWritten}
	require.NoError(t, next(ctx, redis.NewStatusCmd(ctx, "ping")))
	assert.Equal(t, 3, calls, "run, and run again twice")

	calls, fail = 0, nil
	for i := 0; i <= maxNotWrittenReruns; i++ {
		fail = append(fail, notWritten)
	}
	assert.ErrorIs(t, next(ctx, redis.NewStatusCmd(ctx, "ping")), errNotWritten)
	assert.Equal(t, 1+maxNotWrittenReruns, calls, "runs again at most maxNotWrittenReruns times")

	other := errors.New("use of closed network connection")
	calls, fail = 0, []error{other}
	assert.ErrorIs(t, next(ctx, redis.NewStatusCmd(ctx, "ping")), other)
	assert.Equal(t, 1, calls, "another error: not run again")
	assert.EqualValues(t, 2+maxNotWrittenReruns, m.Stats().NotWrittenReruns)

	// go-redis's initConn refusing a connection closed before its
	// handshake: run again by a failover Maint only.
	initClosed, acquireClosed := errors.New(goRedisInitClosed), errors.New(goRedisAcquireClosed)
	calls, fail = 0, []error{initClosed}
	assert.ErrorIs(t, next(ctx, redis.NewStatusCmd(ctx, "ping")), initClosed)
	assert.Equal(t, 1, calls, "not a failover Maint: not run again")
	fm := New()
	defer fm.Close()
	setFailover(fm)
	calls, fail = 0, []error{initClosed, acquireClosed}
	fnext := fm.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		calls++
		if len(fail) > 0 {
			err := fail[0]
			fail = fail[1:]
			return err
		}
		return nil
	})
	require.NoError(t, fnext(ctx, redis.NewStatusCmd(ctx, "ping")))
	assert.Equal(t, 3, calls, "a failover Maint runs it again")
}

// go-redis v9.24 fails a command whose connection it closed at a switch in
// its handshake with redis.ErrClosed, before writing it
// (TestContractFailoverSwitchHandsOutConnClosedInInit), the error of a
// closed client too. A failover Maint runs it again; again after that only
// if go-redis asked to close a data-node connection meanwhile (a switch),
// so a closed client's command costs one refusal more. Another Maint does
// not run it again.
func TestProcessHookRerunsErrClosedOfASwitch(t *testing.T) {
	ctx := context.Background()
	m := New()
	defer m.Close()
	calls := 0
	next := m.ProcessHook(func(context.Context, redis.Cmder) error { calls++; return redis.ErrClosed })
	assert.ErrorIs(t, next(ctx, redis.NewStatusCmd(ctx, "ping")), redis.ErrClosed)
	assert.Equal(t, 1, calls, "not a failover Maint: not run again")

	fm := New()
	defer fm.Close()
	setFailover(fm)
	calls = 0
	fnext := fm.ProcessHook(func(context.Context, redis.Cmder) error { calls++; return redis.ErrClosed })
	assert.ErrorIs(t, fnext(ctx, redis.NewStatusCmd(ctx, "ping")), redis.ErrClosed)
	assert.Equal(t, 2, calls, "no switch meanwhile (a closed client): run again once")

	// Each run refused while go-redis closes a data-node connection.
	calls = 0
	switching := fm.ProcessHook(func(context.Context, redis.Cmder) error {
		if calls++; calls <= 3 {
			fm.deferred.asked.Add(1) // failoverConn.Close: go-redis asked
			return redis.ErrClosed
		}
		return nil
	})
	require.NoError(t, switching(ctx, redis.NewStatusCmd(ctx, "incr", "k")))
	assert.Equal(t, 4, calls, "run again while switches close connections")

	calls = 0
	always := fm.ProcessHook(func(context.Context, redis.Cmder) error {
		calls++
		fm.deferred.asked.Add(1)
		return redis.ErrClosed
	})
	assert.ErrorIs(t, always(ctx, redis.NewStatusCmd(ctx, "ping")), redis.ErrClosed)
	assert.Equal(t, 1+maxNotWrittenReruns, calls, "at most maxNotWrittenReruns times")

	// A pipeline too.
	calls = 0
	pnext := fm.ProcessPipelineHook(func(_ context.Context, cmds []redis.Cmder) error {
		if calls++; calls == 1 {
			setErrs(cmds, redis.ErrClosed)
			return redis.ErrClosed
		}
		return nil
	})
	require.NoError(t, pnext(ctx, []redis.Cmder{redis.NewIntCmd(ctx, "incr", "k"), redis.NewIntCmd(ctx, "incr", "k")}))
	assert.Equal(t, 2, calls, "the pipeline run again")
}

// A close deferred for an owed reply ends with the Maint: Close closes the
// connection and stops the cap's timer, and forgets it.
func TestFailoverConnDeferredCloseEndsWithTheMaint(t *testing.T) {
	m := New()
	c, raw := wrapFlag(t, m, nil)
	f := &failoverConn{conn: c}
	_, err := f.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.False(t, closedRaw(raw), "deferred: a reply is owed")
	require.NoError(t, m.Close())
	assert.True(t, closedRaw(raw), "closed with the Maint")
	assert.False(t, f.timer.Load().Stop(), "the cap's timer stopped")
	assert.Zero(t, m.deferred.len())

	c, raw = wrapFlag(t, m, nil) // the Maint is closed: no wait at all
	f = &failoverConn{conn: c}
	_, err = f.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.True(t, closedRaw(raw), "closed at once by a closed Maint")
}

// A command refused unwritten (errNotWritten) whose context ended before it
// could run again fails with an error that wraps the context's, so that
// errors.Is tells the application why it did not run; the command's own
// error and a pipeline's commands' errors say the same.
func TestNotWrittenCommandWhoseContextEndedSaysSo(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	notWritten := fmt.Errorf("%w (%w)", errNotWritten, ErrRetired)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	ran := 0
	hook := m.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		ran++
		cmd.SetErr(notWritten)
		return notWritten
	})
	cmd := redis.NewStatusCmd(ctx, "set", "k", "v")
	err := hook(ctx, cmd)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrRetired, "and why it was not written")
	assert.Equal(t, err, cmd.Err(), "the command's own error")
	assert.Equal(t, 1, ran, "not run again once its context ended")

	phook := m.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
		setErrs(cmds, notWritten)
		return notWritten
	})
	cmds := []redis.Cmder{redis.NewStatusCmd(ctx, "set", "a", "1"), redis.NewStatusCmd(ctx, "set", "b", "2")}
	err = phook(ctx, cmds)
	assert.ErrorIs(t, err, context.Canceled)
	for _, c := range cmds {
		assert.ErrorIs(t, c.Err(), context.Canceled, c.Name())
	}

	// With its context alive, the error is left as it is.
	live := redis.NewStatusCmd(context.Background(), "set", "k", "v")
	plain := m.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		cmd.SetErr(ErrRetired)
		return ErrRetired
	})
	assert.Same(t, ErrRetired, plain(context.Background(), live))
}
