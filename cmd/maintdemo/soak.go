package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/mainttest"
)

const (
	// soakNodes is how many endpoints the soak moves between.
	soakNodes = 4
	// soakDuration is the default load per client.
	soakDuration = 20 * time.Second
	// minSoakDuration leaves room for one short episode.
	minSoakDuration = 3 * time.Second
	// soakGrace is how long the commands in flight at the end of a soak may
	// take to finish: more than maint's default hold budget (10s), so that
	// no command is cut short by the end of the run.
	soakGrace = 15 * time.Second
	// soakRate is the soak's default rate: during a slow period (every
	// reply ReadTimeout + 0.5s late, for up to 2s) a pool of 16 serves ~10
	// commands a second and the rest wait; at 1000/s they stay well within
	// the 4096 in flight.
	soakRate = 1000
	// soakPoolTimeout is the soak's default PoolTimeout: commands waiting
	// for a connection during a slow period must not fail for want of one
	// (a pool-sizing matter, alike for every client, not maintenance
	// handling).
	soakPoolTimeout = 10 * time.Second
	// soakPrefix prefixes the soak's keys.
	soakPrefix = "maintsoak:"
)

// soakRun is what one client did in a soak.
type soakRun struct {
	Client     string `json:"client"`
	MaxRetries int    `json:"max_retries"`
	// Commands counts the commands scheduled: ok + failed + not started +
	// unfinished. A pipeline or MULTI/EXEC is one.
	Commands   int64 `json:"commands"`
	OK         int64 `json:"ok"`
	Failed     int64 `json:"failed"`
	NotStarted int64 `json:"not_started"`
	Unfinished int64 `json:"unfinished"`
	// Lost counts acknowledged increments missing from the final counters,
	// and GETs and final values that missed an acknowledged SET.
	Lost int64 `json:"lost"`
	// Duplicated counts increments applied more often than sent.
	Duplicated int64 `json:"duplicated"`
	// MixedUp counts replies that belonged to another command.
	MixedUp int64 `json:"mixed_up"`
	// IncrAcked and IncrUnknown count the INCRs acknowledged and those whose
	// outcome is unknown (failed).
	IncrAcked   int64 `json:"incr_acked"`
	IncrUnknown int64 `json:"incr_unknown"`
	// Keys is how many slots' keys were verified.
	Keys int `json:"keys"`
	// ServerClosed counts the connections the emulator closed at windows'
	// ends, RepliesLost the replies they still owed.
	ServerClosed int   `json:"server_closed"`
	RepliesLost  int64 `json:"replies_lost"`
	FailedDials  int64 `json:"failed_dials"`
	// Events counts the notifications sent and DNS changes made.
	Events  int     `json:"events"`
	Latency latency `json:"latency"`
	// PerSecond is the latency of the successful commands scheduled in each
	// second of the load.
	PerSecond []latency    `json:"per_second"`
	Errors    []errorCount `json:"errors,omitempty"`
	Anomalies []string     `json:"anomalies,omitempty"`
	// AnomalyCount counts every anomaly; Anomalies describes a few.
	AnomalyCount int         `json:"anomaly_count"`
	Maint        *maintStats `json:"maint,omitempty"`

	kind clientKind
}

// bad is what --check counts against maint.
func (r *soakRun) bad() int64 {
	return r.Failed + r.NotStarted + r.Unfinished + r.Lost + r.Duplicated + r.MixedUp
}

// soakRetries is go-redis's MaxRetries for the soak's --max-retries.
func soakRetries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// soak plays pl for client k under verified open-loop load against a fresh
// emulated database with soakNodes nodes, and checks the data at the end.
func (rn *runner) soak(pl *plan, k clientKind) (*soakRun, error) {
	s := rn.s
	d, err := openDatabase(s, soakNodes)
	if err != nil {
		return nil, err
	}
	defer d.close()
	for _, n := range d.nodes {
		n.SetMaintLatency(migratingLatency(s))
	}
	ctx := context.Background()
	backend := redis.NewClient(&redis.Options{Addr: d.emu.BackendAddr(), Protocol: 2,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer backend.Close()

	tag := fmt.Sprintf("soak/seed=%d/%s", pl.Seed, k)
	verifiers := make([]*verifier, s.goroutines)
	for id := range verifiers {
		verifiers[id] = newVerifier(soakPrefix, id)
	}
	if err := initKeys(ctx, backend, verifiers); err != nil {
		return nil, fmt.Errorf("%s: backend: %w", tag, err)
	}

	var events eventLog
	rdb, m := newClient(k, d, s, soakRetries(s.maxRetries),
		func(format string, args ...any) { rn.logf("%s: maint: "+format, append([]any{tag}, args...)...) },
		events.add)
	defer func() {
		_ = rdb.Close()
		if m != nil {
			_ = m.Close()
		}
	}()
	if err := warm(ctx, rdb, s.pool); err != nil {
		return nil, fmt.Errorf("%s: first commands: %w", tag, err)
	}

	total := s.soakLength()
	start := time.Now()
	for _, v := range verifiers {
		v.start = start
	}
	l := startLoad(verifiedOp(rdb), s.rate, s.goroutines, start, start.Add(total),
		func(id int) any { return verifiers[id] })
	stopProgress := rn.prog.start(fmt.Sprintf("soak seed %-4d %-17s", pl.Seed, k.title()), start, total, l)
	pb := &player{d: d, pl: pl, logf: func(format string, args ...any) {
		rn.logf("%s: "+format, append([]any{tag}, args...)...)
	}}
	stopPlay := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pb.run(start, stopPlay)
	}()
	l.wait(soakGrace)
	close(stopPlay)
	wg.Wait()
	stopProgress()

	r := &soakRun{Client: k.String(), MaxRetries: effectiveRetries(soakRetries(s.maxRetries)), kind: k,
		OK: l.ok.Load(), Failed: l.failed.Load(), NotStarted: l.notStarted.Load(), Unfinished: l.unfinished.Load(),
		Errors: l.errors(), Events: pb.played, Latency: l.latency(0, total)}
	r.Commands = r.OK + r.Failed + r.NotStarted + r.Unfinished
	for sec := time.Duration(0); sec < total; sec += time.Second {
		r.PerSecond = append(r.PerSecond, l.latency(sec, sec+time.Second))
	}
	for _, n := range d.nodes {
		st := n.Stats()
		r.ServerClosed += st.ClosedAtWindowEnd
		r.RepliesLost += st.OwedAtClose
	}
	r.FailedDials = d.dials.Failed()
	if m != nil {
		r.Maint = maintStatsOf(m.Stats())
	}

	var used []*verifier
	for i, sl := range l.slots {
		if sl.n > 0 {
			used = append(used, verifiers[i])
		}
	}
	if err := checkKeys(ctx, backend, used, r); err != nil {
		return nil, fmt.Errorf("%s: final read: %w", tag, err)
	}
	if s.verbose {
		for _, ev := range d.emu.Events() {
			rn.logf("%s: emulator: %s", tag, ev)
		}
		for _, ev := range events.all() {
			rn.logf("%s: maint event: %s %s", tag, ev.At.Format("15:04:05.000000"), ev)
		}
	}
	return r, nil
}

// initKeys sets every slot's counter to its base and deletes its string,
// directly on the backend.
func initKeys(ctx context.Context, backend *redis.Client, vs []*verifier) error {
	const batch = 256
	for i := 0; i < len(vs); i += batch {
		p := backend.Pipeline()
		var pairs []any
		for _, v := range vs[i:min(i+batch, len(vs))] {
			pairs = append(pairs, v.ctr, v.base)
			p.Del(ctx, v.str)
		}
		p.MSet(ctx, pairs...)
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// checkKeys reads the used slots' keys from the backend, bypassing the
// emulator, and adds what the verifiers found to r.
func checkKeys(ctx context.Context, backend *redis.Client, used []*verifier, r *soakRun) error {
	const batch = 256
	var anomalies int
	for i := 0; i < len(used); i += batch {
		vs := used[i:min(i+batch, len(used))]
		keys := make([]string, 0, 2*len(vs))
		for _, v := range vs {
			keys = append(keys, v.ctr, v.str)
		}
		vals, err := backend.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		for j, v := range vs {
			ctrS, ctrOK := vals[2*j].(string)
			ctr, perr := strconv.ParseInt(ctrS, 10, 64)
			ctrOK = ctrOK && perr == nil
			str, strOK := vals[2*j+1].(string)
			c := v.final(ctr, ctrOK, str, strOK)
			r.Lost += c.lost
			r.Duplicated += c.duplicated
			r.MixedUp += v.mixed
			r.IncrAcked += v.acked
			r.IncrUnknown += v.unknown
			anomalies += v.nAnomalies
			for _, a := range v.anomalies {
				if len(r.Anomalies) < 20 {
					r.Anomalies = append(r.Anomalies, a)
				}
			}
		}
	}
	r.Keys = len(used)
	r.AnomalyCount = anomalies
	return nil
}

// player plays a plan's actions on a database at their times.
type player struct {
	d      *database
	pl     *plan
	logf   func(format string, args ...any)
	frames [][]byte // the notification each action sent, for late copies
	played int      // notifications sent and DNS changes made
}

func (p *player) run(start time.Time, stop <-chan struct{}) {
	p.frames = make([][]byte, len(p.pl.Actions))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i, a := range p.pl.Actions {
		if d := time.Until(start.Add(a.At)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-stop:
				return
			}
		}
		p.frames[i] = p.do(a)
		if a.Kind != actAccept {
			p.played++
		}
		p.logf("step %d: %s", i+1, a)
	}
}

// do performs one action and returns the notification it sent, if any.
func (p *player) do(a action) []byte {
	nodes := p.d.nodes
	ep := nodes[a.Node]
	switch a.Kind {
	case actMoving:
		to := nodes[a.To]
		seq := ep.Moving(mainttest.Moving{Window: a.Window, CloseJitter: a.Jitter, To: to, Null: a.Null,
			StopAccepting: true})
		return resp.AppendMoving(nil, seq, wireSecondsOf(a.Window), to.Addr(), a.Null)
	case actDNS:
		p.d.emu.DNS().Set(host, ep.IP())
	case actAccept:
		ep.RefuseNew(false)
	case actMigrating:
		seq := ep.Migrating(a.StartsIn, shards)
		return resp.AppendMigrating(nil, seq, wireSecondsOf(a.StartsIn), shards)
	case actMigrated:
		return resp.AppendMigrated(nil, ep.Migrated(shards), shards)
	case actFailingOver:
		seq := ep.FailingOver(a.StartsIn, shards)
		return resp.AppendFailingOver(nil, seq, wireSecondsOf(a.StartsIn), shards)
	case actFailedOver:
		return resp.AppendFailedOver(nil, ep.FailedOver(shards), shards)
	case actLateCopy:
		if f := p.frames[a.Of]; f != nil {
			ep.SendRaw(f)
		}
	}
	return nil
}

// wireSecondsOf is d as the emulator puts it on the wire: whole seconds,
// rounded up, at least 1 for a positive d.
func wireSecondsOf(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(int64(math.Ceil(d.Seconds())), 1)
}
