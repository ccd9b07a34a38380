//go:build unix

package maint_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint"
)

// The benchmarks of this file measure what maint costs when no maintenance
// is going on: the hook (one atomic load per command) and the connection
// wrapper (the push stripper on reads, the command scanner on writes),
// against plain go-redis on the same server in the same run.
//
// BenchmarkCommands has one leaf per client, named for benchstat's
// projections (server=, load=, client=): see the README for the command that
// compares them. BenchmarkOverhead runs plain go-redis and maint in
// alternating blocks inside one leaf, so that drift of the machine or the
// server affects both alike, and reports their ratio directly.
//
// The servers are an embedded miniredis (always) and the real Redis named by
// MAINT_TEST_REDIS ("host:port"), when set. The RESP framing throughput of
// the stripper alone is BenchmarkStripperThroughput in internal/resp.

// benchKey is the key every GET reads; its value is benchValue.
const (
	benchKey   = "maint:bench:key"
	benchValue = "0123456789abcdef"
	// pipelineLen is the number of commands in one pipeline.
	pipelineLen = 10
	// parallelism is how many goroutines per GOMAXPROCS the parallel loads run.
	parallelism = 4
)

// benchServer is a Redis server the benchmarks run against.
type benchServer struct {
	name string
	addr string
}

// benchServers starts an embedded miniredis for b and adds the server named
// by MAINT_TEST_REDIS, if any.
func benchServers(b *testing.B) []benchServer {
	b.Helper()
	mr, err := miniredis.Run()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(mr.Close)
	servers := []benchServer{{"miniredis", mr.Addr()}}
	if addr := os.Getenv("MAINT_TEST_REDIS"); addr != "" {
		servers = append(servers, benchServer{"redis", addr})
	}
	return servers
}

// benchClient is one of the two clients compared.
type benchClient struct {
	name string
	// open returns a client on addr and a function that closes it.
	open func(addr string) (*redis.Client, func())
}

var benchClients = []benchClient{
	{"plain", func(addr string) (*redis.Client, func()) {
		rdb := redis.NewClient(benchOptions(addr))
		return rdb, func() { _ = rdb.Close() }
	}},
	{"maint", func(addr string) (*redis.Client, func()) {
		// The one-line integration on the same default client.
		rdb := redis.NewClient(benchOptions(addr))
		m := maint.New(maint.WithLogf(func(string, ...any) {}))
		rdb.AddHook(m)
		return rdb, func() {
			_ = rdb.Close()
			_ = m.Close()
		}
	}},
}

// benchOptions are go-redis's defaults, on addr.
func benchOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr}
}

// benchLoad is one way of issuing commands.
type benchLoad struct {
	name string
	// cmdsPerOp is how many commands one op sends.
	cmdsPerOp int
	// run performs n ops on rdb and fails b on an error.
	run func(b *testing.B, rdb *redis.Client, n int)
}

var benchLoads = []benchLoad{
	{"single", 1, func(b *testing.B, rdb *redis.Client, n int) {
		ctx := context.Background()
		for range n {
			if err := rdb.Get(ctx, benchKey).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}},
	{"parallel", 1, func(b *testing.B, rdb *redis.Client, n int) {
		ctx := context.Background()
		err := benchCrew(b).run(n, func(n int) error {
			for range n {
				if err := rdb.Get(ctx, benchKey).Err(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}},
	{fmt.Sprintf("pipeline%d", pipelineLen), pipelineLen, func(b *testing.B, rdb *redis.Client, n int) {
		ctx := context.Background()
		pipe := rdb.Pipeline()
		for range n {
			for range pipelineLen {
				pipe.Get(ctx, benchKey)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}},
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// crews holds the crew of each running benchmark.
var crews sync.Map // *testing.B -> *crew

// benchCrew returns b's crew, started on first use and stopped with b.
func benchCrew(b *testing.B) *crew {
	if c, ok := crews.Load(b); ok {
		return c.(*crew)
	}
	c := newCrew()
	crews.Store(b, c)
	b.Cleanup(func() {
		crews.Delete(b)
		c.stop()
	})
	return c
}

// crew is a fixed set of goroutines that run shares of a parallel load, so
// that no goroutine is started (and no stack grown) inside a measurement.
type crew struct {
	work []chan int
	done chan error
	f    func(n int) error // set before each run
}

func newCrew() *crew {
	g := parallelism * runtime.GOMAXPROCS(0)
	c := &crew{work: make([]chan int, g), done: make(chan error, g)}
	for i := range c.work {
		c.work[i] = make(chan int)
		go func(work <-chan int) {
			for n := range work {
				c.done <- c.f(n)
			}
		}(c.work[i])
	}
	return c
}

// run splits n ops over the crew and waits for them.
func (c *crew) run(n int, f func(n int) error) error {
	c.f = f
	g := len(c.work)
	for i, w := range c.work {
		share := n / g
		if i < n%g {
			share++
		}
		w <- share
	}
	var first error
	for range g {
		if err := <-c.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *crew) stop() {
	for _, w := range c.work {
		close(w)
	}
}

// prepare writes the key the loads read and warms the client's pool.
func prepare(b *testing.B, rdb *redis.Client, l benchLoad) {
	b.Helper()
	if err := rdb.Set(context.Background(), benchKey, benchValue, 0).Err(); err != nil {
		b.Fatal(err)
	}
	l.run(b, rdb, 4*parallelism*runtime.GOMAXPROCS(0))
}

// BenchmarkCommands measures each client on its own: compare the client=plain
// and client=maint leaves of the same server and load with benchstat.
func BenchmarkCommands(b *testing.B) {
	for _, srv := range benchServers(b) {
		for _, l := range benchLoads {
			for _, c := range benchClients {
				b.Run(fmt.Sprintf("server=%s/load=%s/client=%s", srv.name, l.name, c.name), func(b *testing.B) {
					rdb, closeClient := c.open(srv.addr)
					defer closeClient()
					prepare(b, rdb, l)
					b.ReportAllocs()
					b.ResetTimer()
					if l.name == "parallel" {
						ctx := context.Background()
						b.SetParallelism(parallelism)
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								if err := rdb.Get(ctx, benchKey).Err(); err != nil {
									b.Error(err)
									return
								}
							}
						})
					} else {
						l.run(b, rdb, b.N)
					}
					b.StopTimer()
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*l.cmdsPerOp), "ns/cmd")
				})
			}
		}
	}
}

// overheadBlock is how many ops each client runs before the other takes its
// turn in BenchmarkOverhead.
const overheadBlock = 256

// BenchmarkOverhead runs plain go-redis and maint in alternating blocks of
// ops on the same server, b.N ops each, and reports per command: each
// client's wall time, CPU time of the whole process and heap allocations
// (plain-ns/cmd, maint-ns/cmd, plain-cpu-ns/cmd, maint-cpu-ns/cmd,
// plain-allocs/cmd, maint-allocs/cmd); maint's throughput as a fraction of
// plain go-redis's (maint/plain, the target is at least 0.98), the same for
// CPU (maint/plain-cpu: less sensitive to other load on the machine) and
// maint's extra allocations (extra-allocs/cmd, the target is 0 or less).
// Against the embedded miniredis the CPU time and allocations include the
// server's own, which are the same for both clients.
func BenchmarkOverhead(b *testing.B) {
	for _, srv := range benchServers(b) {
		for _, l := range benchLoads {
			b.Run(fmt.Sprintf("server=%s/load=%s", srv.name, l.name), func(b *testing.B) {
				plain, closePlain := benchClients[0].open(srv.addr)
				defer closePlain()
				mt, closeMaint := benchClients[1].open(srv.addr)
				defer closeMaint()
				prepare(b, plain, l)
				prepare(b, mt, l)
				clients := [2]*redis.Client{plain, mt}
				var took, cpu [2]time.Duration
				var allocs [2]uint64
				var ms runtime.MemStats
				b.ResetTimer()
				for done := 0; done < b.N; done += overheadBlock {
					n := min(overheadBlock, b.N-done)
					// Alternate which client goes first, so that neither
					// always follows the other's garbage.
					for k := range 2 {
						i := (k + done/overheadBlock) % 2
						runtime.ReadMemStats(&ms)
						a0, c0, t0 := ms.Mallocs, processCPU(), time.Now()
						l.run(b, clients[i], n)
						took[i] += time.Since(t0)
						cpu[i] += processCPU() - c0
						runtime.ReadMemStats(&ms)
						allocs[i] += ms.Mallocs - a0
					}
				}
				b.StopTimer()
				cmds := float64(b.N * l.cmdsPerOp)
				b.ReportMetric(float64(took[0].Nanoseconds())/cmds, "plain-ns/cmd")
				b.ReportMetric(float64(took[1].Nanoseconds())/cmds, "maint-ns/cmd")
				b.ReportMetric(float64(took[0])/float64(took[1]), "maint/plain")
				b.ReportMetric(float64(cpu[0].Nanoseconds())/cmds, "plain-cpu-ns/cmd")
				b.ReportMetric(float64(cpu[1].Nanoseconds())/cmds, "maint-cpu-ns/cmd")
				b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "maint/plain-cpu")
				b.ReportMetric(float64(allocs[0])/cmds, "plain-allocs/cmd")
				b.ReportMetric(float64(allocs[1])/cmds, "maint-allocs/cmd")
				b.ReportMetric((float64(allocs[1])-float64(allocs[0]))/cmds, "extra-allocs/cmd")
			})
		}
	}
}
