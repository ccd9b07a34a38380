package maint

import (
	"fmt"
	"sync/atomic"
	"time"
)

// EventKind names what happened.
type EventKind uint8

const (
	// EventNotification: a maintenance notification was read (Detail says which).
	EventNotification EventKind = iota + 1
	// EventMalformed: a push was malformed or absurd and was ignored.
	EventMalformed
	// EventHandoff: a MOVING started a handoff for a node.
	EventHandoff
	// EventRetire: the node's connections left circulation (Count of them):
	// those open at the retirement, and one by one those that join the node
	// while its handoff runs.
	EventRetire
	// EventHold: new commands wait for a replacement.
	EventHold
	// EventRelease: held commands go.
	EventRelease
	// EventDrainCap: the drain cap passed; Count connections were still open and were closed.
	EventDrainCap
	// EventDoomed: a new connection landed on the retiring node and was discarded.
	EventDoomed
	// EventReplacement: a connection landed on another node while a handoff was on.
	EventReplacement
	// EventHandoffDone: the handoff ended.
	EventHandoffDone
	// EventRelax: timeouts of a node were relaxed.
	EventRelax
	// EventRelaxEnd: a completion set the end of a node's relaxation.
	EventRelaxEnd
	// EventUnsupported: the endpoint refused the opt-in handshake.
	EventUnsupported
	// EventSuccessorRefused: a MOVING named a successor that the policy
	// refused, or that a dial refused (its TLS certificate does not prove the
	// name the client verifies; a name that landed where it must not); the
	// MOVING is treated as a null endpoint from then on.
	EventSuccessorRefused
	// EventMisuse: maint found itself installed in a way that switches part
	// of it off (logged once; Detail says what).
	EventMisuse
	// EventReplayed: a copy or a late copy of a notification already acted
	// on was read; it changed nothing (Name says which push).
	EventReplayed
	// EventRelaxOn: a node's timeouts became relaxed (it was not relaxed
	// before). Every EventRelaxOn is followed by one EventRelaxOff for the
	// same node, at the latest when the Maint is closed.
	EventRelaxOn
	// EventRelaxOff: a node's relaxation ended: no operation is open and the
	// tail is over, or the cap passed, or the Maint was closed.
	EventRelaxOff
	// EventHeld: a handoff that held commands has ended (emitted just
	// before its report): Count commands waited for a replacement, Duration
	// is the longest wait, Detail says how many maint failed ("failed=N":
	// their context ended while they waited). One per handoff, never one per
	// command: the release of a hold is when commands most need their turn.
	EventHeld
	// EventHandoffReport: a handoff's story, once it has ended (Report).
	EventHandoffReport
	// EventConnClosed: a connection that maint took out of circulation
	// (retired, fenced) or closed itself has been closed. Detail is the
	// reason, in the terms of the cross-client metrics spec
	// (CloseHealthcheckFailed, CloseError, CloseServer); for CloseError, Err
	// is the error maint closed it with. One per connection: connections
	// closed for reasons maint does not know (the application's Close, an
	// idle eviction) are not reported.
	EventConnClosed
	// EventError: an error maint returned to the application (Internal
	// false: a command's final error, seen by the process hooks) or
	// handled itself (Internal true: the opt-in answered with a transient
	// error, a redis.Error). Err is the error; Node the node concerned,
	// when the error names one. A refusal for lack of support is
	// EventUnsupported, a refused successor EventSuccessorRefused.
	EventError
)

// Close reasons of EventConnClosed (its Detail): the values of the
// cross-client spec's redis.client.connection.close.reason that apply to
// the connections maint takes out of circulation.
const (
	// CloseHealthcheckFailed: go-redis closed the connection because maint's
	// check refused its reuse (it was retired by a handoff), or maint
	// closed a retired subscriber connection.
	CloseHealthcheckFailed = "healthcheck_failed"
	// CloseError: maint closed the connection at the drain cap (idle, or
	// under a blocking command); Event.Err says with which error.
	CloseError = "error"
	// CloseServer: the server closed a connection maint had left to it
	// (one that still owed a reply at the drain cap, or a retired one
	// the server closed first).
	CloseServer = "server_close"
)

var eventNames = [...]string{
	EventNotification:     "notification",
	EventMalformed:        "malformed",
	EventHandoff:          "handoff",
	EventRetire:           "retire",
	EventHold:             "hold",
	EventRelease:          "release",
	EventDrainCap:         "drain-cap",
	EventDoomed:           "doomed",
	EventReplacement:      "replacement",
	EventHandoffDone:      "handoff-done",
	EventRelax:            "relax",
	EventRelaxEnd:         "relax-end",
	EventUnsupported:      "unsupported",
	EventSuccessorRefused: "successor-refused",
	EventMisuse:           "misuse",
	EventReplayed:         "replayed",
	EventRelaxOn:          "relax-on",
	EventRelaxOff:         "relax-off",
	EventHeld:             "held",
	EventHandoffReport:    "handoff-report",
	EventConnClosed:       "conn-closed",
	EventError:            "error",
}

// String returns the kind's name.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one thing a Maint did or saw, for logs, metrics and tests.
// Fields that do not apply to its Kind are zero.
type Event struct {
	At     time.Time
	Kind   EventKind
	Node   string // address of the node concerned, if any
	Seq    int64  // notification sequence id, if any
	Count  int    // connections concerned, if any
	Detail string
	// Name is the push's name (MOVING, MIGRATING, ...) for
	// EventNotification and EventReplayed, and of the push that started
	// the relaxation for EventRelaxOn.
	Name string
	// Duration is the MOVING's window as counted (EventHandoff, see
	// HandoffReport.Window), the longest wait of a held command
	// (EventHeld), or the handoff's total duration (EventHandoffReport).
	Duration time.Duration
	// Successor is the address a MOVING named (EventHandoff, "" for a null
	// endpoint) or where a replacement was found (EventReplacement).
	Successor string
	// Report is the handoff's report (EventHandoffReport), shared by every
	// receiver of the event: read it, do not change it.
	Report *HandoffReport
	// Err is the error of EventError, and of EventConnClosed when maint
	// closed the connection with one.
	Err error
	// Internal says, for EventError, that maint handled the error itself:
	// the application did not see it.
	Internal bool
	// Pool names the pool of Node's connections: the address the client was
	// configured with (redis.Options.Addr), as go-redis's OTel modules name
	// a pool; "" when Node is "" or no longer known.
	Pool string
}

// String formats the event for a log line.
func (e Event) String() string {
	s := e.Kind.String()
	if e.Node != "" {
		s += " node=" + e.Node
	}
	if e.Seq != 0 {
		s += fmt.Sprintf(" seq=%d", e.Seq)
	}
	if e.Count != 0 {
		s += fmt.Sprintf(" count=%d", e.Count)
	}
	switch {
	case e.Kind == EventHandoff:
		s += fmt.Sprintf(" window=%v successor=%q", e.Duration, e.Successor)
	case e.Duration != 0:
		s += fmt.Sprintf(" duration=%v", e.Duration)
	}
	if e.Detail != "" {
		s += " " + e.Detail
	}
	return s
}

// Stats are cumulative counters of a Maint.
type Stats struct {
	Notifications uint64 // maintenance notifications read
	Malformed     uint64 // pushes ignored as malformed or absurd
	Replayed      uint64 // copies and late copies of notifications already acted on, which changed nothing
	Oversize      uint64 // maintenance pushes larger than maint buffers: removed from the stream, not acted on
	Handoffs      uint64 // handoffs started
	Retired       uint64 // connections taken out of circulation
	ClosedAtCap   uint64 // retired connections closed at the drain cap
	BusyAtCap     uint64 // connections left open at the drain cap with a blocking command in flight (the server's close ends it)
	OwedAtCap     uint64 // connections left open at the drain cap because a reply was owed (blocking commands included)
	Doomed        uint64 // new connections discarded for landing on a retiring node
	Held          uint64 // commands that waited for a replacement
	HeldTimeouts  uint64 // held commands whose context ended first
	Relaxations   uint64 // relaxations started
	Unsupported   uint64 // endpoints that refused the opt-in handshake
	// RefusedSuccessors counts MOVING successors refused by the policy or
	// by a dial (see EventSuccessorRefused).
	RefusedSuccessors uint64
	// PoolRetries counts the further pool turns given to commands that
	// timed out waiting for a connection while a node was relaxed.
	PoolRetries uint64
	// NotWrittenReruns counts the commands run again because go-redis
	// closed their failover connection at a switch of the master after
	// they took it from the pool and before they wrote to it.
	NotWrittenReruns uint64
	// Handshakes counts opt-ins maint wrote behind go-redis's HELLO;
	// HandshakeErrors the ones answered with an error other than "no
	// support" (not remembered).
	Handshakes, HandshakeErrors uint64
	// Probes counts the probe dials of a configured address during and
	// after handoffs (moving.go); ProbesReused those whose connection a dial
	// of the pool took (spare.go), ProbesUnused those that landed on a
	// replacement and were closed untaken. The others landed on a retiring
	// node, or failed, and were closed at once.
	Probes, ProbesReused, ProbesUnused uint64
	// Rearms counts the reads and writes whose socket deadline, armed
	// lazily (see docs/design.md), fired before the deadline go-redis
	// asked for, and which went on under that one.
	Rearms uint64
	// ReleasesAsked counts the connections that owed replies at the drain
	// cap and were handed to go-redis to let go at their next clean turn
	// (release.go); ReleasesMarked those go-redis marked through maint's
	// push handler; ReleasesUnmarked those no handler took (a redis.Conn's),
	// closed at a write once nothing was owed.
	ReleasesAsked, ReleasesMarked, ReleasesUnmarked uint64
	// NoOptIn counts the connections that carried commands without an
	// opt-in while no connection of the Maint had one: maint is installed
	// but told nothing (said once at Warn; see handshake.go).
	NoOptIn uint64
	// Misplaced counts the commands that ran through the Maint's hook on
	// a *redis.ClusterClient or *redis.Ring, which dial no connection of
	// their own: maint protects nothing there (said once at Warn, naming
	// the routes that do; see placement.go).
	Misplaced uint64
}

// add adds o to s.
func (s *Stats) add(o Stats) {
	s.Notifications += o.Notifications
	s.Malformed += o.Malformed
	s.Replayed += o.Replayed
	s.Oversize += o.Oversize
	s.Handoffs += o.Handoffs
	s.Retired += o.Retired
	s.ClosedAtCap += o.ClosedAtCap
	s.BusyAtCap += o.BusyAtCap
	s.OwedAtCap += o.OwedAtCap
	s.Doomed += o.Doomed
	s.Held += o.Held
	s.HeldTimeouts += o.HeldTimeouts
	s.Relaxations += o.Relaxations
	s.Unsupported += o.Unsupported
	s.RefusedSuccessors += o.RefusedSuccessors
	s.PoolRetries += o.PoolRetries
	s.NotWrittenReruns += o.NotWrittenReruns
	s.Handshakes += o.Handshakes
	s.HandshakeErrors += o.HandshakeErrors
	s.Probes += o.Probes
	s.ProbesReused += o.ProbesReused
	s.ProbesUnused += o.ProbesUnused
	s.Rearms += o.Rearms
	s.ReleasesAsked += o.ReleasesAsked
	s.ReleasesMarked += o.ReleasesMarked
	s.ReleasesUnmarked += o.ReleasesUnmarked
	s.NoOptIn += o.NoOptIn
	s.Misplaced += o.Misplaced
}

type counters struct {
	handshakes, handshakeErrors, poolRetries, notWrittenReruns,
	notifications, malformed, replayed, oversize, refusedSuccessors, handoffs, retired, closedAtCap, busyAtCap, owedAtCap,
	doomed, held, heldTimeouts, relaxations, unsupported,
	probes, sparesTaken, sparesUnused, rearms,
	releasesAsked, releasesMarked, releasesUnmarked, noOptIn, misplaced atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Notifications: c.notifications.Load(),
		Malformed:     c.malformed.Load(),
		Replayed:      c.replayed.Load(),
		Oversize:      c.oversize.Load(),
		Handoffs:      c.handoffs.Load(),
		Retired:       c.retired.Load(),
		ClosedAtCap:   c.closedAtCap.Load(),
		BusyAtCap:     c.busyAtCap.Load(),
		OwedAtCap:     c.owedAtCap.Load(),
		Doomed:        c.doomed.Load(),
		Held:          c.held.Load(),
		HeldTimeouts:  c.heldTimeouts.Load(),
		Relaxations:   c.relaxations.Load(),
		Unsupported:   c.unsupported.Load(),

		RefusedSuccessors: c.refusedSuccessors.Load(),
		PoolRetries:       c.poolRetries.Load(),
		NotWrittenReruns:  c.notWrittenReruns.Load(),
		Handshakes:        c.handshakes.Load(),
		HandshakeErrors:   c.handshakeErrors.Load(),
		Probes:            c.probes.Load(),
		ProbesReused:      c.sparesTaken.Load(),
		ProbesUnused:      c.sparesUnused.Load(),
		Rearms:            c.rearms.Load(),
		ReleasesAsked:     c.releasesAsked.Load(),
		ReleasesMarked:    c.releasesMarked.Load(),
		ReleasesUnmarked:  c.releasesUnmarked.Load(),
		NoOptIn:           c.noOptIn.Load(),
		Misplaced:         c.misplaced.Load(),
	}
}

// emit logs e, and hands it to Config.OnEvent and to every observer.
func (m *Maint) emit(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if e.Pool == "" && e.Node != "" {
		e.Pool = m.reg.poolOf(e.Node)
	}
	m.logEvent(e)
	if f := m.s.onEvent; f != nil {
		f(e)
	}
	m.obs.notify(e)
}
