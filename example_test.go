package maint_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// twoNodes starts an emulated Redis Enterprise endpoint and the node it will
// move to, in process, on loopback.
func twoNodes() (*mainttest.Emulator, *mainttest.Endpoint, *mainttest.Endpoint) {
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		panic(err)
	}
	old, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		panic(err)
	}
	next, err := emu.AddEndpoint("127.0.0.3:0")
	if err != nil {
		panic(err)
	}
	return emu, old, next
}

// untilServedBy runs GETs until next has served some, bounded.
func untilServedBy(ctx context.Context, rdb *redis.Client, next *mainttest.Endpoint) {
	for deadline := time.Now().Add(10 * time.Second); next.Stats().Served == 0 && time.Now().Before(deadline); {
		_ = rdb.Get(ctx, "greeting").Err()
		time.Sleep(10 * time.Millisecond)
	}
}

// An existing client needs one line: AddHook.
func Example() {
	emu, old, next := twoNodes()
	defer emu.Close()

	rdb := redis.NewClient(&redis.Options{Addr: old.Addr()})
	m := maint.New()
	rdb.AddHook(m)
	defer m.Close()
	defer rdb.Close()

	ctx := context.Background()
	rdb.Set(ctx, "greeting", "hello", 0)

	// The server announces that the endpoint moves to next within 2s.
	old.Moving(mainttest.Moving{Window: 2 * time.Second, To: next})
	untilServedBy(ctx, rdb, next)

	fmt.Println(rdb.Get(ctx, "greeting").Val())
	fmt.Println("moved:", next.Stats().Served > 0)
	fmt.Println("failed over to the server's close:", old.Stats().ClosedAtWindowEnd)
	// Output:
	// hello
	// moved: true
	// failed over to the server's close: 0
}

// A new client: Configure its options, so that maint sends the opt-in
// handshake itself and go-redis's built-in handler stays off.
func ExampleMaint_Configure() {
	emu, old, next := twoNodes()
	defer emu.Close()

	m := maint.New(maint.WithRelaxedTimeout(5 * time.Second))
	defer m.Close()
	opt := &redis.Options{Addr: old.Addr()}
	m.Configure(opt)
	rdb := redis.NewClient(opt)
	rdb.AddHook(m)
	defer rdb.Close()

	ctx := context.Background()
	rdb.Set(ctx, "greeting", "hello", 0)
	fmt.Println("opted in:", old.Stats().OptedIn > 0)

	old.Moving(mainttest.Moving{Window: 2 * time.Second, To: next})
	untilServedBy(ctx, rdb, next)
	fmt.Println(rdb.Get(ctx, "greeting").Val())
	// Output:
	// opted in: true
	// hello
}

// NewClient is Configure, redis.NewClient and AddHook in one call.
func ExampleMaint_NewClient() {
	emu, old, _ := twoNodes()
	defer emu.Close()

	m := maint.New()
	defer m.Close()
	rdb := m.NewClient(&redis.Options{Addr: old.Addr()})
	defer rdb.Close()

	fmt.Println(rdb.Ping(context.Background()).Val())
	// Output: PONG
}

// Restrict where a MOVING may send the client's connections and credentials.
func ExampleAllowNetworks() {
	allow := maint.AllowNetworks("10.0.0.0/8", "fd00::/8")
	fmt.Println(allow("10.1.2.3:12000"), allow("203.0.113.9:12000"), allow("evil.example:12000"))
	// Output: true false false
}

// Events tell what the Maint saw and did, for logs and metrics.
func ExampleWithOnEvent() {
	emu, old, next := twoNodes()
	defer emu.Close()

	handoffs := make(chan maint.Event, 16)
	m := maint.New(maint.WithOnEvent(func(e maint.Event) {
		if e.Kind == maint.EventHandoff || e.Kind == maint.EventRetire {
			handoffs <- e
		}
	}))
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: old.Addr()})
	rdb.AddHook(m)
	defer rdb.Close()

	ctx := context.Background()
	rdb.Ping(ctx)
	old.Moving(mainttest.Moving{Window: 2 * time.Second, To: next})
	rdb.Ping(ctx)
	fmt.Println((<-handoffs).Kind)
	fmt.Println((<-handoffs).Kind)
	// Output:
	// handoff
	// retire
}
