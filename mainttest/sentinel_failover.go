package mainttest

import (
	"fmt"
	"time"
)

// switchTo makes the Discovery Service name to as master, publishes
// +switch-master on every node and logs KindSentinelSwitch. It returns the
// switch's seq, or 0 when to is already the master (or nil).
func (d *discovery) switchTo(to *Endpoint, why string) (seq int64) {
	if to == nil {
		return 0
	}
	d.switchMu.Lock()
	defer d.switchMu.Unlock()
	d.mu.Lock()
	old := d.master
	if old == to {
		d.mu.Unlock()
		return 0
	}
	d.master = to
	d.epoch++
	d.switches++
	reps := d.replicas[:0:0]
	for _, r := range d.replicas {
		if r != to && r != old {
			reps = append(reps, r)
		}
	}
	d.replicas = append(reps, old)
	members := append([]*Sentinel(nil), d.members...)
	quiet := d.quiet
	d.mu.Unlock()

	seq = d.e.nextSeq()
	delivered := 0
	if !quiet {
		msg := fmt.Sprintf("%s %s %s %s %s", d.name, old.ip, old.port, to.ip, to.port)
		for _, s := range members {
			delivered += s.publish("+switch-master", msg)
		}
	}
	d.e.event(Event{Endpoint: members[0].addr, Kind: KindSentinelSwitch, Seq: seq,
		Detail: fmt.Sprintf("%s %s -> %s why=%s delivered=%d", d.name, old.addr, to.addr, why, delivered)})
	return seq
}

// SentinelMoving is a MOVING of the master a Discovery Service names, for
// Sentinel.Moving: the MOVING itself and when the service starts naming the
// successor.
type SentinelMoving struct {
	// Moving is sent on the current master's opted-in connections as
	// Endpoint.Moving sends it. Moving.To is the successor the Discovery
	// Service names afterwards; with Moving.Null the push carries a null
	// endpoint (as all MOVINGs measured on Redis Enterprise did) and the
	// service is then the only way to find To.
	Moving

	// NameAfter is when the Discovery Service starts naming Moving.To,
	// counted from the MOVING, like Moving.DNSLag for DNS. 0 names it
	// before the MOVING is sent. Moving.Window names it as the window ends:
	// CloseJitter before the old connections are closed (with CloseJitter 0
	// the two happen at the same instant, in no fixed order). Any other
	// delay, shorter or longer than the window, is allowed.
	NameAfter time.Duration

	// Never keeps naming the old master: the Discovery Service never
	// follows this MOVING (a test switches later with SetMaster).
	Never bool
}

// Moving starts a MOVING of the master the Discovery Service names (see
// Endpoint.Moving) and switches the named master to m.To after
// m.NameAfter, publishing +switch-master (see SetMaster). It returns the
// MOVING's seq at once; the switch is logged as KindSentinelSwitch. A nil
// m.To sends a null MOVING and switches nothing.
func (s *Sentinel) Moving(m SentinelMoving) (seq int64) {
	from := s.Master()
	follow := m.To != nil && !m.Never
	if follow && m.NameAfter <= 0 {
		s.d.switchTo(m.To, "moving")
		follow = false
	}
	seq = from.Moving(m.Moving)
	if follow {
		to := m.To
		s.e.schedule(m.NameAfter, func() { s.d.switchTo(to, "moving") })
	}
	return seq
}

// Failover describes a failover that changes the master a Discovery Service
// names, for Sentinel.Failover.
type Failover struct {
	// From is the failing master; nil means the master named now. It gets
	// FAILING_OVER and FAILED_OVER on its opted-in connections.
	From *Endpoint

	// To is the replica promoted, the master named after the switch.
	// Required.
	To *Endpoint

	// StartsIn is FAILING_OVER's "starts in" (whole seconds on the wire,
	// rounded up); From's SetMaintLatency applies from then until
	// FAILED_OVER.
	StartsIn time.Duration

	// SwitchAfter is the time from FAILING_OVER to the switch: the
	// Discovery Service names To, publishes +switch-master and From sends
	// FAILED_OVER, in this order, at that moment. 0 does all of it at once,
	// before Failover returns.
	SwitchAfter time.Duration

	// Shards is the shard list of FAILING_OVER and FAILED_OVER, as in
	// Endpoint.FailingOver; empty sends "1".
	Shards string

	// RefuseOld makes From refuse new connections at the switch (after the
	// service names To, before FAILED_OVER), as a demoted node that is down.
	RefuseOld bool

	// CloseOld closes From's connections CloseOldAfter after FAILED_OVER
	// (0: right after it), counting the replies they still owed in From's
	// Stats.OwedAtClose.
	CloseOld      bool
	CloseOldAfter time.Duration
}

// Failover runs a failover of the master: FAILING_OVER on From's opted-in
// connections now, then after f.SwitchAfter the switch of the named master
// to f.To (published as +switch-master, logged as KindSentinelSwitch),
// From refusing new connections (f.RefuseOld), FAILED_OVER on From, and
// f.CloseOldAfter later the close of From's connections (f.CloseOld). It
// returns FAILING_OVER's seq at once; the rest runs on Emulator timers
// unless every delay is 0. A nil f.To does nothing and returns 0.
func (s *Sentinel) Failover(f Failover) (seq int64) {
	if f.To == nil {
		return 0
	}
	if f.From == nil {
		f.From = s.Master()
	}
	if f.Shards == "" {
		f.Shards = "1"
	}
	seq = f.From.FailingOver(f.StartsIn, f.Shards)
	if f.SwitchAfter <= 0 {
		s.failoverSwitch(f)
	} else {
		s.e.schedule(f.SwitchAfter, func() { s.failoverSwitch(f) })
	}
	return seq
}

// failoverSwitch is the second half of Failover.
func (s *Sentinel) failoverSwitch(f Failover) {
	s.d.switchTo(f.To, "failover")
	if f.RefuseOld {
		f.From.setRefusing(true, "failover")
	}
	f.From.FailedOver(f.Shards)
	if !f.CloseOld {
		return
	}
	closeOld := func() {
		n, owed := f.From.closeConns("failover")
		s.e.event(Event{Endpoint: f.From.addr, Kind: KindCloseAll, Detail: fmt.Sprintf("closed=%d owed=%d (failover)", n, owed)})
	}
	if f.CloseOldAfter <= 0 {
		closeOld()
		return
	}
	s.e.schedule(f.CloseOldAfter, closeOld)
}
