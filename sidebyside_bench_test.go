//go:build unix

package maint_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/metrics"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint"
)

// BenchmarkSideBySide compares, in one process and on the same server, what
// a command costs with plain go-redis (its maintenance handler off), with
// go-redis's built-in handler (maintnotifications.ModeEnabled) and with
// rdb.AddHook(maint.New()) on the plain client, while no maintenance is
// going on.
//
// Each leaf is one server and one workload. Its b.N is a number of rounds;
// a round runs one block of the workload on each of the three clients, in an
// order that rotates from round to round, so that drift of the machine, the
// server's state and the garbage one client leaves to the next hit all
// three alike. Per block it reads the process CPU time (getrusage: user plus
// system, all threads, so it includes the garbage collector and, against the
// embedded server, the server's own work, which is the same for all three)
// and the heap allocations, outside the block's window. It reports, per
// command, each client's CPU time and allocations and the CPU ratio of the
// built-in and maint to plain (1.000: free; 1.010: 1% dearer). The parent
// prints the whole table, and a table of the memory maint keeps per
// connection and per node at pool sizes 10, 100 and 1000.
//
// The servers: the embedded miniredis (always), and the redis-server named by
// MAINT_TEST_REDIS, when set. Neither knows CLIENT MAINT_NOTIFICATIONS, which
// the built-in handler in ModeEnabled must have answered: miniredis answers
// it from a pre-hook; for redis-server every client's connections, all three
// alike, pass through sbsShim, which answers it locally.
//
// .ci/run runs it once (-benchtime 1x: one round per workload) to prove it
// works; docs/performance.md's numbers come from many rounds (it has the commands).
func BenchmarkSideBySide(b *testing.B) {
	var table []sbsResult
	var mem []sbsMemory
	srvs := sbsServers(b)
	for _, srv := range srvs {
		for _, w := range sbsWorkloads {
			b.Run(fmt.Sprintf("server=%s/load=%s", srv.name, w.name), func(b *testing.B) {
				r := runSideBySide(b, srv, w)
				r.server, r.load = srv.name, w.name
				b.ReportMetric(r.cpuPerCmd(0), "plain-cpu-ns/cmd")
				b.ReportMetric(r.cpuPerCmd(1), "builtin-cpu-ns/cmd")
				b.ReportMetric(r.cpuPerCmd(2), "maint-cpu-ns/cmd")
				b.ReportMetric(r.ratio(1), "builtin/plain-cpu")
				b.ReportMetric(r.ratio(2), "maint/plain-cpu")
				b.ReportMetric(r.medianRatio(1), "builtin/plain-median")
				b.ReportMetric(r.medianRatio(2), "maint/plain-median")
				b.ReportMetric(r.allocsPerCmd(0), "plain-allocs/cmd")
				b.ReportMetric(r.allocsPerCmd(1), "builtin-allocs/cmd")
				b.ReportMetric(r.allocsPerCmd(2), "maint-allocs/cmd")
				// The last run of a leaf (the largest b.N) is the one kept.
				if len(table) > 0 && table[len(table)-1].server == r.server && table[len(table)-1].load == r.load {
					table[len(table)-1] = r
				} else {
					table = append(table, r)
				}
			})
		}
	}
	// The memory kept per connection, against the real server when there is
	// one (the embedded server's own per-connection state would be measured
	// with the client's otherwise: the same for all three, but noise).
	srv := srvs[len(srvs)-1]
	b.Run(fmt.Sprintf("server=%s/memory", srv.name), func(b *testing.B) {
		mem = mem[:0]
		for _, n := range []int{10, 100, 1000} {
			m := measureMemory(b, srv, n)
			b.ReportMetric(m.perConn(1), fmt.Sprintf("builtin-B/conn@%d", n))
			b.ReportMetric(m.perConn(2), fmt.Sprintf("maint-B/conn@%d", n))
			mem = append(mem, m)
		}
	})
	printSideBySide(table, mem)
}

// sbsClientNames are the three clients compared, in their index order.
var sbsClientNames = [3]string{"plain", "built-in", "maint"}

// sbsServer is a server BenchmarkSideBySide runs against.
type sbsServer struct {
	name string
	addr string
	// shim: the built-in handler's connections pass through sbsShim.
	shim bool
}

// sbsServers returns the embedded miniredis, started for b, and the
// redis-server of MAINT_TEST_REDIS, if set.
func sbsServers(b *testing.B) []sbsServer {
	b.Helper()
	servers := []sbsServer{{name: "miniredis", addr: benchMiniredis(b).Addr()}}
	if addr := os.Getenv("MAINT_TEST_REDIS"); addr != "" {
		servers = append(servers, sbsServer{name: "redis-server", addr: addr, shim: true})
	}
	return servers
}

// benchMiniredis starts an embedded miniredis for b that answers the
// built-in handler's opt-in.
func benchMiniredis(b *testing.B) *miniredis.Miniredis {
	b.Helper()
	mr, err := miniredis.Run()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(mr.Close)
	answerOptIn(mr)
	return mr
}

// answerOptIn makes mr answer the built-in handler's opt-in (CLIENT
// MAINT_NOTIFICATIONS) with +OK, as Redis Enterprise does.
func answerOptIn(mr *miniredis.Miniredis) {
	mr.Server().SetPreHook(func(p *server.Peer, cmd string, args ...string) bool {
		if strings.EqualFold(cmd, "client") && len(args) > 0 && strings.EqualFold(args[0], "maint_notifications") {
			p.WriteOK()
			return true
		}
		return false
	})
}

// options returns the options of client i (see sbsClientNames) for srv,
// with pool size n (0: go-redis's default).
func (srv sbsServer) options(i, n int) *redis.Options {
	opt := &redis.Options{Addr: srv.addr, PoolSize: n}
	mode := maintnotifications.ModeDisabled
	if i == 1 {
		mode = maintnotifications.ModeEnabled
	}
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: mode}
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Fixed socket buffers: the kernel's autotuning otherwise gives
		// each connection buffers of its own history, and the large-value
		// rows would compare connections rather than clients.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(sbsSocketBuffer)
			_ = tc.SetWriteBuffer(sbsSocketBuffer)
		}
		if srv.shim && i == 1 {
			return &sbsShim{Conn: c, sc: c.(syscall.Conn)}, nil
		}
		return c, nil
	}
	return opt
}

// sbsSocketBuffer is the size asked for every benchmark connection's
// socket buffers (the kernel caps it at net.core.[rw]mem_max).
const sbsSocketBuffer = 1 << 20

// open returns client i for srv and the function that closes it.
func (srv sbsServer) open(i, n int) (*redis.Client, func()) {
	rdb := redis.NewClient(srv.options(i, n))
	if i != 2 {
		return rdb, func() { _ = rdb.Close() }
	}
	m := maint.New(maint.WithLogf(func(string, ...any) {}))
	rdb.AddHook(m)
	return rdb, func() {
		_ = rdb.Close()
		_ = m.Close()
	}
}

// sbsShim answers CLIENT MAINT_NOTIFICATIONS among a connection's first
// writes with +OK, as a server that supports it does, and passes everything
// else through. Past the handshake it costs a wrapper's call and one
// comparison per read and per write. Only the built-in handler, which needs
// its opt-in answered, is given it: through a wrapper maint's conn would no
// longer see the *net.TCPConn whose deadlines it arms lazily
// (docs/design.md), and would be measured without that saving.
type sbsShim struct {
	net.Conn
	sc     syscall.Conn
	writes int
	fake   []byte // a local reply not yet read
}

// shimWrites is how many of a connection's first writes the shim inspects:
// go-redis's handshake (HELLO, CLIENT SETINFO, the opt-in) is among them.
const shimWrites = 4

func (s *sbsShim) Write(p []byte) (int, error) {
	if s.writes < shimWrites {
		s.writes++
		if bytes.Contains(bytes.ToUpper(p), []byte("MAINT_NOTIFICATIONS")) {
			s.fake = append(s.fake, "+OK\r\n"...)
			return len(p), nil
		}
	}
	return s.Conn.Write(p)
}

func (s *sbsShim) Read(p []byte) (int, error) {
	if len(s.fake) > 0 {
		n := copy(p, s.fake)
		s.fake = s.fake[n:]
		return n, nil
	}
	return s.Conn.Read(p)
}

// SyscallConn is the socket's, for go-redis's pool health check.
func (s *sbsShim) SyscallConn() (syscall.RawConn, error) { return s.sc.SyscallConn() }

// sbsWorkload is one row of the table.
type sbsWorkload struct {
	name string
	// cmds is the number of commands (or messages) in one block.
	cmds int
	// setup prepares client rdb (index i) for the workload and returns the
	// block to run on it; cleanup is registered on b.
	setup func(b *testing.B, srv sbsServer, i int, rdb *redis.Client) func() error
}

// Value sizes of the large-value rows.
const (
	size16K = 16 << 10
	size1M  = 1 << 20
)

var sbsWorkloads = []sbsWorkload{
	{"GET", 200, getBlock("sbs:small", 16, 200)},
	{"pipeline of 20 GETs", 20 * 30, pipelineBlock(20, 30)},
	{"pipeline of 100 GETs", 100 * 10, pipelineBlock(100, 10)},
	{"GET 16 KiB", 100, getBlock("sbs:16k", size16K, 100)},
	{"SET 16 KiB", 100, setBlock("sbs:16k:set", size16K, 100)},
	{"GET 1 MiB", 4, getBlock("sbs:1m", size1M, 4)},
	{"SET 1 MiB", 4, setBlock("sbs:1m:set", size1M, 4)},
	{"MGET of 100 keys", 20, mgetBlock(100, 20)},
	{"pub/sub message", 100, pubsubBlock(100)},
}

// getBlock is n GETs of one key holding size bytes.
func getBlock(key string, size, n int) func(*testing.B, sbsServer, int, *redis.Client) func() error {
	return func(b *testing.B, _ sbsServer, _ int, rdb *redis.Client) func() error {
		ctx := context.Background()
		if err := rdb.Set(ctx, key, strings.Repeat("v", size), 0).Err(); err != nil {
			b.Fatal(err)
		}
		return func() error {
			for range n {
				if err := rdb.Get(ctx, key).Err(); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// setBlock is n SETs of size bytes.
func setBlock(key string, size, n int) func(*testing.B, sbsServer, int, *redis.Client) func() error {
	return func(_ *testing.B, _ sbsServer, i int, rdb *redis.Client) func() error {
		ctx := context.Background()
		v := strings.Repeat("v", size)
		k := fmt.Sprintf("%s:%d", key, i)
		return func() error {
			for range n {
				if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// pipelineBlock is n pipelines of size GETs.
func pipelineBlock(size, n int) func(*testing.B, sbsServer, int, *redis.Client) func() error {
	return func(b *testing.B, _ sbsServer, _ int, rdb *redis.Client) func() error {
		ctx := context.Background()
		if err := rdb.Set(ctx, "sbs:small", strings.Repeat("v", 16), 0).Err(); err != nil {
			b.Fatal(err)
		}
		pipe := rdb.Pipeline()
		return func() error {
			for range n {
				for range size {
					pipe.Get(ctx, "sbs:small")
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// mgetBlock is n MGETs of keys keys of 16 bytes each.
func mgetBlock(keys, n int) func(*testing.B, sbsServer, int, *redis.Client) func() error {
	return func(b *testing.B, _ sbsServer, _ int, rdb *redis.Client) func() error {
		ctx := context.Background()
		names := make([]string, keys)
		pairs := make([]any, 0, 2*keys)
		for k := range names {
			names[k] = fmt.Sprintf("sbs:mget:%d", k)
			pairs = append(pairs, names[k], strings.Repeat("m", 16))
		}
		if err := rdb.MSet(ctx, pairs...).Err(); err != nil {
			b.Fatal(err)
		}
		return func() error {
			for range n {
				if err := rdb.MGet(ctx, names...).Err(); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// pubsubBlock is the delivery of n messages to client i's subscriber. A
// plain publisher of its own, outside the measured window, publishes them
// in one pipeline before the block; the block receives them, so it measures
// the subscriber's side only.
func pubsubBlock(n int) func(*testing.B, sbsServer, int, *redis.Client) func() error {
	return func(b *testing.B, srv sbsServer, i int, rdb *redis.Client) func() error {
		ctx := context.Background()
		channel := fmt.Sprintf("sbs:channel:%d", i)
		sub := rdb.Subscribe(ctx, channel)
		b.Cleanup(func() { _ = sub.Close() })
		if _, err := sub.Receive(ctx); err != nil { // the confirmation
			b.Fatal(err)
		}
		pub, closePub := srv.open(0, 1)
		b.Cleanup(closePub)
		pipe := pub.Pipeline()
		payload := strings.Repeat("p", 64)
		return func() error {
			// Outside the window: sbsRun calls the returned function
			// between its readings only for the receiving part.
			for range n {
				pipe.Publish(ctx, channel, payload)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			sbsStartWindow()
			for range n {
				if _, err := sub.ReceiveMessage(ctx); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// sbsWindow is set by a block that starts its measured window itself
// (sbsStartWindow) after unmeasured preparation; the benchmark runs one
// block at a time.
var sbsWindow struct {
	started bool
	cpu     time.Duration
	allocs  uint64
}

// sbsStartWindow (re)starts the measured window of the running block.
func sbsStartWindow() {
	sbsWindow.allocs = heapObjects()
	sbsWindow.cpu = processCPU()
	sbsWindow.started = true
}

// sbsResult is one row: per client, the CPU time and heap allocations of
// all its blocks, and the commands they ran.
type sbsResult struct {
	server, load string
	cpu          [3]time.Duration
	allocs       [3]uint64
	cmds         int
	// rounds[i] are client i's CPU times in each round, for the median of
	// the per-round ratios: robust to the odd block a scheduler hiccup or a
	// garbage collection lands on.
	rounds [3][]time.Duration
}

// medianRatio is the median over the rounds of client i's CPU time divided
// by plain go-redis's in the same round.
func (r sbsResult) medianRatio(i int) float64 {
	q := make([]float64, 0, len(r.rounds[0]))
	for k, p := range r.rounds[0] {
		if p > 0 {
			q = append(q, float64(r.rounds[i][k])/float64(p))
		}
	}
	if len(q) == 0 {
		return 0
	}
	sort.Float64s(q)
	return q[len(q)/2]
}

func (r sbsResult) cpuPerCmd(i int) float64 {
	return float64(r.cpu[i].Nanoseconds()) / float64(r.cmds)
}
func (r sbsResult) allocsPerCmd(i int) float64 { return float64(r.allocs[i]) / float64(r.cmds) }
func (r sbsResult) ratio(i int) float64        { return float64(r.cpu[i]) / float64(r.cpu[0]) }

// runSideBySide runs b.N rounds of w on the three clients of srv.
func runSideBySide(b *testing.B, srv sbsServer, w sbsWorkload) sbsResult {
	var blocks [3]func() error
	for i := range blocks {
		rdb, closeClient := srv.open(i, 0)
		b.Cleanup(closeClient)
		blocks[i] = w.setup(b, srv, i, rdb)
		// Warm up: the pool's connections dialled, buffers grown.
		for range 2 {
			if err := blocks[i](); err != nil {
				b.Fatalf("%s: %v", sbsClientNames[i], err)
			}
		}
	}
	var r sbsResult
	runtime.GC()
	b.ResetTimer()
	for round := range b.N {
		for k := range 3 {
			i := (round + k) % 3
			sbsWindow.started = false
			a0, c0 := heapObjects(), processCPU()
			err := blocks[i]()
			c1, a1 := processCPU(), heapObjects()
			if sbsWindow.started {
				a0, c0 = sbsWindow.allocs, sbsWindow.cpu
			}
			if err != nil {
				b.Fatalf("%s: %v", sbsClientNames[i], err)
			}
			r.cpu[i] += c1 - c0
			r.rounds[i] = append(r.rounds[i], c1-c0)
			r.allocs[i] += a1 - a0
		}
	}
	b.StopTimer()
	r.cmds = b.N * w.cmds
	return r
}

// heapSamples are the runtime metrics whose sum is the number of heap
// allocations so far (as runtime.MemStats.Mallocs, without stopping the
// world).
var heapSamples = []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/tiny/allocs:objects"}}

// heapObjects returns the number of heap allocations so far.
func heapObjects() uint64 {
	metrics.Read(heapSamples)
	return heapSamples[0].Value.Uint64() + heapSamples[1].Value.Uint64()
}

// sbsMemory is the heap each client holds with a pool of n connections
// open: the live heap with the client and its n connections, minus the live
// heap before it was created.
type sbsMemory struct {
	n    int
	heap [3]int64
	// sizes are maint's structures, from maint.StateSizes.
	sizes maint.StateSize
}

// perConn is client i's heap per connection beyond plain go-redis's.
func (m sbsMemory) perConn(i int) float64 { return float64(m.heap[i]-m.heap[0]) / float64(m.n) }

// measureMemory measures sbsMemory at pool size n: each client in turn
// opens n connections (n dedicated redis.Conns, each pinged once), and the
// live heap is read after two collections. Each client is measured three
// times, and the median kept.
func measureMemory(b *testing.B, srv sbsServer, n int) sbsMemory {
	m := sbsMemory{n: n, sizes: maint.StateSizes()}
	var runs [3][3]int64
	for rep := range 3 {
		for i := range 3 {
			runs[i][rep] = clientHeap(b, srv, i, n)
		}
	}
	for i := range 3 {
		s := runs[i][:]
		sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
		m.heap[i] = s[1]
	}
	return m
}

// clientHeap returns the live heap client i holds with n connections open.
func clientHeap(b *testing.B, srv sbsServer, i, n int) int64 {
	before := liveHeap()
	rdb, closeClient := srv.open(i, n)
	defer closeClient()
	ctx := context.Background()
	conns := make([]*redis.Conn, n)
	for k := range conns {
		conns[k] = rdb.Conn()
		if err := conns[k].Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	after := liveHeap()
	for _, c := range conns {
		_ = c.Close()
	}
	runtime.KeepAlive(conns)
	return after - before
}

// liveHeap returns the bytes of live heap objects after two collections.
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// printSideBySide prints the table of the rows and the memory measured, as
// docs/performance.md shows it.
func printSideBySide(rows []sbsResult, mem []sbsMemory) {
	var sb strings.Builder
	if len(rows) > 0 {
		printRows(&sb, rows)
	}
	if len(mem) > 0 {
		printMemory(&sb, mem)
	}
	fmt.Print(sb.String())
}

// printRows prints the CPU and allocation table.
func printRows(sb *strings.Builder, rows []sbsResult) {
	fmt.Fprintf(sb, "\nCPU per command (process CPU time, ns) and heap allocations per command, %d rounds; ratio = CPU / plain go-redis's: of the totals (median of the per-round ratios)\n\n", len(rows[0].rounds[0]))
	fmt.Fprintf(sb, "| server | workload | plain | built-in | maint | built-in/plain | maint/plain | allocs plain / built-in / maint |\n")
	fmt.Fprintf(sb, "|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(sb, "| %s | %s | %s | %s | %s | %.3f (%.3f) | %.3f (%.3f) | %s / %s / %s |\n", r.server, r.load,
			ns(r.cpuPerCmd(0)), ns(r.cpuPerCmd(1)), ns(r.cpuPerCmd(2)), r.ratio(1), r.medianRatio(1), r.ratio(2), r.medianRatio(2),
			allocs(r.allocsPerCmd(0)), allocs(r.allocsPerCmd(1)), allocs(r.allocsPerCmd(2)))
	}
}

// printMemory prints the memory table.
func printMemory(sb *strings.Builder, mem []sbsMemory) {
	s := mem[0].sizes
	fmt.Fprintf(sb, "\nHeap held per connection beyond plain go-redis's (live heap with n connections open to one node, median of 3; the last column is that node's whole state)\n")
	fmt.Fprintf(sb, "maint's structures: %d B per connection (conn), %d B per node (node) + %d B per configured address (target), %d B per Maint\n\n",
		s.Conn, s.Node, s.Target, s.Maint)
	fmt.Fprintf(sb, "| pool size | built-in B/conn | maint B/conn | maint per node (n connections) |\n|---:|---:|---:|---:|\n")
	for _, m := range mem {
		fmt.Fprintf(sb, "| %d | %.0f | %.0f | %d |\n", m.n, m.perConn(1), m.perConn(2), m.heap[2]-m.heap[0])
	}
}

// ns formats nanoseconds with a thousands separator.
func ns(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}

// allocs formats allocations per command.
func allocs(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// BenchmarkSideBySideAlone runs each workload of BenchmarkSideBySide on one
// client only, a leaf per client (client=plain, client=built-in,
// client=maint); its b.N is a number of blocks. It is what instruction
// counts need: under callgrind a process's count is the sum of everything
// it ran, and BenchmarkSideBySide's interleaved rounds run the three clients
// in one process. The difference of two runs' counts (say 5 and 25 blocks)
// divided by the commands of the extra blocks is one client's cost per
// command, setup and warm-up cancelled out; docs/performance.md has the loop.
func BenchmarkSideBySideAlone(b *testing.B) {
	for _, srv := range sbsServers(b) {
		for _, w := range sbsWorkloads {
			for i, name := range sbsClientNames {
				b.Run(fmt.Sprintf("server=%s/load=%s/client=%s", srv.name, w.name, name), func(b *testing.B) {
					rdb, closeClient := srv.open(i, 0)
					b.Cleanup(closeClient)
					block := w.setup(b, srv, i, rdb)
					for range 2 { // warm up, as BenchmarkSideBySide does
						if err := block(); err != nil {
							b.Fatal(err)
						}
					}
					b.ResetTimer()
					for range b.N {
						if err := block(); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w.cmds), "ns/cmd")
				})
			}
		}
	}
}
