package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	gopush "github.com/redis/go-redis/v9/push"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/conformance"
	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/mainttest"
)

// The suite's two switches. With FAULT_INJECTION_API_URL and
// REDIS_ENDPOINTS_CONFIG_PATH set it runs against that fault injector and
// database (full length unless -short); without them against a fresh
// emulated fault injector per client (short unless MAINT_CONFORMANCE=full).
var (
	realFI        = os.Getenv("FAULT_INJECTION_API_URL")
	realEndpoints = os.Getenv("REDIS_ENDPOINTS_CONFIG_PATH")
	real          = realFI != "" && realEndpoints != ""
)

func full() bool {
	if testing.Short() {
		return false
	}
	return real || os.Getenv("MAINT_CONFORMANCE") == "full"
}

// phases is the emulated timeline and the run lengths. Full length is the
// peers' own (60 s runs, 15 s MOVING windows); short keeps every scenario
// and shortens what only sets how long it takes.
type phases struct {
	run        time.Duration // redis-py's execution_duration
	warmup     time.Duration // traffic before the action starts
	lead       time.Duration // notification to action (starts-in)
	phase      time.Duration // migration or failover, start to completion
	latency    time.Duration // extra latency of the node while it migrates
	movingTTL  time.Duration // a bind's window
	clusterRun time.Duration // redis-py's cluster execution duration
	pace       time.Duration // pause between a load worker's operations
}

func currentPhases() phases {
	if full() {
		return phases{run: 60 * time.Second, warmup: 3 * time.Second, lead: time.Second, phase: 5 * time.Second,
			latency: 1500 * time.Millisecond, movingTTL: 15 * time.Second, clusterRun: 40 * time.Second,
			pace: 5 * time.Millisecond}
	}
	return phases{run: 3 * time.Second, warmup: 500 * time.Millisecond, lead: 300 * time.Millisecond,
		phase: 700 * time.Millisecond, latency: 1500 * time.Millisecond, movingTTL: 2 * time.Second,
		clusterRun: 3 * time.Second, pace: 10 * time.Millisecond}
}

// world is one database behind one fault injector, real or emulated.
type world struct {
	fi      *conformance.FaultInjector
	db      conformance.Database
	cluster *conformance.Database
	addr    string // host:port clients dial
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	ph      phases
	emu     *mainttest.Emulator      // nil on a real cluster
	fake    *mainttest.FaultInjector // nil on a real cluster
}

// emulated databases: a standalone one on two nodes, a three-node cluster.
const (
	emuHost      = "redis-12000.conformance.test"
	stdName      = "m-standard"                  // redis-py's default endpoint name
	clusterName  = "maint-notifications-oss-api" // its OSS Cluster API default
	emuStdBdb    = 1
	emuClusterDB = 2
	emuRTT       = time.Millisecond // per command, on the standalone nodes
)

var (
	realOnce  sync.Once
	realWorld *world
	realErr   error
	realMu    sync.Mutex // one scenario at a time on a real cluster
)

// newWorld returns the world a test's client lives in: on a real cluster
// the shared one (the caller holds it alone until the test ends), else a
// fresh emulated one. withCluster adds the emulated cluster database.
func newWorld(t *testing.T, withCluster bool, tune func(*phases)) *world {
	t.Helper()
	if real {
		realOnce.Do(func() { realWorld, realErr = loadRealWorld() })
		if realErr != nil {
			t.Fatal(realErr)
		}
		realMu.Lock()
		t.Cleanup(realMu.Unlock)
		return realWorld
	}
	ph := currentPhases()
	if tune != nil {
		tune(&ph)
	}
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	var a, b *mainttest.Endpoint
	for i := 0; i < 20 && b == nil; i++ {
		if a, err = emu.AddEndpoint("127.0.0.2:0"); err != nil {
			t.Fatal(err)
		}
		if b, err = emu.AddEndpoint("127.0.0.3:" + a.Port()); err != nil {
			a.RefuseNew(true)
			b = nil
		}
	}
	if b == nil {
		t.Fatalf("no port free on 127.0.0.2 and 127.0.0.3: %v", err)
	}
	for i, ep := range []*mainttest.Endpoint{a, b} { // the FQDN endpoint types name nodes
		// As Redis Enterprise names them: siblings of the database's host
		// (redis-12000.cluster.x, node1.cluster.x), the cluster's domain
		// after the first label, which go-redis's e2e suite checks.
		_, domain, _ := strings.Cut(emuHost, ".")
		name := fmt.Sprintf("node%d.%s", i+1, domain)
		ep.SetFQDN(name)
		emu.DNS().Set(name, ep.IP())
		// A network round trip to the proxy: as against a real cluster, a
		// client under load has commands in flight most of the time, when a
		// node closes its connections too.
		ep.SetLatency(emuRTT)
	}
	fake, err := emu.NewFaultInjector(mainttest.FaultInjectorConfig{LeadTime: ph.lead, Phase: ph.phase,
		MaintLatency: ph.latency, MovingTTL: ph.movingTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	if err := fake.AddDatabase(mainttest.FaultDatabase{Name: stdName, BdbID: emuStdBdb, Host: emuHost,
		Nodes: []*mainttest.Endpoint{a, b}}); err != nil {
		t.Fatal(err)
	}
	if withCluster {
		cl, err := emu.NewCluster(mainttest.ClusterConfig{Addrs: []string{"127.0.0.5:0", "127.0.0.6:0", "127.0.0.7:0"}})
		if err != nil {
			t.Fatalf("emulated cluster: %v", err)
		}
		if err := fake.AddDatabase(mainttest.FaultDatabase{Name: clusterName, BdbID: emuClusterDB, Cluster: cl}); err != nil {
			t.Fatal(err)
		}
	}
	// The emulated world is read through the same files and API as a real
	// one: the endpoints file goes to disk and back.
	cfg, err := fake.EndpointsConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "endpoints.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := loadWorld(fake.URL(), path, emu.Dialer())
	if err != nil {
		t.Fatal(err)
	}
	w.ph, w.emu, w.fake = ph, emu, fake
	return w
}

func loadRealWorld() (*world, error) {
	w, err := loadWorld(realFI, realEndpoints, nil)
	if err != nil {
		return nil, err
	}
	w.ph = currentPhases()
	w.ph.movingTTL = 15 * time.Second // Redis Enterprise's; read from the MOVING when it matters
	return w, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// loadWorld reads the endpoints file and picks the databases by the peers'
// names (REDIS_ENDPOINT_NAME, REDIS_CLUSTER_ENDPOINT_NAME).
func loadWorld(fiURL, path string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*world, error) {
	dbs, err := conformance.LoadEndpoints(path)
	if err != nil {
		return nil, err
	}
	std, ok := dbs[envOr("REDIS_ENDPOINT_NAME", stdName)]
	if !ok {
		return nil, fmt.Errorf("endpoints file %s has no database %q", path, envOr("REDIS_ENDPOINT_NAME", stdName))
	}
	addrs, err := std.Addrs()
	if err != nil {
		return nil, err
	}
	w := &world{fi: &conformance.FaultInjector{BaseURL: fiURL}, db: std, addr: addrs[0], dial: dial}
	if c, ok := dbs[envOr("REDIS_CLUSTER_ENDPOINT_NAME", clusterName)]; ok {
		w.cluster = &c
	}
	if w.dial == nil {
		var d net.Dialer
		w.dial = d.DialContext
	}
	if std.UsesTLS() {
		raw := w.dial
		w.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := raw(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			host, _, _ := net.SplitHostPort(addr)
			tc := tls.Client(c, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12,
				InsecureSkipVerify: os.Getenv("MAINT_CONFORMANCE_TLS_INSECURE") == "1"}) //nolint:gosec // opt-in for test clusters
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = c.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	return w, nil
}

// action runs a fault injector action on the standalone database and waits
// for it, as the peers do (poll every 300 ms, at most 10 minutes).
func (w *world) action(ctx context.Context, typ string, params map[string]any) error {
	if params == nil {
		params = map[string]any{}
	}
	if _, ok := params["bdb_id"]; !ok && typ != "sequence_of_actions" {
		params["bdb_id"] = w.db.BdbID()
		params["cluster_index"] = 0
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_, err := w.fi.Run(ctx, typ, params, 300*time.Millisecond)
	return err
}

// migrateAndBind is node-redis's migrateAndBindAction: one sequence.
func (w *world) migrateAndBind(ctx context.Context) error {
	return w.action(ctx, "sequence_of_actions", conformance.Sequence(w.db.BdbID(),
		conformance.Step{Type: "migrate"}, conformance.Step{Type: "bind"}))
}

// effect is redis-py's trigger_effect for a standalone database.
func (w *world) effect(ctx context.Context, effect string) error {
	return w.action(ctx, "topology_change_standalone", map[string]any{"bdb_id": w.db.BdbID(),
		"cluster_index": 0, "effect": effect, "trigger": triggerOf(effect)})
}

// triggerOf is the trigger redis-py picks for an effect (the first the
// service lists); a real service is asked.
func triggerOf(effect string) string {
	switch effect {
	case "conn_drop", "dns_resolution_change":
		return "bind"
	}
	return "migrate"
}

// --- the four clients of every scenario ---

// column is one way of running a scenario's client: maint on each install
// route, and the two controls.
type column int

const (
	colAddHook column = iota
	colOptions
	colBuiltin
	colNone
	numColumns
)

var columnNames = [numColumns]string{"maint AddHook", "maint options", "go-redis built-in", "no handler"}

// cellNotRun is the cell of the built-in's column under the race detector.
const cellNotRun = "not run (-race)"

// builtinUnderRace is why the built-in's column is not run under the race
// detector: go-redis v9.23's handoff worker re-initializes a connection
// (SetNetConnAndInitConn: HELLO, the opt-in) while a command of the
// application reads on it, a data race in go-redis that the race detector
// reports (seen under load, with a reply misparsed in the same column:
// "can't parse reply"). A report fails the whole test binary, whatever maint
// did; the column runs, and is tabled, without -race.
const builtinUnderRace = "go-redis's built-in handler races with itself under -race (its handoff re-initializes a connection in use): column run without -race only"

func (c column) String() string { return columnNames[c] }
func (c column) maint() bool    { return c == colAddHook || c == colOptions }

// params are the client parameters a scenario takes from its peer.
type params struct {
	timeout      time.Duration // socket / command timeout
	relaxed      time.Duration // relaxed timeout
	endpointType string        // moving-endpoint-type; "" for the client's default
	addr         string        // the address dialled; "" for the database's
	pool         int
	minIdle      int
	maxActive    int
	// optIn is how the column's client asks for notifications: "" its
	// default (auto), "required" (go-redis ModeEnabled, maint
	// HandshakeRequired), "off" (go-redis ModeDisabled, maint HandshakeOff).
	optIn string
	// pushes records the notifications the client received (received).
	pushes bool
}

// subject is one column's client in one world, with the evidence of its
// connections.
type subject struct {
	t     *testing.T
	w     *world
	col   column
	p     params
	rdb   *redis.Client
	m     *maint.Maint
	dials *tapDialer

	mu     sync.Mutex
	noted  []push // what maint read, with params.pushes
	hooked []push // what go-redis's built-in handled, with params.pushes
}

func (w *world) options(p params, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *redis.Options {
	addr := w.addr
	if p.addr != "" {
		addr = p.addr
	}
	return &redis.Options{
		Addr:           addr,
		Username:       w.db.Username,
		Password:       w.db.Password,
		Protocol:       3,
		MaxRetries:     -1, // every peer disables retries: nothing hides a failure
		ReadTimeout:    p.timeout,
		WriteTimeout:   p.timeout,
		PoolSize:       p.pool,
		MinIdleConns:   p.minIdle,
		MaxActiveConns: p.maxActive,
		Dialer:         dial,
	}
}

// client builds the column's client; everything is closed at the end of t.
func (w *world) client(t *testing.T, col column, p params) *subject {
	t.Helper()
	s := &subject{t: t, w: w, col: col, p: p, dials: &tapDialer{next: w.dial, recordPushes: p.pushes}}
	opt := w.options(p, s.dials.dial)
	ept := maintnotifications.EndpointType(p.endpointType)
	if p.endpointType == "" {
		ept = maintnotifications.EndpointTypeAuto
	}
	mopts := []maint.Option{maint.WithRelaxedTimeout(p.relaxed), maint.WithLogger(quietLog)}
	hookMode, builtinMode := maintnotifications.ModeAuto, maintnotifications.ModeEnabled
	switch p.optIn {
	case "required":
		hookMode = maintnotifications.ModeEnabled
		mopts = append(mopts, maint.WithHandshake(maint.HandshakeRequired))
	case "off":
		hookMode, builtinMode = maintnotifications.ModeDisabled, maintnotifications.ModeDisabled
		mopts = append(mopts, maint.WithHandshake(maint.HandshakeOff))
	}
	switch col {
	case colAddHook: // go-redis's own handshake (auto mode), maint on top
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: hookMode, EndpointType: ept}
		s.m = maint.New(mopts...)
		s.rdb = redis.NewClient(opt)
		s.rdb.AddHook(s.m)
	case colOptions:
		if p.endpointType != "" {
			mopts = append(mopts, maint.WithEndpointType(p.endpointType))
		}
		s.m = maint.New(mopts...)
		s.rdb = s.m.NewClient(opt)
	case colBuiltin:
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: builtinMode,
			EndpointType: ept, RelaxedTimeout: p.relaxed}
		s.rdb = redis.NewClient(opt)
	case colNone:
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		s.rdb = redis.NewClient(opt)
	}
	if p.pushes && s.m != nil {
		cancel := s.m.Observe(s.note)
		t.Cleanup(cancel)
	}
	if p.pushes && col == colBuiltin {
		if mgr := s.rdb.GetMaintNotificationsManager(); mgr != nil {
			mgr.AddNotificationHook(builtinNoter{s})
		}
	}
	t.Cleanup(func() {
		_ = s.rdb.Close()
		if s.m != nil {
			_ = s.m.Close()
		}
	})
	return s
}

// note records a notification maint read (EventNotification), as a push:
// seq, time and, for a MOVING, the endpoint ("" for null).
func (s *subject) note(e maint.Event) {
	if e.Kind != maint.EventNotification {
		return
	}
	p := push{at: e.At, kind: e.Name, args: []string{strconv.FormatInt(e.Seq, 10), "", ""}}
	for _, f := range strings.Fields(e.Detail) {
		k, v, _ := strings.Cut(f, "=")
		switch {
		case k == "time":
			p.args[1] = v
		case k == "endpoint" && v != "null":
			p.args[2] = v
		}
	}
	s.mu.Lock()
	s.noted = append(s.noted, p)
	s.mu.Unlock()
}

// builtinNoter records the notifications go-redis's built-in handler
// handles (handled), through its notification hook.
type builtinNoter struct{ s *subject }

func (b builtinNoter) PreHook(_ context.Context, _ gopush.NotificationHandlerContext, typ string, n []interface{}) ([]interface{}, bool) {
	b.s.mu.Lock()
	b.s.hooked = append(b.s.hooked, push{at: time.Now(), kind: typ})
	b.s.mu.Unlock()
	return n, true
}

func (builtinNoter) PostHook(context.Context, gopush.NotificationHandlerContext, string, []interface{}, error) {
}

// handled reports whether the client's handler has handled a notification
// of kind since (params.pushes): maint's EventNotification, go-redis's
// hook; a client with no handler handles none.
func (s *subject) handled(kind string, since time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range append(s.noted[:len(s.noted):len(s.noted)], s.hooked...) {
		if p.kind == kind && !p.at.Before(since) {
			return true
		}
	}
	return false
}

// awaitHandled returns once the client's handler has handled a
// notification of kind read since (params.pushes), or after 1 s. node-redis
// sends the command its timeout scenarios measure from its handler of the
// notification, once the client has read it; the client's copy may reach it
// after the suite observer's (far after, on a loaded machine), and a command
// whose deadline passed before the notification came is one no client can
// relax. A pooled go-redis client reads a push with its next command: it
// PINGs until then. A client with no handler handles nothing: it returns at
// once.
func (s *subject) awaitHandled(ctx context.Context, kind string, since time.Time) {
	if s.m == nil && s.col != colBuiltin {
		return
	}
	for deadline := time.Now().Add(time.Second); !s.handled(kind, since) && time.Now().Before(deadline); {
		_ = s.rdb.Ping(ctx).Err()
		sleepCtx(ctx, 10*time.Millisecond)
	}
}

// received returns the notifications the client received (params.pushes):
// on maint's columns those maint says it read (its EventNotification
// events, the client's own account, as node-redis's diagnostics channel
// is: maint reads the pushes of idle connections off the socket itself,
// which the tap does not see), on the controls' the pushes the tap saw
// the client read.
func (s *subject) received() []push {
	if s.m == nil {
		var out []push
		for _, p := range s.dials.Pushes() {
			out = append(out, p.push)
		}
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]push(nil), s.noted...)
}

// plain is a client with no handler, for the second connection some
// scenarios push through.
func (w *world) plain(t *testing.T) *redis.Client {
	opt := w.options(params{timeout: 5 * time.Second, pool: 2}, w.dial)
	opt.MaxRetries = 3
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// --- a tap on the client's connections ---

// stallKey is the key of the command whose reply a tapped connection
// withholds: node-redis's blockCommand, a reply that never comes, on both
// worlds. Pushes still get through, as they would from a slow server.
const stallKey = "conformance:stall"

// tapDialer wraps every connection of a client: it records where each
// landed, when, what the client wrote and when the client closed it, and a
// command on stallKey never gets its reply (the connection delivers push
// frames and drops everything else until its read deadline passes, so the
// command times out exactly at the deadline the client, and maint, set).
// A connection keeps its syscall.Conn, so go-redis's and maint's idle
// checks work as on the plain socket.
type tapDialer struct {
	next func(ctx context.Context, network, addr string) (net.Conn, error)
	// timeouts counts the reads that timed out on the wire, whether or not
	// the client surfaced them (a cluster client retries timeouts).
	timeouts atomic.Int64
	failed   atomic.Int64
	wire     map[string]*wireSeen // the OSS Cluster API's pushes read, by name
	// recordPushes makes every connection parse what it reads and record
	// the pushes (Pushes); off, reads are passed through untouched. What a
	// client reads off the socket through SyscallConn (maint's idle
	// checks) is not seen.
	recordPushes bool
	mu           sync.Mutex
	all          []*tapConn
	pushes       []tapPush
}

// tapPush is a push a client's connection read from the server.
type tapPush struct {
	push
	conn *tapConn
}

// Pushes returns the pushes the client's connections read, in order.
func (d *tapDialer) Pushes() []tapPush {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]tapPush(nil), d.pushes...)
}

func (d *tapDialer) addPush(c *tapConn, frame []byte) {
	if p, ok := parsePush(frame); ok {
		d.mu.Lock()
		d.pushes = append(d.pushes, tapPush{p, c})
		d.mu.Unlock()
	}
}

// wireSeen is how often a push name was read on the client's
// connections, and when first and last.
type wireSeen struct {
	n           int
	first, last time.Time
}

// wireNames are the push names the tap counts: a client reads them
// whether or not it acts on them, and one that did not opt in gets none.
// maint's idle check reads a waiting push straight off the socket (its
// syscall.Conn), which the tap does not see: count maint's by its events.
var wireNames = []string{"SMIGRATING", "SMIGRATED"}

// Wire returns how often the client read the push name, and when first
// and last.
func (d *tapDialer) Wire(name string) wireSeen {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.wire[name]; s != nil {
		return *s
	}
	return wireSeen{}
}

// scan counts the wire names in what a connection read. carry holds the
// end of the previous read, so that a name split across two reads is
// found; a name is counted by the read that completes it, so once.
func (c *tapConn) scan(p []byte) {
	if len(p) == 0 {
		return
	}
	buf := append(c.carry, p...)
	var found []string
	for _, name := range wireNames {
		tok := []byte("\n" + name + "\r\n") // a bulk string's line
		for i := 0; ; {
			j := bytes.Index(buf[i:], tok)
			if j < 0 {
				break
			}
			if end := i + j + len(tok); end > len(c.carry) {
				found = append(found, name)
			}
			i += j + len(tok)
		}
	}
	keep := min(len(buf), len("\nSMIGRATING\r\n")-1)
	c.carry = append(c.carry[:0:0], buf[len(buf)-keep:]...)
	if len(found) == 0 {
		return
	}
	now := time.Now()
	c.d.mu.Lock()
	if c.d.wire == nil {
		c.d.wire = map[string]*wireSeen{}
	}
	for _, name := range found {
		s := c.d.wire[name]
		if s == nil {
			s = &wireSeen{first: now}
			c.d.wire[name] = s
		}
		s.n++
		s.last = now
	}
	c.d.mu.Unlock()
}

func (d *tapDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.next(ctx, network, addr)
	if err != nil {
		d.failed.Add(1)
		return nil, err
	}
	tc := &tapConn{Conn: c, d: d, Asked: addr, Remote: c.RemoteAddr().String(), Dialed: time.Now()}
	d.mu.Lock()
	d.all = append(d.all, tc)
	d.mu.Unlock()
	if sc, ok := c.(syscall.Conn); ok {
		return &tapSysConn{tapConn: tc, sc: sc}, nil
	}
	return tc, nil
}

// Conns returns the connections dialled so far, in dial order.
func (d *tapDialer) Conns() []*tapConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*tapConn(nil), d.all...)
}

type tapConn struct {
	net.Conn
	d       *tapDialer
	Asked   string    // the address the client dialled
	Remote  string    // the address reached
	Dialed  time.Time // when the dial returned
	written atomic.Int64
	closed  atomic.Int64 // unix nanoseconds; 0 while open

	mu      sync.Mutex
	stalled bool
	br      *bufio.Reader // from the stall on
	pending []byte        // a push frame being handed out in a stalled read
	carry   []byte        // the end of the last read (scan); reads are not concurrent
	unread  []byte        // bytes read and not yet framed (recordPushes)
	// unframable: the recording gave up on this stream
	unframable bool
}

// tapSysConn is a tapConn over a socket, with its syscall.Conn.
type tapSysConn struct {
	*tapConn
	sc syscall.Conn
}

func (c *tapSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

func (c *tapConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(stallKey)) {
		c.mu.Lock()
		if !c.stalled {
			c.stalled, c.br = true, bufio.NewReader(c.Conn)
		}
		c.mu.Unlock()
	}
	c.written.Add(int64(len(p)))
	return c.Conn.Write(p)
}

func (c *tapConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	stalled := c.stalled
	c.mu.Unlock()
	if !stalled {
		n, err := c.Conn.Read(p)
		if isTimeout(err) {
			c.d.timeouts.Add(1)
		}
		c.scan(p[:n])
		if c.d.recordPushes && n > 0 {
			c.frame(p[:n])
		}
		return n, err
	}
	for len(c.pending) == 0 {
		f, err := resp.ReadFrame(c.br, nil)
		if err != nil {
			// The socket's own error, as a read of the socket returns it
			// (ReadFrame wraps it): the deadline's timeout is a net.Error.
			var ne net.Error
			if errors.As(err, &ne) {
				return 0, ne
			}
			return 0, err
		}
		if len(f) > 0 && f[0] == '>' {
			c.pending = f
			if c.d.recordPushes {
				c.d.addPush(c, f)
			}
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	c.scan(p[:n])
	return n, nil
}

// frame records the pushes among the bytes the client read; a frame not
// yet whole waits for the next read. A stream that cannot be framed (or a
// frame over 1 MiB, which no test here reads) stops the recording.
func (c *tapConn) frame(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unframable {
		return
	}
	c.unread = append(c.unread, b...)
	for len(c.unread) > 0 {
		f, err := resp.ReadFrame(bufio.NewReader(bytes.NewReader(c.unread)), nil)
		if err != nil {
			if len(c.unread) > 1<<20 || !errors.Is(err, io.ErrUnexpectedEOF) {
				c.unread, c.unframable = nil, true
			}
			return
		}
		if f[0] == '>' {
			c.d.addPush(c, f)
		}
		c.unread = c.unread[len(f):]
	}
}

func (c *tapConn) Close() error {
	c.closed.CompareAndSwap(0, time.Now().UnixNano())
	return c.Conn.Close()
}

// Written is how many bytes the client wrote (0: it never carried a
// command, not even the handshake).
func (c *tapConn) Written() int64 { return c.written.Load() }

// IsClosed reports whether the client closed the connection.
func (c *tapConn) IsClosed() bool { return c.closed.Load() != 0 }

// Closed is when the client closed it, the zero time while open.
func (c *tapConn) Closed() time.Time {
	if ns := c.closed.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// stall runs one command that never gets its reply and returns its error
// and how long the client waited.
func (s *subject) stall(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	err := s.rdb.Set(ctx, stallKey, "value", 0).Err()
	return time.Since(start), err
}

// --- an observer of the notifications ---

// observer is a connection of its own that opts in and records the pushes
// the database sends, so that a scenario acts on a notification the same
// moment whichever client it tests (a client with no handler sees none).
// It reconnects when the server closes it.
type observer struct {
	mu     sync.Mutex
	seen   []push
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

type push struct {
	at   time.Time
	kind string
	args []string
}

func (w *world) observe(t *testing.T) *observer { return w.observeAt(t, w.addr) }

// observeAt is an observer of the node at addr (a cluster's node).
func (w *world) observeAt(t *testing.T, addr string) *observer {
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{wake: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(o.done)
		var once sync.Once
		for ctx.Err() == nil {
			o.session(ctx, w, addr, func() { once.Do(func() { close(ready) }) })
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-o.done })
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the observer could not opt in")
	}
	return o
}

func (o *observer) session(ctx context.Context, w *world, addr string, ready func()) {
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	c, err := w.dial(dctx, "tcp", addr)
	dcancel()
	if err != nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	br := bufio.NewReader(c)
	hello := []string{"HELLO", "3"}
	if w.db.Password != "" {
		user := w.db.Username
		if user == "" {
			user = "default"
		}
		hello = append(hello, "AUTH", user, w.db.Password)
	}
	for _, cmd := range [][]string{hello, {"CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "none"}} {
		b := resp.AppendArrayHeader(nil, len(cmd))
		for _, a := range cmd {
			b = resp.AppendBulk(b, a)
		}
		if _, err := c.Write(b); err != nil {
			return
		}
		for { // the reply, after any push a replay put in front of it
			f, err := resp.ReadFrame(br, nil)
			if err != nil {
				return
			}
			if f[0] == '>' {
				o.add(f)
				continue
			}
			if f[0] == '-' {
				return
			}
			break
		}
	}
	ready()
	for {
		f, err := resp.ReadFrame(br, nil)
		if err != nil {
			return
		}
		if len(f) > 0 && f[0] == '>' {
			o.add(f)
		}
	}
}

func (o *observer) add(frame []byte) {
	p, ok := parsePush(frame)
	if !ok {
		return
	}
	o.mu.Lock()
	o.seen = append(o.seen, p)
	close(o.wake)
	o.wake = make(chan struct{})
	o.mu.Unlock()
}

// parsePush reads a push frame's name and arguments (a null as "").
func parsePush(frame []byte) (push, bool) {
	lines := strings.Split(string(frame), "\r\n")
	p := push{at: time.Now()}
	for i := 1; i < len(lines); i++ {
		l := lines[i]
		switch {
		case l == "" || l[0] == '$' || l[0] == '*':
		case l[0] == ':' || l[0] == '+':
			p.args = append(p.args, l[1:])
		case l[0] == '_':
			p.args = append(p.args, "")
		default:
			p.args = append(p.args, l)
		}
	}
	if len(p.args) == 0 {
		return push{}, false
	}
	p.kind, p.args = p.args[0], p.args[1:]
	return p, true
}

// wait returns the first push of kind seen at or after since.
func (o *observer) wait(ctx context.Context, kind string, since time.Time) (push, error) {
	for {
		o.mu.Lock()
		for _, p := range o.seen {
			if p.kind == kind && !p.at.Before(since) {
				o.mu.Unlock()
				return p, nil
			}
		}
		wake := o.wake
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			return push{}, fmt.Errorf("no %s notification: %w", kind, ctx.Err())
		case <-wake:
		}
	}
}

// window is a MOVING's announced window.
func (p push) window() time.Duration {
	if len(p.args) >= 2 {
		if s, err := strconv.Atoi(p.args[1]); err == nil {
			return time.Duration(s) * time.Second
		}
	}
	return 0
}

// --- results ---

type result struct {
	scenario, criterion string
	cells               [numColumns]string
	controlsMayPass     string // why no control failing is expected, when so
}

var (
	resMu   sync.Mutex
	results = map[string]*result{}
	resKeys []string
)

func record(scenario, criterion, mayPass string, col column, cell string) {
	resMu.Lock()
	defer resMu.Unlock()
	r := results[scenario]
	if r == nil {
		r = &result{scenario: scenario, criterion: criterion, controlsMayPass: mayPass}
		results[scenario] = r
		resKeys = append(resKeys, scenario)
	}
	r.cells[col] = cell
}

// scenario is one ported scenario: its peer's name, the criterion it
// asserts, and the check run for each column.
type scenario struct {
	name      string // the test's name, with the case
	criterion string
	// controlsMayPass says why the controls are expected to pass too (a
	// criterion about not doing worse than go-redis alone); "" means a
	// control must fail somewhere, or maint's pass is an accident.
	controlsMayPass string
	world           func(t *testing.T) *world
	check           func(ctx context.Context, t *testing.T, w *world, col column) error
}

// run runs the scenario for each column: at once on the emulator (each
// column in a world of its own), one after the other on a real cluster
// (newWorld holds it). maint's columns must pass; the controls are
// recorded.
func (sc scenario) run(t *testing.T) {
	names := make([]string, numColumns)
	for col := range numColumns {
		names[col] = strings.ReplaceAll(col.String(), " ", "_")
	}
	together(t, names, func(t *testing.T, i int) {
		col := column(i)
		if col == colBuiltin && raceOn {
			record(sc.name, sc.criterion, sc.controlsMayPass, col, cellNotRun)
			t.Skip(builtinUnderRace)
		}
		w := sc.world
		if w == nil {
			w = func(t *testing.T) *world { return newWorld(t, false, nil) }
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		err := sc.check(ctx, t, w(t), col)
		cell := "pass"
		if err != nil {
			cell = "FAIL: " + oneLine(err.Error())
		}
		switch {
		case err == nil:
		case !col.maint():
			t.Logf("control %s fails: %v", col, err)
		default:
			t.Errorf("%s: %v", sc.criterion, err)
		}
		record(sc.name, sc.criterion, sc.controlsMayPass, col, cell)
	})
}

// together runs one subtest per name, all at once: they mostly wait on
// the emulated timeline, so they are not bound by -parallel (t.Run called
// from several goroutines, as testing allows). On a real cluster they
// queue on the shared world.
func together(t *testing.T, names []string, fn func(t *testing.T, i int)) {
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, func(t *testing.T) { fn(t, i) })
		}()
	}
	wg.Wait()
}

// tcase is one case of a scenario test.
type tcase struct {
	name string
	fn   func(t *testing.T)
}

// runCases runs a scenario test's cases: together in short mode, one
// after the other at full length (60 s of load each, a machine's worth).
func runCases(t *testing.T, cases []tcase) {
	if full() {
		for _, c := range cases {
			t.Run(c.name, c.fn)
		}
		return
	}
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	together(t, names, func(t *testing.T, i int) { cases[i].fn(t) })
}

// parallelTop marks a scenario test parallel with the others when
// MAINT_CONFORMANCE_PARALLEL is set (a quiet machine): by default they run
// one after the other, each with its columns and cases at once.
func parallelTop(t *testing.T) {
	if !real && os.Getenv("MAINT_CONFORMANCE_PARALLEL") != "" {
		t.Parallel()
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 90 {
		s = s[:87] + "..."
	}
	return s
}

// table renders the results as a Markdown table.
func table() string {
	resMu.Lock()
	defer resMu.Unlock()
	var b strings.Builder
	b.WriteString("| scenario | criterion |")
	for _, n := range columnNames {
		b.WriteString(" " + n + " |")
	}
	b.WriteString("\n|---|---|---|---|---|---|\n")
	for _, k := range resKeys {
		r := results[k]
		fmt.Fprintf(&b, "| %s | %s |", r.scenario, r.criterion)
		for _, c := range r.cells {
			if c == "" {
				c = "-"
			}
			b.WriteString(" " + c + " |")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// accidents lists the scenario tests (a test function, all its cases)
// that maint passes on both routes in every case while both controls pass
// every case too and no reason was stated: they prove nothing. Cases are
// pooled because a control can pass one case by luck (no command in
// flight at the instant a node closes).
func accidents() []string {
	resMu.Lock()
	defer resMu.Unlock()
	type family struct{ maintPass, controlFails, mayPass bool }
	fams := map[string]*family{}
	var order []string
	for _, k := range resKeys {
		r := results[k]
		name, _, _ := strings.Cut(k, "/")
		f := fams[name]
		if f == nil {
			f = &family{maintPass: true}
			fams[name] = f
			order = append(order, name)
		}
		f.maintPass = f.maintPass && r.cells[colAddHook] == "pass" && r.cells[colOptions] == "pass"
		builtinFails := r.cells[colBuiltin] != "pass" && r.cells[colBuiltin] != cellNotRun
		f.controlFails = f.controlFails || builtinFails || r.cells[colNone] != "pass"
		f.mayPass = f.mayPass || r.controlsMayPass != ""
	}
	var out []string
	for _, name := range order {
		if f := fams[name]; f.maintPass && !f.controlFails && !f.mayPass {
			out = append(out, name)
		}
	}
	return out
}

// errorsOf is a bounded error collector for load generators.
type errorsOf struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (e *errorsOf) add(err error) {
	e.mu.Lock()
	e.n++
	if len(e.first) < 3 {
		e.first = append(e.first, err.Error())
	}
	e.mu.Unlock()
}

func (e *errorsOf) err(what string, ops int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d %s failed, first: %s", e.n, ops, what, strings.Join(e.first, "; "))
}

// isMaintTimeout reports whether err is maint's timeout during maintenance.
func isMaintTimeout(err error) bool {
	var te *maint.TimeoutError
	return errors.As(err, &te)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
