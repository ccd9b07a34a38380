package maint_test

// Contract tests of go-redis's sharded pub/sub on a ClusterClient: what
// clusterpubsub.go relies on, on the emulated cluster, without maint.
//
//   - A server-pushed sunsubscribe is only a message: the PubSub keeps its
//     connection and never resubscribes (the gap maint closes).
//   - On a read error the PubSub reconnects on its own, to the node its slot
//     map gives its first channel's slot at that moment, and resubscribes
//     every channel it holds in one SSUBSCRIBE.
//   - Reconnected to a node that no longer owns the slot, its SSUBSCRIBE meets
//     MOVED: go-redis hands the error to the reader and never retries, so the
//     subscription is lost for good. Hence maint closes a subscriber only once
//     the slot map shows the new owner.
//   - MasterForKey reads the same slot map and gives the node that reconnect
//     picks; ReloadState reloads it (lazily).

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/mainttest"
)

// psContract is an emulated cluster and a bare ClusterClient with one
// PubSub SSUBSCRIBEd to two channels of one slot of node a.
type psContract struct {
	emu      *mainttest.Emulator
	cl       *mainttest.Cluster
	a, b     *mainttest.Endpoint
	slot     int
	channels []string
	subDials *subDialLog
	cc, pub  *redis.ClusterClient
	ps       *redis.PubSub
	msgs     <-chan any
}

func newPSContract(t *testing.T) *psContract {
	t.Helper()
	emu, err := mainttest.New(mainttest.Config{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	cl, err := emu.NewCluster(mainttest.ClusterConfig{})
	require.NoError(t, err)
	p := &psContract{emu: emu, cl: cl, a: cl.Nodes()[0], b: cl.Nodes()[1]}
	for i := 0; ; i++ {
		tag := "pc" + strconv.Itoa(i)
		if cl.OwnerOf(tag) == p.a {
			p.slot = mainttest.KeySlot(tag)
			p.channels = []string{"{" + tag + "}:x", "{" + tag + "}:y"}
			break
		}
	}
	p.subDials = &subDialLog{next: emu.Dialer()}
	p.cc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: p.subDials.dial})
	t.Cleanup(func() { _ = p.cc.Close() })
	p.pub = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3, Dialer: emu.Dialer()})
	t.Cleanup(func() { _ = p.pub.Close() })
	ctx := context.Background()
	require.NoError(t, p.cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	p.ps = p.cc.SSubscribe(ctx, p.channels...)
	t.Cleanup(func() { _ = p.ps.Close() })
	p.msgs = p.ps.ChannelWithSubscriptions()
	for range p.channels {
		sb := p.nextSub(t, "the SSUBSCRIBE confirmations")
		require.Equal(t, "ssubscribe", sb.Kind)
	}
	return p
}

// nextSub returns the next confirmation (skipping messages still in
// flight), failing the test after 5s.
func (p *psContract) nextSub(t *testing.T, what string) *redis.Subscription {
	t.Helper()
	end := time.After(5 * time.Second)
	for {
		select {
		case m := <-p.msgs:
			if sb, ok := m.(*redis.Subscription); ok {
				return sb
			}
		case <-end:
			t.Fatalf("no confirmation received: %s", what)
			return nil
		}
	}
}

// delivers publishes on every channel until each delivered once (bounded),
// skipping confirmations; it reports whether all did.
func (p *psContract) delivers(t *testing.T, within time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	want := map[string]bool{}
	for _, ch := range p.channels {
		want[ch] = true
	}
	end := time.Now().Add(within)
	for len(want) > 0 && time.Now().Before(end) {
		for ch := range want {
			_ = p.pub.SPublish(ctx, ch, "m").Err()
		}
		select {
		case m := <-p.msgs:
			if msg, ok := m.(*redis.Message); ok {
				delete(want, msg.Channel)
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	return len(want) == 0
}

// breakConn closes the PubSub's connection under go-redis and returns the
// address of the one go-redis makes in its place.
func (p *psContract) breakConn(t *testing.T) string {
	t.Helper()
	cn, _, n := p.subDials.last()
	require.NoError(t, cn.Close())
	require.Eventually(t, func() bool { _, _, m := p.subDials.last(); return m == n+1 }, 5*time.Second, time.Millisecond,
		"go-redis never reconnected")
	_, addr, _ := p.subDials.last()
	return addr
}

// silent publishes on every channel for d and reports whether no message
// arrived at all.
func (p *psContract) silent(t *testing.T, d time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	// What was published before (delivers publishes until all arrived) may
	// still be on its way.
	for drained := false; !drained; {
		select {
		case <-p.msgs:
		case <-time.After(100 * time.Millisecond):
			drained = true
		}
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, ch := range p.channels {
			_ = p.pub.SPublish(ctx, ch, "m").Err()
		}
		select {
		case m := <-p.msgs:
			if _, ok := m.(*redis.Message); ok {
				return false
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

func TestContractPubSubServerSunsubscribeIsOnlyAMessage(t *testing.T) {
	p := newPSContract(t)
	require.True(t, p.delivers(t, 5*time.Second))
	_, _, dials := p.subDials.last()
	require.NoError(t, p.cl.SetOwner(strconv.Itoa(p.slot), p.b))
	for range p.channels {
		sb := p.nextSub(t, "the server's sunsubscribe")
		assert.Equal(t, "sunsubscribe", sb.Kind, "go-redis hands the server's sunsubscribe to the reader as a Subscription")
	}
	assert.True(t, p.silent(t, 500*time.Millisecond), "go-redis resubscribed after a server-pushed sunsubscribe")
	_, _, after := p.subDials.last()
	assert.Equal(t, dials, after, "go-redis reconnected after a server-pushed sunsubscribe")
}

func TestContractPubSubReconnectsThroughTheSlotMap(t *testing.T) {
	p := newPSContract(t)
	require.True(t, p.delivers(t, 5*time.Second))
	cn, addr, dials := p.subDials.last()
	require.Equal(t, p.a.Addr(), addr, "the PubSub connected to the slot's owner")

	// A read error: go-redis reconnects on its own, to the node the slot
	// map gives, and resubscribes both channels.
	require.NoError(t, cn.Close())
	for range p.channels {
		sb := p.nextSub(t, "the resubscription")
		assert.Equal(t, "ssubscribe", sb.Kind)
	}
	_, addr, n := p.subDials.last()
	assert.Equal(t, dials+1, n, "one new connection")
	assert.Equal(t, p.a.Addr(), addr)
	assert.True(t, p.delivers(t, 5*time.Second), "every channel delivers after the reconnect")

	// The slot moves; go-redis's slot map still says a: a reconnect now goes
	// to a, whose MOVED answers the SSUBSCRIBE, and go-redis stays there,
	// subscribed to nothing.
	require.NoError(t, p.cl.SetOwner(strconv.Itoa(p.slot), p.b))
	for range p.channels {
		assert.Equal(t, "sunsubscribe", p.nextSub(t, "the server's sunsubscribe").Kind)
	}
	require.Equal(t, p.a.Addr(), ownerBy(t, p.cc, p.channels[0]), "the slot map is not reloaded by a sunsubscribe")
	addr = p.breakConn(t)
	assert.Equal(t, p.a.Addr(), addr, "go-redis reconnected by its slot map of that moment, to the old owner")
	assert.True(t, p.silent(t, 500*time.Millisecond), "a reconnect to the old owner delivered")
	_, _, n = p.subDials.last()
	assert.Equal(t, dials+2, n, "go-redis retried the SSUBSCRIBE that met MOVED")

	// Once the slot map shows b (ReloadState, lazy), the reconnect goes to b
	// and resubscribes both channels.
	p.cc.ReloadState(context.Background())
	require.Eventually(t, func() bool { return ownerBy(t, p.cc, p.channels[0]) == p.b.Addr() }, 5*time.Second, time.Millisecond,
		"ReloadState never showed the new owner through MasterForKey")
	addr = p.breakConn(t)
	assert.Equal(t, p.b.Addr(), addr, "go-redis reconnected to the slot map's new owner")
	assert.True(t, p.delivers(t, 5*time.Second), "every channel delivers after the reconnect to the new owner")
}

// TestContractPubSubAcrossSlotsCannotResubscribe: a PubSub subscribed in two
// slots of one node (two SSubscribe calls, each accepted) resubscribes both
// in one SSUBSCRIBE after a read error, which the server refuses with
// CROSSSLOT: nothing is delivered any more.
func TestContractPubSubAcrossSlotsCannotResubscribe(t *testing.T) {
	p := newPSContract(t)
	var other string
	for i := 0; ; i++ {
		other = "{pco" + strconv.Itoa(i) + "}:z"
		if p.cl.OwnerOf(other) == p.a && mainttest.KeySlot(other) != p.slot {
			break
		}
	}
	require.NoError(t, p.ps.SSubscribe(context.Background(), other))
	assert.Equal(t, "ssubscribe", p.nextSub(t, "the second slot's confirmation").Kind)
	p.channels = append(p.channels, other)
	require.True(t, p.delivers(t, 5*time.Second), "both slots deliver on one connection")
	assert.Equal(t, p.a.Addr(), p.breakConn(t))
	assert.True(t, p.silent(t, 500*time.Millisecond), "go-redis resubscribed a PubSub spanning slots")
}
