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

// A Ring through the options route: every shard client gets its own Maint
// before its first connection, shards added later by SetAddrs too.
func ExampleGroup_NewRing() {
	emu, a, b := twoNodes()
	defer emu.Close()

	g := maint.NewGroup()
	defer g.Close() // runs after rdb.Close: close the client first
	rdb := g.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	defer rdb.Close()

	ctx := context.Background()
	_ = rdb.Set(ctx, "greeting", "hello", 0).Err()
	fmt.Println(rdb.Get(ctx, "greeting").Val(), len(g.Maints()))
	// Output: hello 2
}

// A ClusterClient through the options route: one Maint per node client,
// installed through ClusterOptions.NewClient before the node's first
// connection. Nothing is dialled until the first command.
func ExampleGroup_NewClusterClient() {
	g := maint.NewGroup()
	defer g.Close()
	rdb := g.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}})
	defer rdb.Close()
	fmt.Println(len(g.Maints())) // node clients are made with the slot map, at the first command
	// Output: 0
}

// A failover client (Redis Sentinel, or Redis Enterprise's Discovery
// Service): the data nodes' connections are watched and opted in, the
// sentinels' never are; at a MOVING, maint holds new work until the
// sentinels name another master. Nothing is dialled until the first command.
func ExampleGroup_NewFailoverClient() {
	g := maint.NewGroup()
	defer g.Close()
	rdb := g.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "db",
		SentinelAddrs: []string{"127.0.0.1:26379"},
	})
	defer rdb.Close()
	fmt.Println(len(g.Maints()))
	// Output: 1
}

// The two-step failover route, for code that builds its own client: the
// hook ConfigureFailover returns goes on the client it made.
func ExampleGroup_ConfigureFailover() {
	g := maint.NewGroup()
	defer g.Close()
	opt := &redis.FailoverOptions{MasterName: "db", SentinelAddrs: []string{"127.0.0.1:26379"}}
	h := g.ConfigureFailover(opt)
	rdb := redis.NewFailoverClient(opt)
	rdb.AddHook(h)
	defer rdb.Close()
	fmt.Println(len(g.Maints()))
	// Output: 1
}

// UniversalOptions take the route of the shape redis.NewUniversalClient
// would build: here one address, a *redis.Client.
func ExampleGroup_NewUniversalClient() {
	emu, a, _ := twoNodes()
	defer emu.Close()

	g := maint.NewGroup()
	defer g.Close()
	rdb := g.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{a.Addr()}})
	defer rdb.Close()
	fmt.Println(rdb.Ping(context.Background()).Val(), a.Stats().OptedIn)
	// Output: PONG 1
}

// Instrument installs maint on a client that exists already, of any kind.
// Connections dialled before it are not watched until the pool replaces
// them (it says so once); the options routes above watch every one.
func ExampleInstrument() {
	emu, a, b := twoNodes()
	defer emu.Close()

	rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	defer rdb.Close()
	g, err := maint.Instrument(rdb)
	if err != nil {
		panic(err)
	}
	defer g.Close()
	fmt.Println(rdb.Ping(context.Background()).Err(), len(g.Maints()))
	// Output: <nil> 2
}
