package mainttest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint/mainttest"
)

// ExampleSelfSignedCert serves the emulator's endpoints over TLS, with a
// certificate for the name the client verifies.
func ExampleSelfSignedCert() {
	cert, ca, err := mainttest.SelfSignedCert("redis.test")
	if err != nil {
		panic(err)
	}
	emu, err := mainttest.New(mainttest.Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	if err != nil {
		panic(err)
	}
	defer emu.Close()
	ep, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		panic(err)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	client := redis.NewClient(&redis.Options{
		Addr:      ep.Addr(),
		Protocol:  3,
		TLSConfig: &tls.Config{RootCAs: roots, ServerName: "redis.test", MinVersion: tls.VersionTLS12},
	})
	defer client.Close()
	fmt.Println(client.Ping(context.Background()).Val())
	// Output: PONG
}
