package maint_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// rdb.AddHook(maint.New()) on a client that dials no connection of its own
// (a ClusterClient, a Ring, a UniversalClient that is one of them)
// protects nothing: maint says so once at Warn by the end of the first
// command, naming the routes that protect that kind, and counts the
// commands in Stats.Misplaced. On a client that dials (a Client, a
// failover client, a Conn of one) and on the node clients a Group makes,
// nothing is said and nothing counted.
func TestMisplacedHookIsSaid(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	single, err := emu.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)
	copt := func() *redis.ClusterOptions {
		return &redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3}
	}

	for _, tc := range []struct {
		name   string
		client func() redis.UniversalClient
		said   string // "": nothing is said
	}{
		{"ClusterClient", func() redis.UniversalClient { return redis.NewClusterClient(copt()) }, "NewClusterClient"},
		{"Ring", func() redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": single.Addr()}, Dialer: emu.Dialer()})
		}, "NewRing"},
		{"UniversalClient of several addresses", func() redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: cl.Addrs(), Dialer: emu.Dialer()})
		}, "NewClusterClient"},
		{"Client", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: single.Addr(), Dialer: emu.Dialer()})
		}, ""},
		{"UniversalClient of one address", func() redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{single.Addr()}, Dialer: emu.Dialer()})
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &records{level: slog.LevelWarn}
			m := maint.New(maint.WithLogger(slog.New(logs)))
			defer m.Close()
			rdb := tc.client()
			defer rdb.Close()
			rdb.AddHook(m)
			ctx := context.Background()
			require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
			n := said(logs, "protects nothing")
			if tc.said == "" {
				assert.Zero(t, n, "said of a client that dials: %v", logs.byMessage())
				for i := range 20 {
					require.NoError(t, rdb.Get(ctx, "k").Err(), "%d", i)
				}
				assert.Zero(t, m.Stats().Misplaced)
				return
			}
			require.Equal(t, 1, n, "said by the end of the first command: %v", logs.byMessage())
			for _, d := range saidDetails(logs) {
				assert.Contains(t, d, tc.said, "the route that protects it")
				assert.Contains(t, d, "Instrument")
			}
			for i := range 20 {
				require.NoError(t, rdb.Get(ctx, "k").Err(), "%d", i)
			}
			assert.Equal(t, 1, said(logs, "protects nothing"), "said once")
			assert.EqualValues(t, 21, m.Stats().Misplaced, "every command counted")
		})
	}

	t.Run("a Group's node clients and a Conn", func(t *testing.T) {
		logs := &records{level: slog.LevelWarn}
		g := maint.NewGroup(maint.WithLogger(slog.New(logs)))
		defer g.Close()
		cc := g.NewClusterClient(copt())
		defer cc.Close()
		ctx := context.Background()
		for i := range 30 {
			require.NoError(t, cc.Set(ctx, fmt.Sprint("k", i), "v", 0).Err())
		}
		rdb := g.NewClient(&redis.Options{Addr: single.Addr(), Dialer: emu.Dialer()})
		defer rdb.Close()
		conn := rdb.Conn()
		defer conn.Close()
		require.NoError(t, conn.Set(ctx, "k", "v", 0).Err())
		assert.Zero(t, said(logs, "protects nothing"), "%v", logs.byMessage())
		assert.Zero(t, g.Stats().Misplaced)
	})
}

// said counts the Warn records of maint's misuse whose detail contains s.
func said(logs *records, s string) int {
	n := 0
	for _, as := range logs.attrs("maint: misuse") {
		if strings.Contains(as["detail"].String(), s) {
			n++
		}
	}
	return n
}

// saidDetails returns the details of maint's misuse records.
func saidDetails(logs *records) []string {
	var out []string
	for _, as := range logs.attrs("maint: misuse") {
		out = append(out, as["detail"].String())
	}
	return out
}
