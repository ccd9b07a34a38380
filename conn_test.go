package maint

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// fakeConn is a net.Conn whose server side is a byte script.
type fakeConn struct {
	r      io.Reader
	mu     sync.Mutex
	w      bytes.Buffer
	remote string
	closed bool
}

func (f *fakeConn) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *fakeConn) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Write(p)
}
func (f *fakeConn) Close() error                     { f.closed = true; return nil }
func (f *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (f *fakeConn) RemoteAddr() net.Addr             { a, _ := net.ResolveTCPAddr("tcp", f.remote); return a }
func (f *fakeConn) SetDeadline(time.Time) error      { return nil }
func (f *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fakeConn) SetWriteDeadline(time.Time) error { return nil }

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(strings.ReplaceAll(format, "%", "")))
}

func (l *logSink) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// wrapScript wraps a fake connection to 127.0.0.2:6379 whose server sends script.
func wrapScript(t *testing.T, m *Maint, script []byte) (*conn, *fakeConn) {
	t.Helper()
	raw := &fakeConn{r: bytes.NewReader(script), remote: "127.0.0.2:6379"}
	tg := m.target("redis.test:6379")
	c := m.wrap(tg, raw, raw.remote)
	return c, raw
}

func readAll(t *testing.T, c *conn) []byte {
	t.Helper()
	out, err := io.ReadAll(c)
	require.NoError(t, err)
	return out
}

// Bad input from the network is ignored with a log line and a counter: never
// a panic, never a desynchronised connection.
func TestBadNotificationsAreIgnored(t *testing.T) {
	cases := []struct {
		name   string
		push   []byte
		malfor bool // counted as malformed
	}{
		{"MOVING without time", []byte(">2\r\n$6\r\nMOVING\r\n:1\r\n"), true},
		{"MOVING seq not a number", []byte(">4\r\n$6\r\nMOVING\r\n$3\r\nabc\r\n:15\r\n_\r\n"), true},
		{"absurd window", resp.AppendMoving(nil, 7, 1<<40, "10.0.0.2:1", false), true},
		{"garbage endpoint", resp.AppendMoving(nil, 8, 5, "not an endpoint", false), true},
		{"port out of range", resp.AppendMoving(nil, 9, 5, "10.0.0.2:99999", false), true},
		{"endpoint with a slash", resp.AppendMoving(nil, 10, 5, "evil/x:1", false), true},
		{"MIGRATING as a map", []byte(">2\r\n$9\r\nMIGRATING\r\n%1\r\n+a\r\n+b\r\n"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logSink{}
			m := New(WithLogf(logs.logf))
			defer m.Close()
			reply := []byte("+OK\r\n$3\r\nbar\r\n")
			script := append(append([]byte("+FIRST\r\n"), tc.push...), reply...)
			c, _ := wrapScript(t, m, script)
			out := readAll(t, c)
			assert.Equal(t, "+FIRST\r\n"+string(reply), string(out), "the stream around the bad push is intact")
			if tc.malfor {
				assert.NotZero(t, m.Stats().Malformed, "counted")
				assert.NotZero(t, logs.count(), "logged")
			}
		})
	}
}

func TestAbsurdWindowIsCapped(t *testing.T) {
	m := New(WithLogf(t.Logf), WithConfig(Config{MaxWindow: 3 * time.Second, Logf: t.Logf}))
	defer m.Close()
	c, _ := wrapScript(t, m, resp.AppendMoving(nil, 1, 1<<40, "10.0.0.9:1", false))
	readAll(t, c)
	r := c.n.run.Load()
	require.NotNil(t, r)
	assert.Equal(t, 3*time.Second, r.h.Params().Window)
}

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

func TestStripsNotificationsAndCountsReplies(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	script := append([]byte("+OK\r\n"), resp.AppendMigrating(nil, 3, 0, `["1"]`)...)
	script = append(script, "$3\r\nbar\r\n"...)
	c, _ := wrapScript(t, m, script)
	_, err := c.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	assert.EqualValues(t, 3, c.owed(), "three commands in flight")
	out := readAll(t, c)
	assert.Equal(t, "+OK\r\n$3\r\nbar\r\n", string(out), "the MIGRATING is removed, nothing else")
	assert.EqualValues(t, 2, c.replies.Load(), "two replies read; the notification is not one")
	assert.EqualValues(t, 1, c.owed(), "the PING's reply is still owed")
	assert.True(t, c.n.relaxing())
	assert.EqualValues(t, 1, m.Stats().Notifications)
}

func TestSyscallConnRefusesRetired(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, _ := wrapScript(t, m, nil)
	rc, err := c.SyscallConn()
	require.NoError(t, err, "an active connection is usable")
	require.NotNil(t, rc)
	require.True(t, c.retire(false))
	_, err = c.SyscallConn()
	require.NoError(t, err, "a fenced connection is still usable by work already past the hold")
	require.True(t, c.retire(true))
	_, err = c.SyscallConn()
	require.ErrorIs(t, err, ErrRetired)
	require.True(t, c.closeWith(ErrDrainCap))
	_, err = c.SyscallConn()
	require.ErrorIs(t, err, ErrRetired)
}

// blockingConn returns its script, then blocks until its read deadline.
type blockingConn struct {
	fakeConn
	dl   chan time.Time
	once sync.Once
}

func (b *blockingConn) SetReadDeadline(t time.Time) error { b.dl <- t; return nil }
func (b *blockingConn) Read(p []byte) (int, error) {
	n, err := b.fakeConn.Read(p)
	if n > 0 || err == nil {
		return n, err
	}
	d := <-b.dl
	if d.IsZero() {
		d = <-b.dl
	}
	time.Sleep(time.Until(d))
	return 0, &net.OpError{Op: "read", Err: osTimeout{}}
}

type osTimeout struct{}

func (osTimeout) Error() string   { return "i/o timeout" }
func (osTimeout) Timeout() bool   { return true }
func (osTimeout) Temporary() bool { return true }

// The pool's health check peeks with no deadline: a read it triggers on an
// idle connection whose only pending bytes are a notification must not block.
func TestHealthCheckReadDoesNotBlockOnANotification(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	raw := &blockingConn{fakeConn: fakeConn{r: bytes.NewReader(resp.AppendMoving(nil, 1, 5, "10.0.0.2:1", false)), remote: "127.0.0.2:6379"}, dl: make(chan time.Time, 4)}
	c := m.wrap(m.target("redis.test:6379"), raw, raw.remote)
	_, _ = c.SyscallConn() // the health check
	done := make(chan error, 1)
	go func() {
		var b [16]byte
		_, err := c.Read(b[:])
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err, "nothing but the notification: the check sees an error and discards the connection")
	case <-time.After(5 * time.Second):
		t.Fatal("the health check's read blocked")
	}
	assert.EqualValues(t, 1, m.Stats().Handoffs, "the MOVING was acted on")
}

func TestCloseDuringHandoffIsPrompt(t *testing.T) {
	m := New(WithLogf(t.Logf))
	c, _ := wrapScript(t, m, resp.AppendMoving(nil, 1, 3600, "", true))
	readAll(t, c)
	require.NotNil(t, c.n.run.Load())
	start := time.Now()
	require.NoError(t, m.Close())
	assert.Less(t, time.Since(start), time.Second)
	require.NoError(t, m.Close(), "idempotent")
}

func TestHeldCommandHonoursItsContext(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	h := &hold{released: make(chan struct{}), until: time.Now().Add(time.Hour)}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := m.waitHold(ctx, h)
	require.ErrorIs(t, err, ErrHeld)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.EqualValues(t, 1, m.Stats().HeldTimeouts)
}

// A timeout names the relaxation only when one was applied to the deadline
// that expired; a probe's deadline (no reply owed) is never relaxed, however
// short, and a reply's always is.
func TestTimeoutErrorNamesTheMaintenance(t *testing.T) {
	m := New(WithLogf(t.Logf), WithRelaxedTimeout(2*time.Second))
	defer m.Close()
	c, _ := wrapScript(t, m, nil)
	plain := &net.OpError{Op: "read", Err: osTimeout{}}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "no maintenance: the error as it was")
	m.relax(c.n, resp.Notification{Kind: resp.KindMigrating, Seq: 5})

	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Millisecond)))
	assert.False(t, c.rdl.raised(), "a probe's deadline (no reply owed) is left as asked")
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "a probe's timeout names no relaxation")

	_, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Millisecond)))
	assert.True(t, c.wdl.raised(), "a 1 ms write deadline is relaxed")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	require.True(t, c.rdl.raised(), "a 50 ms reply deadline is relaxed")
	assert.GreaterOrEqual(t, time.Until(fromMono(c.rdl.applied.Load())), 1900*time.Millisecond)
	err = c.ioErr(plain, &c.rdl)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.Contains(t, err.Error(), "during maintenance (deadline relaxed to at least 2s)")
	assert.True(t, errors.Is(err, plain))

	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
	assert.False(t, c.rdl.raised(), "a deadline past the relaxed one is left as asked")
	assert.Same(t, error(plain), c.ioErr(plain, &c.rdl), "and its timeout names no relaxation")
}

// selfSigned returns a TLS server config with a certificate for name.
func selfSigned(t *testing.T, name string) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
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

// A later MOVING wins over an earlier one, and the earlier handoff's end never
// clears the later pin; another connection's copy of a MOVING starts nothing.
func TestLaterMovingWins(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	first := resp.AppendMoving(nil, 1, 5, "10.0.0.2:6379", false)
	second := resp.AppendMoving(nil, 2, 5, "10.0.0.3:6379", false)
	c, _ := wrapScript(t, m, append(first, second...))
	readAll(t, c)
	p := c.t.pin.Load()
	require.NotNil(t, p)
	assert.Equal(t, "10.0.0.3:6379", p.addr, "the later MOVING's successor")
	r := c.n.run.Load()
	require.NotNil(t, r)
	assert.EqualValues(t, 2, r.seq)
	assert.EqualValues(t, 2, m.Stats().Handoffs)

	// The first handoff's late decisions do not touch the newer pin.
	c.t.unpin(p.gen - 1)
	assert.Same(t, p, c.t.pin.Load())

	// A copy of the second MOVING on another connection to the node starts nothing.
	c2, _ := wrapScript(t, m, second)
	readAll(t, c2)
	assert.EqualValues(t, 2, m.Stats().Handoffs)
	assert.Same(t, r, c.n.run.Load())
}

func TestSubscriberIsRecognisedByItsPushes(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	c, _ := wrapScript(t, m, []byte(">3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"))
	assert.False(t, c.sub.Load())
	out := readAll(t, c)
	assert.Contains(t, string(out), "subscribe", "a subscription push passes through")
	assert.True(t, c.sub.Load())
	assert.Zero(t, c.replies.Load(), "a push is not a reply")
}
