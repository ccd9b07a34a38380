package mainttest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// ErrClosed is returned by WaitEvent and AddEndpoint once the Emulator is closed.
var ErrClosed = errors.New("mainttest: emulator closed")

// Config configures an Emulator. The zero value is ready to use: an embedded
// miniredis backend, maintenance notifications supported, no logging.
type Config struct {
	// Backend is the Redis address every endpoint relays to. Empty starts an
	// embedded miniredis (see Emulator.Miniredis); otherwise any Redis server,
	// for example a real redis-server on 127.0.0.1:6379.
	Backend string

	// Unsupported makes every endpoint answer CLIENT MAINT_NOTIFICATIONS like
	// a server without support: `-ERR unknown subcommand 'maint_notifications'.
	// Try CLIENT HELP.` (subcommand echoed as sent). Nothing is recorded. It
	// takes precedence over Handshake.
	Unsupported bool

	// Handshake is how every endpoint answers CLIENT MAINT_NOTIFICATIONS at
	// first (Endpoint.SetHandshake changes it per endpoint). The zero value
	// answers like Redis Enterprise; with Times set, each endpoint gives this
	// answer to its first Times handshakes, then answers like Redis
	// Enterprise.
	Handshake Handshake

	// TLS, when set, makes every endpoint serve TLS with this configuration:
	// each accepted connection is wrapped with tls.Server, and its handshake
	// runs when the connection is first read. For a certificate per
	// endpoint, choose it in GetCertificate or GetConfigForClient by
	// ClientHelloInfo.Conn.LocalAddr(). nil serves plain TCP.
	TLS *tls.Config

	// Logf, when set, receives one line per logged Event and per internal
	// problem (backend dial failures, rebind failures). nil is silent. It is
	// called with the Emulator's locks held: it must not call the Emulator.
	Logf func(format string, args ...any)
}

// Emulator is an in-process Redis Enterprise maintenance emulator: a set of
// loopback endpoints relaying RESP to one backend, which inject maintenance
// push notifications on demand. Create it with New and release it with Close.
type Emulator struct {
	cfg     Config
	mr      *miniredis.Miniredis
	backend string
	dns     *DNS
	seq     atomic.Int64
	connID  atomic.Uint64
	done    chan struct{}

	mu        sync.Mutex // guards closed, endpoints, timers and wg.Add
	closed    bool
	endpoints []*Endpoint
	timers    map[*etimer]struct{}
	wg        sync.WaitGroup

	evMu   sync.Mutex
	events []Event
	evWake chan struct{} // closed and replaced on every appended event
}

// New starts an Emulator. With an empty cfg.Backend it starts an embedded
// miniredis; with an address it checks the backend is reachable.
func New(cfg Config) (*Emulator, error) {
	e := &Emulator{
		cfg:    cfg,
		done:   make(chan struct{}),
		timers: make(map[*etimer]struct{}),
		evWake: make(chan struct{}),
	}
	e.dns = &DNS{e: e, records: make(map[string][]string)}
	if cfg.Backend == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("mainttest: start miniredis: %w", err)
		}
		e.mr = mr
		e.backend = mr.Addr()
	} else {
		c, err := net.DialTimeout("tcp", cfg.Backend, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("mainttest: backend %s: %w", cfg.Backend, err)
		}
		_ = c.Close()
		e.backend = cfg.Backend
	}
	return e, nil
}

// Close closes every endpoint and connection (counting replies still owed in
// Stats.OwedAtClose), stops every timer and goroutine the Emulator owns and,
// when embedded, the miniredis. It is idempotent and always returns nil.
func (e *Emulator) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.done)
	for t := range e.timers {
		t.t.Stop()
	}
	clear(e.timers)
	eps := append([]*Endpoint(nil), e.endpoints...)
	e.mu.Unlock()

	for _, ep := range eps {
		ep.shutdown()
	}
	e.wg.Wait()
	if e.mr != nil {
		e.mr.Close()
	}
	return nil
}

// Miniredis returns the embedded backend, or nil when Config.Backend names
// an external server.
func (e *Emulator) Miniredis() *miniredis.Miniredis { return e.mr }

// BackendAddr returns the address every endpoint relays to.
func (e *Emulator) BackendAddr() string { return e.backend }

// DNS returns the resolver the Emulator controls; Dialer resolves through it.
func (e *Emulator) DNS() *DNS { return e.dns }

// Endpoints returns the endpoints added so far, in order.
func (e *Emulator) Endpoints() []*Endpoint {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Endpoint(nil), e.endpoints...)
}

// Dialer returns a dial function for redis.Options.Dialer (or any client).
// When the host of addr has records in DNS it dials those addresses in order
// (rotated per dial with DNS.SetRoundRobin) with addr's port and returns the
// first success; otherwise it dials addr as given with a net.Dialer.
func (e *Emulator) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return d.DialContext(ctx, network, addr)
		}
		ips := e.dns.dialOrder(host)
		if len(ips) == 0 {
			return d.DialContext(ctx, network, addr)
		}
		var firstErr error
		for _, ip := range ips {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(ip, port))
			if err == nil {
				return c, nil
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		return nil, firstErr
	}
}

// nextSeq returns the next sequence id, shared by all event types and endpoints.
func (e *Emulator) nextSeq() int64 { return e.seq.Add(1) }

func (e *Emulator) logf(format string, args ...any) {
	if e.cfg.Logf != nil {
		e.cfg.Logf(format, args...)
	}
}

// goLocked starts fn on a goroutine owned by the Emulator. The caller holds
// e.mu and has checked that the Emulator is not closed.
func (e *Emulator) goLocked(fn func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn()
	}()
}

// etimer is a timer owned by the Emulator: Close stops it, and its callback
// never runs after Close started.
type etimer struct {
	t *time.Timer
}

// schedule runs fn after d on an Emulator-owned goroutine, unless the
// Emulator is closed first.
func (e *Emulator) schedule(d time.Duration, fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	tm := &etimer{}
	tm.t = time.AfterFunc(d, func() {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return
		}
		delete(e.timers, tm)
		e.wg.Add(1)
		e.mu.Unlock()
		defer e.wg.Done()
		fn()
	})
	e.timers[tm] = struct{}{}
}
