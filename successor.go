package maint

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/maintkit/maint/internal/resp"
)

// A MOVING tells the client to send its connections, and so its
// credentials, elsewhere. maint takes a successor only when:
//   - it is a well-formed "host:port";
//   - the application's AllowSuccessor accepts it, or, with no policy, it is
//     no cloud metadata endpoint (isMetadata: by address, and by the
//     well-known names; a name is judged again where it lands), and not a
//     loopback, link-local or unspecified address, unless the node that
//     sent the MOVING is itself reached at such an address (a local test, a
//     tunnel): a server must not be able to point the client at the
//     client's own host or at a cloud metadata endpoint;
//   - over TLS, maint can inspect the connections' handshakes, so that a
//     successor must prove the original server name (see verifySuccessor).
// A successor refused is treated as a null endpoint. The same address rule
// is applied again when the dial to a successor host name lands (landing).

// successor returns the successor of a MOVING read on c, or "" when there is
// none or it is refused.
func (m *Maint) successor(c *conn, nt resp.Notification) string {
	if nt.Null {
		return ""
	}
	ep := nt.Endpoint
	if err := validSuccessor(ep); err != nil {
		m.badInput(c, nt.Seq, fmt.Sprintf("MOVING endpoint %q is not host:port (%v); treating it as null", ep, err))
		return ""
	}
	if m.s.allow != nil {
		if !m.s.allow(ep) {
			m.refuseSuccessor(c.n.key, nt.Seq, ep, "refused by AllowSuccessor")
			return ""
		}
	} else if isMetadataAddr(ep) {
		m.refuseSuccessor(c.n.key, nt.Seq, ep, "a cloud metadata endpoint")
		return ""
	} else if isLocalAddr(ep) && !isLocalAddr(c.n.key) {
		m.refuseSuccessor(c.n.key, nt.Seq, ep, "a local address named by a remote node")
		return ""
	}
	if c.t.tlsOpaque() {
		if c.t.warnedOpaque.CompareAndSwap(false, true) {
			m.warn("the client uses TLS but its connections hide their TLS state (a wrapping Dialer?): successors cannot be verified, so MOVINGs are treated as null", "node", c.t.addr)
		}
		m.refuseSuccessor(c.n.key, nt.Seq, ep, "TLS state not inspectable")
		return ""
	}
	return ep
}

// refuseSuccessor counts and says the refusal of successor ep, named by
// node's MOVING seq (0 when the handoff is over), for why.
func (m *Maint) refuseSuccessor(node string, seq int64, ep, why string) {
	m.c.refusedSuccessors.Add(1)
	m.emit(Event{Kind: EventSuccessorRefused, Node: node, Seq: seq, Detail: ep + ": " + why})
}

// landing checks where a dial to a successor landed: a successor named by
// host name must not resolve to a cloud metadata endpoint, nor to a local
// address that an IP would not have been allowed to be.
func (m *Maint) landing(p *pin, remote string) error {
	if m.s.allow != nil {
		return nil
	}
	if isMetadataAddr(remote) {
		return fmt.Errorf("%s resolves to the cloud metadata endpoint %s", p.addr, remote)
	}
	if p.fromLocal {
		return nil
	}
	if !isLocalAddr(remote) {
		return nil
	}
	return fmt.Errorf("%s resolves to the local address %s", p.addr, remote)
}

// validSuccessor checks the shape of a MOVING's endpoint: "host:port" with a
// port in range and a host free of anything a name or address cannot hold.
func validSuccessor(ep string) error {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	if host == "" || len(host) > 253 || strings.ContainsAny(host, " \t\r\n/\\@?#") {
		return fmt.Errorf("bad host %q", host)
	}
	return nil
}

// isLocal reports whether host is a loopback, link-local or unspecified IP
// (169.254/16 holds cloud metadata endpoints). Host names are judged where
// they land.
func isLocal(host string) bool {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return strings.EqualFold(host, "localhost")
	}
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified()
}

// isLocalAddr is isLocal for a "host:port".
func isLocalAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && isLocal(host)
}

// Cloud metadata endpoints: the instance's own credentials are served
// there, so a MOVING must never send the client (and its AUTH) to one,
// whatever the address rule above says of its range.
var (
	metadataIPs = func() map[netip.Addr]bool {
		m := map[netip.Addr]bool{}
		for _, a := range []string{
			"169.254.169.254", // AWS, GCP, Azure, Oracle Cloud, DigitalOcean, OpenStack: instance metadata
			"169.254.170.2",   // AWS ECS task metadata and credentials
			"169.254.170.23",  // AWS EKS Pod Identity agent
			"169.254.0.23",    // Tencent Cloud metadata
			"100.100.100.200", // Alibaba Cloud metadata
			"168.63.129.16",   // Azure WireServer (platform agent)
			"192.0.0.192",     // Oracle Cloud Classic, Cloud@Customer metadata
			"fd00:ec2::254",   // AWS IMDS over IPv6
		} {
			m[netip.MustParseAddr(a)] = true
		}
		return m
	}()
	// awsServices is AWS's block of instance services over IPv6 (IMDS
	// ::254, DNS ::253, NTP ::123, EKS Pod Identity ::23): never a node.
	awsServices = netip.MustParsePrefix("fd00:ec2::/64")
	// nat64 embeds an IPv4 address in IPv6 (RFC 6052's well-known prefix).
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
)

// metadataNames are the well-known host names of metadata endpoints (a
// trailing dot and case aside).
var metadataNames = map[string]bool{
	"metadata.google.internal": true, // GCP
	"metadata.goog":            true, // GCP
	"metadata":                 true, // GCP's short name inside an instance
	"instance-data":            true, // AWS's legacy name
	"metadata.tencentyun.com":  true, // Tencent Cloud
}

// isMetadata reports whether host is a cloud metadata endpoint, by address
// (IPv4, IPv4-mapped or NAT64-embedded IPv6, IPv6) or by a well-known name.
func isMetadata(host string) bool {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return metadataNames[strings.TrimSuffix(strings.ToLower(host), ".")]
	}
	ip = ip.Unmap().WithZone("")
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return metadataIPs[ip] || awsServices.Contains(ip)
}

// isMetadataAddr is isMetadata for a "host:port".
func isMetadataAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && isMetadata(host)
}
