package maintotel_test

import (
	"log"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/maintotel"
)

// Instrument a client's Maint with the application's MeterProvider (here an
// SDK one with a manual reader; an OTLP or Prometheus exporter in practice).
func ExampleInstrument() {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	m := maint.New()
	rdb := m.NewClient(&redis.Options{Addr: "127.0.0.1:6379", Protocol: 3})
	stop, err := maintotel.Instrument(m, maintotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	// ... the application runs ...
	stop()
	_ = rdb.Close()
	_ = m.Close()
	// Output:
}

// Instrument every Maint maint.Instrument installs on a cluster client,
// including those of nodes the cluster discovers later.
func ExampleInstrument_group() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000"}, Protocol: 3})
	g, err := maint.Instrument(rdb)
	if err != nil {
		log.Fatal(err)
	}
	stop, err := maintotel.Instrument(g) // the global MeterProvider
	if err != nil {
		log.Fatal(err)
	}
	stop()
	_ = rdb.Close()
	_ = g.Close()
	// Output:
}
