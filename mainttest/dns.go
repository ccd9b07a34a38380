package mainttest

import (
	"strings"
	"sync"
	"time"
)

// DNS is the resolver an Emulator controls: host names mapped to addresses.
// Emulator.Dialer resolves through it, so every client dialling with that
// dialer sees the same answers. Host names are case-insensitive.
type DNS struct {
	e       *Emulator
	mu      sync.Mutex
	records map[string][]string
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

// Lookup returns a copy of the current answer for host (nil when none).
func (d *DNS) Lookup(host string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.records[strings.ToLower(host)]...)
}
