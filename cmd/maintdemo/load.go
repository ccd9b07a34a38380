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

// sample is one successful command, in nanoseconds: when it was scheduled
// (from the start of the load), how long it took from then, and how late it
// started (the generator's own lag, part of took).
type sample struct {
	at, took, lag int64
}

// slot is where one command runs: one command at a time runs on a slot, so
// what the slot holds (its key, its samples, the state of a verifying op)
// needs no lock of its own; the free list's lock orders the commands that
// take it in turn.
type slot struct {
	id      int
	key     string   // the slot's own key for the demo's SET and GET
	n       int64    // commands this slot has run
	samples []sample // successful commands
	errs    errorCounts
	state   any // the op's per-slot state (the soak's verifier)
}

// op runs one command on slot s and returns its error; redis.Nil is a
// success. It is called on the command's own goroutine, with the slot held.
type op func(ctx context.Context, s *slot) error

// load is the traffic of one run, open loop as wrk2 and HdrHistogram measure
// it: commands are scheduled at a constant rate from the start of the load,
// and each starts on its own goroutine at its scheduled time whatever is
// still in flight, so a client that stalls is charged every command that
// was due meanwhile, not just the one it stalled on. A command's latency is
// measured from its scheduled time. At most maxInFlight commands run at
// once: a command due when that many are in flight is not started and is
// counted in notStarted (not in failed). A scheduler that fell behind (the
// machine was busy) starts what was due at once, and nothing more.
type load struct {
	ok, failed atomic.Int64
	// notStarted counts commands that were due while maxInFlight were in
	// flight.
	notStarted atomic.Int64
	// unfinished counts commands still in flight when the grace after the
	// end ran out: they were cancelled and count neither as ok nor failed.
	unfinished atomic.Int64

	start, end time.Time
	rate       int
	do         op

	ctx       context.Context // cancelled when the grace after the end runs out
	cancel    context.CancelFunc
	freeMu    sync.Mutex
	free      []*slot // idle slots, a stack: the slots used recently are used again
	slots     []*slot
	inflight  sync.WaitGroup
	stopSched chan struct{}
	schedDone chan struct{}
	stopOnce  sync.Once
}

// startLoad schedules rate commands per second from start until end, each
// running do on a free slot, with at most maxInFlight in flight. newState,
// if not nil, gives each slot its op state.
func startLoad(do op, rate, maxInFlight int, start, end time.Time, newState func(id int) any) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{start: start, end: end, rate: rate, do: do, ctx: ctx, cancel: cancel,
		free: make([]*slot, 0, maxInFlight), slots: make([]*slot, maxInFlight),
		stopSched: make(chan struct{}), schedDone: make(chan struct{})}
	for id := range maxInFlight {
		s := &slot{id: id, key: "maintdemo:k" + strconv.Itoa(id)}
		if newState != nil {
			s.state = newState(id)
		}
		l.slots[id] = s
	}
	for id := maxInFlight - 1; id >= 0; id-- {
		l.free = append(l.free, l.slots[id])
	}
	go l.schedule()
	return l
}

// due is when command i is scheduled: i/rate seconds after the start,
// computed from the start each time so that no rounding accumulates.
func (l *load) due(i int64) time.Time {
	return l.start.Add(time.Duration(i * int64(time.Second) / int64(l.rate)))
}

func (l *load) schedule() {
	defer close(l.schedDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := int64(0); ; i++ {
		due := l.due(i)
		if !due.Before(l.end) {
			return
		}
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.stopSched:
				return
			}
		}
		if s := l.take(); s != nil {
			l.inflight.Add(1)
			go l.exec(s, due)
		} else {
			l.notStarted.Add(1)
		}
	}
}

func (l *load) exec(s *slot, due time.Time) {
	defer l.inflight.Done()
	lag := time.Since(due)
	err := l.do(l.ctx, s)
	took := time.Since(due)
	s.n++
	switch {
	case err != nil && l.ctx.Err() != nil:
		l.unfinished.Add(1) // cancelled after the grace: neither a success nor a failure
	case err != nil && !errors.Is(err, redis.Nil):
		l.failed.Add(1)
		s.errs.add(normalizeError(err))
	default:
		l.ok.Add(1)
		s.samples = append(s.samples, sample{at: due.Sub(l.start).Nanoseconds(), took: took.Nanoseconds(), lag: lag.Nanoseconds()})
	}
	l.freeMu.Lock()
	l.free = append(l.free, s)
	l.freeMu.Unlock()
}

// take returns a free slot, or nil when every slot is in flight.
func (l *load) take() *slot {
	l.freeMu.Lock()
	defer l.freeMu.Unlock()
	n := len(l.free)
	if n == 0 {
		return nil
	}
	s := l.free[n-1]
	l.free = l.free[:n-1]
	return s
}

// stop ends the schedule now if it has not ended, lets the commands in flight
// finish for up to grace, then cancels what is left and waits for it.
func (l *load) stop(grace time.Duration) {
	l.stopOnce.Do(func() { close(l.stopSched) })
	<-l.schedDone
	done := make(chan struct{})
	go func() {
		l.inflight.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	l.cancel()
	<-done
}

// wait blocks until the schedule ends (at the end given to startLoad), then
// stops the load as stop does.
func (l *load) wait(grace time.Duration) {
	<-l.schedDone
	l.stop(grace)
}

// errors returns the errors of every command, most frequent first. Call it
// after stop.
func (l *load) errors() []errorCount {
	var all errorCounts
	for _, s := range l.slots {
		all.merge(s.errs)
	}
	return all.list()
}

// latency summarises the successful commands scheduled in [from, to)
// (offsets from the start of the load). Call it after stop.
func (l *load) latency(from, to time.Duration) latency {
	var took, lag []int64
	for _, s := range l.slots {
		for _, smp := range s.samples {
			if smp.at >= int64(from) && smp.at < int64(to) {
				took = append(took, smp.took)
				lag = append(lag, smp.lag)
			}
		}
	}
	slices.Sort(took)
	slices.Sort(lag)
	st := latencyStats(took)
	if len(lag) > 0 {
		st.LagP99 = ms(lag[rank(0.99, len(lag))])
	}
	return st
}

// setGet is the demo's op: SET and GET in turn on the slot's own key.
func setGet(rdb *redis.Client) op {
	return func(ctx context.Context, s *slot) error {
		if s.n%2 == 0 {
			return rdb.Set(ctx, s.key, s.n, 0).Err()
		}
		return rdb.Get(ctx, s.key).Err()
	}
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
	q := func(p float64) float64 { return ms(sorted[rank(p, len(sorted))]) }
	return latency{Count: len(sorted), P50: q(0.50), P99: q(0.99), Max: ms(sorted[len(sorted)-1])}
}

// rank is the index of the p quantile of n sorted values, by nearest rank.
func rank(p float64, n int) int {
	return max(int(math.Ceil(p*float64(n)))-1, 0)
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }
