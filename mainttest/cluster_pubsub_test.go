package mainttest

import (
	"strconv"
	"testing"
	"time"
)

// TestClusterShardedPubSub: sharded pub/sub is each node's own, as on a real
// cluster, and a node that gives a slot away pushes sunsubscribe to its
// subscribers in the bytes redis-server 7.0 sends (captured from a real
// cluster: `>3 $12 sunsubscribe $<len> <channel> :<channels still subscribed>`).
func TestClusterShardedPubSub(t *testing.T) {
	e := newEmu(t, Config{})
	cl := newCluster(t, e, ClusterConfig{})
	a, b := cl.Nodes()[0], cl.Nodes()[1]
	tag := keyOn(t, cl, a, "t")
	x, y := "{"+tag+"}a", "{"+tag+"}b"
	other := keyOn(t, cl, a, "o") // another slot of a
	slot := strconv.Itoa(KeySlot(x))

	sub := dialRaw(t, a.Addr())
	sub.hello3()
	// Not the owner: MOVED, as redis-server answers; across slots: CROSSSLOT.
	wrong := dialRaw(t, b.Addr())
	wrong.hello3()
	if got := wrong.do("SSUBSCRIBE", x); got != "-MOVED "+slot+" "+a.Addr()+"\r\n" {
		t.Fatalf("SSUBSCRIBE on a non-owner: %q", got)
	}
	if got := sub.do("SSUBSCRIBE", x, other); got != errCrossSlot {
		t.Fatalf("SSUBSCRIBE across slots: %q", got)
	}

	sub.send("SSUBSCRIBE", x, y)
	sub.expect(">3\r\n$10\r\nssubscribe\r\n$" + strconv.Itoa(len(x)) + "\r\n" + x + "\r\n:1\r\n")
	sub.expect(">3\r\n$10\r\nssubscribe\r\n$" + strconv.Itoa(len(y)) + "\r\n" + y + "\r\n:2\r\n")
	sub.send("SSUBSCRIBE", other)
	sub.expect(">3\r\n$10\r\nssubscribe\r\n$" + strconv.Itoa(len(other)) + "\r\n" + other + "\r\n:3\r\n")

	// SPUBLISH reaches the owner's subscribers; elsewhere it is redirected.
	pub := dialRaw(t, a.Addr())
	if got := pub.do("SPUBLISH", x, "hi"); got != ":1\r\n" {
		t.Fatalf("SPUBLISH on the owner: %q", got)
	}
	sub.expect(">3\r\n$8\r\nsmessage\r\n$" + strconv.Itoa(len(x)) + "\r\n" + x + "\r\n$2\r\nhi\r\n")
	pubB := dialRaw(t, b.Addr())
	if got := pubB.do("SPUBLISH", x, "hi"); got != "-MOVED "+slot+" "+a.Addr()+"\r\n" {
		t.Fatalf("SPUBLISH on a non-owner: %q", got)
	}

	// The slot moves: a drops x and y, and says so; other stays.
	if err := cl.SetOwner(slot, b); err != nil {
		t.Fatal(err)
	}
	first, second := x, y // in name order
	sub.expect(">3\r\n$12\r\nsunsubscribe\r\n$" + strconv.Itoa(len(first)) + "\r\n" + first + "\r\n:2\r\n")
	sub.expect(">3\r\n$12\r\nsunsubscribe\r\n$" + strconv.Itoa(len(second)) + "\r\n" + second + "\r\n:1\r\n")
	if got := pubB.do("SPUBLISH", x, "hi"); got != ":0\r\n" {
		t.Fatalf("SPUBLISH on the new owner, nobody subscribed there: %q", got)
	}
	if got := pub.do("SPUBLISH", other, "o"); got != ":1\r\n" {
		t.Fatalf("SPUBLISH on a slot that stayed: %q", got)
	}
	sub.expect(">3\r\n$8\r\nsmessage\r\n$" + strconv.Itoa(len(other)) + "\r\n" + other + "\r\n$1\r\no\r\n")

	// SUNSUBSCRIBE with no channel: every channel left, then a nil one.
	sub.send("SUNSUBSCRIBE")
	sub.expect(">3\r\n$12\r\nsunsubscribe\r\n$" + strconv.Itoa(len(other)) + "\r\n" + other + "\r\n:0\r\n")
	sub.send("SUNSUBSCRIBE")
	sub.expect(">3\r\n$12\r\nsunsubscribe\r\n_\r\n:0\r\n")

	// RESP2: the same frames as arrays.
	r2 := dialRaw(t, b.Addr())
	r2.send("SSUBSCRIBE", x)
	r2.expect("*3\r\n$10\r\nssubscribe\r\n$" + strconv.Itoa(len(x)) + "\r\n" + x + "\r\n:1\r\n")
	if err := cl.SetOwner(slot, a); err != nil {
		t.Fatal(err)
	}
	r2.expect("*3\r\n$12\r\nsunsubscribe\r\n$" + strconv.Itoa(len(x)) + "\r\n" + x + "\r\n:0\r\n")

	// Silent: subscribers dropped without a word.
	cl.SetShardUnsubscribePush(false)
	sub.send("SSUBSCRIBE", x)
	sub.expect(">3\r\n$10\r\nssubscribe\r\n$" + strconv.Itoa(len(x)) + "\r\n" + x + "\r\n:1\r\n")
	if err := cl.SetOwner(slot, b); err != nil {
		t.Fatal(err)
	}
	sub.noFrameWithin(100 * time.Millisecond)
	if got := pubB.do("SPUBLISH", x, "hi"); got != ":0\r\n" {
		t.Fatalf("SPUBLISH after a silent drop: %q", got)
	}

	// A closed subscriber is forgotten.
	cl.SetShardUnsubscribePush(true)
	r2.send("SSUBSCRIBE", other)
	r2.read()
	_ = r2.nc.Close()
	waitFor(t, "the closed subscriber forgotten", func() bool {
		cl.shard.mu.Lock()
		defer cl.shard.mu.Unlock()
		return len(cl.shard.byConn) == 0 && len(cl.shard.subs) == 0
	})
}
