// Package classify judges a new connection made while a node is being retired:
// is it a bona fide replacement, is it doomed because it landed back on the
// retiring node, or can nothing be said yet?
//
// The functions here are pure: they see addresses and facts about the handoff,
// never sockets, so every rule is a row in a table test.
package classify

import (
	"net/netip"
	"strings"
)

// Verdict is the judgement passed on a new connection.
type Verdict uint8

const (
	// Unknown means the evidence does not settle it: the address could not be
	// read, or addresses do not identify nodes (a tunnel, a fixed front address)
	// and the handoff has not yet let go of the old node.
	Unknown Verdict = iota
	// Replacement means the connection serves the node's work from now on.
	Replacement
	// Doomed means the connection landed on the node being retired: the server
	// will close it when the window ends, so it must never carry a command.
	Doomed
)

// String returns the verdict's name.
func (v Verdict) String() string {
	switch v {
	case Replacement:
		return "replacement"
	case Doomed:
		return "doomed"
	default:
		return "unknown"
	}
}

// Input is what is known about a new connection and the handoff judging it.
type Input struct {
	// Remote is the address the connection reached (net.Conn.RemoteAddr), or ""
	// when it could not be read.
	Remote string
	// Retiring is the address of the node being retired.
	Retiring string
	// Identifying reports whether a socket address names a node. It is false
	// behind a tunnel or a fixed front address, where every connection reports
	// the same address whichever node serves it.
	Identifying bool
	// Released reports that the handoff has let go of the retiring node (the old
	// connections are out of circulation). Behind a fixed address this is the
	// only evidence there is: what connects afterwards is the replacement.
	Released bool
}

// Judge classifies one connection.
//
// The rules, in order:
//  1. An unreadable address is Unknown.
//  2. Where addresses identify nodes, landing on the retiring address is Doomed
//     and landing anywhere else is a Replacement.
//  3. Where they do not, time tells: after the release it is a Replacement,
//     before it Unknown.
func Judge(in Input) Verdict {
	if in.Remote == "" {
		return Unknown
	}
	if in.Identifying {
		if SameAddr(in.Remote, in.Retiring) {
			return Doomed
		}
		return Replacement
	}
	if in.Released {
		return Replacement
	}
	return Unknown
}

// SameAddr reports whether two "host:port" addresses name the same endpoint,
// comparing IPs by value (so "::ffff:10.0.0.1" equals "10.0.0.1") and host
// names case-insensitively. Redis Enterprise rebinds to other ports on the same
// host, so the port is part of the identity.
func SameAddr(a, b string) bool {
	if a == b {
		return a != ""
	}
	ha, pa, okA := split(a)
	hb, pb, okB := split(b)
	if !okA || !okB || pa != pb {
		return false
	}
	ia, errA := netip.ParseAddr(ha)
	ib, errB := netip.ParseAddr(hb)
	if errA == nil && errB == nil {
		return ia.Unmap() == ib.Unmap()
	}
	return strings.EqualFold(ha, hb)
}

// split is net.SplitHostPort without the allocation of an error value on the
// paths that matter, tolerant of a missing port (returned as "").
func split(addr string) (host, port string, ok bool) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", false
	}
	host, port = addr[:i], addr[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if host == "" || port == "" {
		return "", "", false
	}
	if z := strings.IndexByte(host, '%'); z >= 0 {
		host = host[:z]
	}
	return host, port, true
}

// IdentifiesNodes reports whether the configured address can tell nodes apart
// by address. A host name can: DNS moves it to the new node. A literal IP
// cannot move, so it is taken to be a fixed front address (a proxy, a load
// balancer, a tunnel) unless the handoff has seen a second address.
func IdentifiesNodes(configured string, sawSecondAddress bool) bool {
	if sawSecondAddress {
		return true
	}
	host, _, ok := split(configured)
	if !ok {
		return false
	}
	_, err := netip.ParseAddr(host)
	return err != nil
}
