package mainttest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/maintkit/maint/mainttest"
	"github.com/redis/go-redis/v9"
)

// ExampleSentinel_Failover runs go-redis's FailoverClient through an
// emulated Discovery Service and fails the master over to its replica.
func ExampleSentinel_Failover() {
	emu, err := mainttest.New(mainttest.Config{}) // embedded miniredis backend
	if err != nil {
		panic(err)
	}
	defer emu.Close()
	primary, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		panic(err)
	}
	replica, err := emu.AddEndpoint("127.0.0.3:0")
	if err != nil {
		panic(err)
	}
	ds, err := emu.AddSentinel("127.0.0.1:0", "db1", primary)
	if err != nil {
		panic(err)
	}
	ds.SetReplicas(replica)

	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    ds.MasterName(),
		SentinelAddrs: []string{ds.Addr()},
		Dialer:        emu.Dialer(),
	})
	defer client.Close()
	ctx := context.Background()
	client.Set(ctx, "greeting", "hello", 0)
	fmt.Println("served by the primary:", primary.Stats().Served > 0)

	// FAILING_OVER now; 100 ms later the service names the replica
	// (+switch-master), FAILED_OVER, and the primary's connections close.
	ds.Failover(mainttest.Failover{To: replica, SwitchAfter: 100 * time.Millisecond, CloseOld: true})
	ev, err := emu.WaitEvent(ctx, mainttest.IsKind(primary, mainttest.KindCloseAll))
	if err != nil {
		panic(err)
	}
	fmt.Println("primary:", ev.Kind)

	// go-redis retries on a new connection, which asks the service again.
	fmt.Println("GET greeting:", client.Get(ctx, "greeting").Val())
	fmt.Println("served by the replica:", replica.Stats().Served > 0)
	st := ds.Stats()
	fmt.Println("switches:", st.Switches, "unknown commands:", st.Unknown)

	// Output:
	// served by the primary: true
	// primary: close_all
	// GET greeting: hello
	// served by the replica: true
	// switches: 1 unknown commands: 0
}

// ExampleSentinel_Moving moves the master with a null MOVING: the client
// finds the successor only through the Discovery Service, which names it
// 200 ms after the MOVING, before the old node closes its connections.
func ExampleSentinel_Moving() {
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		panic(err)
	}
	defer emu.Close()
	old, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		panic(err)
	}
	successor, err := emu.AddEndpoint("127.0.0.3:0")
	if err != nil {
		panic(err)
	}
	ds, err := emu.AddSentinel("127.0.0.1:0", "db1", old)
	if err != nil {
		panic(err)
	}
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "db1", SentinelAddrs: []string{ds.Addr()}, Dialer: emu.Dialer(),
	})
	defer client.Close()
	ctx := context.Background()
	client.Set(ctx, "greeting", "hello", 0)

	ds.Moving(mainttest.SentinelMoving{
		Moving: mainttest.Moving{Window: 300 * time.Millisecond, CloseJitter: 100 * time.Millisecond,
			To: successor, Null: true, StopAccepting: true},
		NameAfter: 200 * time.Millisecond,
	})
	fmt.Println("named at the MOVING:", ds.Master() == old)
	if _, err := emu.WaitEvent(ctx, mainttest.IsKind(old, mainttest.KindWindowEndClose)); err != nil {
		panic(err)
	}
	fmt.Println("named at the window's end:", ds.Master() == successor)
	fmt.Println("GET greeting:", client.Get(ctx, "greeting").Val())
	fmt.Println("served by the successor:", successor.Stats().Served > 0)

	// Output:
	// named at the MOVING: true
	// named at the window's end: true
	// GET greeting: hello
	// served by the successor: true
}
