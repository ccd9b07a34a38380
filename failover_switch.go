package maint

import (
	"context"
	"fmt"
	"time"
)

// A failover client's master after FAILED_OVER.
//
// When the sentinels publish +switch-master, go-redis's FailoverClient
// closes its connections to the old master itself (failover_close.go keeps
// the replies owed on them). A Discovery Service that publishes nothing
// (or a client that missed the message) leaves them in the pool: the
// commands go on reaching the demoted node until it closes them, with
// replies owed (failed commands, writes run twice). FAILED_OVER on the old
// master's connections is then the only signal. It does not say the master
// moved (a failover behind a proxy endpoint keeps the address), so the
// Maint asks the sentinels, as the client's dialer does: it dials through
// that dialer, and if the connection lands elsewhere, retires the node's
// connections. Retired, they serve no new command (the pool's health check
// refuses them; go-redis dials again, through the sentinels), and the
// commands in flight on them finish.

// failedOverProbeTimeout bounds the dial through the sentinels.
const failedOverProbeTimeout = 2 * time.Second

// failedOverSwitch returns a failover Maint's FAILED_OVER handler: one
// dial through the sentinels per node and notification (the server sends
// FAILED_OVER on every opted-in connection), off the goroutine reading c.
// The last notification probed is the node's own (node.failedOverSeq):
// nothing outlives a node the Maint forgets.
func failedOverSwitch() func(c *conn, seq int64) {
	return func(c *conn, seq int64) {
		if c.n.failedOverSeq.Swap(seq+1) == seq+1 {
			return
		}
		failedOverProbe(c)
	}
}

// failedOverProbe asks the sentinels where the master is now and retires
// c's node if it is elsewhere.
func failedOverProbe(c *conn) {
	m, n, old := c.m, c.n, c.remote
	m.goBackground(func() {
		t := m.target(failoverTarget)
		nextp := t.next.Load()
		if nextp == nil || old == "" {
			return
		}
		ctx, cancel := context.WithTimeout(m.ctx, failedOverProbeTimeout)
		defer cancel()
		ctx = context.WithValue(ctx, dialKey{}, &dialCtx{m: m})
		raw, err := (*nextp)(ctx, "tcp", failoverTarget)
		if err != nil {
			return
		}
		remote := remoteString(raw)
		_ = raw.Close()
		if remote == "" || remote == old {
			return // the sentinels name the same node
		}
		k := m.retire(n, true)
		m.emit(Event{Kind: EventRetire, Node: n.key, Successor: remote,
			Detail: fmt.Sprintf("FAILED_OVER and the sentinels name %s: %d connections retired", remote, k)})
	})
}
