package maint_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// A MOVING tells the client to send its credentials elsewhere. These tests
// run a real go-redis client with Options.TLSConfig (its own TLS dialer, or
// maint's on the options route) and a password through a MOVING of a TLS
// emulator, each endpoint serving its own certificate: a successor that
// proves the name the client verifies takes the load; one that does not
// never sees a command, and the client stays on the node it has.

const (
	tlsPassword = "s3cret"
	evilName    = "evil.example"
)

// tlsEnv is env with TLS endpoints: each endpoint's certificate is chosen by
// the address the client reached.
type tlsEnv struct {
	*env
	roots *x509.CertPool // trusts every certificate the endpoints serve
	mu    sync.Mutex
	certs map[string]*tls.Certificate // by endpoint IP
}

// newTLSEnv starts a TLS emulator whose old node serves a certificate for
// host (redis.test) and whose new node serves one for successorName. Both
// certificates are trusted by roots: only a name check can tell them apart.
// The backend requires tlsPassword.
func newTLSEnv(t *testing.T, successorName string) *tlsEnv {
	t.Helper()
	te := &tlsEnv{roots: x509.NewCertPool(), certs: map[string]*tls.Certificate{}}
	cfg := &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		ip, _, err := net.SplitHostPort(hi.Conn.LocalAddr().String())
		if err != nil {
			return nil, err
		}
		te.mu.Lock()
		defer te.mu.Unlock()
		if c := te.certs[ip]; c != nil {
			return c, nil
		}
		return nil, errors.New("no certificate for " + ip)
	}}
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf, TLS: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	emu.Miniredis().RequireAuth(tlsPassword)
	var old, nw *mainttest.Endpoint
	for i := 0; i < 20 && nw == nil; i++ {
		old, err = emu.AddEndpoint("127.0.0.2:0")
		require.NoError(t, err)
		nw, err = emu.AddEndpoint("127.0.0.3:" + old.Port())
	}
	require.NoError(t, err)
	te.env = &env{t: t, emu: emu, old: old, new: nw, addr: old.Addr()}
	// Each certificate is also valid for its endpoint's own IP, which a
	// client verifies when TLSConfig.ServerName is empty.
	te.serve(old, host, old.IP())
	te.serve(nw, successorName, nw.IP())
	return te
}

// serve makes ep present a fresh certificate for name (and ips), trusted by
// roots.
func (te *tlsEnv) serve(ep *mainttest.Endpoint, name string, ips ...string) {
	cert, ca, err := mainttest.SelfSignedCert(name, ips...)
	require.NoError(te.t, err)
	te.roots.AddCert(ca)
	te.mu.Lock()
	te.certs[ep.IP()] = &cert
	te.mu.Unlock()
}

// tlsOptions: the old node by IP, verified as host (redis.test), with a
// password, go-redis's own dialer (no Dialer: TLSConfig is go-redis's to
// apply), and no retry that would hide a failure.
func (te *tlsEnv) tlsOptions(pool int) *redis.Options {
	return &redis.Options{
		Addr:         te.old.Addr(),
		Protocol:     3,
		Password:     tlsPassword,
		PoolSize:     pool,
		MaxRetries:   -1,
		TLSConfig:    &tls.Config{RootCAs: te.roots, ServerName: host, MinVersion: tls.VersionTLS12},
		ReadTimeout:  3 * time.Second,
		WriteTimeout: 3 * time.Second,
	}
}

// A MOVING naming a successor whose certificate is valid for the name the
// client verifies: under INCR load on both routes, nothing fails, every
// INCR is applied once, the load moves to the successor (authenticated, or
// the backend would refuse it), and nothing is left on the old node for the
// server to close. maint needs no WithAllowSuccessor: a loopback successor
// named by a loopback node is allowed by default.
func TestMovingOverTLSToAVerifiedSuccessor(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			e := newTLSEnv(t, host)
			rdb, m, ev := e.client(r, e.tlsOptions(8))
			require.NoError(t, rdb.Ping(context.Background()).Err())
			l := startIncr(rdb, 8, "tls:")
			waitFor(t, "load on the old node", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
			window := 2 * time.Second
			e.old.Moving(mainttest.Moving{Window: window, To: e.new, StopAccepting: true})
			end := e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
			waitFor(t, "load on the new node", 10*time.Second, func() bool { return e.new.Stats().Served > 200 })
			l.stop()

			old, nw, st := e.old.Stats(), e.new.Stats(), m.Stats()
			t.Logf("old %+v\nnew %+v\nmaint %+v\nevents:\n%s", old, nw, st, ev)
			l.check(t, e.emu.Miniredis(), "tls:")
			assert.Zero(t, old.ClosedAtWindowEnd, "connections left on the old node for the server to close")
			assert.Zero(t, old.OwedAtClose, "replies owed when the old node closed")
			assert.True(t, old.LastServed.Before(end.At), "old node used until its close")
			assert.NotZero(t, nw.OptedIn, "connections opted in on the successor")
			assert.Zero(t, st.RefusedSuccessors)
			_, rejected := ev.first(maint.EventSuccessorRefused)
			assert.False(t, rejected, "the successor was refused")
			assert.NotZero(t, st.Handoffs)
		})
	}
}

// refusedRun is what a client went through in refusedSuccessor.
type refusedRun struct {
	e       *tlsEnv
	m       *maint.Maint
	ev      *eventLog
	l       *incrLoad
	windowE time.Time
	// inWindow counts the commands the old node served from the MOVING to
	// its window's end.
	inWindow int64
	// servedAtEnd is what the old node had served at its window's end.
	servedAtEnd int64
}

// refusedSuccessor runs INCR load through a MOVING that names a successor
// serving a certificate for evil.example (trusted by the client's RootCAs,
// so that only a name check can stop it), until the old node, which keeps
// accepting, has served 200 commands more after the window's end (10 s at
// most).
// serverName is the client's TLSConfig.ServerName: host, or "" to verify
// the IP dialled, which the successor's certificate also holds (then
// crypto/tls accepts the successor, and only maint's check, against the
// configured address, can stop it).
func refusedSuccessor(t *testing.T, r route, serverName string) *refusedRun {
	e := newTLSEnv(t, evilName)
	opt := e.tlsOptions(8)
	opt.TLSConfig.ServerName = serverName
	rdb, m, ev := e.client(r, opt)
	require.NoError(t, rdb.Ping(context.Background()).Err())
	run := &refusedRun{e: e, m: m, ev: ev}
	run.l = startIncr(rdb, 8, "tls:")
	waitFor(t, "load on the old node", 10*time.Second, func() bool { return e.old.Stats().Served > 200 })
	window := 2 * time.Second
	atMoving := e.old.Stats().Served
	e.old.Moving(mainttest.Moving{Window: window, To: e.new})
	run.windowE = e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second).At
	served := e.old.Stats().Served
	run.inWindow, run.servedAtEnd = served-atMoving, served
	// Not waitFor: should the client have gone elsewhere, the caller's
	// assertions on the successor say where.
	for deadline := time.Now().Add(10 * time.Second); e.old.Stats().Served <= served+200 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	run.l.stop()
	t.Logf("served by the old node within the window: %d", run.inWindow)
	t.Logf("old %+v\nnew %+v\nmaint %+v\nevents:\n%s", e.old.Stats(), e.new.Stats(), m.Stats(), ev)
	return run
}

// A MOVING naming a successor whose certificate is for another name: the
// successor gets its TLS handshake (that is how its certificate is judged)
// and nothing else, neither the password (HELLO, AUTH) nor a command, on
// both routes, whether the client's TLS handshake (TLSConfig.ServerName
// set) or maint's check (ServerName empty: the IP dialled is verified)
// catches the name. The refusal drops the successor: no command fails, no
// write is lost or run twice, and once the window is over the client is
// served by the old node again, on its own.
func TestMovingOverTLSNeverSendsCredentialsToAnotherName(t *testing.T) {
	for _, tc := range []struct {
		r          route
		serverName string
	}{{routes[0], host}, {routes[1], host}, {routes[0], ""}, {routes[1], ""}} {
		t.Run(tc.r.name+"/ServerName="+tc.serverName, func(t *testing.T) {
			run := refusedSuccessor(t, tc.r, tc.serverName)
			nw := run.e.new.Stats()
			assert.NotZero(t, nw.Opened, "the successor was dialled (its certificate is how it is judged)")
			assert.Zero(t, nw.Commands, "the successor received HELLO, AUTH or a command")
			assert.Zero(t, nw.Handshakes)
			assert.Zero(t, nw.Served)
			run.l.check(t, run.e.emu.Miniredis(), "tls:") // nothing failed, every INCR once
			assert.True(t, run.e.old.Stats().LastServed.After(run.windowE), "served by the old node after the window")
			assert.Greater(t, run.e.old.Stats().Served, run.servedAtEnd+200, "commands served by the old node after the window")
		})
	}
}

// A refused successor leaves the handoff a null endpoint's: the old node,
// which serves until its window's end, keeps serving the client until the
// last call (the refusal drops the pin and the handoff goes on as for a
// MOVING that named no successor), rather than every dial meeting a node
// retired at the MOVING for the whole window. The refusal is counted and
// said (RefusedSuccessors, EventSuccessorRefused).
func TestMovingOverTLSKeepsServingThroughARefusedSuccessor(t *testing.T) {
	for _, r := range routes[:2] {
		t.Run(r.name, func(t *testing.T) {
			run := refusedSuccessor(t, r, host)
			assert.Greater(t, run.inWindow, int64(200), "commands served by the old node within the window")
			assert.NotZero(t, run.m.Stats().RefusedSuccessors, "the refusal counted")
			_, said := run.ev.first(maint.EventSuccessorRefused)
			assert.True(t, said, "the refusal said")
		})
	}
}
