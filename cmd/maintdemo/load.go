package main

import (
	"context"
	"errors"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// sample is one successful command: when it was issued and how long it took,
// both in nanoseconds, the first from the start of the load.
type sample struct {
	at, took int64
}

// load is the steady traffic of one run: goroutines doing SET and GET in
// turn on their own key, paced to a total rate (or as fast as they go), each
// recording the latency of its successful commands.
type load struct {
	ok, failed atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  time.Time

	mu      sync.Mutex // guards the following
	samples [][]sample // one slice per goroutine, merged at the end
	errs    errorCounts
}

// startLoad starts goroutines workers on rdb, pacing them to rate commands per
// second in all (0: as fast as they go). Times are measured from start.
func startLoad(rdb *redis.Client, workers, rate int, start time.Time) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, start: start, samples: make([][]sample, workers)}
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(workers) / float64(rate))
	}
	for w := range workers {
		l.wg.Add(1)
		go l.worker(ctx, rdb, w, interval, workers)
	}
	return l
}

func (l *load) worker(ctx context.Context, rdb *redis.Client, w int, interval time.Duration, workers int) {
	defer l.wg.Done()
	key := "maintdemo:k" + strconv.Itoa(w)
	own := make([]sample, 0, 4096)
	var errs errorCounts
	defer func() {
		l.mu.Lock()
		l.samples[w] = own
		l.errs.merge(errs)
		l.mu.Unlock()
	}()
	// Spread the goroutines' schedules over one interval so the paced load is
	// even, not a burst every interval.
	next := l.start
	if interval > 0 {
		next = next.Add(interval * time.Duration(w) / time.Duration(workers))
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i := 0; ; i++ {
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
			}
			next = next.Add(interval)
			if now := time.Now(); next.Before(now.Add(-interval)) {
				// Behind (a stall): no burst to catch up, keep the pace.
				next = now
			}
		}
		if ctx.Err() != nil {
			return
		}
		t0 := time.Now()
		var err error
		if i%2 == 0 {
			err = rdb.Set(ctx, key, i, 0).Err()
		} else {
			err = rdb.Get(ctx, key).Err()
		}
		took := time.Since(t0)
		if ctx.Err() != nil {
			return // stopped mid-command: neither a success nor a failure
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			l.failed.Add(1)
			errs.add(normalizeError(err))
			continue
		}
		l.ok.Add(1)
		own = append(own, sample{at: t0.Sub(l.start).Nanoseconds(), took: took.Nanoseconds()})
	}
}

// stop ends the load and waits for its goroutines.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// latencies returns the latencies of the successful commands issued in
// [from, to) (offsets from the start of the load), sorted.
func (l *load) latencies(from, to time.Duration) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for _, own := range l.samples {
		for _, s := range own {
			if s.at >= int64(from) && s.at < int64(to) {
				out = append(out, s.took)
			}
		}
	}
	slices.Sort(out)
	return out
}

// localAddr matches the local half of "read tcp 127.0.0.1:50312->127.0.0.2:6379".
var localAddr = regexp.MustCompile(`[0-9a-fA-F.:\[\]]+:\d+->`)

// normalizeError is err's message without the local address, so that errors
// differing only by the connection's local port count together.
func normalizeError(err error) string {
	return localAddr.ReplaceAllString(err.Error(), "")
}

// errorCounts counts errors by message, keeping a bounded number of distinct
// messages.
type errorCounts struct {
	msgs   []string
	counts []int64
	other  int64
}

const maxErrorKinds = 8

func (e *errorCounts) add(msg string) { e.addN(msg, 1) }

func (e *errorCounts) addN(msg string, n int64) {
	if i := slices.Index(e.msgs, msg); i >= 0 {
		e.counts[i] += n
		return
	}
	if len(e.msgs) == maxErrorKinds {
		e.other += n
		return
	}
	e.msgs = append(e.msgs, msg)
	e.counts = append(e.counts, n)
}

func (e *errorCounts) merge(o errorCounts) {
	for i, m := range o.msgs {
		e.addN(m, o.counts[i])
	}
	e.other += o.other
}

// list returns the errors, most frequent first.
func (e *errorCounts) list() []errorCount {
	out := make([]errorCount, 0, len(e.msgs)+1)
	for i, m := range e.msgs {
		out = append(out, errorCount{Error: m, Count: e.counts[i]})
	}
	slices.SortStableFunc(out, func(a, b errorCount) int {
		switch {
		case a.Count > b.Count:
			return -1
		case a.Count < b.Count:
			return 1
		}
		return 0
	})
	if e.other > 0 {
		out = append(out, errorCount{Error: "(other errors)", Count: e.other})
	}
	return out
}

// latencyStats summarises sorted latencies.
func latencyStats(sorted []int64) latency {
	if len(sorted) == 0 {
		return latency{}
	}
	// Nearest rank: the smallest latency with at least p of them at or below it.
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(sorted)))) - 1
		return ms(sorted[max(i, 0)])
	}
	return latency{Count: len(sorted), P50: q(0.50), P99: q(0.99), Max: ms(sorted[len(sorted)-1])}
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }
