package maint_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closeCounter counts the Close calls go-redis makes on a connection.
type closeCounter struct {
	net.Conn
	mu     *sync.Mutex
	closes map[string]int // remote address → Close calls
}

func (c *closeCounter) Close() error {
	c.mu.Lock()
	c.closes[c.RemoteAddr().String()]++
	c.mu.Unlock()
	return c.Conn.Close()
}

// Contract (failover_close.go): at +switch-master, go-redis's FailoverClient
// closes the net.Conn of a connection to the old master while a command is
// in flight on it (onFailover → pool Filter → Conn.Close on a used
// connection), so the command fails unless the net.Conn defers the close;
// and it calls that net.Conn's Close once only (pool.Conn.Close claims the
// socket's generation), not again when it puts the connection back, so a
// deferred close must complete on its own. If this fails, failoverConn's
// deferral is either unneeded or leaks sockets: revisit it.
func TestContractFailoverSwitchClosesConnInUseOnce(t *testing.T) {
	e := newEnv(t)
	ds := e.newDiscovery()
	var mu sync.Mutex
	closes := map[string]int{}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "db", SentinelAddrs: []string{ds.Addr()}, Protocol: 3, PoolSize: 1, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &closeCounter{Conn: c, mu: &mu, closes: closes}, nil
		},
	})
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	done := make(chan error, 1)
	go func() { done <- rdb.BLPop(ctx, 3*time.Second, "contract:failover:q").Err() }()
	waitFor(t, "the BLPOP in flight", 5*time.Second, func() bool { return e.old.Stats().Pending > 0 })
	ds.SetMaster(e.new)
	closedOld := func() int {
		mu.Lock()
		defer mu.Unlock()
		return closes[e.old.Addr()]
	}
	waitFor(t, "go-redis closing the old master's connection in use", 5*time.Second, func() bool { return closedOld() > 0 })
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the BLPOP did not return")
	}
	require.Error(t, err, "the command in flight at the switch")
	assert.Contains(t, err.Error(), "use of closed network connection", "the command failed because go-redis closed its connection")
	require.NoError(t, rdb.Ping(ctx).Err(), "the client serves on the new master")
	assert.Equal(t, 1, closedOld(), "Close calls on the old master's connection: once at the switch, not again when put back")
}

// gateConn is a connection to one address whose next write deadline (or
// read) waits at a gate the test opens, and which records what go-redis
// does with it once it has called Close. With defer set, Close only
// records (as a net.Conn that defers the close while a reply is owed).
type gateConn struct {
	net.Conn
	g      *gate
	closed atomic.Bool
}

type gate struct {
	addr         string
	armWrite     atomic.Bool // the next SetWriteDeadline waits
	armRead      atomic.Bool // the next Read waits
	reached      chan struct{}
	open         chan struct{}
	deferClose   bool
	closed       atomic.Bool  // go-redis called Close on one of the connections
	writesClosed atomic.Int64 // Write calls on a connection after its Close
	mu           sync.Mutex
	afterClose   []byte // what was written on a connection after its Close
}

// writtenAfterClose is what go-redis wrote on the connections after it
// closed them.
func (g *gate) writtenAfterClose() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return string(g.afterClose)
}

func newGate(addr string, deferClose bool) *gate {
	return &gate{addr: addr, reached: make(chan struct{}, 1), open: make(chan struct{}), deferClose: deferClose}
}

func (g *gate) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil || addr != g.addr {
			return c, err
		}
		return &gateConn{Conn: c, g: g}, nil
	}
}

func (g *gate) wait(armed *atomic.Bool) {
	if armed.CompareAndSwap(true, false) {
		g.reached <- struct{}{}
		<-g.open
	}
}

var errGateClosed = errors.New("contract: closed by go-redis")

func (c *gateConn) SetWriteDeadline(t time.Time) error {
	c.g.wait(&c.g.armWrite)
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return fmt.Errorf("%w (%w)", errGateClosed, err)
	}
	return nil
}

func (c *gateConn) Read(p []byte) (int, error) {
	c.g.wait(&c.g.armRead)
	return c.Conn.Read(p)
}

func (c *gateConn) Write(p []byte) (int, error) {
	if c.closed.Load() {
		c.g.writesClosed.Add(1)
		c.g.mu.Lock()
		c.g.afterClose = append(c.g.afterClose, p...)
		c.g.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *gateConn) Close() error {
	c.closed.Store(true)
	c.g.closed.Store(true)
	if c.g.deferClose {
		return nil
	}
	return c.Conn.Close()
}

// rerunHook runs a command again once when its error is errGateClosed, as
// maint's ProcessHook does for errNotWritten, and records what it saw.
type rerunHook struct{ saw atomic.Int64 }

func (h *rerunHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *rerunHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if errors.Is(err, errGateClosed) {
			h.saw.Add(1)
			err = next(ctx, cmd)
		}
		return err
	}
}
func (h *rerunHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Contract (failover_close.go): at +switch-master, go-redis closes the
// net.Conn of a connection a command has taken from the pool and not yet
// written on; the command then sets its write deadline on it before it
// writes any byte (pool.Conn.WithWriter). With MaxRetries -1 the error of
// that call reaches the ProcessHook with its chain intact; a ProcessHook
// that runs the command again gets another connection, to the new master,
// and the command completes. With go-redis's default retries go-redis runs
// it again itself (the error is a net.OpError: shouldRetry). If this fails, maint's errNotWritten and its rerun
// (rerunNotWritten) are built on a path go-redis no longer takes: revisit.
func TestContractFailoverSwitchClosesConnBeforeWrite(t *testing.T) {
	for _, retries := range []int{-1, 0} {
		t.Run(retriesName(retries), func(t *testing.T) {
			e := newEnv(t)
			ds := e.newDiscovery()
			g := newGate(e.old.Addr(), false)
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: "db", SentinelAddrs: []string{ds.Addr()}, Protocol: 3, PoolSize: 1, MaxRetries: retries,
				Dialer: g.dialer(),
			})
			defer rdb.Close()
			h := &rerunHook{}
			rdb.AddHook(h)
			ctx := context.Background()
			require.NoError(t, rdb.Ping(ctx).Err())
			g.armWrite.Store(true)
			done := make(chan error, 1)
			go func() { done <- rdb.Set(ctx, "contract:before-write", "v", 0).Err() }()
			<-g.reached // the SET holds the connection and has written nothing
			served := e.old.Stats().Served
			waitFor(t, "go-redis subscribed to +switch-master", 5*time.Second, func() bool { return ds.Stats().Subscribed > 0 })
			ds.SetMaster(e.new)
			waitFor(t, "go-redis closing the connection the SET holds", 5*time.Second, g.closed.Load)
			close(g.open)
			require.NoError(t, <-done, "the SET, run again by the hook")
			if retries < 0 {
				assert.EqualValues(t, 1, h.saw.Load(), "the hook saw the write-deadline error of the closed connection")
			} else {
				assert.Zero(t, h.saw.Load(), "go-redis retried the command itself (a closed connection's net.OpError is retryable)")
			}
			assert.Zero(t, g.writesClosed.Load(), "writes on the connection after go-redis closed it")
			assert.Equal(t, served, e.old.Stats().Served, "commands the old master served after the switch")
			v, err := rdb.Get(ctx, "contract:before-write").Result()
			require.NoError(t, err)
			assert.Equal(t, "v", v)
		})
	}
}

// Contract (failover_close.go), checked on v9.23.0 and v9.24.0: a
// connection go-redis closes at +switch-master while it initialises it
// (HELLO written, its reply not yet read), whose net.Conn defers the close
// (as failoverConn does while replies are owed), is
//
//   - v9.23: handed to the command that dialled it all the same, once the
//     net.Conn has served the handshake (initConn sets the connection IDLE
//     after the handshake, over the CLOSED that Close set), and the command
//     writes on it. failoverConn therefore fails such writes before they
//     reach the wire and says so (errNotWritten), and the Maint's
//     ProcessHook runs the command again.
//   - v9.24 and later: refused to the command, which fails with
//     redis.ErrClosed ("redis: client is closed") before any byte of it is
//     written (initConn: "Do not overwrite a Close that raced the final
//     handshake reply"), whatever MaxRetries is (go-redis does not retry
//     ErrClosed); the client is not closed, and the next command runs on the
//     new master. The Maint's ProcessHook runs such a command again on the
//     failover route (notWrittenErr).
//
// On v9.23 the rest of the handshake (CLIENT SETINFO) is written after the
// close too; on v9.24 nothing is (the handshake's SingleConnPool refuses a
// CLOSED connection: ErrClosed). If this fails, go-redis moved the seam again: revisit
// failover_close.go's notWrittenErr and its comment.
func TestContractFailoverSwitchHandsOutConnClosedInInit(t *testing.T) {
	e := newEnv(t)
	ds := e.newDiscovery()
	g := newGate(e.old.Addr(), true)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "db", SentinelAddrs: []string{ds.Addr()}, Protocol: 3, PoolSize: 1, MaxRetries: -1,
		Dialer: g.dialer(),
	})
	defer rdb.Close()
	ctx := context.Background()
	const key = "contract:init"
	g.armRead.Store(true) // the first read on the old master's first connection: HELLO's reply
	done := make(chan error, 1)
	go func() { done <- rdb.Set(ctx, key, "v", 0).Err() }()
	<-g.reached
	waitFor(t, "go-redis subscribed to +switch-master", 5*time.Second, func() bool { return ds.Stats().Subscribed > 0 })
	ds.SetMaster(e.new)
	waitFor(t, "go-redis closing the connection it initialises", 5*time.Second, g.closed.Load)
	close(g.open)
	err := <-done
	if !goRedisAtLeast(9, 24) {
		assert.NotZero(t, g.writesClosed.Load(), "go-redis %s: writes on the connection after go-redis closed it", redis.Version())
		require.NoError(t, err, "go-redis %s: the SET, on the connection go-redis closed (its close deferred)", redis.Version())
		assert.Contains(t, g.writtenAfterClose(), key, "go-redis %s: the SET was written on the connection go-redis had closed", redis.Version())
		assert.NotZero(t, e.old.Stats().Served, "the old master served the SET")
		return
	}
	require.ErrorIs(t, err, redis.ErrClosed, "go-redis %s: the SET on a connection closed in its handshake", redis.Version())
	assert.Equal(t, "redis: client is closed", err.Error(), "go-redis %s: the error as the application sees it", redis.Version())
	assert.Zero(t, g.writesClosed.Load(), "go-redis %s: writes on the connection after go-redis closed it (%q)", redis.Version(), g.writtenAfterClose())
	require.ErrorIs(t, rdb.Get(ctx, key).Err(), redis.Nil, "go-redis %s: the refused SET ran nowhere", redis.Version())
	served := e.new.Stats().Served
	require.NoError(t, rdb.Set(ctx, key, "v", 0).Err(), "go-redis %s: the client is not closed: the SET run again", redis.Version())
	assert.Greater(t, e.new.Stats().Served, served, "the SET run again, on the new master")
}
