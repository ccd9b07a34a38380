package mainttest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/maintkit/maint/internal/resp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// startRedisServer runs a real redis-server on a free loopback port, or
// skips the test when none is installed.
func startRedisServer(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server in PATH")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitFor(t, "redis-server to accept", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return addr
}

// TestRealRedisBackend relays to a real redis-server: its own pushes
// (client-side caching invalidations) are relayed, and maintenance events
// reach go-redis's built-in handler the same way as with miniredis.
func TestRealRedisBackend(t *testing.T) {
	addr := startRedisServer(t)
	e := newEmu(t, Config{Backend: addr})
	old, nw := pairEndpoints(t, e)

	// A real server's invalidation pushes and ours share one connection.
	c := optedInClient(t, old, "internal-ip")
	if r := c.do("CLIENT", "TRACKING", "ON"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING: %q", r)
	}
	if r := c.do("GET", "tracked"); r != "_\r\n" {
		t.Fatalf("GET: %q", r)
	}
	other := dialRaw(t, nw.Addr())
	if r := other.do("SET", "tracked", "1"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	c.expect(">2\r\n$10\r\ninvalidate\r\n*1\r\n$7\r\ntracked\r\n")
	seq := old.Migrating(0, `["1"]`)
	c.expect(string(resp.AppendMigrating(nil, seq, 0, `["1"]`)))
	// Real Redis would reject the handshake; the emulator answers it.
	if r := c.do("CLIENT", "MAINT_NOTIFICATIONS", "OFF"); r != "+OK\r\n" {
		t.Fatal(r)
	}
	old.Migrated(`["1"]`)
	// The raw connection's part is done: from here on every connection on
	// old is go-redis's, so that old's count tells go-redis's handoff.
	_ = c.nc.Close()
	waitFor(t, "the raw connection gone from old", func() bool { return old.Stats().Open == 0 })

	client, log := builtinClient(t, e, old.Addr(), redis.Options{MaxRetries: -1}, maintnotifications.Config{})
	ctx := context.Background()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// A window that outlasts the test: go-redis's handoff runs on a worker
	// goroutine, and on a starved machine it has taken over a second. A
	// window ending first closed go-redis's connection on old, and with its
	// moving state over go-redis dialled old again for the next GET: a
	// connection on old that nothing closes. Within the window, leaving old
	// is go-redis's own handoff (its old connection closed once the
	// successor's is up), so no handoff is in flight when the client closes
	// (see settleHandoffs for why that matters on go-redis v9.23).
	mseq := old.Moving(Moving{Window: time.Minute, To: nw})
	if err := client.Get(ctx, "k").Err(); err != nil { // delivers the MOVING
		t.Fatal(err)
	}
	awaitHandoff(t, old)
	for i := 0; i < 5; i++ {
		if v, err := client.Get(ctx, "k").Result(); err != nil || v != "v" {
			t.Fatalf("GET: %q %v", v, err)
		}
	}
	if log.count("MOVING", mseq) != 1 || nw.Stats().OptedIn != 1 {
		t.Fatalf("go-redis did not move: saw %v, new %+v", log.seen, nw.Stats())
	}
	if st := old.Stats(); st.Open != 0 || st.ClosedAtWindowEnd != 0 {
		t.Fatalf("go-redis came back to old or left it only at the window's end: %+v", st)
	}
}
