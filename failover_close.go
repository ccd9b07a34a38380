package maint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A failover client's data-node connections, as go-redis gets them.
//
// When the sentinels announce a new master (+switch-master), go-redis's
// FailoverClient closes every pooled connection to the old one, those a
// command holds included (sentinel.go onFailover, pool.Filter: cn.Close on
// a connection not idle). Such a command is at one of three points:
//
//   - It has written and waits for its reply. Closing the socket loses the
//     reply: with MaxRetries -1 the command fails with "use of closed network
//     connection"; with retries a write that ran may run twice. A
//     failoverConn closes such a connection once the replies it owes are
//     read (the command then completes, and go-redis drops the connection
//     as it puts it back), or after failoverCloseCap at most.
//   - It has taken the connection from the pool and not written yet
//     (TestContractFailoverSwitchClosesConnBeforeWrite). Its write must not
//     reach the old master, which the sentinels no longer name; the socket
//     is closed at once, and the write fails before any byte of it leaves
//     (go-redis sets the write deadline first, pool.Conn.WithWriter): the
//     error says so (errNotWritten), and the Maint's ProcessHook runs the
//     command again on a connection go-redis takes from its pool, which
//     hands out no other it closed (rerunNotWritten). go-redis retries that
//     error itself unless MaxRetries is -1 (it is a net.OpError).
//   - go-redis is initialising it: it has written the handshake, or not
//     yet. Written, the close waits for the handshake's replies as above.
//     What go-redis does then depends on the release
//     (TestContractFailoverSwitchHandsOutConnClosedInInit): v9.23 hands the
//     connection to the command all the same (initConn sets it IDLE over the
//     CLOSED that Close set), and its write fails as above; v9.24 refuses it
//     and fails the command with redis.ErrClosed before writing anything of
//     it (nor the rest of the handshake). Not yet written, go-redis fails the
//     command before writing anything: with goRedisInitClosed (v9.23, and
//     v9.24 when the close races its own check) or redis.ErrClosed (v9.24);
//     so when the close comes between the handshake and the command taking
//     the connection (goRedisAcquireClosed). The ProcessHook runs all of
//     these again, whatever MaxRetries is (go-redis retries none of them).
//
// The close decision and a concurrent Write are ordered as the drain cap's
// are (closeIfClosable): the state is marked closing before what is owed is
// read, and Write counts a command before it reads the state; so either the
// decision sees the command (and defers the close) or the Write sees the
// close (and keeps the command off the wire).
//
// go-redis closes a connection's socket once (pool.Conn.Close claims the
// socket's generation), so the deferred close is the connection's own: its
// next Read that leaves nothing owed closes it, or the cap's timer does.

// failoverCloseCap bounds how long a close that go-redis asked for waits
// for owed replies.
var failoverCloseCap = 10 * time.Second // a variable for tests

// errNotWritten marks the error of a write on a connection closed before
// the command was written (go-redis closed it at a failover, or the drain
// cap closed it idle just after go-redis took it from the pool): nothing of
// the command left, so running it again cannot run it twice.
var errNotWritten = errors.New("maint: the connection was closed before the command was written")

// goRedisInitClosed is the error go-redis fails a command with when the
// connection it dialled for it was closed before its handshake began
// (initConn: the CREATED → INITIALIZING transition refused; the only state
// transition on a command's path, before any write): at +switch-master,
// pool.Filter closes a connection as soon as it is in the pool.
const goRedisInitClosed = "invalid state transition"

// goRedisAcquireClosed is the error go-redis fails a command with when the
// connection it initialised for it was closed after the handshake and
// before the command took it (initPooledConn: TryAcquire refused), before
// the command wrote anything.
const goRedisAcquireClosed = "redis: connection is not usable"

// redis.ErrClosed is also what go-redis fails a command with when the client
// is closed, before writing it too (pool.Get refuses it first); go-redis
// uses the one error for both. On the failover route maint runs such a
// command again once, and again only if go-redis asked to close a data-node
// connection meanwhile (deferredCloses.asked): after the client's Close the
// command costs one refusal more, not maxNotWrittenReruns.

// maxNotWrittenReruns bounds how often one command runs again after
// errNotWritten: each time, go-redis handed it a connection it had closed
// at a switch of the master, and then dropped that connection; a burst of
// switches under load may hand one command several.
const maxNotWrittenReruns = 8

// failoverConn is a failover client's data-node connection: maint's conn
// whose Close, while replies are owed, waits for them.
type failoverConn struct {
	*conn
	closeWanted atomic.Bool
	readFailed  atomic.Bool // a Read returned an error: go-redis gives up on the connection
	closedClean atomic.Bool // closed at go-redis's request while owing nothing
	timer       atomic.Pointer[time.Timer]
}

// wrapFailover wraps c, a connection maint watches, in a failoverConn;
// other connections are returned as they are.
func wrapFailover(c net.Conn, err error) (net.Conn, error) {
	if mc, ok := c.(*conn); ok && err == nil {
		return &failoverConn{conn: mc}, nil
	}
	return c, err
}

// Read reads as conn.Read does, and completes a close asked for while
// replies were owed once none is.
func (f *failoverConn) Read(p []byte) (int, error) {
	n, err := f.conn.Read(p)
	if err != nil {
		f.readFailed.Store(true)
	}
	if f.closeWanted.Load() && f.conn.owed() <= 0 {
		f.shut()
	}
	return n, err
}

// Write writes as conn.Write does; a write that put nothing on the wire of
// a connection closed while owing nothing says so (errNotWritten).
func (f *failoverConn) Write(p []byte) (int, error) {
	n, err := f.conn.Write(p)
	if err != nil && n == 0 {
		return 0, f.notWritten(err)
	}
	return n, err
}

// SetWriteDeadline sets the write deadline as conn's does. go-redis sets it
// before it writes a command: failing, it says so (errNotWritten).
func (f *failoverConn) SetWriteDeadline(t time.Time) error {
	if err := f.conn.SetWriteDeadline(t); err != nil {
		return f.notWritten(err)
	}
	return nil
}

// notWritten marks err, a write-side error, as errNotWritten if go-redis
// had asked for the close and the socket was closed owing nothing: no
// command written since is complete on the wire (a command counts once its
// last byte is written, and one that is counted defers the close), so none
// can have run.
func (f *failoverConn) notWritten(err error) error {
	if f.closedClean.Load() {
		return fmt.Errorf("%w (%w)", errNotWritten, err)
	}
	return err
}

// Close closes the connection now if it owes no reply (or what it owes is
// unknown, or is one blocking command's, which has not run to completion:
// go-redis runs it again), or if a read failed on it (go-redis gave up on
// it: a timeout); otherwise when the replies are read, or at
// failoverCloseCap.
func (f *failoverConn) Close() error {
	f.m.deferred.asked.Add(1)
	if f.closeIfIdle() {
		return nil
	}
	if f.closeWanted.Swap(true) {
		return nil
	}
	if !f.m.deferred.add(f) {
		f.shut() // the Maint is closed: no wait outlives it
		return nil
	}
	f.timer.Store(time.AfterFunc(failoverCloseCap, f.shut))
	// The reply may have been read between the check and the flag, and the
	// connection handed to a command since (initConn): decided as above,
	// against that command's Write.
	if f.closeIfIdle() {
		f.shut()
	}
	return nil
}

// closeIfIdle closes the connection if nothing stops it (see Close),
// ordered against a concurrent Write (see above), and reports whether it
// is closed.
func (f *failoverConn) closeIfIdle() bool {
	c := f.conn
	for {
		s := c.settled()
		if s == stateClosed {
			return true
		}
		if !c.state.CompareAndSwap(s, stateClosing) {
			continue
		}
		owed := c.owed() // once: a Write counted since is refused (conn.refused)
		ok := c.closable(owed) || owed == 1 && c.lastBlocking.Load()
		if ok || owed < 0 || f.readFailed.Load() {
			if owed == 0 {
				f.closedClean.Store(true)
			}
			c.closeWith(errFailoverClosed)
			return true
		}
		c.state.CompareAndSwap(stateClosing, s) // unless go-redis closed it meanwhile
		return false
	}
}

// errFailoverClosed is why a failover connection is closed: go-redis asked,
// at a switch of the master.
var errFailoverClosed = errors.New("maint: connection closed by go-redis at a switch of the master")

// shut completes a close go-redis asked for while replies were owed, and
// stops the cap's timer.
func (f *failoverConn) shut() {
	if t := f.timer.Load(); t != nil {
		t.Stop()
	}
	f.m.deferred.remove(f)
	if f.conn.owed() == 0 {
		f.closedClean.Store(true)
	}
	f.conn.closeWith(errFailoverClosed)
}

// notWrittenErr reports whether err says that go-redis closed the
// command's connection at a failover before the command was written.
func (m *Maint) notWrittenErr(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errNotWritten) {
		return true
	}
	if m.s.failedOver == nil {
		return false
	}
	if errors.Is(err, redis.ErrClosed) {
		return true
	}
	s := err.Error()
	return s == goRedisInitClosed || s == goRedisAcquireClosed
}

// txNotWritten corrects what go-redis says of a transaction whose error
// says it was not written (notWrittenErr): go-redis stamps a failed
// attempt's error on every command of the batch, MULTI and EXEC included
// (setCmdsErr), and a later attempt that runs the transaction resets the
// queued commands' errors only (pipelineReadCmds), so with MaxRetries >= 0,
// or after a rerun of maint's, go-redis returns the stale error of MULTI
// (processTxPipeline: cmdsFirstErr) for a transaction that ran. The queued
// commands tell: if none of them says not written, the transaction ran,
// MULTI's and EXEC's stale errors are cleared and the first queued
// command's error is returned. cmds are as the pipeline hook sees them.
func (m *Maint) txNotWritten(cmds []redis.Cmder, err error) error {
	n := len(cmds)
	if n < 3 || !m.notWrittenErr(err) || cmds[0].Name() != "multi" || cmds[n-1].Name() != "exec" {
		return err
	}
	var first error
	for _, c := range cmds[1 : n-1] {
		e := c.Err()
		if m.notWrittenErr(e) {
			return err // not written: run it again
		}
		if first == nil && e != nil {
			first = e
		}
	}
	cmds[0].SetErr(nil)
	cmds[n-1].SetErr(nil)
	return first
}

// setErrs sets err on every command of a batch: the hold's error, or nil
// before maint runs the batch again, so that what the rerun leaves is its
// own.
func setErrs(cmds []redis.Cmder, err error) {
	for _, c := range cmds {
		c.SetErr(err)
	}
}

// deferredCloses are a Maint's failover connections whose close go-redis
// asked for and that wait for owed replies: Close ends every wait, and
// none is added after it.
type deferredCloses struct {
	// asked counts the closes go-redis asked for of the Maint's failover
	// connections (failoverConn.Close), deferred or not: rerunNotWritten's
	// evidence that a redis.ErrClosed may be a switch's, not the client's
	// Close.
	asked atomic.Uint64

	mu     sync.Mutex // guards the following
	closed bool
	set    map[*failoverConn]struct{}
}

// add records f, whose close waits for owed replies, unless the Maint is
// closed.
func (d *deferredCloses) add(f *failoverConn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	if d.set == nil {
		d.set = make(map[*failoverConn]struct{})
	}
	d.set[f] = struct{}{}
	return true
}

// remove forgets f, whose close is done.
func (d *deferredCloses) remove(f *failoverConn) {
	d.mu.Lock()
	delete(d.set, f)
	d.mu.Unlock()
}

// shutAll completes every close that waits (the Maint's Close), and
// refuses the later ones.
func (d *deferredCloses) shutAll() {
	d.mu.Lock()
	d.closed = true
	set := d.set
	d.set = nil
	d.mu.Unlock()
	for f := range set {
		f.shut()
	}
}

// len is how many closes wait, for tests.
func (d *deferredCloses) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.set)
}

// waitTurn makes a command wait for the holds in force: a command run
// again (rerunNotWritten), whose connection was refused because its node is
// moving, waits as a new command does, the hold being what keeps it off
// that node. The process hooks' own check on every command is this one
// written out, where it inlines to one load (this function is one over
// the inliner's budget).
func (m *Maint) waitTurn(ctx context.Context) error {
	if m.ho.holding() {
		return m.waitHolds(ctx)
	}
	return nil
}

// rerunNotWritten runs a command again (again) while its error says that
// go-redis closed its connection at a failover before it was written
// (notWrittenErr): bounded by ctx and maxNotWrittenReruns.
func (m *Maint) rerunNotWritten(ctx context.Context, again func() error, err error) error {
	cuts := 0
	var asked uint64 // go-redis's close requests before the last run refused with ErrClosed
	closedBefore := false
	for i := 0; i < maxNotWrittenReruns && m.notWrittenErr(err) && ctx.Err() == nil; i++ {
		if errors.Is(err, errHandshakeCut) {
			if cuts++; cuts > 1 {
				break // the server closes new connections: once is enough
			}
		}
		if errors.Is(err, redis.ErrClosed) {
			if closedBefore && m.deferred.asked.Load() == asked {
				break // no switch closed a connection meanwhile: the client is closed
			}
			closedBefore = true
		}
		asked = m.deferred.asked.Load()
		m.c.notWrittenReruns.Add(1)
		err = again()
	}
	return err
}

// notRun is err for a command (or pipeline) that was not written and whose
// context ended before it could run again: wrapped with the context's
// error, so that errors.Is(err, context.Canceled) (or DeadlineExceeded)
// tells the application why it did not run, as it does for a command held
// until its context ended (ErrHeld). ok reports that err was such an error.
func (m *Maint) notRun(ctx context.Context, err error) (_ error, ok bool) {
	if cerr := ctx.Err(); cerr != nil && m.notWrittenErr(err) {
		return fmt.Errorf("maint: not run, its context ended before it could run again: %w (%w)", cerr, err), true
	}
	return err, false
}

// runsAgain reports whether the process hooks run cmds again after err:
// it says they were not written (notWrittenErr), and they are not the
// handshake's own commands cut with their connection (handshakeOnly).
func (m *Maint) runsAgain(err error, cmds ...redis.Cmder) bool {
	return m.notWrittenErr(err) && !(errors.Is(err, errHandshakeCut) && handshakeOnly(cmds...))
}

// handshakeOnly reports whether cmds are all commands of a connection's
// handshake (isHandshakeCommand). Cut with their connection in its
// handshake (errHandshakeCut), they are go-redis's own, which it sends on
// the connection being opened (initConn shares the client's hooks), or the
// application's, written already: neither is run again.
func handshakeOnly(cmds ...redis.Cmder) bool {
	for _, cmd := range cmds {
		if !isHandshakeCommand([]byte(cmd.Name())) {
			return false
		}
	}
	return len(cmds) > 0
}
