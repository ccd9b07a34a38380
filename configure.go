package maint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"
)

// configure implements Maint.Configure.
func configure(m *Maint, opt *redis.Options) {
	// The built-in handler never acts on a notification the Maint handles:
	// it is off, and sends no handshake of its own. Options configured
	// already are left as they are: Configure is idempotent.
	if !m.claim(opt) {
		return
	}
	if optionsInUse(opt) {
		m.emit(Event{Kind: EventMisuse, Detail: "Configure: these options are a live client's (rdb.Options(): go-redis has filled in its defaults): the connections it dialled before are not maint's, and it has no maint hook; configure the options before redis.NewClient (or use Group.Instrument on the client)"})
	}

	base := opt.Dialer
	if base == nil {
		base = defaultDialer(opt)
	}
	tlsOn := opt.TLSConfig != nil
	resp2 := opt.Protocol == 2
	// The opt-in goes on the wire, behind go-redis's HELLO (handshake.go),
	// in both Auto and Required: never as a command, which the
	// application's hooks and Limiter would see (go-redis issue #3853).
	// Required adds a check in OnConnect, where a refusal fails the
	// connection before the application's command is written.
	optIn := m.s.optsIn(opt.Addr) // optin.go
	o := dialOpts{tls: tlsOn, inject: optIn && !resp2}
	if tlsOn {
		o.tlsName = opt.TLSConfig.ServerName
	}
	opt.Dialer = m.dialWith(base, o)

	prev := opt.OnConnect
	required := m.s.handshake == HandshakeRequired && optIn && !resp2
	addr := opt.Addr
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if required {
			if err := m.requireOptIn(ctx, cn, addr); err != nil {
				return err
			}
		}
		if prev != nil {
			return prev(ctx, cn)
		}
		return nil
	}
}

// optionsInUse reports whether opt went through go-redis's NewClient
// already (rdb.Options() returns that copy, the live client's own):
// Options.init fills in the Dialer, the network and the pool's defaults,
// which a caller's options rarely all set (TestContractNewClientFillsOptions).
func optionsInUse(opt *redis.Options) bool {
	return opt.Dialer != nil && opt.Network != "" && opt.PoolSize > 0 && opt.PoolTimeout > 0 &&
		opt.MinRetryBackoff != 0 && opt.MaxRetryBackoff != 0 && opt.ReadBufferSize > 0 && opt.WriteBufferSize > 0
}

// requireOptIn fails a new connection whose endpoint refused the opt-in
// (HandshakeRequired). The opt-in went on the wire behind HELLO; its answer
// is known here when go-redis has read past it (its CLIENT SETINFO
// pipeline, unless DisableIdentity); otherwise one PING reads past it. The
// endpoint is the address the target's last dial reached.
func (m *Maint) requireOptIn(ctx context.Context, cn *redis.Conn, addr string) error {
	remote := ""
	if p := m.target(addr).lastRemote.Load(); p != nil {
		remote = *p
	}
	if remote == "" {
		return nil
	}
	known, msg := m.hs.refusal(remote)
	if !known {
		if err := cn.Ping(ctx).Err(); err != nil {
			var rerr redis.Error
			if !errors.As(err, &rerr) {
				return err // the connection failed: go-redis discards it
			}
		}
		_, msg = m.hs.refusal(remote)
	}
	if msg != "" {
		return fmt.Errorf("maint: %s refused the maintenance notifications handshake: %s", remote, msg)
	}
	return nil
}

// endpointType resolves the moving-endpoint-type the way the peers do: an
// FQDN with TLS (a certificate names hosts), an IP without; internal when the
// connected address is private (RFC 1918, RFC 4193, loopback, link-local, and
// CGNAT 100.64/10 as go-redis does).
func (m *Maint) endpointType(remote string, tlsOn bool) string {
	if m.s.endpoint != "" {
		return m.s.endpoint
	}
	scope := "external"
	if isPrivate(remote) {
		scope = "internal"
	}
	if tlsOn {
		return scope + "-fqdn"
	}
	return scope + "-ip"
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func isPrivate(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	return ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || cgnat.Contains(ip)
}

// defaultDialer is go-redis's dialer, except that a connection to a successor
// keeps verifying TLS against the original server name: a certificate valid
// for the configured host is what may receive the client's credentials.
func defaultDialer(opt *redis.Options) dialFunc {
	plain := redis.NewDialer(opt)
	if opt.TLSConfig == nil {
		return plain
	}
	configured := opt.Addr
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == configured {
			return plain(ctx, network, addr)
		}
		nd := &net.Dialer{Timeout: opt.DialTimeout, KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3,
		}}
		raw, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := opt.TLSConfig.Clone()
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(configured)
			if err != nil {
				host = configured
			}
			cfg.ServerName = host
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return tc, nil
	}
}
