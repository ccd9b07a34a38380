package mainttest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecorder(t *testing.T) {
	e, err := New(Config{})
	require.NoError(t, err)
	defer e.Close()
	ep, err := e.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)
	rec := NewRecorder(e.Dialer())
	rdb := redis.NewClient(&redis.Options{Addr: ep.Addr(), Dialer: rec.Dial, PoolSize: 1})
	require.NoError(t, rdb.Ping(context.Background()).Err())
	require.Equal(t, 1, rec.OpenTo(ep.Addr()))
	c := rec.Conns()[0]
	assert.Equal(t, ep.Addr(), c.Remote)
	assert.NotZero(t, c.Written())
	assert.False(t, c.IsClosed())
	require.NoError(t, rdb.Close())
	assert.True(t, c.IsClosed())
	assert.False(t, c.Closed().Before(c.Dialed))
	assert.Zero(t, rec.OpenTo(ep.Addr()))

	_, err = rec.Dial(context.Background(), "tcp", "127.0.0.1:1")
	assert.Error(t, err)
	assert.EqualValues(t, 1, rec.Failed())
}
