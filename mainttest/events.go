package mainttest

import (
	"context"
	"fmt"
	"time"
)

// Event kinds, the stable vocabulary of the Emulator's event log.
const (
	// KindListen: an endpoint started listening (AddEndpoint).
	KindListen = "listen"
	// KindAccept: a client connection was accepted; Conn is its id.
	KindAccept = "accept"
	// KindClose: a client connection ended; Detail says why ("client",
	// "backend", "protocol_error", "handshake" (AnswerClose), "window_end",
	// "close_all", "emulator_close") and how many replies were still owed.
	KindClose = "close"
	// KindOptIn: CLIENT MAINT_NOTIFICATIONS ON was accepted; Detail is the
	// requested moving-endpoint-type ("" for a bare ON).
	KindOptIn = "optin"
	// KindOptOut: CLIENT MAINT_NOTIFICATIONS OFF was accepted.
	KindOptOut = "optout"
	// KindUnsupported: the handshake was answered with an error
	// (AnswerError, Config.Unsupported); Detail is the error line.
	KindUnsupported = "unsupported"
	// KindHandshakeIgnored: the handshake was read and will never be
	// answered (AnswerNone).
	KindHandshakeIgnored = "handshake_ignored"
	// KindFirstServed: the endpoint relayed its first backend reply.
	KindFirstServed = "first_served"

	// The push kinds: a push was sent to the endpoint's opted-in RESP3
	// connections; Seq is its id and Detail ends with "conns=N".

	// KindMoving: Endpoint.Moving; Detail has the wire time, window and target.
	KindMoving = "moving"
	// KindMigrating: Endpoint.Migrating.
	KindMigrating = "migrating"
	// KindMigrated: Endpoint.Migrated.
	KindMigrated = "migrated"
	// KindFailingOver: Endpoint.FailingOver.
	KindFailingOver = "failing_over"
	// KindFailedOver: Endpoint.FailedOver.
	KindFailedOver = "failed_over"
	// KindSMigrating: Endpoint.SMigrating.
	KindSMigrating = "smigrating"
	// KindSMigrated: Endpoint.SMigrated.
	KindSMigrated = "smigrated"
	// KindRaw: Endpoint.SendRaw (Seq 0).
	KindRaw = "raw"
	// KindReplay: a newly opted-in connection was sent the retained
	// completion or the MOVING of an open window (Detail names which).
	KindReplay = "replay"

	// KindMaintStart: the "starts in" of a MIGRATING or FAILING_OVER elapsed;
	// SetMaintLatency applies from now until the matching completion.
	KindMaintStart = "maint_start"
	// KindWindowEndClose: a MOVING window ended; Detail has "closed=N owed=M".
	// It is logged once those connections are closed, with At the moment the
	// window ended.
	KindWindowEndClose = "window_end_close"
	// KindCloseAll: CloseAll closed the endpoint's connections.
	KindCloseAll = "close_all"
	// KindRefuse: the endpoint stopped accepting (Detail "on") or accepts
	// again ("off"); a failed rebind is logged with Detail "rebind failed: ...".
	KindRefuse = "refuse"
	// KindDNS: a DNS answer changed; Detail is "host -> ip,ip".
	KindDNS = "dns"
)

// Event is one entry of the Emulator's timestamped log.
type Event struct {
	At       time.Time // when it happened
	Endpoint string    // the endpoint's address; "" for DNS events
	Kind     string    // one of the Kind constants
	Seq      int64     // the push's sequence id, when the event is a push
	Conn     uint64    // the client connection's id, for per-connection events
	Detail   string    // human-readable details
}

// String formats the event for logs.
func (ev Event) String() string {
	s := fmt.Sprintf("%s %s %s", ev.At.Format("15:04:05.000000"), ev.Endpoint, ev.Kind)
	if ev.Seq != 0 {
		s += fmt.Sprintf(" seq=%d", ev.Seq)
	}
	if ev.Conn != 0 {
		s += fmt.Sprintf(" conn=%d", ev.Conn)
	}
	if ev.Detail != "" {
		s += " " + ev.Detail
	}
	return s
}

func (e *Emulator) event(ev Event) {
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	e.evMu.Lock()
	e.events = append(e.events, ev)
	close(e.evWake)
	e.evWake = make(chan struct{})
	e.evMu.Unlock()
	e.logf("mainttest: %s", ev)
}

// Events returns a copy of the event log: every endpoint, in order.
func (e *Emulator) Events() []Event {
	e.evMu.Lock()
	defer e.evMu.Unlock()
	return append([]Event(nil), e.events...)
}

// WaitEvent blocks until an event matching match is logged, or was already,
// and returns the first such event. It returns ctx's error when ctx ends and
// ErrClosed when the Emulator is closed without a match.
func (e *Emulator) WaitEvent(ctx context.Context, match func(Event) bool) (Event, error) {
	next := 0
	for {
		e.evMu.Lock()
		evs := e.events[next:len(e.events):len(e.events)]
		wake := e.evWake
		e.evMu.Unlock()
		for _, ev := range evs {
			if match(ev) {
				return ev, nil
			}
		}
		next += len(evs)
		select {
		case <-wake:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-e.done:
			// One last look: events logged while closing.
			e.evMu.Lock()
			evs = e.events[next:len(e.events):len(e.events)]
			e.evMu.Unlock()
			for _, ev := range evs {
				if match(ev) {
					return ev, nil
				}
			}
			return Event{}, ErrClosed
		}
	}
}

// IsKind returns a WaitEvent matcher for events of kind on endpoint ep
// (any endpoint when ep is nil).
func IsKind(ep *Endpoint, kind string) func(Event) bool {
	return func(ev Event) bool {
		return ev.Kind == kind && (ep == nil || ev.Endpoint == ep.addr)
	}
}
