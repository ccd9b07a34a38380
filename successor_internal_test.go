package maint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/mainttest"
)

func TestSuccessorPolicy(t *testing.T) {
	m := New(WithLogf(t.Logf), WithAllowSuccessor(AllowNetworks("10.0.0.0/8")))
	defer m.Close()
	c, _ := wrapScript(t, m, resp.AppendMoving(nil, 1, 5, "192.168.1.1:6379", false))
	readAll(t, c)
	r := c.n.run.Load()
	require.NotNil(t, r)
	assert.Equal(t, "", r.h.Params().Successor, "a refused successor is a null endpoint")
	assert.Nil(t, c.t.pin.Load(), "no pin to a refused successor")

	m2 := New(WithLogf(t.Logf), WithAllowSuccessor(AllowNetworks("10.0.0.0/8")))
	defer m2.Close()
	c2, _ := wrapScript(t, m2, resp.AppendMoving(nil, 1, 5, "10.1.2.3:6379", false))
	readAll(t, c2)
	p := c2.t.pin.Load()
	require.NotNil(t, p)
	assert.Equal(t, "10.1.2.3:6379", p.addr)
	assert.False(t, AllowNetworks("10.0.0.0/8")("redis.example:1"), "names are refused by an IP policy")
}

// With no AllowSuccessor, a remote node may not send the client to a
// local address; a local node (a test, a tunnel) may.
func TestSafeSuccessorsByDefault(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		ok       bool
	}{
		{"192.0.2.10:6379", "127.0.0.9:1", false},
		{"192.0.2.10:6379", "169.254.169.254:80", false},
		{"192.0.2.10:6379", "[fe80::1]:6379", false},
		{"192.0.2.10:6379", "0.0.0.0:6379", false},
		{"192.0.2.10:6379", "localhost:6379", false},
		{"192.0.2.10:6379", "192.0.2.11:6379", true},
		{"127.0.0.2:6379", "127.0.0.3:6379", true},
	} {
		t.Run(tc.from+"->"+tc.to, func(t *testing.T) {
			m := New(WithLogf(t.Logf))
			defer m.Close()
			c, _ := wrapDL(t, m, tc.from, nil)
			c.onNotification(resp.AppendMoving(nil, 1, 30, tc.to, false))
			r := c.n.run.Load()
			require.NotNil(t, r)
			if tc.ok {
				assert.Equal(t, tc.to, r.h.Params().Successor)
				assert.NotNil(t, c.t.pin.Load())
			} else {
				assert.Equal(t, "", r.h.Params().Successor, "treated as null")
				assert.Nil(t, c.t.pin.Load())
				assert.EqualValues(t, 1, m.Stats().RefusedSuccessors)
			}
		})
	}
}

// A successor host name that resolves to a local address, named by
// a remote node, is refused where the dial lands.
func TestSuccessorNameLandingLocallyIsRefused(t *testing.T) {
	successorLandingRefused(t, "192.0.2.10:6379", "127.0.0.9:6379")
}

// successorLandingRefused dials redis.test (landing at first), reads a MOVING
// to the successor name next.example, then dials through the pin, which
// lands at landed: that dial must be refused and the pin dropped. It
// returns the refusal.
func successorLandingRefused(t *testing.T, first, landed string) error {
	t.Helper()
	m := New(WithLogf(t.Logf))
	defer m.Close()
	d := &fakeDialer{remotes: []string{first}}
	dial := m.dialVia(d.dial)
	c, err := dial(context.Background(), "tcp", "redis.test:6379")
	require.NoError(t, err)
	c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, "next.example:6379", false))
	require.NotNil(t, c.(*conn).t.pin.Load())
	d.mu.Lock()
	d.remotes = []string{landed}
	d.mu.Unlock()
	_, err = dial(context.Background(), "tcp", "redis.test:6379")
	require.ErrorIs(t, err, ErrSuccessorRejected)
	assert.Nil(t, c.(*conn).t.pin.Load(), "the pin is dropped")
	return err
}

// selfSigned returns a TLS server config with a certificate for name, and
// a pool that trusts it.
func selfSigned(t *testing.T, name string) (*tls.Config, *x509.CertPool) {
	t.Helper()
	cert, ca, err := mainttest.SelfSignedCert(name)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{Certificates: []tls.Certificate{cert}}, pool
}

// A MOVING sends credentials elsewhere: a TLS successor must prove the
// original server name.
func TestSuccessorMustProveTheOriginalName(t *testing.T) {
	for _, tc := range []struct {
		certFor string
		ok      bool
	}{{"redis.example", true}, {"evil.example", false}} {
		t.Run(tc.certFor, func(t *testing.T) {
			srvCfg, roots := selfSigned(t, tc.certFor)
			ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
			require.NoError(t, err)
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err == nil {
					_ = c.(*tls.Conn).Handshake()
					_ = c.Close()
				}
			}()
			// The client dials the successor with the successor's own name, as
			// go-redis's default dialer does; the certificate is checked after.
			raw, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: tc.certFor})
			require.NoError(t, err)
			defer raw.Close()
			err = verifySuccessor(context.Background(), raw, "redis.example")
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

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

// Over TLS, connections whose TLS state is hidden make successors
// unverifiable: maint does not pin to them, and says so once.
func TestOpaqueTLSIsNotPinned(t *testing.T) {
	logs := &logSink{}
	m := New(WithLogf(logs.logf))
	defer m.Close()
	d := &fakeDialer{remotes: []string{"127.0.0.2:6379"}}
	dial := m.dialVia(d.dial)
	m.target("redis.test:6379").tlsOn.Store(true) // as Configure does for opt.TLSConfig
	c, err := dial(context.Background(), "tcp", "redis.test:6379")
	require.NoError(t, err)
	c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, "127.0.0.3:6379", false))
	c.(*conn).onNotification(resp.AppendMoving(nil, 2, 30, "127.0.0.3:6379", false))
	assert.Nil(t, c.(*conn).t.pin.Load())
	n := 0
	logs.mu.Lock()
	for _, l := range logs.lines {
		if strings.Contains(l, "hide their TLS state") {
			n++
		}
	}
	logs.mu.Unlock()
	assert.Equal(t, 1, n, "logged once")
}

// metadataEndpoints are the cloud metadata endpoints a MOVING may name,
// with a port, by address and by name.
var metadataEndpoints = []string{
	"169.254.169.254:80", "169.254.170.2:80", "169.254.170.23:80", "169.254.0.23:80",
	"100.100.100.200:80", "168.63.129.16:80", "192.0.0.192:80",
	"[fd00:ec2::254]:80", "[fd00:ec2::23]:80", "[::ffff:169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]:80",
	"[::ffff:100.100.100.200]:80", "[fd00:ec2::254%eth0]:80",
	"metadata.google.internal:80", "METADATA.GOOGLE.INTERNAL.:80", "metadata:80", "instance-data:80",
	"metadata.tencentyun.com:80",
}

// With no AllowSuccessor, a MOVING naming a cloud metadata endpoint is
// treated as null, whether the node that sent it is remote or local (a
// local node allows local successors, never these); an AllowSuccessor
// policy decides for itself.
func TestSuccessorMetadataEndpointsRefusedByDefault(t *testing.T) {
	for _, ep := range metadataEndpoints {
		t.Run(ep, func(t *testing.T) {
			m := New(WithLogf(t.Logf))
			defer m.Close()
			d := &fakeDialer{remotes: []string{"192.0.2.10:6379"}}
			c, err := m.dialVia(d.dial)(context.Background(), "tcp", "redis.test:6379")
			require.NoError(t, err)
			c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, ep, false))
			assert.Nil(t, c.(*conn).t.pin.Load(), "pinned to a metadata endpoint named by a remote node")

			local, _ := wrapScript(t, m, nil) // a node reached at 127.0.0.2
			local.onNotification(resp.AppendMoving(nil, 2, 30, ep, false))
			assert.Nil(t, local.t.pin.Load(), "pinned to a metadata endpoint named by a local node")
			assert.EqualValues(t, 2, m.Stats().RefusedSuccessors)

			allowed := New(WithLogf(t.Logf), WithAllowSuccessor(func(string) bool { return true }))
			defer allowed.Close()
			c, err = allowed.dialVia(d.dial)(context.Background(), "tcp", "redis.test:6379")
			require.NoError(t, err)
			c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, ep, false))
			assert.NotNil(t, c.(*conn).t.pin.Load(), "AllowSuccessor decides")
		})
	}
	for _, ep := range []string{"10.0.0.7:6379", "[fd00:ec3::254]:6379", "[2001:db8::254]:6379", "redis-2.example:6379", "100.100.100.201:6379"} {
		assert.False(t, isMetadataAddr(ep), ep)
	}
}

// A successor named by a host name that resolves to a metadata endpoint is
// refused where the dial lands, even when the node that named it is local.
func TestSuccessorNameLandingOnMetadataIsRefused(t *testing.T) {
	for _, landed := range []string{"169.254.169.254:6379", "[fd00:ec2::254]:6379", "100.100.100.200:6379"} {
		t.Run(landed, func(t *testing.T) {
			err := successorLandingRefused(t, "127.0.0.2:6379", landed)
			assert.Contains(t, err.Error(), "metadata")
		})
	}
}
