package mainttest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/maintkit/maint/mainttest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Example moves a go-redis client, using its built-in maintenance handler,
// from one endpoint to its successor with a MOVING.
func Example() {
	emu, err := mainttest.New(mainttest.Config{}) // embedded miniredis backend
	if err != nil {
		panic(err)
	}
	defer emu.Close()

	// The old and the new node: same port, different loopback IPs.
	old, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		panic(err)
	}
	successor, err := emu.AddEndpoint("127.0.0.3:" + old.Port())
	if err != nil { // port taken on 127.0.0.3: any port will do
		if successor, err = emu.AddEndpoint("127.0.0.3:0"); err != nil {
			panic(err)
		}
	}

	client := redis.NewClient(&redis.Options{
		Addr:     old.Addr(),
		Protocol: 3,
		Dialer:   emu.Dialer(),
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode:         maintnotifications.ModeEnabled,
			EndpointType: maintnotifications.EndpointTypeInternalIP,
		},
	})
	defer client.Close()
	ctx := context.Background()

	client.Set(ctx, "greeting", "hello", 0)
	fmt.Println("GET greeting:", client.Get(ctx, "greeting").Val())

	// A one-second window; the emulator closes what is left on the old
	// endpoint when it ends.
	seq := old.Moving(mainttest.Moving{Window: time.Second, To: successor})
	fmt.Println("MOVING seq:", seq)

	// go-redis reads the push with its next reply and, when that command
	// returns the connection to its pool, hands it over to the successor.
	client.Get(ctx, "greeting")
	deadline := time.Now().Add(10 * time.Second)
	for old.Stats().Open > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling the emulator, not go-redis
	}
	fmt.Println("GET greeting:", client.Get(ctx, "greeting").Val())
	fmt.Println("successor serving:", successor.Stats().Served > 0)

	ev, err := emu.WaitEvent(ctx, mainttest.IsKind(old, mainttest.KindWindowEndClose))
	if err != nil {
		panic(err)
	}
	fmt.Println("old endpoint:", ev.Kind)
	fmt.Println("GET after the window:", client.Get(ctx, "greeting").Val())

	// Output:
	// GET greeting: hello
	// MOVING seq: 1
	// GET greeting: hello
	// successor serving: true
	// old endpoint: window_end_close
	// GET after the window: hello
}

// ExampleEndpoint_SetHandshake makes a node answer the first two opt-ins
// with -LOADING, then like Redis Enterprise.
func ExampleEndpoint_SetHandshake() {
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		panic(err)
	}
	defer emu.Close()
	ep, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		panic(err)
	}
	ep.SetHandshake(mainttest.Handshake{
		Answer: mainttest.AnswerError,
		Error:  "LOADING Redis is loading the dataset in memory",
		Times:  2,
	})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		client := redis.NewClient(&redis.Options{
			Addr: ep.Addr(), Protocol: 3, MaxRetries: -1,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			OnConnect: func(ctx context.Context, cn *redis.Conn) error {
				err := cn.Do(ctx, "CLIENT", "MAINT_NOTIFICATIONS", "ON").Err()
				fmt.Println("opt-in:", err)
				return nil
			},
		})
		client.Ping(ctx)
		client.Close()
	}
	s := ep.Stats()
	fmt.Println("handshakes:", s.Handshakes, "opted in:", s.OptedIn)

	// Output:
	// opt-in: LOADING Redis is loading the dataset in memory
	// opt-in: LOADING Redis is loading the dataset in memory
	// opt-in: <nil>
	// handshakes: 3 opted in: 1
}

// ExampleDNS_SetRoundRobin puts two nodes behind one name and spreads
// successive dials over them.
func ExampleDNS_SetRoundRobin() {
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		panic(err)
	}
	defer emu.Close()
	// Two nodes on one port, as one name with two addresses needs.
	var a, b *mainttest.Endpoint
	for i := 0; b == nil; i++ {
		if i == 20 {
			panic(err)
		}
		if a, err = emu.AddEndpoint("127.0.0.2:0"); err != nil {
			panic(err)
		}
		if b, err = emu.AddEndpoint("127.0.0.3:" + a.Port()); err != nil {
			a.RefuseNew(true) // port taken on 127.0.0.3: try another
		}
	}
	emu.DNS().Set("db.example", a.IP(), b.IP())
	emu.DNS().SetRoundRobin(true)
	dial := emu.Dialer()
	for i := 0; i < 4; i++ {
		c, err := dial(context.Background(), "tcp", "db.example:"+a.Port())
		if err != nil {
			panic(err)
		}
		fmt.Println(c.RemoteAddr().String() == a.Addr())
		c.Close()
	}

	// Output:
	// true
	// false
	// true
	// false
}
