package maint

import (
	"fmt"

	"github.com/maintkit/maint/internal/resp"
)

// What a maintenance notification does: each push maint strips from a
// connection's stream (dialer.go) is parsed and handed to the concern it
// starts or ends: a MOVING to the handoff (moving.go), a MIGRATING,
// FAILING_OVER or SMIGRATING to relaxation (relax.go) and their completions
// likewise, an SMIGRATED in a cluster to the slot map (cluster.go), a
// FAILED_OVER on the failover route to its probe (failover_switch.go).
// Bad input is counted and reported, never acted on.

// onNotification handles one stripped maintenance push. It runs on the
// goroutine reading the connection and must not block.
func (c *conn) onNotification(frame []byte) {
	m := c.m
	nt, err := resp.ParsePush(frame)
	if err != nil {
		m.c.malformed.Add(1)
		m.emit(Event{Kind: EventMalformed, Node: c.n.key, Detail: "ignoring malformed notification: " + err.Error()})
		return
	}
	if m.ctx.Err() != nil {
		return
	}
	m.c.notifications.Add(1)
	ev := Event{Kind: EventNotification, Node: c.n.key, Seq: nt.Seq, Name: nt.Kind.String(), Detail: describe(nt)}
	if cs := m.s.cluster; cs != nil && nt.Kind == resp.KindSMigrated {
		// The slot map to serve first, then the event: once an observer
		// learns that maint read the SMIGRATED, go-redis's reload is asked
		// and answered from maint's map (guarantee C2).
		cs.onSMigrated(m, c, nt)
		m.emit(ev)
		m.relaxEnd(c.n, nt)
		cs.relaxReplicas(m, nt, true)
		return
	}
	m.emit(ev)
	switch nt.Kind {
	case resp.KindMoving:
		m.onMoving(c, nt)
	case resp.KindMigrating, resp.KindFailingOver:
		m.relax(c.n, nt)
	case resp.KindSMigrating:
		m.relax(c.n, nt)
		if cs := m.s.cluster; cs != nil {
			cs.relaxReplicas(m, nt, false) // reads reach the replicas too
		}
	case resp.KindMigrated, resp.KindFailedOver:
		m.relaxEnd(c.n, nt)
		if nt.Kind == resp.KindFailedOver && m.s.failedOver != nil {
			m.s.failedOver(c, nt.Seq)
		}
	case resp.KindSMigrated: // outside a cluster (a cluster's is above)
		m.relaxEnd(c.n, nt)
	}
}

func describe(nt resp.Notification) string {
	s := nt.Kind.String()
	if nt.HasTime {
		s += fmt.Sprintf(" time=%d", nt.Time)
	}
	if nt.Kind == resp.KindMoving {
		if nt.Null {
			s += " endpoint=null"
		} else {
			s += " endpoint=" + nt.Endpoint
		}
	}
	return s
}

// badInput counts, logs and reports a notification that is malformed or
// absurd.
func (m *Maint) badInput(c *conn, seq int64, what string) {
	m.c.malformed.Add(1)
	m.emit(Event{Kind: EventMalformed, Node: c.n.key, Seq: seq, Detail: what})
}
