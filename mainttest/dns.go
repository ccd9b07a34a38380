package mainttest

import (
	"strings"
	"sync"
	"time"
)

// DNS is the resolver an Emulator controls: host names mapped to addresses.
// Emulator.Dialer resolves through it, so every client dialling with that
// dialer sees the same answers. Host names are case-insensitive.
//
// A host with several addresses is dialled in the order given, the first
// that accepts winning; with SetRoundRobin each dial starts one address
// further, so that successive connections spread over the addresses as
// with a round-robin DNS answer (two nodes behind one name).
type DNS struct {
	e          *Emulator
	mu         sync.Mutex
	records    map[string][]string
	roundRobin bool
	turn       map[string]int // next starting address per host, with roundRobin
}

// Set replaces the answer for host now. With no ips the records are removed
// and the Dialer dials the host as given.
func (d *DNS) Set(host string, ips ...string) {
	key := strings.ToLower(host)
	d.mu.Lock()
	if len(ips) == 0 {
		delete(d.records, key)
	} else {
		d.records[key] = append([]string(nil), ips...)
	}
	d.mu.Unlock()
	d.e.event(Event{Kind: KindDNS, Detail: host + " -> " + strings.Join(ips, ",")})
}

// SetAfter schedules Set(host, ips...) after delay on a timer owned by the
// Emulator (Close stops it). Several scheduled changes run independently; the
// last one to fire wins.
func (d *DNS) SetAfter(host string, delay time.Duration, ips ...string) {
	ips = append([]string(nil), ips...)
	d.e.schedule(delay, func() { d.Set(host, ips...) })
}

// SetRoundRobin makes Emulator.Dialer rotate the starting address of a host
// with several addresses (true): the first dial of the host tries its first
// address first, the next dial its second, and so on, wrapping around; the
// addresses after the starting one are still tried in turn when it refuses.
// False (the default) starts every dial at the first address. It changes no
// answer, so it logs no KindDNS event.
func (d *DNS) SetRoundRobin(on bool) {
	d.mu.Lock()
	d.roundRobin = on
	d.mu.Unlock()
}

// dialOrder returns the addresses to try, in order, for one dial of host
// (nil when it has no records), and advances the rotation.
func (d *DNS) dialOrder(host string) []string {
	key := strings.ToLower(host)
	d.mu.Lock()
	defer d.mu.Unlock()
	ips := d.records[key]
	if len(ips) == 0 {
		return nil
	}
	start := 0
	if d.roundRobin {
		if d.turn == nil {
			d.turn = make(map[string]int)
		}
		start = d.turn[key] % len(ips)
		d.turn[key] = start + 1
	}
	return append(append([]string(nil), ips[start:]...), ips[:start]...)
}

// Lookup returns a copy of the current answer for host (nil when none).
func (d *DNS) Lookup(host string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.records[strings.ToLower(host)]...)
}
