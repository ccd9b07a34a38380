package mainttest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/maintkit/maint/mainttest"
	"github.com/redis/go-redis/v9"
)

// ExampleCluster_MigrateSlots moves the slot of a key from one node of an
// emulated OSS Cluster API to another, under a go-redis ClusterClient with
// no maintenance handler: its next command for the key meets -MOVED on the
// source and follows it.
func ExampleCluster_MigrateSlots() {
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		panic(err)
	}
	defer emu.Close()
	cl, err := emu.NewCluster(mainttest.ClusterConfig{}) // 3 nodes, slots split evenly
	if err != nil {
		panic(err)
	}
	nodes := cl.Nodes()

	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:  cl.Addrs(),
		Dialer: emu.Dialer(),
	})
	defer client.Close()
	ctx := context.Background()

	key := "{user:48}.name" // slot 8002, on the second node
	slot := mainttest.KeySlot(key)
	fmt.Println("slot:", slot, "on node 1:", cl.Owner(slot) == nodes[1])
	fmt.Println("SET:", client.Set(ctx, key, "Ada", 0).Val())

	// SMIGRATING now, the ownership change and SMIGRATED 100 ms later.
	seq, err := cl.MigrateSlots(mainttest.SlotMigration{
		From: nodes[1], To: nodes[2], Slots: "8000-8200",
		Duration: 100 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("SMIGRATING seq:", seq)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev, err := emu.WaitEvent(waitCtx, mainttest.IsKind(nodes[1], mainttest.KindSMigrated))
	if err != nil {
		panic(err)
	}
	fmt.Println("SMIGRATED seq:", ev.Seq, "now on node 2:", cl.Owner(slot) == nodes[2])

	fmt.Println("GET:", client.Get(ctx, key).Val())
	fmt.Println("MOVED served by node 1:", nodes[1].Stats().Cluster.Moved)
	// Output:
	// slot: 8002 on node 1: true
	// SET: OK
	// SMIGRATING seq: 1
	// SMIGRATED seq: 2 now on node 2: true
	// GET: Ada
	// MOVED served by node 1: 1
}
