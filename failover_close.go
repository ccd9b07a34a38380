package maint

import (
	"net"
	"sync/atomic"
	"time"
)

// A failover client's data-node connections, as go-redis gets them.
//
// When the sentinels announce a new master (+switch-master), go-redis's
// FailoverClient closes every pooled connection to the old one, those in
// use included (sentinel.go onFailover, pool.Filter: cn.Close on a used
// connection). A command in flight there loses its reply: with MaxRetries
// -1 it fails with "use of closed network connection"; with retries,
// go-redis runs it again on the new master, and a write that ran on the old
// one runs twice. A failoverConn closes such a connection once the replies
// it owes are read (the command then completes, and go-redis closes the
// connection as it puts it back), or after failoverCloseCap at most.
//
// go-redis closes a connection's socket once (pool.Conn.Close claims the
// socket's generation), so the deferred close is the connection's own: its
// next Read that leaves nothing owed closes it, or the cap's timer does.

// failoverCloseCap bounds how long a close that go-redis asked for waits
// for owed replies.
var failoverCloseCap = 10 * time.Second // a variable for tests

// failoverConn is a failover client's data-node connection: maint's conn
// whose Close, while replies are owed, waits for them.
type failoverConn struct {
	*conn
	closeWanted atomic.Bool
	readFailed  atomic.Bool // a Read returned an error: go-redis gives up on the connection
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
		_ = f.conn.Close()
	}
	return n, err
}

// Close closes the connection now if it owes no reply (or what it owes is
// unknown, or one blocking command, which go-redis runs again safely), or if a read failed on it (go-redis gave up on it: a timeout);
// otherwise when the replies are read, or at failoverCloseCap.
func (f *failoverConn) Close() error {
	if f.conn.closable() || f.conn.owesOneBlocking() || f.conn.owed() < 0 || f.readFailed.Load() {
		return f.conn.Close()
	}
	if f.closeWanted.Swap(true) {
		return nil
	}
	time.AfterFunc(failoverCloseCap, func() { _ = f.conn.Close() })
	// The reply may have been read between the check and the flag.
	if f.conn.owed() == 0 {
		return f.conn.Close()
	}
	return nil
}
