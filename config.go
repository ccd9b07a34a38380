package maint

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Config holds the settings of a Maint. The zero value means the defaults,
// which suit most applications; each field says what its zero value does.
type Config struct {
	// RelaxedTimeout is the floor put under the read and write deadlines of a
	// node's connections while it migrates or fails over, and of connections
	// being drained. It never shortens a longer or infinite timeout.
	// 0 means 10s; a negative value turns relaxation off (the drain keeps its
	// one-second floor).
	RelaxedTimeout time.Duration
	// RelaxedTail is how long relaxation lasts after MIGRATED or FAILED_OVER.
	// 0 means twice the relaxed timeout.
	RelaxedTail time.Duration
	// RelaxCap ends relaxation if the completion never comes. 0 means 60s.
	RelaxCap time.Duration
	// HoldBudget bounds how long past a MOVING window's end commands wait for
	// DNS to name another node, when it has not by then. 0 means 10s; a
	// negative value means commands are not held past the window's end.
	HoldBudget time.Duration
	// MaxWindow caps an announced MOVING window before anything is derived
	// from it. 0 means one hour.
	MaxWindow time.Duration
	// EndpointType is the moving-endpoint-type sent in the opt-in handshake
	// (Configure route only): "internal-ip", "internal-fqdn", "external-ip",
	// "external-fqdn" or "none". "" means auto: an FQDN with TLS, an IP
	// without; internal when the connected address is private.
	EndpointType string
	// Handshake says what Configure's OnConnect does with the opt-in
	// handshake. The zero value, HandshakeAuto, sends it and carries on
	// without notifications where the endpoint refuses it (remembered per
	// endpoint). HandshakeRequired fails the connection instead.
	// HandshakeOff never sends it.
	Handshake HandshakeMode
	// OptIn decides, for each address a client is configured with
	// (redis.Options.Addr; a cluster's seed addresses, a ring's shards),
	// whether the options route sends the opt-in handshake to it. nil means
	// every address: HandshakeAuto asks, and remembers a refusal per
	// endpoint for HandshakeRetry. OptInHosts() opts in only the hosts of
	// services known to support maintenance notifications (Redis Cloud,
	// Azure Managed Redis) and the hosts, suffixes and IP prefixes it is
	// given; see optin.go for why that is not the default. An address it
	// refuses is treated as HandshakeOff, Required or not.
	OptIn func(addr string) bool
	// HandshakeRetry is how long an endpoint that refused the opt-in for
	// lack of support (an unknown command or subcommand) is not asked again;
	// the first new connection after it asks again. Other refusals (LOADING,
	// a timeout, a closed socket) are not remembered. 0 means one minute; a
	// negative value means always ask.
	HandshakeRetry time.Duration
	// FixedAddress declares that the configured address never identifies a
	// node (a tunnel, a load balancer, a fixed front address): a null-endpoint
	// MOVING then holds new work from the last call until the window and its
	// close grace are over, and what connects afterwards is trusted. false
	// means auto: a host name identifies nodes (DNS moves it), a
	// literal IP does not unless a MOVING names a successor.
	FixedAddress bool
	// AllowSuccessor decides whether connections, and so credentials, may go
	// to a successor a MOVING names ("host:port"). nil allows any successor; a
	// refused one is treated like a null endpoint. See AllowNetworks.
	AllowSuccessor func(successor string) bool
	// Logf receives one line per notable event (bad input, handoffs, the
	// handshake unsupported): the Info-or-above records Logger would
	// receive, each formatted as "msg key=value ...". It is used only when
	// Logger is nil. Kept for compatibility; prefer Logger.
	Logf func(format string, args ...any)
	// Logger receives maint's structured log records (see WithLogger). nil
	// means Logf, or slog.Default() when Logf is nil too.
	Logger *slog.Logger
	// OnEvent, if set, is called for every Event, outside any lock of the
	// Maint. It must not block.
	OnEvent func(Event)

	// optionSet: an Option set something (WithConfig after it is refused).
	optionSet bool
}

// HandshakeMode is how the Configure route opts connections in.
type HandshakeMode uint8

const (
	// HandshakeAuto sends the handshake; an endpoint that refuses it is
	// remembered and not asked again.
	HandshakeAuto HandshakeMode = iota
	// HandshakeRequired sends the handshake and fails a connection whose
	// endpoint refuses it.
	HandshakeRequired
	// HandshakeOff sends nothing: notifications arrive only if something else
	// opts connections in.
	HandshakeOff
)

// Option changes one setting of a Config. The With functions check their
// argument when they are called, and New and NewGroup check the Config the
// options make: a value maint cannot honour (a negative cap, a timeout
// floor too short to relax anything, an unknown mode) panics with a
// message naming the option, as go-redis does for invalid options.
type Option func(*Config)

// set is an Option of one setting: it marks the Config as set, so that a
// WithConfig after it, which would replace it without a word, is refused.
func set(f func(*Config)) Option {
	return func(c *Config) {
		f(c)
		c.optionSet = true
	}
}

// WithConfig replaces the whole Config. It must come first: it panics when
// an option before it set something it would replace.
func WithConfig(c Config) Option {
	return func(dst *Config) {
		if dst.optionSet {
			panic("maint: WithConfig after other options: it replaces the whole Config, and every option before it with it; put WithConfig first")
		}
		*dst = c
		dst.optionSet = true
	}
}

// WithRelaxedTimeout sets Config.RelaxedTimeout: 0 means the default (10s),
// a negative value turns relaxation off, and a positive one must be at
// least 10ms.
func WithRelaxedTimeout(d time.Duration) Option {
	checkRelaxed("WithRelaxedTimeout", d)
	return set(func(c *Config) { c.RelaxedTimeout = d })
}

// WithRelaxedTail sets Config.RelaxedTail: 0 means the default, and a
// value must not be negative.
func WithRelaxedTail(d time.Duration) Option {
	checkSpan("WithRelaxedTail", d, "twice the relaxed timeout")
	return set(func(c *Config) { c.RelaxedTail = d })
}

// WithRelaxCap sets Config.RelaxCap: 0 means the default (60s), and a
// value must not be negative.
func WithRelaxCap(d time.Duration) Option {
	checkSpan("WithRelaxCap", d, "60s")
	return set(func(c *Config) { c.RelaxCap = d })
}

// WithHoldBudget sets Config.HoldBudget: 0 means the default (10s), a
// negative value means commands are not held past a window's end.
func WithHoldBudget(d time.Duration) Option {
	checkOffOrSpan("WithHoldBudget", d)
	return set(func(c *Config) { c.HoldBudget = d })
}

// WithMaxWindow sets Config.MaxWindow: 0 means the default (one hour), and
// a value must not be negative.
func WithMaxWindow(d time.Duration) Option {
	checkSpan("WithMaxWindow", d, "one hour")
	return set(func(c *Config) { c.MaxWindow = d })
}

// WithEndpointType sets Config.EndpointType: "", "internal-ip",
// "internal-fqdn", "external-ip", "external-fqdn" or "none".
func WithEndpointType(t string) Option {
	checkEndpointType("WithEndpointType", t)
	return set(func(c *Config) { c.EndpointType = t })
}

// WithHandshake sets Config.Handshake: HandshakeAuto, HandshakeRequired
// or HandshakeOff.
func WithHandshake(h HandshakeMode) Option {
	checkHandshake("WithHandshake", h)
	return set(func(c *Config) { c.Handshake = h })
}

// WithOptIn sets Config.OptIn (OptInHosts builds the host-name policy).
func WithOptIn(f func(addr string) bool) Option { return set(func(c *Config) { c.OptIn = f }) }

// WithHandshakeRetry sets Config.HandshakeRetry: 0 means the default (one
// minute), a negative value means always ask.
func WithHandshakeRetry(d time.Duration) Option {
	checkOffOrSpan("WithHandshakeRetry", d)
	return set(func(c *Config) { c.HandshakeRetry = d })
}

// WithFixedAddress sets Config.FixedAddress.
func WithFixedAddress(fixed bool) Option { return set(func(c *Config) { c.FixedAddress = fixed }) }

// WithAllowSuccessor sets Config.AllowSuccessor.
func WithAllowSuccessor(f func(successor string) bool) Option {
	return set(func(c *Config) { c.AllowSuccessor = f })
}

// minRelaxed is the shortest relaxed timeout maint takes: the relaxed
// timeout is a floor under deadlines, and one shorter than a round trip
// on a loopback relaxes nothing.
const minRelaxed = 10 * time.Millisecond

// minSpan is the shortest positive duration maint takes for its spans
// (tail, cap, budget, retry, window): a shorter one is a unit mistake
// (time.Duration(5) is 5ns).
const minSpan = time.Millisecond

// badOption panics with a message that names the option and the value.
func badOption(name string, v any, why string) {
	panic(fmt.Sprintf("maint: %s(%v): %s", name, v, why))
}

func checkRelaxed(name string, d time.Duration) {
	if d > 0 && d < minRelaxed {
		badOption(name, d, fmt.Sprintf("a floor under timeouts shorter than %v relaxes nothing; 0 means the default (10s), a negative value turns relaxation off", minRelaxed))
	}
}

func checkSpan(name string, d time.Duration, def string) {
	if d < 0 {
		badOption(name, d, "must not be negative; 0 means the default ("+def+")")
	}
	if d > 0 && d < minSpan {
		badOption(name, d, fmt.Sprintf("shorter than %v (a time.Duration counts nanoseconds)", minSpan))
	}
}

func checkOffOrSpan(name string, d time.Duration) {
	if d > 0 && d < minSpan {
		badOption(name, d, fmt.Sprintf("shorter than %v (a time.Duration counts nanoseconds); a negative value turns it off", minSpan))
	}
}

func checkEndpointType(name, t string) {
	switch t {
	case "", "internal-ip", "internal-fqdn", "external-ip", "external-fqdn", "none":
	default:
		badOption(name, fmt.Sprintf("%q", t), `unknown: "" (auto), "internal-ip", "internal-fqdn", "external-ip", "external-fqdn" or "none"`)
	}
}

func checkHandshake(name string, h HandshakeMode) {
	if h > HandshakeOff {
		badOption(name, uint8(h), "unknown: HandshakeAuto, HandshakeRequired or HandshakeOff")
	}
}

// check panics on a Config value maint cannot honour, naming its field:
// what WithConfig or an Option of the application's own set.
func (c Config) check() {
	checkRelaxed("Config.RelaxedTimeout", c.RelaxedTimeout)
	checkSpan("Config.RelaxedTail", c.RelaxedTail, "twice the relaxed timeout")
	checkSpan("Config.RelaxCap", c.RelaxCap, "60s")
	checkOffOrSpan("Config.HoldBudget", c.HoldBudget)
	checkSpan("Config.MaxWindow", c.MaxWindow, "one hour")
	checkEndpointType("Config.EndpointType", c.EndpointType)
	checkHandshake("Config.Handshake", c.Handshake)
	checkOffOrSpan("Config.HandshakeRetry", c.HandshakeRetry)
}

// configOf applies opts over the zero Config and checks the result; what
// names the caller in the message of a nil option.
func configOf(what string, opts []Option) Config {
	var cfg Config
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("maint: %s: option %d of %d is nil", what, i+1, len(opts)))
		}
		o(&cfg)
	}
	cfg.check()
	return cfg
}

// WithLogf sets Config.Logf.
func WithLogf(f func(format string, args ...any)) Option { return set(func(c *Config) { c.Logf = f }) }

// WithLogger sets Config.Logger: maint logs structured records with
// stable keys (node, seq, kind, window, successor, count, duration, and the
// handoff report's fields), a few at Info per handoff and none per command
// or connection above Debug.
func WithLogger(l *slog.Logger) Option { return set(func(c *Config) { c.Logger = l }) }

// WithOnEvent sets Config.OnEvent.
func WithOnEvent(f func(Event)) Option { return set(func(c *Config) { c.OnEvent = f }) }

// AllowNetworks returns an AllowSuccessor policy that accepts successors
// whose host is an IP inside one of the given prefixes ("10.0.0.0/8"), and
// refuses host names and everything else. It panics on a malformed prefix,
// at construction.
func AllowNetworks(prefixes ...string) func(successor string) bool {
	ps := make([]netip.Prefix, len(prefixes))
	for i, s := range prefixes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			panic(fmt.Sprintf("maint: AllowNetworks: %v", err))
		}
		ps[i] = p
	}
	return func(successor string) bool {
		host, _, err := net.SplitHostPort(successor)
		if err != nil {
			return false
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return false
		}
		for _, p := range ps {
			if p.Contains(ip.Unmap()) {
				return true
			}
		}
		return false
	}
}

// settings are the effective values, defaults applied.
type settings struct {
	relaxed        time.Duration // < 0: off
	tail           time.Duration
	relaxCap       time.Duration
	holdBudget     time.Duration // < 0: none
	maxWindow      time.Duration
	endpoint       string
	fixed          bool
	handshake      HandshakeMode
	handshakeRetry time.Duration // < 0: never remembered
	optIn          func(addr string) bool
	allow          func(string) bool
	log            *slog.Logger
	logf           func(string, ...any) // unstructured lines, at Warn through log (see Maint.logf)
	onEvent        func(Event)
	// cluster is shared by the Maints of one cluster's node clients
	// (cluster.go); nil outside a cluster.
	cluster *clusterState
	// failedOver, set on a failover client's Maint, runs at FAILED_OVER
	// (failover_switch.go).
	failedOver func(c *conn, seq int64)
	// noOptInSaid, set on the Maints of one client's node clients (a
	// cluster's, a ring's), says "no opt-in" once for the client, not once
	// per node; nil: once per Maint (handshake.go noteCarrying).
	noOptInSaid *sync.Once
}

func (c Config) settings() settings {
	s := settings{
		relaxed:        c.RelaxedTimeout,
		tail:           c.RelaxedTail,
		relaxCap:       c.RelaxCap,
		holdBudget:     c.HoldBudget,
		maxWindow:      c.MaxWindow,
		endpoint:       c.EndpointType,
		fixed:          c.FixedAddress,
		handshake:      c.Handshake,
		handshakeRetry: c.HandshakeRetry,
		optIn:          c.OptIn,
		allow:          c.AllowSuccessor,
		log:            c.logger(),
		onEvent:        c.OnEvent,
	}
	s.logf = func(format string, args ...any) { s.log.Warn(fmt.Sprintf(format, args...)) }
	if s.relaxed == 0 {
		s.relaxed = 10 * time.Second
	}
	if s.tail <= 0 {
		s.tail = 2 * s.relaxed
		if s.tail < 0 {
			s.tail = 0
		}
	}
	if s.relaxCap <= 0 {
		s.relaxCap = 60 * time.Second
	}
	if s.holdBudget == 0 {
		s.holdBudget = 10 * time.Second
	}
	if s.holdBudget < 0 {
		s.holdBudget = 0
	}
	if s.handshakeRetry == 0 {
		s.handshakeRetry = time.Minute
	}
	if s.maxWindow <= 0 {
		s.maxWindow = time.Hour
	}
	return s
}

// needOptions panics, naming the call, when opt is nil: go-redis would
// dereference it later, in a frame that names neither the call nor maint.
func needOptions[T any](call string, opt *T) {
	if opt == nil {
		panic(fmt.Sprintf("maint: %s: the options are a nil %T", call, opt))
	}
}
