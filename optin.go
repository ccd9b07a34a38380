package maint

import (
	"net"
	"net/netip"
	"strings"

	"github.com/redis/go-redis/v9/maintnotifications"
)

// Opting in by host name (Config.OptIn, OptInHosts).
//
// Open-source Redis, Valkey and most managed Redis services do not know
// CLIENT MAINT_NOTIFICATIONS and answer it with an error, which their
// operators see in the server's error statistics. maint's own handshake
// (the options route) already asks such an endpoint once per HandshakeRetry
// rather than once per connection, and keeps the refusal away from
// go-redis's hooks and error counts; a Config.OptIn policy goes further and
// sends nothing at all to hosts that are not known to support it.
//
// The hosts known to support it are those StackExchange.Redis recognises
// for its automatic opt-in (pull request #3248): Redis Cloud
// (*.cloud.redislabs.com, *.redislabs.com, *.cloud.redis.io) and Azure
// Managed Redis (*.redis.azure.net, *.redisenterprise.cache.azure.net).
// Azure Cache for Redis (*.redis.cache.windows.net) is not among them: it
// announces maintenance on the AzureRedisEvents pub/sub channel, not with
// RESP3 pushes.

// knownSuffixes are the host name suffixes of the services known to send
// maintenance notifications.
var knownSuffixes = []string{
	".cloud.redislabs.com",
	".redislabs.com",
	".cloud.redis.io",
	".redis.azure.net",
	".redisenterprise.cache.azure.net",
}

// KnownHostSuffixes returns the host name suffixes of the services known to
// support maintenance notifications (Redis Cloud, Azure Managed Redis): the
// hosts OptInHosts opts in without being told.
func KnownHostSuffixes() []string { return append([]string(nil), knownSuffixes...) }

// KnownHost reports whether addr ("host:port" or a bare host) names a
// host of a service known to support maintenance notifications.
func KnownHost(addr string) bool {
	host := hostOf(addr)
	for _, s := range knownSuffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// OptInHosts returns a Config.OptIn policy that opts in the known hosts
// (KnownHost) and the hosts the patterns name, and nothing else. A pattern
// is a host name ("redis.internal"), a suffix starting with a dot
// (".redis.internal" matches every host under it), an IP address, or an IP
// prefix ("10.0.0.0/8", "127.0.0.0/8"); names are matched without regard
// to case or a trailing dot. A self-managed Redis Enterprise, a custom
// domain, a CNAME, a private DNS name or a tunnel matches no known suffix:
// name it here, or leave Config.OptIn nil. It panics on a malformed IP
// prefix, at construction.
func OptInHosts(patterns ...string) func(addr string) bool {
	var names, suffixes []string
	var prefixes []netip.Prefix
	for _, p := range patterns {
		switch {
		case strings.Contains(p, "/"):
			pf, err := netip.ParsePrefix(p)
			if err != nil {
				panic("maint: OptInHosts: " + err.Error())
			}
			prefixes = append(prefixes, pf)
		case strings.HasPrefix(p, "."):
			suffixes = append(suffixes, hostOf(p))
		default:
			if ip, err := netip.ParseAddr(p); err == nil {
				prefixes = append(prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			} else {
				names = append(names, hostOf(p))
			}
		}
	}
	return func(addr string) bool {
		if KnownHost(addr) {
			return true
		}
		host := hostOf(addr)
		if ip, err := netip.ParseAddr(host); err == nil {
			for _, p := range prefixes {
				if p.Contains(ip.Unmap()) {
					return true
				}
			}
			return false
		}
		for _, n := range names {
			if host == n {
				return true
			}
		}
		for _, s := range suffixes {
			if strings.HasSuffix(host, s) {
				return true
			}
		}
		return false
	}
}

// NotificationsMode is, for the AddHook and Instrument routes (where
// go-redis's own handshake opts connections in, not maint's), the
// maintnotifications mode that applies the known-host policy to addr:
// ModeAuto for a known host, ModeDisabled otherwise. Set it in
// redis.Options.MaintNotificationsConfig before creating the client.
func NotificationsMode(addr string) maintnotifications.Mode {
	if KnownHost(addr) {
		return maintnotifications.ModeAuto
	}
	return maintnotifications.ModeDisabled
}

// hostOf is addr's host, lower case, without a port, brackets or a
// trailing dot.
func hostOf(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	return strings.ToLower(host)
}

// optsIn reports whether the options route sends the opt-in to a client
// configured with addr.
func (s *settings) optsIn(addr string) bool {
	return s.handshake != HandshakeOff && (s.optIn == nil || s.optIn(addr))
}

// seedsOptIn reports whether Config.OptIn accepts one of a cluster's seed
// addresses: the policy is asked about the addresses the application
// configured, since a cluster announces its nodes by address (an IP a host
// name policy cannot recognise).
func (g *Group) seedsOptIn(seeds []string) bool {
	var c Config
	for _, o := range g.opts {
		o(&c)
	}
	if c.OptIn == nil {
		return false // no policy: every node opts in anyway
	}
	for _, s := range seeds {
		if c.OptIn(s) {
			return true
		}
	}
	return false
}
