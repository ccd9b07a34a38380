package mainttest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// testCert returns a certificate for name and a pool that trusts it.
func testCert(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	cert, ca, err := SelfSignedCert(name)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return cert, pool
}

// TestTLSEndpointServesGoRedis: with Config.TLS every endpoint serves TLS. A
// go-redis client verifying the endpoint's certificate (its own TLS dialer,
// no Dialer of the emulator's) is served and opts in, and a MOVING reaches
// go-redis's built-in handler through the TLS stream, which then hands its
// connection over to the successor, over TLS too. A client without TLS, or
// verifying another name, is not served.
func TestTLSEndpointServesGoRedis(t *testing.T) {
	cert, roots := testCert(t, "redis.test")
	e := newEmu(t, Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	old, nw := pairEndpoints(t, e)
	ctx := context.Background()

	newClient := func(tc *tls.Config, mode maintnotifications.Mode) (*redis.Client, *notificationLog) {
		c := redis.NewClient(&redis.Options{Addr: old.Addr(), Protocol: 3, TLSConfig: tc, MaxRetries: -1,
			DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: mode, EndpointType: maintnotifications.EndpointTypeInternalIP}})
		t.Cleanup(func() { _ = c.Close() })
		log := &notificationLog{}
		if m := c.GetMaintNotificationsManager(); m != nil {
			m.AddNotificationHook(log)
		}
		return c, log
	}

	// Not served: plain TCP to a TLS endpoint, and a certificate for a name
	// the client does not verify.
	plain, _ := newClient(nil, maintnotifications.ModeDisabled)
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("a plain-TCP client was served by a TLS endpoint")
	}
	wrong, _ := newClient(&tls.Config{RootCAs: roots, ServerName: "other.test"}, maintnotifications.ModeDisabled)
	var herr x509.HostnameError
	if err := wrong.Ping(ctx).Err(); !errors.As(err, &herr) {
		t.Fatalf("a client verifying other.test: %v, want an x509.HostnameError", err)
	}
	if st := old.Stats(); st.Commands != 0 || st.Served != 0 {
		t.Fatalf("the failed clients' commands reached the endpoint: %+v", st)
	}

	client, log := newClient(&tls.Config{RootCAs: roots, ServerName: "redis.test"}, maintnotifications.ModeEnabled)
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS: %v", err)
	}
	if got, err := client.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET over TLS: %q, %v", got, err)
	}
	if st := old.Stats(); st.OptedIn != 1 || st.Commands == 0 {
		t.Fatalf("want one connection opted in over TLS: %+v", st)
	}

	seq := old.Moving(Moving{Window: time.Second, To: nw})
	if err := client.Get(ctx, "k").Err(); err != nil {
		t.Fatalf("GET delivering the MOVING: %v", err)
	}
	if log.count("MOVING", seq) != 1 {
		t.Fatalf("the built-in handler did not see MOVING %d over TLS (saw %v)", seq, log.seen)
	}
	settleHandoffs(t, e, old)
	if got, err := client.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after the handoff: %q, %v", got, err)
	}
	if st := nw.Stats(); st.OptedIn != 1 || st.Served == 0 {
		t.Fatalf("want the handed-over connection opted in on the successor, over TLS: %+v", st)
	}
}
