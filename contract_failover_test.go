package maint_test

import (
	"context"
	"net"
	"sync"
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
