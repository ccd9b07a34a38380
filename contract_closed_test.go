package maint_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Contract (group.go clientClosed): a *redis.Client answers a command whose
// context was cancelled before it was sent with redis.ErrClosed once it is
// closed, and with the context's error while it lives, without dialling and
// without writing on an idle connection it holds (the pool checks closed,
// then the context, before it hands out a turn). A ClusterClient's Close
// closes its node clients. If this fails, the Group cannot tell a closed
// ClusterClient's node clients without I/O, and keeps their Maints.
func TestContractClosedClientAnswersACancelledPing(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	var dials atomic.Int64
	never := redis.NewClient(&redis.Options{Addr: "127.0.0.9:1", Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return nil, net.ErrClosed
	}})
	err := never.Ping(cancelled).Err()
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, redis.ErrClosed)
	assert.Zero(t, dials.Load(), "no dial")
	require.NoError(t, never.Close())
	assert.ErrorIs(t, never.Ping(cancelled).Err(), redis.ErrClosed)

	e := newEnv(t)
	rdb := redis.NewClient(e.options(2))
	require.NoError(t, rdb.Ping(ctx).Err()) // one idle connection
	served := e.old.Stats().Served
	err = rdb.Ping(cancelled).Err()
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, served, e.old.Stats().Served, "nothing written on the idle connection")
	require.NoError(t, rdb.Close())
	assert.ErrorIs(t, rdb.Ping(cancelled).Err(), redis.ErrClosed)

	// A ClusterClient's Close closes the node clients it made.
	var nodes []*redis.Client
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.9:1"},
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			nodes = append(nodes, c)
			return c
		}})
	_ = cc.Ping(cancelled).Err()
	require.NoError(t, cc.Close())
	require.NotEmpty(t, nodes)
	for _, c := range nodes {
		assert.ErrorIs(t, c.Ping(cancelled).Err(), redis.ErrClosed)
	}
}
