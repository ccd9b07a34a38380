package maint_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
)

// Options are checked at construction, in go-redis's manner: a value maint
// cannot honour panics with a message that names the option (or the
// Config field, or the call given nil options), never silently becomes
// the default or is taken as given; and every value the docs allow passes.
func TestBadOptionsPanicNamingTheOption(t *testing.T) {
	quiet := maint.WithLogf(func(string, ...any) {})
	bad := []struct {
		name string
		make func()
		want string // the whole message, or (with a trailing "…") its start
	}{
		{"negative relax cap", func() { maint.WithRelaxCap(-5 * time.Second) }, "maint: WithRelaxCap(-5s): must not be negative; 0 means the default (60s)"},
		{"negative relaxed tail", func() { maint.WithRelaxedTail(-5 * time.Second) }, "maint: WithRelaxedTail(-5s): must not be negative…"},
		{"negative max window", func() { maint.WithMaxWindow(-time.Second) }, "maint: WithMaxWindow(-1s): must not be negative…"},
		{"relaxed timeout of 1ns", func() { maint.WithRelaxedTimeout(1) }, "maint: WithRelaxedTimeout(1ns): a floor under timeouts shorter than 10ms relaxes nothing…"},
		{"relaxed timeout under 10ms", func() { maint.WithRelaxedTimeout(9 * time.Millisecond) }, "maint: WithRelaxedTimeout(9ms)…"},
		{"relax cap in nanoseconds", func() { maint.WithRelaxCap(60) }, "maint: WithRelaxCap(60ns): shorter than 1ms…"},
		{"hold budget in nanoseconds", func() { maint.WithHoldBudget(10) }, "maint: WithHoldBudget(10ns): shorter than 1ms…"},
		{"handshake retry in nanoseconds", func() { maint.WithHandshakeRetry(5) }, "maint: WithHandshakeRetry(5ns)…"},
		{"unknown handshake mode", func() { maint.WithHandshake(maint.HandshakeMode(99)) }, "maint: WithHandshake(99): unknown: HandshakeAuto, HandshakeRequired or HandshakeOff"},
		{"unknown endpoint type", func() { maint.WithEndpointType("internal") }, `maint: WithEndpointType("internal"): unknown…`},
		{"WithConfig after an option", func() { maint.New(quiet, maint.WithConfig(maint.Config{})) }, "maint: WithConfig after other options…"},
		{"WithConfig after an option, to a Group", func() { maint.NewGroup(quiet, maint.WithConfig(maint.Config{})) }, "maint: WithConfig after other options…"},
		{"a bad Config", func() { maint.New(maint.WithConfig(maint.Config{RelaxCap: -time.Second})) }, "maint: Config.RelaxCap(-1s): must not be negative…"},
		{"a bad Config to a Group", func() { maint.NewGroup(maint.WithConfig(maint.Config{Handshake: 7})) }, "maint: Config.Handshake(7)…"},
		{"an Option of the application's own", func() { maint.New(func(c *maint.Config) { c.RelaxedTimeout = time.Nanosecond }) }, "maint: Config.RelaxedTimeout(1ns)…"},
		{"a nil option", func() { maint.New(quiet, nil) }, "maint: New: option 2 of 2 is nil"},
		{"a nil option to a Group", func() { maint.NewGroup(nil) }, "maint: NewGroup: option 1 of 1 is nil"},
	}
	nilOptions := []struct {
		call string
		typ  string
		make func(m *maint.Maint, g *maint.Group)
	}{
		{"Configure", "*redis.Options", func(m *maint.Maint, _ *maint.Group) { m.Configure(nil) }},
		{"NewClient", "*redis.Options", func(m *maint.Maint, _ *maint.Group) { m.NewClient(nil) }},
		{"Configure", "*redis.Options", func(_ *maint.Maint, g *maint.Group) { g.Configure(nil) }},
		{"NewClient", "*redis.Options", func(_ *maint.Maint, g *maint.Group) { g.NewClient(nil) }},
		{"ConfigureCluster", "*redis.ClusterOptions", func(_ *maint.Maint, g *maint.Group) { g.ConfigureCluster(nil) }},
		{"NewClusterClient", "*redis.ClusterOptions", func(_ *maint.Maint, g *maint.Group) { g.NewClusterClient(nil) }},
		{"ConfigureRing", "*redis.RingOptions", func(_ *maint.Maint, g *maint.Group) { g.ConfigureRing(nil) }},
		{"NewRing", "*redis.RingOptions", func(_ *maint.Maint, g *maint.Group) { g.NewRing(nil) }},
		{"NewUniversalClient", "*redis.UniversalOptions", func(_ *maint.Maint, g *maint.Group) { g.NewUniversalClient(nil) }},
		{"ConfigureFailover", "*redis.FailoverOptions", func(_ *maint.Maint, g *maint.Group) { g.ConfigureFailover(nil) }},
		{"NewFailoverClient", "*redis.FailoverOptions", func(_ *maint.Maint, g *maint.Group) { g.NewFailoverClient(nil) }},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) { assertPanics(t, c.want, c.make) })
	}
	for i, c := range nilOptions {
		t.Run(fmt.Sprintf("nil options to %s (%d)", c.call, i), func(t *testing.T) {
			m := maint.New(quiet)
			defer m.Close()
			g := maint.NewGroup(quiet)
			defer g.Close()
			assertPanics(t, "maint: "+c.call+": the options are a nil "+c.typ, func() { c.make(m, g) })
			assert.Empty(t, g.Maints(), "a Maint was made for nil options")
		})
	}

	// Instrument, which returns an error, returns one for a nil client.
	g := maint.NewGroup(quiet)
	defer g.Close()
	for name, rdb := range map[string]redis.UniversalClient{
		"nil": nil, "nil *redis.Client": (*redis.Client)(nil),
		"nil *redis.ClusterClient": (*redis.ClusterClient)(nil), "nil *redis.Ring": (*redis.Ring)(nil),
	} {
		assert.EqualError(t, g.Instrument(rdb), "maint: Instrument: the client is nil", name)
		_, err := maint.Instrument(rdb, quiet)
		assert.EqualError(t, err, "maint: Instrument: the client is nil", name)
	}
}

// Every value the docs allow is taken: zero (the defaults), negative where
// it turns a setting off, the smallest positive ones, and WithConfig first
// with options after it.
func TestAllowedOptionsPass(t *testing.T) {
	quiet := maint.WithLogf(func(string, ...any) {})
	for name, opts := range map[string][]maint.Option{
		"none":                    nil,
		"zeros":                   {maint.WithRelaxedTimeout(0), maint.WithRelaxedTail(0), maint.WithRelaxCap(0), maint.WithHoldBudget(0), maint.WithMaxWindow(0), maint.WithHandshakeRetry(0)},
		"negatives that turn off": {maint.WithRelaxedTimeout(-1), maint.WithHoldBudget(-1), maint.WithHandshakeRetry(-1)},
		"the smallest positives":  {maint.WithRelaxedTimeout(10 * time.Millisecond), maint.WithRelaxedTail(time.Millisecond), maint.WithRelaxCap(time.Millisecond), maint.WithHoldBudget(time.Millisecond), maint.WithMaxWindow(time.Millisecond), maint.WithHandshakeRetry(time.Millisecond)},
		"every mode and type":     {maint.WithHandshake(maint.HandshakeOff), maint.WithEndpointType("external-fqdn"), maint.WithEndpointType("")},
		"WithConfig first":        {maint.WithConfig(maint.Config{RelaxCap: time.Minute, Handshake: maint.HandshakeRequired}), quiet, maint.WithHoldBudget(time.Second)},
	} {
		require.NotPanics(t, func() { _ = maint.New(append(opts, quiet)...).Close() }, name)
		require.NotPanics(t, func() { _ = maint.NewGroup(append(opts, quiet)...).Close() }, name)
	}
}

// assertPanics asserts that f panics with want (or, want ending in "…",
// with a message that starts with it).
func assertPanics(t *testing.T, want string, f func()) {
	t.Helper()
	var got any
	func() {
		defer func() { got = recover() }()
		f()
	}()
	require.NotNil(t, got, "no panic; want %q", want)
	msg := fmt.Sprint(got)
	if prefix, ok := strings.CutSuffix(want, "…"); ok {
		assert.Truef(t, strings.HasPrefix(msg, prefix), "panic %q, want it to start with %q", msg, prefix)
		return
	}
	assert.Equal(t, want, msg)
}
