package maint_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// The Configure route remembers that an endpoint does not support the
// handshake: one round trip and one log line in all, not one per connection.
func TestUnsupportedHandshakeIsRememberedPerEndpoint(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{Unsupported: true})
	require.NoError(t, err)
	defer emu.Close()
	ep, err := emu.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)

	var mu sync.Mutex
	var lines []string
	m := maint.New(maint.WithLogf(func(format string, args ...any) {
		mu.Lock()
		lines = append(lines, format)
		mu.Unlock()
	}))
	defer m.Close()
	rdb := m.NewClient(&redis.Options{Addr: ep.Addr(), PoolSize: 8, MinIdleConns: 8})
	defer rdb.Close()
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		require.NoError(t, rdb.Ping(ctx).Err())
	}
	waitFor(t, "the idle connections", 10*time.Second, func() bool { return ep.Stats().Opened >= 8 })

	attempts := 0
	for _, e := range emu.Events() {
		if e.Kind == mainttest.KindUnsupported {
			attempts++
		}
	}
	mu.Lock()
	logged := 0
	for _, l := range lines {
		if strings.Contains(l, "does not support") {
			logged++
		}
	}
	mu.Unlock()
	t.Logf("connections %d, handshake attempts %d, log lines %d", ep.Stats().Opened, attempts, logged)
	// Connections dialled concurrently before the first answer may each try
	// once; the point is that the count does not grow with the pool.
	assert.LessOrEqual(t, attempts, 2)
	assert.Equal(t, 1, logged)
	assert.EqualValues(t, 1, m.Stats().Unsupported)
	assert.Zero(t, ep.Stats().OptedIn)
}

// The Configure route opts every connection in with an endpoint type, and
// keeps an OnConnect the application had.
func TestConfigureOptsInAndChainsOnConnect(t *testing.T) {
	e := newEnv(t)
	m := maint.New(maint.WithLogf(t.Logf))
	defer m.Close()
	called := 0
	opt := &redis.Options{Addr: e.old.Addr(), PoolSize: 2, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
		called++
		return nil
	}}
	rdb := m.NewClient(opt)
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	assert.Equal(t, 1, called)
	assert.Equal(t, 1, e.old.Stats().OptedIn)
	var typ string
	for _, ev := range e.emu.Events() {
		if ev.Kind == mainttest.KindOptIn {
			typ = ev.Detail
		}
	}
	assert.Contains(t, typ, "internal-ip", "a loopback address is internal, and there is no TLS")
}

func TestHandshakeModes(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{Unsupported: true})
	require.NoError(t, err)
	defer emu.Close()
	ep, err := emu.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)
	ctx := context.Background()

	t.Run("required fails the connection", func(t *testing.T) {
		m := maint.New(maint.WithLogf(t.Logf), maint.WithHandshake(maint.HandshakeRequired))
		defer m.Close()
		rdb := m.NewClient(&redis.Options{Addr: ep.Addr(), MaxRetries: -1, DialerRetries: 1})
		defer rdb.Close()
		err := rdb.Ping(ctx).Err()
		// go-redis unwraps one level of OnConnect's error: the server's own
		// refusal is what the command reports.
		require.Error(t, err)
		assert.Contains(t, err.Error(), "MAINT_NOTIFICATIONS")
		// The opt-in went on the wire, as in Auto: the refusal is
		// remembered, and the next connections fail without asking again.
		assert.EqualValues(t, 1, m.Stats().Unsupported)
		before := ep.Stats().Handshakes
		err = rdb.Ping(ctx).Err()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "MAINT_NOTIFICATIONS")
		assert.Equal(t, before, ep.Stats().Handshakes, "not asked again within the cooldown")
	})
	t.Run("off sends nothing", func(t *testing.T) {
		before := len(emu.Events())
		m := maint.New(maint.WithLogf(t.Logf), maint.WithHandshake(maint.HandshakeOff))
		defer m.Close()
		rdb := m.NewClient(&redis.Options{Addr: ep.Addr()})
		defer rdb.Close()
		require.NoError(t, rdb.Ping(ctx).Err())
		for _, e := range emu.Events()[before:] {
			assert.NotEqual(t, mainttest.KindUnsupported, e.Kind)
		}
	})
}
