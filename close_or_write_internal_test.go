package maint

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/handoff"
)

// A close that maint decides (at go-redis's request on a failover
// connection, or at the drain cap on a retired one) and a command's Write
// racing it on an idle connection agree on what happened: either the Write
// was counted first, the close is put off, and the command is on the wire;
// or the close came first, nothing of the command left, and its error says
// so (errNotWritten), so that it runs again. A command that fails with
// another error here is one that go-redis fails (MaxRetries -1) though it
// never reached the server.
func TestCloseAndWriteAgreeOnWhatWasWritten(t *testing.T) {
	ping := []byte("*1\r\n$4\r\nPING\r\n")
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	for _, tc := range []struct {
		name     string
		failover bool
	}{
		{"go-redis's close of a failover connection", true},
		{"the drain cap's close of a retired connection", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			defer m.Close()
			var refused, written int
			for i := 0; i < rounds; i++ {
				raw := &closeFlagConn{fakeConn: &fakeConn{r: bytes.NewReader(nil), remote: "127.0.0.2:6379"}}
				c := m.wrap(m.target(failoverTarget), raw, raw.remote)
				c.carried.Store(true) // past its handshake: the command is the application's
				f := &failoverConn{conn: c}
				var w net.Conn = f
				if !tc.failover {
					require.True(t, c.retire(true))
					w = c
				}
				var n int
				var err error
				race(i, func() {
					if tc.failover {
						_ = f.Close()
					} else {
						c.closeIfClosable(ErrDrainCap, false)
					}
				}, func() { n, err = w.Write(ping) })
				raw.mu.Lock()
				onWire := raw.w.Len()
				raw.mu.Unlock()
				switch {
				case err == nil:
					written++
					require.Equal(t, len(ping), n)
					require.Equal(t, len(ping), onWire)
					require.False(t, closedRaw(raw), "round %d: a command on the wire of a connection closed under it", i)
				default:
					refused++
					require.Zero(t, n)
					require.Zero(t, onWire, "round %d: bytes on the wire of a refused command", i)
					require.ErrorIs(t, err, errNotWritten, "round %d: a command kept off the wire must say it was not written", i)
				}
				if f.closeWanted.Load() {
					f.shut()
				}
			}
			t.Logf("%d rounds: %d written first, %d refused", rounds, written, refused)
		})
	}
}

// race runs other on a goroutine of its own and this on the caller's,
// started together, each after spinning a while that varies with round i,
// so that over the rounds every interleaving of the two comes up; it
// returns once both are done.
func race(i int, other, this func()) {
	var start, ready atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ready.Store(true)
		for k := 0; !start.Load(); k++ {
			if k > 100000 {
				runtime.Gosched() // descheduled meanwhile: let the other side run
			}
		}
		spin(i % 97)
		other()
	}()
	for !ready.Load() {
		runtime.Gosched()
	}
	start.Store(true)
	spin(i * 7 % 401)
	this()
	wg.Wait()
}

// spin busies the goroutine for about n short steps.
func spin(n int) {
	x := 0
	for i := 0; i < n*8; i++ {
		x += i
	}
	sink.Add(int64(x))
}

var sink atomic.Int64

// A new connection's first command on a node past its last call is refused
// (refusesFirstUse), also while the drain cap is deciding whether to close
// that connection: the cap sees the command counted and leaves the
// connection open, and a refusal that skipped the deciding state let the
// command onto the wire of a node whose window is over (it timed out there,
// in TestHelloReplyWaitsForTheOptInReply, one CI run in several).
func TestFirstCommandIsRefusedWhileTheCapDecides(t *testing.T) {
	ping := []byte("*1\r\n$4\r\nPING\r\n")
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	m := New()
	defer m.Close()
	m.hooked.Store(true)
	tg := m.target("redis.test:6379")
	const old = "127.0.0.2:6379"
	h, _ := handoff.New(handoff.Params{Gen: 1, Seq: 1, Node: old, Start: time.Now(),
		RelaxedTimeout: 10 * time.Second, HoldBudget: 10 * time.Second, Identifying: true})
	var r *run
	for i := 0; i < rounds; i++ {
		raw := &closeFlagConn{fakeConn: &fakeConn{r: bytes.NewReader(nil), remote: old}}
		c := m.wrap(tg, raw, old)
		if r == nil {
			r = testRun(m, c, tg, h)
			c.n.run.Store(r)
		}
		require.True(t, c.retire(true))
		var n int
		var err error
		race(i, func() { c.closeIfClosable(ErrDrainCap, false) }, func() { n, err = c.Write(ping) })
		raw.mu.Lock()
		onWire := raw.w.Len()
		raw.mu.Unlock()
		require.Error(t, err, "round %d: the first command written to a node past its last call", i)
		require.Zero(t, n)
		require.Zero(t, onWire, "round %d: bytes on the wire of a refused first command", i)
		require.ErrorIs(t, err, errNotWritten, "round %d", i)
	}
}
