package maint_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// The host-name policy: the known suffixes (StackExchange.Redis #3248's
// list), names, suffixes and IP prefixes it is given, and nothing else.
func TestOptInHostsMatches(t *testing.T) {
	known := maint.OptInHosts()
	for addr, want := range map[string]bool{
		"redis-12000.c1.us-east-1-2.ec2.cloud.redislabs.com:12000":    true,
		"redis-12000.internal.c1.us-east-1-2.ec2.redislabs.com:12000": true,
		"redis-1.c2.eu-west-1-1.ec2.cloud.redis.io:16379":             true,
		"REDIS-1.C2.EU-WEST-1-1.EC2.CLOUD.REDIS.IO.:16379":            true, // case, trailing dot
		"mycache.westeurope.redis.azure.net:10000":                    true,
		"mycache.westeurope.redisenterprise.cache.azure.net:10000":    true,
		"mycache.redis.cache.windows.net:6380":                        false, // Azure Cache for Redis: pub/sub events, not pushes
		"evilredislabs.com:6379":                                      false, // a suffix is matched at a dot
		"redislabs.com.attacker.example:6379":                         false,
		"redis.internal:6379":                                         false,
		"10.0.0.5:6379":                                               false,
		"127.0.0.1:6379":                                              false,
		"[::1]:6379":                                                  false,
	} {
		assert.Equal(t, want, known(addr), addr)
		assert.Equal(t, want, maint.KnownHost(addr), addr)
	}
	custom := maint.OptInHosts("redis.internal", ".db.example", "10.0.0.0/8", "::1", "127.0.0.2")
	for addr, want := range map[string]bool{
		"redis.internal:6379":          true,
		"Redis.Internal.:6379":         true,
		"other.internal:6379":          false,
		"a.b.db.example:12000":         true,
		"db.example:12000":             false, // the suffix, not the name
		"10.1.2.3:6379":                true,
		"11.1.2.3:6379":                false,
		"[::1]:6379":                   true,
		"127.0.0.2:6379":               true,
		"127.0.0.3:6379":               false,
		"x.cloud.redislabs.com:1":      true, // the known hosts still
		"mycache.redis.azure.net:1000": true,
	} {
		assert.Equal(t, want, custom(addr), addr)
	}
	assert.Panics(t, func() { maint.OptInHosts("10.0.0.0/33") })
	assert.Equal(t, maintnotifications.ModeAuto, maint.NotificationsMode("x.cloud.redis.io:1"))
	assert.Equal(t, maintnotifications.ModeDisabled, maint.NotificationsMode("127.0.0.1:6379"))
	assert.Contains(t, maint.KnownHostSuffixes(), ".redis.azure.net")
}

// optInEnv is one emulated endpoint on 127.0.0.2 with names in the
// emulator's DNS: traffic never leaves loopback, whatever the name.
func optInEnv(t *testing.T) (*mainttest.Emulator, *mainttest.Endpoint) {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	ep, err := emu.AddEndpoint("127.0.0.2:0")
	require.NoError(t, err)
	for _, name := range []string{"redis-12000.c1.us-east-1-2.ec2.cloud.redislabs.com", "cache.example.test"} {
		emu.DNS().Set(name, ep.IP())
	}
	return emu, ep
}

// pingVia pings through a client of m on addr, and returns what the
// endpoint saw of the opt-in.
func pingVia(t *testing.T, emu *mainttest.Emulator, ep *mainttest.Endpoint, m *maint.Maint, host string) (handshakes, optedIn int) {
	t.Helper()
	rdb := m.NewClient(&redis.Options{Addr: net.JoinHostPort(host, ep.Port()), Protocol: 3, PoolSize: 2, Dialer: emu.Dialer()})
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err())
	st := ep.Stats()
	return st.Handshakes, st.OptedIn
}

// On the options route, the policy decides on the configured address:
// a host it does not know gets no CLIENT MAINT_NOTIFICATIONS at all, a
// known host (resolved to loopback by the emulator's DNS) and a
// configured IP prefix do; without a policy every address is asked, as
// before.
func TestOptInPolicyOnTheWire(t *testing.T) {
	quiet := maint.WithLogf(func(string, ...any) {})
	for _, c := range []struct {
		name   string
		policy func(string) bool
		host   string
		optIn  bool
	}{
		{"unknown host, known-host policy", maint.OptInHosts(), "cache.example.test", false},
		{"loopback IP, known-host policy", maint.OptInHosts(), "127.0.0.2", false},
		{"known host, known-host policy", maint.OptInHosts(), "redis-12000.c1.us-east-1-2.ec2.cloud.redislabs.com", true},
		{"loopback IP, its prefix configured", maint.OptInHosts("127.0.0.0/8"), "127.0.0.2", true},
		{"unknown host, its name configured", maint.OptInHosts("cache.example.test"), "cache.example.test", true},
		{"unknown host, no policy (the default)", nil, "cache.example.test", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			emu, ep := optInEnv(t)
			m := maint.New(quiet, maint.WithOptIn(c.policy))
			defer m.Close()
			hs, in := pingVia(t, emu, ep, m, c.host)
			if c.optIn {
				assert.Positive(t, in, "opted in")
				assert.Positive(t, m.Stats().Handshakes)
			} else {
				assert.Zero(t, hs, "the endpoint read no CLIENT MAINT_NOTIFICATIONS")
				assert.Zero(t, m.Stats().Handshakes)
			}
		})
	}
	t.Run("required, refused by the policy", func(t *testing.T) {
		emu, ep := optInEnv(t)
		m := maint.New(quiet, maint.WithOptIn(maint.OptInHosts()), maint.WithHandshake(maint.HandshakeRequired))
		defer m.Close()
		hs, _ := pingVia(t, emu, ep, m, "cache.example.test") // no failed connection: the policy wins
		assert.Zero(t, hs)
	})
}

// A cluster is decided on its seed addresses: the nodes it announces by IP
// opt in when a seed is a known host, and none does otherwise.
func TestOptInPolicyClusterSeeds(t *testing.T) {
	for _, c := range []struct {
		name  string
		seed  func(*mainttest.Cluster) string
		optIn bool
	}{
		{"known seed", func(cl *mainttest.Cluster) string {
			return net.JoinHostPort("redis-12000.c1.us-east-1-2.ec2.cloud.redislabs.com", cl.Nodes()[0].Port())
		}, true},
		{"IP seed", func(cl *mainttest.Cluster) string { return cl.Addrs()[0] }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			emu, err := mainttest.New(mainttest.Config{})
			require.NoError(t, err)
			defer emu.Close()
			cl, err := emu.NewCluster(mainttest.ClusterConfig{})
			require.NoError(t, err)
			emu.DNS().Set("redis-12000.c1.us-east-1-2.ec2.cloud.redislabs.com", cl.Nodes()[0].IP())
			g := maint.NewGroup(maint.WithLogf(func(string, ...any) {}), maint.WithOptIn(maint.OptInHosts()))
			defer g.Close()
			cc := g.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.seed(cl)}, Protocol: 3, Dialer: emu.Dialer(),
				ReadTimeout: 2 * time.Second})
			defer cc.Close()
			ctx := context.Background()
			for _, ep := range cl.Nodes() { // a key of each node's slots
				key := ""
				for i := 0; key == ""; i++ {
					if k := "k" + strconv.Itoa(i); cl.OwnerOf(k) == ep {
						key = k
					}
				}
				require.NoError(t, cc.Set(ctx, key, "v", 0).Err())
			}
			for _, ep := range cl.Nodes() {
				st := ep.Stats()
				require.Positive(t, st.Served, "node %s served nothing", ep.Addr())
				if c.optIn {
					assert.Positive(t, st.OptedIn, "node %s", ep.Addr())
				} else {
					assert.Zero(t, st.Handshakes, "node %s", ep.Addr())
				}
			}
		})
	}
}
