package maint

import (
	"context"
	"errors"
	"net"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// Group is a set of Maints for one or more go-redis clients, of any kind:
// one Maint for a *redis.Client or a failover client, one per node client
// for a *redis.ClusterClient or a *redis.Ring. It is the options route for
// every kind: its Configure methods prepare a kind's options before the
// client exists, so that every connection of every node client is watched
// from the first dial and go-redis's built-in handler stays off; its New
// methods are the Configure method and the go-redis constructor in one
// call; Instrument installs maint on a client that exists already.
//
//	kind        options route                                 existing client
//	Client      g.NewClient(opt), or g.Configure + AddHook    g.Instrument(rdb)
//	Cluster     g.NewClusterClient(opt)                       g.Instrument(rdb)
//	Ring        g.NewRing(opt)                                g.Instrument(rdb)
//	Failover    g.NewFailoverClient(opt)                      g.Instrument(rdb)
//	Universal   g.NewUniversalClient(opt)                     g.Instrument(rdb)
//
// Cluster and Ring options get one Maint per node client through their
// NewClient field (the application's own NewClient, if set, still creates
// the node client): the node's *redis.Options are configured before the
// node client exists, and the Maint is added to it as a hook. A failover
// client (Redis Sentinel, Redis Enterprise's Discovery Service) gets one
// Maint for its data nodes; its sentinel connections are never wrapped and
// never receive the handshake. The Maints of Ring shard clients that the
// Ring closes are closed and forgotten, their counters kept in Stats; so
// are those of the clients the application closes (a client the Group made
// or instrumented, a ClusterClient's node clients), and the options a Group
// configured are remembered only while they are reachable. A Maint of
// Configure, whose client the Group cannot see, is forgotten once the
// application closes it.
// A Group is safe for concurrent use. Close it after its clients.
type Group struct {
	opts []Option

	mu      sync.Mutex // guards the following
	ms      []*member
	byCli   map[*redis.Client]*member
	retired Stats // counters of the Maints closed and forgotten
	closed  bool
	// clusters are the cluster states of the ClusterOptions configured,
	// bound to their ClusterClient by NewClusterClient or Instrument. Keyed
	// weakly: an entry goes when its options are collected (forgetKind), so
	// no clusterState holds its options or ClusterClient strongly.
	clusters map[weak.Pointer[redis.ClusterOptions]]*clusterState
	// watched are the Rings whose shards are polled for (Instrument: shards
	// down when it ran get a Maint once they are up).
	watched []*redis.Ring
	// ringSaid is each watched Ring's "no opt-in" once, shared by its
	// shards' Maints (handshake.go noteCarrying); dropped with the Ring.
	ringSaid map[*redis.Ring]*sync.Once
	sweeper  bool
	// sweepEvery is how often the sweeper runs; deadAfter how long a ring
	// shard's Maint must see no command and hold no connection to be taken
	// for closed by go-redis.
	sweepEvery, deadAfter time.Duration
	// clusterGone is how long a cluster node client's Maint must see no
	// command, dial or connection while the slot maps no longer name its
	// node before it is taken for closed: go-redis closes such node clients
	// a minute after the reload (TestContractClusterNodeGC).
	clusterGone time.Duration
	// sweeps counts the sweeps done (for tests, which wait on it).
	sweeps atomic.Uint64

	obs groupObservers // observers (observe.go), guarded by mu

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// member is one Maint of a group, and what tells whether its node client
// still lives.
type member struct {
	m    *Maint
	cli  *redis.Client // nil when not known
	live *liveHook     // nil when liveness is not judged (see sweep)
	// quiet is when the sweeper first saw the member with no command and no
	// connection (zero: not quiet).
	quiet time.Time
	// gone: forgotten (guarded by the group's mu).
	gone bool
}

// NewGroup returns an empty Group whose Maints are created with opts. It
// panics, naming the option, on a value maint cannot honour (see Option).
func NewGroup(opts ...Option) *Group {
	configOf("NewGroup", opts) // panics now, not at the first node client
	g := &Group{
		opts:     append([]Option(nil), opts...),
		byCli:    make(map[*redis.Client]*member),
		clusters: make(map[weak.Pointer[redis.ClusterOptions]]*clusterState),
		// go-redis's node GC runs a minute after a reload; a margin for a
		// command routed by the old map just before it.
		clusterGone: time.Minute + 30*time.Second,
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// newMaint creates a Maint with the group's options.
func (g *Group) newMaint() *Maint { return New(g.opts...) }

// add records m, installed on cli (nil when unknown; reserved by reserve
// on Instrument's route), unless the group is closed: then m is closed and
// add reports false. Every member is made here.
func (g *Group) add(m *Maint, cli *redis.Client, live *liveHook) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		_ = m.Close()
		return false
	}
	mb := &member{m: m, cli: cli, live: live}
	m.rel.register(cli)
	g.ms = append(g.ms, mb)
	g.attachLocked(m)
	if cli != nil {
		g.byCli[cli] = mb
	}
	g.mu.Unlock()
	if live == nil {
		// A client of its own, forgotten once closed; or one the group
		// cannot see (Configure, ConfigureFailover), once its Maint is.
		g.startClosedSweeper()
	}
	return true
}

// has reports whether cli has a Maint of the group.
func (g *Group) has(cli *redis.Client) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.byCli[cli]
	return ok
}

// Configure prepares options for a new *redis.Client (see Maint.Configure)
// with a new Maint of the group, and returns that Maint: add it to the
// client as a hook (rdb.AddHook(m)), or use NewClient. Close the Maint
// after its client: the group cannot see that client, and forgets the
// Maint (its counters kept in Stats) once it is closed.
func (g *Group) Configure(opt *redis.Options) *Maint {
	needOptions("Configure", opt)
	m := g.newMaint()
	m.Configure(opt)
	g.add(m, nil, nil)
	return m
}

// NewClient is Configure, redis.NewClient and AddHook in one call.
func (g *Group) NewClient(opt *redis.Options) *redis.Client {
	needOptions("NewClient", opt)
	m := g.newMaint()
	m.Configure(opt)
	rdb := redis.NewClient(opt)
	rdb.AddHook(m)
	g.add(m, rdb, nil)
	return rdb
}

// nodeClient returns a NewClient for node clients of a Cluster (cs non-nil)
// or a Ring (live set): each node client gets its own Maint, its options
// configured before prev creates it.
func (g *Group) nodeClient(prev func(*redis.Options) *redis.Client, cs *clusterState, ring bool) func(*redis.Options) *redis.Client {
	if prev == nil {
		prev = redis.NewClient
	}
	nm := &nodeMaker{g: g, prev: prev, cs: cs, ring: ring, noOptInSaid: new(sync.Once)}
	if cs != nil {
		nm.noOptInSaid = &cs.noOptInSaid
	}
	return nm.newClient
}

// nodeMaker is what a Group's per-node constructor (nodeClient) needs.
type nodeMaker struct {
	g    *Group
	prev func(*redis.Options) *redis.Client
	cs   *clusterState
	ring bool
	// noOptInSaid: "no opt-in" is said once for the client, not per node.
	noOptInSaid *sync.Once
}

// newClient creates one node client, with its own Maint.
func (nm *nodeMaker) newClient(opt *redis.Options) *redis.Client {
	g, cs := nm.g, nm.cs
	m := g.newMaint()
	m.s.cluster = cs
	m.s.noOptInSaid = nm.noOptInSaid
	if cs != nil && cs.seedsOptIn {
		m.s.optIn = nil // optin.go
	}
	m.Configure(opt)
	cli := nm.prev(opt)
	cli.AddHook(m)
	if cs != nil {
		cs.join(cli, m)
	}
	var live *liveHook
	if nm.ring || cs != nil {
		live = &liveHook{}
		cli.AddHook(live)
	}
	if cs != nil {
		g.startClosedSweeper()
	}
	g.add(m, cli, live)
	return cli
}

// ConfigureCluster prepares ClusterOptions for a new *redis.ClusterClient:
// every node client gets its own Maint (through opt.NewClient, wrapping the
// application's own NewClient if set), and the node Maints of the cluster
// share its slot map. The slot map is reloaded on SMIGRATED once the
// ClusterClient is known: create it with NewClusterClient, or pass it to
// Instrument after redis.NewClusterClient. Configuring the same options
// again is a no-op.
func (g *Group) ConfigureCluster(opt *redis.ClusterOptions) {
	needOptions("ConfigureCluster", opt)
	g.configureCluster(opt)
}

func (g *Group) configureCluster(opt *redis.ClusterOptions) *clusterState {
	if madeByGroup(opt.NewClient) {
		// The options of a ClusterClient a Group configured
		// (ClusterClient.Options, a copy from go-redis v9.24 on): its node
		// clients are served already (nil: a copy, whose state its node
		// clients lead to: bindThroughNodes).
		return g.clusterOf(opt)
	}
	if !claimKind(g, opt) {
		return g.clusterOf(opt)
	}
	cs := &clusterState{seedsOptIn: g.seedsOptIn(opt.Addrs)}
	g.mu.Lock()
	g.clusters[weak.Make(opt)] = cs
	g.mu.Unlock()
	opt.NewClient = g.nodeClient(opt.NewClient, cs, false)
	return cs
}

// madeByGroup reports whether newClient is a Group's per-node
// constructor (nodeClient): options copied from ones a Group configured,
// as go-redis copies a Ring's (Ring.Options returns the copy), carry it.
// Wrapping it again would give each node a second Maint that serves
// nothing.
func madeByGroup(newClient func(*redis.Options) *redis.Client) bool {
	return newClient != nil && reflect.ValueOf(newClient).Pointer() == nodeClientCode
}

// nodeClientCode is the code pointer of every nodeMaker.newClient method
// value (one wrapper function for the method, wherever it is taken).
var nodeClientCode = reflect.ValueOf((&nodeMaker{}).newClient).Pointer()

// NewClusterClient is ConfigureCluster and redis.NewClusterClient in one
// call.
func (g *Group) NewClusterClient(opt *redis.ClusterOptions) *redis.ClusterClient {
	needOptions("NewClusterClient", opt)
	cs := g.configureCluster(opt)
	cc := redis.NewClusterClient(opt)
	switch {
	case cs != nil:
		bindCluster(cs, cc)
		ownNodes(cs, cc, false)
	case madeByGroup(opt.NewClient):
		g.bindThroughNodes(cc, false)
	}
	return cc
}

// clusterOf returns the cluster state of opt, configured by g (nil if not).
func (g *Group) clusterOf(opt *redis.ClusterOptions) *clusterState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.clusters[weak.Make(opt)]
}

// bindCluster lets the cluster's node Maints reload cc's slot map. cc is
// held weakly: it holds its options, the key of cs in g.clusters, which
// would then never be collected.
func bindCluster(cs *clusterState, cc *redis.ClusterClient) {
	// Sharded subscribers look at cc's slot map (clusterpubsub.go).
	cs.subs.bind(cc)
	w := weak.Make(cc)
	cs.bind(w, func() { // lazy: go-redis reloads on its own goroutine
		if cc := w.Value(); cc != nil {
			cc.ReloadState(context.Background())
		}
	})
}

// ownNodes records cc as the owner of the node clients it makes from now
// on (OnNewNode) and, when existing, of those it has: several
// ClusterClients on the same options share one cluster state, and each
// one's sharded subscribers follow by its own slot map.
func ownNodes(cs *clusterState, cc *redis.ClusterClient, existing bool) {
	w := weak.Make(cc) // the callback is kept by cc itself
	cc.OnNewNode(func(node *redis.Client) {
		if cc := w.Value(); cc != nil {
			cs.own(node, cc)
		}
	})
	if !existing {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = cc.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		cs.own(node, cc)
		return nil
	})
}

// ConfigureRing prepares RingOptions for a new *redis.Ring: every shard
// client gets its own Maint (through opt.NewClient, wrapping the
// application's own NewClient if set), before its first connection, shards
// added later by SetAddrs too. The Maints of shards the Ring closes are
// closed and forgotten. Configuring the same options again is a no-op.
func (g *Group) ConfigureRing(opt *redis.RingOptions) {
	needOptions("ConfigureRing", opt)
	if madeByGroup(opt.NewClient) {
		// The options of a Ring a Group made (Ring.Options(), go-redis's
		// copy of them): its shards are served already.
		return
	}
	if !claimKind(g, opt) {
		return
	}
	g.startSweeper(opt.HeartbeatFrequency, opt.DialTimeout, opt.ReadTimeout)
	opt.NewClient = g.nodeClient(opt.NewClient, nil, true)
}

// NewRing is ConfigureRing and redis.NewRing in one call.
func (g *Group) NewRing(opt *redis.RingOptions) *redis.Ring {
	needOptions("NewRing", opt)
	g.ConfigureRing(opt)
	return redis.NewRing(opt)
}

// NewUniversalClient creates the client redis.NewUniversalClient would,
// through the group's options route for its shape: MasterName with
// RouteByLatency, RouteRandomly or IsClusterMode, a failover cluster
// client (instrumented: see Instrument); MasterName, a failover client
// (NewFailoverClient); several addresses or IsClusterMode, a cluster client
// (NewClusterClient); otherwise a *redis.Client (NewClient).
// UniversalOptions have no per-node constructor of their own, so there is
// no ConfigureUniversal: the shape's options are built here, as go-redis
// builds them.
func (g *Group) NewUniversalClient(opt *redis.UniversalOptions) redis.UniversalClient {
	needOptions("NewUniversalClient", opt)
	switch {
	case opt.MasterName != "" && (opt.RouteByLatency || opt.RouteRandomly || opt.IsClusterMode):
		cc := redis.NewFailoverClusterClient(opt.Failover())
		_ = g.Instrument(cc)
		return cc
	case opt.MasterName != "":
		return g.NewFailoverClient(opt.Failover())
	case len(opt.Addrs) > 1 || opt.IsClusterMode:
		return g.NewClusterClient(opt.Cluster())
	default:
		return g.NewClient(opt.Simple())
	}
}

// kindOwners maps the Cluster, Ring and Failover options a Group
// configured to that Group, so that configuring them again is a no-op
// (their NewClient or Dialer is the Group's already: wrapping it again
// would give each node two Maints). It is keyed weakly, by
// weak.Make(opt): an entry goes with the Group's Close, or when its
// options are collected (forgetKind), whichever comes first. A Group holds
// no options of its kinds strongly once their clients are closed and
// forgotten (bindCluster), so a long-lived Group that builds clients from
// new options keeps one entry per options still reachable.
var kindOwners sync.Map // weak.Pointer[redis.ClusterOptions | redis.RingOptions | redis.FailoverOptions] → *Group

// kindKey is what forgetKind is given when the options of a kind are
// collected: weak pointers only, or the options would never be.
type kindKey[T any] struct {
	opt weak.Pointer[T]
	g   weak.Pointer[Group]
}

// forgetKind drops the entries of options that were collected: their
// owner's, and their cluster state. No Pointer equal to k.opt can be made
// again, so nothing else can own the entry.
func forgetKind[T any](k kindKey[T]) {
	kindOwners.Delete(k.opt)
	co, ok := any(k.opt).(weak.Pointer[redis.ClusterOptions])
	if !ok {
		return
	}
	if g := k.g.Value(); g != nil {
		g.mu.Lock()
		delete(g.clusters, co)
		g.mu.Unlock()
	}
}

// claimKind reports whether opt is free for g to configure.
func claimKind[T any](g *Group, opt *T) bool {
	key := weak.Make(opt)
	owner, loaded := kindOwners.LoadOrStore(key, g)
	if !loaded {
		runtime.AddCleanup(opt, forgetKind[T], kindKey[T]{opt: key, g: weak.Make(g)})
		return true
	}
	if owner.(*Group) != g {
		g.logf("maint: %T already configured by another Group; left as it is", opt)
	}
	return false
}

// liveHook tells the sweeper that a ring shard or cluster node client is
// still in use: the Ring's heartbeat pings every shard it holds, up or
// down, and a down shard's PING dials (or fails at once while its pool
// waits to dial again). A command or a dial since the last sweep, or a dial
// in flight (a PING to a down shard may wait in dial retries for seconds),
// means alive. One atomic load per command once set.
type liveHook struct {
	seen    atomic.Bool
	dialing atomic.Int64
}

// DialHook notes dials, and dials in flight.
func (h *liveHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dialing.Add(1)
		defer h.dialing.Add(-1)
		h.seen.Store(true)
		return next(ctx, network, addr)
	}
}

// ProcessHook notes commands.
func (h *liveHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.seen.Load() {
			h.seen.Store(true)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook adds nothing: the heartbeat sends single commands.
func (h *liveHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// openConns counts the connections m watches.
func (m *Maint) openConns() int64 { return m.reg.openConns() }

// startSweeper starts the goroutine that forgets the Maints of ring shards
// go-redis closed and installs Maints on instrumented Rings' shards that
// came up, once per group. hb is the Ring's heartbeat period (0: go-redis's
// default).
func (g *Group) startSweeper(hb, dial, read time.Duration) {
	if hb <= 0 {
		hb = 500 * time.Millisecond
	}
	if dial <= 0 {
		dial = 5 * time.Second
	}
	if read <= 0 {
		read = 3 * time.Second
	}
	// A closed shard sees no heartbeat; a live one sees one every hb, but a
	// heartbeat round waits for every shard's PING in turn.
	dead := 10*hb + dial + read
	g.mu.Lock()
	defer g.mu.Unlock()
	if dead > g.deadAfter {
		g.deadAfter = dead
	}
	g.sweepLocked(hb)
}

// startClosedSweeper starts the sweeper for the clients whose Maints are
// forgotten once they are closed (see sweep): cluster node clients, which
// go-redis closes, and clients of their own (NewClient, NewFailoverClient,
// Instrument on a *redis.Client), which the application closes.
func (g *Group) startClosedSweeper() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweepLocked(min(5*time.Second, g.clusterGone/4))
}

// sweepLocked makes the sweeper run at least every period, starting it
// unless it runs or the group is closed. g.mu is held.
func (g *Group) sweepLocked(every time.Duration) {
	if g.closed {
		return
	}
	if g.sweepEvery == 0 || every < g.sweepEvery {
		g.sweepEvery = every
	}
	if g.sweeper {
		return
	}
	g.sweeper = true
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			g.mu.Lock()
			d := g.sweepEvery
			g.mu.Unlock()
			t := time.NewTimer(d)
			select {
			case <-g.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			g.sweep(time.Now())
		}
	}()
}

// sweep forgets the Maints the application closed (Configure's and
// ConfigureFailover's, whose clients the group cannot see); it closes and forgets the Maints of ring
// shards that ran no command
// (not even the heartbeat's PING) and held no connection for deadAfter or
// are closed, of clients of their own with no connection that are closed,
// of cluster node clients quiet for clusterGone whose node the slot maps
// have no longer named for as long, and of closed cluster node clients
// quiet since the last sweep (clientClosed); it installs Maints on the shards
// of instrumented Rings that are up and have none.
func (g *Group) sweep(now time.Time) {
	g.mu.Lock()
	rings := append([]*redis.Ring(nil), g.watched...)
	check := append([]*member(nil), g.ms...)
	dead, gone := g.deadAfter, g.clusterGone
	g.mu.Unlock()
	for _, r := range rings {
		if ringClosed(r) {
			g.unwatch(r)
			continue
		}
		g.coverRing(r, false)
	}
	mnow := monoNow()
	for _, mb := range check {
		if mb.m.isClosed() {
			g.forget(mb) // closed by the application: it serves nobody
			continue
		}
		if mb.cli == nil && mb.live == nil {
			continue // Configure's: the application closes it
		}
		if mb.live == nil {
			// A client of its own: the application closes it. One with no
			// connection is asked at its second quiet sweep.
			if mb.m.openConns() > 0 {
				mb.quiet = time.Time{}
			} else if mb.quiet.IsZero() {
				mb.quiet = now
			} else if clientClosed(mb) {
				g.forget(mb)
			}
			continue
		}
		if mb.live.seen.Swap(false) || mb.live.dialing.Load() > 0 || mb.m.openConns() > 0 {
			mb.quiet = time.Time{} // only the sweeper touches quiet
			continue
		}
		if mb.quiet.IsZero() {
			mb.quiet = now
			continue
		}
		if cs := mb.m.s.cluster; cs != nil {
			// A cluster node client: go-redis closes it once reloaded slot
			// maps no longer name its node, and every one of them when the
			// ClusterClient is closed. Quiet alone is no sign: a node that
			// owns slots nobody uses now is quiet too; a closed one says so
			// without I/O (clientClosed).
			if clientClosed(mb) || now.Sub(mb.quiet) >= gone && cs.goneFor(mb.m, mnow) >= gone {
				g.forget(mb)
			}
			continue
		}
		// A ring shard: go-redis closes it when SetAddrs drops it, and
		// every one at the Ring's Close.
		if clientClosed(mb) || now.Sub(mb.quiet) >= dead {
			g.forget(mb)
		}
	}
	g.sweeps.Add(1)
}

// ringClosed reports whether r is closed, without any I/O and without
// running any of the Ring's hooks: go-redis's GetShardClientForKey
// answers ErrClosed once the Ring is closed, before it looks at its
// shards, and otherwise a shard or "all ring shards are down"
// (TestContractRingShardForKeyAnswersClosed). A PING through the Ring,
// asked when no shard was live, ran through the hooks the application had
// added to the Ring, which recorded a failed PING every sweep.
func ringClosed(r *redis.Ring) bool {
	_, err := r.GetShardClientForKey("")
	return errors.Is(err, redis.ErrClosed)
}

// closedAsk is the configuration clientClosed asks for an autopipeliner
// with: one go-redis refuses (a negative batch size), so that the answer
// is ErrClosed or the refusal, and nothing is built.
var closedAsk = &redis.AutoPipelineOptions{MaxBatchSize: -1}

// clientClosed reports whether mb's client, quiet (no connection, no
// command), is closed, without any I/O and without running any of the
// client's hooks: go-redis's AutoPipelineWithOptions answers ErrClosed
// once the client (or a clone sharing its pools) is closed, before it
// looks at the configuration; otherwise it returns the autopipeliner the
// client has, or refuses closedAsk before building one
// (TestContractAutoPipelineAnswersClosed). A command on the client, or on
// a *redis.Conn of it, ran through the hooks the application had added
// before maint's (its own NewClient's on the options route, those before
// Instrument), so that a tracing or metrics hook recorded a failed PING
// every sweep for every quiet client.
func clientClosed(mb *member) bool {
	if mb.cli == nil {
		return false
	}
	_, err := mb.cli.AutoPipelineWithOptions(closedAsk)
	return errors.Is(err, redis.ErrClosed)
}

// unwatch stops polling r, a closed Ring.
func (g *Group) unwatch(r *redis.Ring) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.ringSaid, r)
	for i, x := range g.watched {
		if x == r {
			g.watched = append(g.watched[:i:i], g.watched[i+1:]...)
			return
		}
	}
}

// watchedRings returns how many Rings the group polls for shards that come up
// (for tests).
func (g *Group) watchedRings() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.watched)
}

// forget closes mb's Maint and drops it, keeping its counters. The Maint
// is closed before the group's observers are unsubscribed from it, so that
// what its Close reports (a relaxed node's RelaxOff) reaches them.
func (g *Group) forget(mb *member) {
	g.mu.Lock()
	if mb.gone {
		g.mu.Unlock()
		return
	}
	mb.gone = true
	g.mu.Unlock()
	// Closed first, then out of Maints(): once a Maint has left the group,
	// the events its Close emits (the RelaxOffs that bring gauges back to
	// 0) have reached the group's observers.
	_ = mb.m.Close()
	st := mb.m.Stats()
	g.mu.Lock()
	for i, x := range g.ms {
		if x == mb {
			g.ms = append(g.ms[:i:i], g.ms[i+1:]...)
			break
		}
	}
	if mb.cli != nil && g.byCli[mb.cli] == mb {
		delete(g.byCli, mb.cli)
	}
	var cancels []func()
	for _, cs := range g.obs.fs { // the observers' subscriptions to mb go with it
		if c := cs[mb.m]; c != nil {
			cancels = append(cancels, c)
		}
	}
	g.detachLocked(mb.m)
	g.retired.add(st)
	g.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// Maints returns the Maints of the group's live clients.
func (g *Group) Maints() []*Maint {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*Maint, len(g.ms))
	for i, mb := range g.ms {
		out[i] = mb.m
	}
	return out
}

// Stats returns the sum of the counters of every Maint of the group, those
// of Maints already closed and forgotten included.
func (g *Group) Stats() Stats {
	g.mu.Lock()
	s := g.retired
	g.mu.Unlock()
	for _, m := range g.Maints() {
		s.add(m.Stats())
	}
	return s
}

// Close closes every Maint of the group and stops its goroutines. Close the
// clients first. Close is idempotent.
func (g *Group) Close() error {
	g.mu.Lock()
	g.closed = true
	ms := g.ms
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	for _, mb := range ms {
		_ = mb.m.Close()
	}
	kindOwners.Range(func(k, v any) bool {
		if v.(*Group) == g {
			kindOwners.Delete(k)
		}
		return true
	})
	return nil
}

// ringOnce returns r's "no opt-in" once (nil for a Ring no longer
// watched: each shard's Maint then says it once).
func (g *Group) ringOnce(r *redis.Ring) *sync.Once {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ringSaid[r]
}
