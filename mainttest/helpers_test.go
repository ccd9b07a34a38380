package mainttest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint/internal/resp"
)

// newEmu starts an Emulator closed at the end of the test.
func newEmu(t *testing.T, cfg Config) *Emulator {
	t.Helper()
	if cfg.Logf == nil && testing.Verbose() {
		cfg.Logf = t.Logf
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// pairEndpoints adds an old endpoint on 127.0.0.2 and a new one on
// 127.0.0.3 with the same port: an endpoint move that changes the IP only.
func pairEndpoints(t *testing.T, e *Emulator) (old, nw *Endpoint) {
	t.Helper()
	var err error
	for i := 0; i < 20; i++ {
		old, err = e.AddEndpoint("127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		nw, err = e.AddEndpoint("127.0.0.3:" + old.Port())
		if err == nil {
			return old, nw
		}
		old.RefuseNew(true) // port taken on 127.0.0.3: try another
	}
	t.Fatalf("no port free on both 127.0.0.2 and 127.0.0.3: %v", err)
	return nil, nil
}

func addEndpoint(t *testing.T, e *Emulator, addr string) *Endpoint {
	t.Helper()
	ep, err := e.AddEndpoint(addr)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// rawClient is a hand-driven RESP client for byte-exact checks.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
}

func encodeCmd(args ...string) []byte {
	b := resp.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = resp.AppendBulk(b, a)
	}
	return b
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rawClient) send(args ...string) { c.t.Helper(); c.write(encodeCmd(args...)) }

// read returns the next frame, failing the test after 10 s.
func (c *rawClient) read() string {
	c.t.Helper()
	f, err := c.readErr(10 * time.Second)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

func (c *rawClient) readErr(timeout time.Duration) (string, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	f, err := resp.ReadFrame(c.br, nil)
	return string(f), err
}

// expect reads one frame and compares it byte for byte.
func (c *rawClient) expect(want string) {
	c.t.Helper()
	if got := c.read(); got != want {
		c.t.Fatalf("got %q, want %q", got, want)
	}
}

// do sends a command and returns its reply.
func (c *rawClient) do(args ...string) string {
	c.t.Helper()
	c.send(args...)
	return c.read()
}

// hello3 switches to RESP3.
func (c *rawClient) hello3() {
	c.t.Helper()
	if r := c.do("HELLO", "3"); !strings.HasPrefix(r, "%") {
		c.t.Fatalf("HELLO 3: %q", r)
	}
}

// optIn sends the handshake the way go-redis does (lowercase).
func (c *rawClient) optIn(typ string) {
	c.t.Helper()
	args := []string{"client", "maint_notifications", "on"}
	if typ != "" {
		args = append(args, "moving-endpoint-type", typ)
	}
	c.send(args...)
	c.expect("+OK\r\n")
}

// noFrameWithin asserts nothing arrives for d.
func (c *rawClient) noFrameWithin(d time.Duration) {
	c.t.Helper()
	if f, err := c.readErr(d); err == nil {
		c.t.Fatalf("unexpected frame %q", f)
	} else if !isTimeout(err) {
		c.t.Fatalf("unexpected error %v", err)
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitEvent waits up to 10 s for an event.
func waitEvent(t *testing.T, e *Emulator, match func(Event) bool) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := e.WaitEvent(ctx, match)
	if err != nil {
		t.Fatalf("waiting for event: %v\nevents:\n%s", err, dumpEvents(e))
	}
	return ev
}

func dumpEvents(e *Emulator) string {
	var b strings.Builder
	for _, ev := range e.Events() {
		b.WriteString(ev.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// newCluster starts a cluster on e, failing the test on error.
func newCluster(t *testing.T, e *Emulator, cfg ClusterConfig) *Cluster {
	t.Helper()
	cl, err := e.NewCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// keyOn returns a key (with prefix) whose slot cl's node ep owns now.
func keyOn(t *testing.T, cl *Cluster, ep *Endpoint, prefix string) string {
	t.Helper()
	for i := 0; i < 100000; i++ {
		k := prefix + strconv.Itoa(i)
		if cl.OwnerOf(k) == ep {
			return k
		}
	}
	t.Fatalf("no key for %s", ep.Addr())
	return ""
}

// keyInSlot returns a key (with prefix) in slot.
func keyInSlot(t *testing.T, slot int, prefix string) string {
	t.Helper()
	for i := 0; i < 1000000; i++ {
		k := prefix + strconv.Itoa(i)
		if KeySlot(k) == slot {
			return k
		}
	}
	t.Fatalf("no key in slot %d", slot)
	return ""
}

func builtinClient(t *testing.T, e *Emulator, addr string, opt redis.Options, mc maintnotifications.Config) (*redis.Client, *notificationLog) {
	t.Helper()
	mc.Mode = maintnotifications.ModeEnabled
	mc.EndpointType = maintnotifications.EndpointTypeInternalIP
	opt.Addr = addr
	opt.Protocol = 3
	opt.Dialer = e.Dialer()
	opt.MaintNotificationsConfig = &mc
	c := redis.NewClient(&opt)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("go-redis Close: %v", err)
		}
	})
	m := c.GetMaintNotificationsManager()
	if m == nil {
		t.Fatal("go-redis built-in maintenance manager not enabled")
	}
	log := &notificationLog{}
	m.AddNotificationHook(log)
	return c, log
}

// awaitHandoff waits, without issuing commands, until every connection
// left old: go-redis's handoff dialled the successor, initialised the new
// connection and closed the old one. Commands issued while a handoff is in
// flight can race inside go-redis v9.23 (see TestGoRedisBuiltinStress).
func awaitHandoff(t *testing.T, old *Endpoint) time.Time {
	t.Helper()
	waitFor(t, "go-redis to leave the old endpoint", func() bool { return old.Stats().Open == 0 })
	return time.Now()
}

// settleHandoffs waits until the MOVING window of old ended and no
// connection is left on it, so no go-redis handoff is in flight when the
// client closes: go-redis v9.23's Client.Close holds its maintenance
// manager lock while waiting for handoff workers, and a handoff's initConn
// waits for that lock, so Close during a handoff blocks for 10 s, fails
// and leaks a goroutine.
func settleHandoffs(t *testing.T, e *Emulator, old *Endpoint) {
	t.Helper()
	waitEvent(t, e, IsKind(old, KindWindowEndClose))
	waitFor(t, "no connection on the old endpoint", func() bool { return old.Stats().Open == 0 })
}

// optedInClient dials ep, switches to RESP3 and opts in with typ.
func optedInClient(t *testing.T, ep *Endpoint, typ string) *rawClient {
	t.Helper()
	c := dialRaw(t, ep.Addr())
	c.hello3()
	c.optIn(typ)
	return c
}

// failoverClientAddrs returns a FailoverClient asking the sentinels addrs.
func failoverClientAddrs(t *testing.T, e *Emulator, name string, addrs []string) *redis.Client {
	t.Helper()
	return newFailoverClient(t, e, redis.FailoverOptions{MasterName: name, SentinelAddrs: addrs})
}

// addSentinel starts a Discovery Service for "db1" whose master is master.
func addSentinel(t *testing.T, e *Emulator, master *Endpoint) *Sentinel {
	t.Helper()
	s, err := e.AddSentinel("127.0.0.1:0", "db1", master)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
