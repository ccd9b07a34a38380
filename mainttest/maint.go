package mainttest

import (
	"fmt"
	"math"
	"net"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// wireSeconds converts d to whole seconds for the wire, rounding up.
func wireSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// optIn records CLIENT MAINT_NOTIFICATIONS ON for c and queues its +OK,
// followed (RESP3 only) by the retained completion and by the MOVING of an
// open window with the whole seconds left.
func (ep *Endpoint) optIn(c *conn, typ string) {
	ep.mu.Lock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		ep.mu.Unlock()
		return
	}
	c.optedIn = true
	c.epType = typ
	first := !c.everIn
	c.everIn = true
	reply := []byte("+OK\r\n")
	var replays []Event
	if c.resp3 {
		if ep.completion != nil {
			reply = append(reply, ep.completion...)
			replays = append(replays, Event{Detail: ep.completionK})
		}
		if ep.replayActive {
			for _, op := range [...]*maintOp{ep.migrating, ep.failingOver} {
				if op != nil {
					reply = op.appendFrame(reply)
					replays = append(replays, Event{Seq: op.seq, Detail: op.kind})
				}
			}
			for _, sm := range ep.smigrating {
				reply = append(reply, sm.frame...)
				replays = append(replays, Event{Seq: sm.seq, Detail: KindSMigrating})
			}
		}
		if mv := ep.moving; mv != nil {
			left := wireSeconds(time.Until(mv.end))
			reply = mv.appendFrame(reply, left, typ)
			c.toldAtOptIn = true
			replays = append(replays, Event{Seq: mv.seq, Detail: fmt.Sprintf("moving time=%d", left)})
		}
	}
	c.queueLocalLocked(reply)
	isResp3 := c.resp3
	c.mu.Unlock()
	if first {
		ep.stats.OptedIn++
	}
	ep.mu.Unlock()

	detail := typ
	if !isResp3 {
		detail += " (RESP2: no pushes)"
	}
	ep.e.event(Event{Endpoint: ep.addr, Kind: KindOptIn, Conn: c.id, Detail: detail})
	for _, r := range replays {
		r.Endpoint, r.Kind, r.Conn = ep.addr, KindReplay, c.id
		ep.e.event(r)
	}
}

// appendFrame appends the MOVING frame for a connection that asked for
// endpoint type typ.
func (mv *movingOp) appendFrame(dst []byte, timeS int64, typ string) []byte {
	to := mv.m.To
	if mv.m.Null || to == nil || typ == "none" {
		return resp.AppendMoving(dst, mv.seq, timeS, "", true)
	}
	host := to.ip
	if typ == "internal-fqdn" || typ == "external-fqdn" {
		if f := to.fqdn.Load(); f != nil && *f != "" {
			host = *f
		}
	}
	return resp.AppendMoving(dst, mv.seq, timeS, net.JoinHostPort(host, to.port), false)
}

// Moving starts a MOVING on this (old) endpoint and returns its seq at once;
// the rest runs on Emulator timers. Every opted-in RESP3 connection gets its
// own copy, with the endpoint its requested type asks for: internal-ip,
// external-ip and a bare ON get To's "ip:port"; internal-fqdn and
// external-fqdn get To's FQDN (SetFQDN, default the IP) with To's port; none
// gets a null. Connections opting in during the window get MOVING with the
// whole seconds left (0 or negative once the window is over). At Window +
// CloseJitter every connection still on this endpoint is closed (see
// Stats.ClosedAtWindowEnd); with StopAccepting the listener is closed just
// before them, so a client reconnecting on the close cannot land here again.
// A later MOVING on the same endpoint supersedes this one: only the latest
// window's end closes connections.
func (ep *Endpoint) Moving(m Moving) (seq int64) {
	e := ep.e
	seq = e.nextSeq()
	timeS := wireSeconds(m.Window)
	if m.Window > 0 {
		timeS = max(timeS, 1)
	} else {
		timeS = 0
	}
	mv := &movingOp{seq: seq, m: m, end: time.Now().Add(m.Window)}
	frames := map[string][]byte{}
	ep.mu.Lock()
	ep.moving = mv
	n := 0
	for c := range ep.conns {
		if c.pushWith(func(typ string) []byte {
			f, ok := frames[typ]
			if !ok {
				f = mv.appendFrame(nil, timeS, typ)
				frames[typ] = f
			}
			return f
		}) {
			n++
		}
	}
	ep.mu.Unlock()
	to := "null"
	if m.To != nil && !m.Null {
		to = m.To.addr
	}
	e.event(Event{Endpoint: ep.addr, Kind: KindMoving, Seq: seq,
		Detail: fmt.Sprintf("time=%d window=%s to=%s conns=%d", timeS, m.Window, to, n)})
	if m.DNSHost != "" && m.To != nil {
		e.dns.SetAfter(m.DNSHost, m.DNSLag, m.To.ip)
	}
	e.schedule(m.Window+m.CloseJitter, func() { ep.windowEnd(mv) })
	return seq
}

// windowEnd closes the connections still on the endpoint when mv's window
// (plus jitter) ends, unless a later MOVING superseded mv.
func (ep *Endpoint) windowEnd(mv *movingOp) {
	// The event carries the moment the window ended, not the moment the last
	// of possibly hundreds of connections was closed: assertions compare
	// client-side times against it.
	at := time.Now()
	ep.mu.Lock()
	current := ep.moving == mv
	ep.mu.Unlock()
	if !current {
		return
	}
	if mv.m.StopAccepting {
		ep.setRefusing(true, "stop_accepting")
	}
	// The connections closed are those open when the window ends, in the
	// same instant: one that opts in after it is told nothing and is not
	// closed; one that opted in before was told of the MOVING.
	ep.mu.Lock()
	if ep.moving != mv {
		ep.mu.Unlock()
		return
	}
	ep.moving = nil
	conns := ep.connsLocked()
	ep.mu.Unlock()
	n, owed := closeAll(conns, "window_end")
	ep.e.event(Event{At: at, Endpoint: ep.addr, Kind: KindWindowEndClose, Seq: mv.seq,
		Detail: fmt.Sprintf("closed=%d owed=%d", n, owed)})
}

// broadcastEvent sends frame to every opted-in RESP3 connection and logs it.
func (ep *Endpoint) broadcastEvent(kind string, seq int64, frame []byte, detail string, update func()) {
	ep.mu.Lock()
	if update != nil {
		update()
	}
	n := ep.broadcastLocked(frame)
	ep.mu.Unlock()
	if detail != "" {
		detail += " "
	}
	ep.e.event(Event{Endpoint: ep.addr, Kind: kind, Seq: seq, Detail: fmt.Sprintf("%sconns=%d", detail, n)})
}

// startMaint sends a MIGRATING or FAILING_OVER and arms its start.
func (ep *Endpoint) startMaint(kind string, startsIn time.Duration, frame []byte, seq int64, shards string, slot **maintOp) {
	op := &maintOp{seq: seq, started: startsIn <= 0, kind: kind, shards: shards, startAt: time.Now().Add(startsIn)}
	ep.broadcastEvent(kind, seq, frame, fmt.Sprintf("starts_in=%s", startsIn), func() { *slot = op })
	start := func() {
		ep.mu.Lock()
		current := *slot == op
		if current {
			op.started = true
		}
		ep.mu.Unlock()
		if current {
			ep.e.event(Event{Endpoint: ep.addr, Kind: KindMaintStart, Seq: seq, Detail: kind})
		}
	}
	if startsIn <= 0 {
		start()
		return
	}
	ep.e.schedule(startsIn, start)
}

// appendFrame appends op's push again, with the seconds left of its "starts
// in" (0 once started), for a connection opting in while op is open.
func (op *maintOp) appendFrame(dst []byte) []byte {
	left := max(wireSeconds(time.Until(op.startAt)), 0)
	if op.kind == KindFailingOver {
		return resp.AppendFailingOver(dst, op.seq, left, op.shards)
	}
	return resp.AppendMigrating(dst, op.seq, left, op.shards)
}

// Migrating sends MIGRATING (full form: seq, starts-in seconds rounded up,
// shards) to the endpoint's opted-in RESP3 connections. From startsIn on,
// until Migrated, SetMaintLatency's latency applies to every command.
func (ep *Endpoint) Migrating(startsIn time.Duration, shards string) (seq int64) {
	seq = ep.e.nextSeq()
	frame := resp.AppendMigrating(nil, seq, wireSeconds(startsIn), shards)
	ep.startMaint(KindMigrating, startsIn, frame, seq, shards, &ep.migrating)
	return seq
}

// Migrated sends MIGRATED, ends the MIGRATING and retains the frame: it is
// replayed to every RESP3 connection that opts in to this endpoint later,
// right after its +OK, until another MIGRATED or FAILED_OVER replaces it.
func (ep *Endpoint) Migrated(shards string) (seq int64) {
	seq = ep.e.nextSeq()
	ep.complete(KindMigrated, seq, resp.AppendMigrated(nil, seq, shards), &ep.migrating)
	return seq
}

// FailingOver sends FAILING_OVER (full form: seq, starts-in seconds rounded
// up, shards). From startsIn on, until FailedOver, SetMaintLatency's latency
// applies to every command.
func (ep *Endpoint) FailingOver(startsIn time.Duration, shards string) (seq int64) {
	seq = ep.e.nextSeq()
	frame := resp.AppendFailingOver(nil, seq, wireSeconds(startsIn), shards)
	ep.startMaint(KindFailingOver, startsIn, frame, seq, shards, &ep.failingOver)
	return seq
}

// FailedOver sends FAILED_OVER, ends the FAILING_OVER and retains the frame
// for replay on later opt-ins, like Migrated.
func (ep *Endpoint) FailedOver(shards string) (seq int64) {
	seq = ep.e.nextSeq()
	ep.complete(KindFailedOver, seq, resp.AppendFailedOver(nil, seq, shards), &ep.failingOver)
	return seq
}

// complete sends a completion, ends the operation in slot and retains the
// frame for replay on later opt-ins.
func (ep *Endpoint) complete(kind string, seq int64, frame []byte, slot **maintOp) {
	ep.broadcastEvent(kind, seq, frame, "", func() {
		*slot = nil
		ep.completion, ep.completionK = frame, kind
	})
}

// SMigrating sends SMIGRATING with one slots string such as
// "123,456,789-1000" (cluster tests).
func (ep *Endpoint) SMigrating(slots string) (seq int64) {
	seq = ep.e.nextSeq()
	ep.broadcastEvent(KindSMigrating, seq, resp.AppendSMigrating(nil, seq, slots), "slots="+slots, nil)
	return seq
}

// SMigrated sends SMIGRATED with one [src, dst, slots] triplet per move.
func (ep *Endpoint) SMigrated(moves ...SlotMove) (seq int64) {
	seq = ep.e.nextSeq()
	rm := make([]resp.SlotMove, len(moves))
	for i, m := range moves {
		rm[i] = resp.SlotMove{Src: m.Src, Dst: m.Dst, Slots: m.Slots}
	}
	ep.broadcastEvent(KindSMigrated, seq, resp.AppendSMigrated(nil, seq, rm), fmt.Sprintf("moves=%d", len(moves)), nil)
	return seq
}

// SendRaw sends frame, unchecked, as a push to every opted-in RESP3
// connection at a frame boundary (malformed-input tests). It takes no seq.
func (ep *Endpoint) SendRaw(frame []byte) {
	frame = append([]byte(nil), frame...)
	ep.broadcastEvent(KindRaw, 0, frame, fmt.Sprintf("bytes=%d", len(frame)), nil)
}
