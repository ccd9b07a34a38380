package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	gopush "github.com/redis/go-redis/v9/push"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// go-redis's maintnotifications/e2e scenario_unified_injector_test.go
// drives a cluster through a notification injector: a proxy in front of
// the nodes whose /send-to-all-clients writes a push, as given, to every
// client connection, with no maintenance behind it. The emulated nodes'
// SendRaw is the same injection (to every opted-in RESP3 connection, as a
// server sends pushes); the fault injector has no action for it, and
// go-redis's tests skip when a real one is configured, as these do.

// handledNotes records the maintenance notifications a column's cluster
// client handled, by name and time: maint's EventNotification on its
// columns, go-redis's notification hook (PreHook, as go-redis's tracker
// counts them) on every node client of the built-in's column; a client
// with no handler handles none.
type handledNotes struct {
	mu   sync.Mutex
	seen []push
	wake chan struct{}
}

func newHandledNotes() *handledNotes { return &handledNotes{wake: make(chan struct{})} }

func (h *handledNotes) add(kind, node string, at time.Time) {
	h.mu.Lock()
	h.seen = append(h.seen, push{at: at, kind: kind, args: []string{node}})
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
}

// watch starts recording for cc's column before its first command (the
// built-in's hook goes on each node client as go-redis creates it);
// everything stops at the end of t.
func (h *handledNotes) watch(t *testing.T, col column, cc *redis.ClusterClient, g *maint.Group) {
	switch {
	case g != nil:
		t.Cleanup(g.Observe(func(e maint.Event) {
			if e.Kind == maint.EventNotification {
				h.add(e.Name, e.Node, e.At)
			}
		}))
	case col == colBuiltin:
		cc.OnNewNode(func(node *redis.Client) {
			if mgr := node.GetMaintNotificationsManager(); mgr != nil {
				mgr.AddNotificationHook(noteHook{h})
			}
		})
	}
}

// wait returns the first notification of kind handled at or after since
// (its args hold the node, when known), waiting for it until deadline.
func (h *handledNotes) wait(ctx context.Context, kind string, since, deadline time.Time) (push, bool) {
	for {
		h.mu.Lock()
		for _, p := range h.seen {
			if p.kind == kind && !p.at.Before(since) {
				h.mu.Unlock()
				return p, true
			}
		}
		wake := h.wake
		h.mu.Unlock()
		d := time.Until(deadline)
		if d <= 0 {
			return push{}, false
		}
		tm := time.NewTimer(d)
		select {
		case <-wake:
		case <-tm.C:
		case <-ctx.Done():
		}
		tm.Stop()
		if ctx.Err() != nil {
			return push{}, false
		}
	}
}

// noteHook is go-redis's notification hook recording what the built-in
// handles.
type noteHook struct{ h *handledNotes }

func (n noteHook) PreHook(_ context.Context, nc gopush.NotificationHandlerContext, typ string, v []interface{}) ([]interface{}, bool) {
	node := ""
	if c, ok := nc.Conn.(interface{ RemoteAddr() net.Addr }); ok && c.RemoteAddr() != nil {
		node = c.RemoteAddr().String()
	}
	n.h.add(typ, node, time.Now())
	return v, true
}

func (noteHook) PostHook(context.Context, gopush.NotificationHandlerContext, string, []interface{}, error) {
}

// clusterEndpoints returns the emulated cluster's node endpoints, the ones
// a client finds through the endpoints file, in its order.
func (w *world) clusterEndpoints() ([]*mainttest.Endpoint, error) {
	addrs, err := w.cluster.Addrs()
	if err != nil {
		return nil, err
	}
	byAddr := map[string]*mainttest.Endpoint{}
	for _, ep := range w.emu.Endpoints() {
		byAddr[ep.Addr()] = ep
	}
	out := make([]*mainttest.Endpoint, 0, len(addrs))
	for _, a := range addrs {
		ep := byAddr[a]
		if ep == nil {
			return nil, fmt.Errorf("no emulated endpoint for the cluster address %s", a)
		}
		out = append(out, ep)
	}
	return out, nil
}

// goRedisSMigrating is the SMIGRATING go-redis's injector writes
// (formatSMigratingNotification): the seq as an integer, each slot range
// as a bulk string of its own.
func goRedisSMigrating(seq int64, slots ...string) []byte {
	b := fmt.Appendf(nil, ">%d\r\n$10\r\nSMIGRATING\r\n:%d\r\n", len(slots)+2, seq)
	for _, s := range slots {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(s), s)
	}
	return b
}

// unifiedNotificationDelay is go-redis's NotificationDelay of its proxy
// mock, the time it gives a client to process an injected notification
// before it counts what its tracker saw.
const unifiedNotificationDelay = time.Second

// TestGoRedisE2EUnifiedInjectorSMIGRATING ports go-redis's
// TestUnifiedInjector_SMIGRATING: a ClusterClient (RESP3, relaxed 30 s,
// go-redis's default 3 s read timeout) sets key0..key9, starts a BLPOP of
// 10 s on notification-test-list to keep a connection active, and the
// injector writes SMIGRATING [12345, "1000-2000", "3000"] to every
// connection of every node; no migration follows, and no SMIGRATED. Its
// criteria: the client's notification hook counted an SMIGRATING
// NotificationDelay (1 s) after the injection, with no command sent
// meanwhile, so it was read by the connection waiting on the BLPOP; then a
// SET of test-key-during-migration succeeds. The port waits for the
// client's handler (maint's EventNotification, go-redis's hook) at most
// that 1 s instead of sleeping it, and waits until the node holds the
// BLPOP instead of go-redis's 500 ms. go-redis never reads the BLPOP's
// result; the port holds every column to it besides: it returns its own
// reply, the nil of its timeout (2 s in short mode: it sets only how long
// the test takes), not the push taken for its reply and not an error. A
// client with no handler never opts in and is sent nothing.
func TestGoRedisE2EUnifiedInjectorSMIGRATING(t *testing.T) {
	parallelTop(t)
	if real {
		t.Skip("needs the injection of a bare notification (go-redis's proxy mock), which the fault injector has no action for; go-redis's own test skips with a real fault injector too")
	}
	const (
		listKey = "notification-test-list"
		seq     = 12345
	)
	blpop := 10 * time.Second
	if !full() {
		blpop = 2 * time.Second
	}
	scenario{
		name:      "TestGoRedisE2EUnifiedInjectorSMIGRATING",
		criterion: "SMIGRATING [12345, 1000-2000, 3000] to every connection, a BLPOP the only command in flight: handled within 1 s; a SET then succeeds; the BLPOP returns its own nil",
		world:     func(t *testing.T) *world { return newWorld(t, true, nil) },
		check: func(ctx context.Context, t *testing.T, w *world, col column) error {
			nodes, err := w.clusterEndpoints()
			if err != nil {
				return err
			}
			cc, g, err := w.clusterClientOf(t, col, clusterParams{relaxed: 30 * time.Second}, &tapDialer{next: w.dial})
			if err != nil {
				return err
			}
			notes := newHandledNotes()
			notes.watch(t, col, cc, g)
			if err := cc.Ping(ctx).Err(); err != nil {
				return err
			}
			for i := range 10 {
				if err := cc.Set(ctx, fmt.Sprintf("key%d", i), "value", 0).Err(); err != nil {
					t.Logf("SET key%d: %v", i, err) // go-redis logs a warning
				}
			}
			// The BLPOP in flight: its node owes the reply.
			owner, err := cc.MasterForKey(ctx, listKey)
			if err != nil {
				return err
			}
			var node *mainttest.Endpoint
			for _, ep := range nodes {
				if ep.Addr() == owner.Options().Addr {
					node = ep
				}
			}
			if node == nil {
				return fmt.Errorf("%s's master %s is no node of the cluster", listKey, owner.Options().Addr)
			}
			before := node.Stats().Pending
			type popped struct {
				v   []string
				err error
				d   time.Duration
			}
			res := make(chan popped, 1)
			popStart := time.Now()
			go func() {
				v, err := cc.BLPop(ctx, blpop, listKey).Result()
				res <- popped{v, err, time.Since(popStart)}
			}()
			for deadline := time.Now().Add(5 * time.Second); node.Stats().Pending <= before; {
				if time.Now().After(deadline) {
					return fmt.Errorf("the BLPOP never reached %s", node.Addr())
				}
				sleepCtx(ctx, 5*time.Millisecond)
			}
			since := time.Now()
			for _, ep := range nodes {
				ep.SendRaw(goRedisSMigrating(seq, "1000-2000", "3000"))
			}
			var errs []error
			if p, ok := notes.wait(ctx, "SMIGRATING", since, since.Add(unifiedNotificationDelay)); ok {
				t.Logf("SMIGRATING handled %v after the injection (node %s; the BLPOP's: %s)",
					p.at.Sub(since).Round(time.Microsecond), p.args[0], node.Addr())
			} else {
				errs = append(errs, fmt.Errorf("no SMIGRATING handled within %v of the injection", unifiedNotificationDelay))
			}
			if err := cc.Set(ctx, "test-key-during-migration", "value", 0).Err(); err != nil {
				errs = append(errs, fmt.Errorf("SET during the migration: %w", err))
			}
			select {
			case r := <-res:
				switch {
				case errors.Is(r.err, redis.Nil):
				case r.err != nil:
					errs = append(errs, fmt.Errorf("BLPOP: %w after %v", r.err, r.d.Round(time.Millisecond)))
				default:
					errs = append(errs, fmt.Errorf("BLPOP of an empty list returned %q after %v", r.v, r.d.Round(time.Millisecond)))
				}
			case <-time.After(blpop + 15*time.Second):
				errs = append(errs, fmt.Errorf("the BLPOP (%v) never returned", blpop))
			}
			return joinFirst(errs)
		},
	}.run(t)
}
