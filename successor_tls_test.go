package maint

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tlsServer listens on addr with srvCfg, completes each handshake and
// holds the connection until the test ends.
func tlsServer(t *testing.T, addr string, srvCfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", addr, srvCfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return ln.Addr().String()
}

// pinTo routes m's new connections of target addr to successor.
func pinTo(m *Maint, addr, successor string) {
	now := time.Now()
	m.target(addr).pin.Store(&pin{addr: successor, until: now.Add(time.Minute), window: now.Add(30 * time.Second)})
}

// A client that dials an IP address and verifies TLS against
// TLSConfig.ServerName (a Redis Cloud private endpoint) takes a successor
// whose certificate is valid for that name: maint checks the name go-redis
// verifies (ServerName when set, else the host), not the host of Addr. On
// the options route the name is in the options; on the hook route it is
// learned from the client's own connections. A successor with a
// certificate for another name is still rejected.
func TestSuccessorProvesTheNameGoRedisVerifies(t *testing.T) {
	const name = "redis.example"
	srvCfg, roots := selfSigned(t, name)
	orig := tlsServer(t, "127.0.0.2:0", srvCfg)
	good := tlsServer(t, "127.0.0.3:0", srvCfg)
	evilSrv, evilRoots := selfSigned(t, "evil.example")
	evil := tlsServer(t, "127.0.0.4:0", evilSrv)
	clientCfg := &tls.Config{RootCAs: roots}
	allowAll := WithAllowSuccessor(func(string) bool { return true })
	ctx := context.Background()

	t.Run("Options", func(t *testing.T) {
		m := New(allowAll)
		defer m.Close()
		cfg := clientCfg.Clone()
		cfg.ServerName = name
		opt := &redis.Options{Addr: orig, TLSConfig: cfg}
		configure(m, opt)
		c, err := opt.Dialer(ctx, "tcp", orig)
		require.NoError(t, err, "the client's own node")
		_ = c.Close()
		pinTo(m, orig, good)
		c, err = opt.Dialer(ctx, "tcp", orig)
		require.NoError(t, err, "a successor with a certificate for ServerName")
		assert.Equal(t, good, c.RemoteAddr().String())
		_ = c.Close()
	})

	t.Run("Hook", func(t *testing.T) {
		m := New(allowAll)
		defer m.Close()
		cfg := clientCfg.Clone()
		cfg.ServerName = name
		next := func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
		}
		dial := m.DialHook(next)
		c, err := dial(ctx, "tcp", orig)
		require.NoError(t, err, "the client's own node: its ServerName is learned")
		_ = c.Close()
		pinTo(m, orig, good)
		c, err = dial(ctx, "tcp", orig)
		require.NoError(t, err, "a successor with a certificate for the learned ServerName")
		_ = c.Close()
	})

	t.Run("OtherName", func(t *testing.T) {
		m := New(allowAll)
		defer m.Close()
		// The successor's dial trusts its certificate, which is for
		// another name than the client verifies.
		next := func(ctx context.Context, network, addr string) (net.Conn, error) {
			cfg := &tls.Config{RootCAs: evilRoots, ServerName: "evil.example"}
			return (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
		}
		dial := m.dialWith(next, dialOpts{tls: true, tlsName: name})
		pinTo(m, orig, evil)
		_, err := dial(ctx, "tcp", orig)
		require.Error(t, err)
		assert.True(t, errors.Is(err, ErrSuccessorRejected), "%v", err)
	})
}
