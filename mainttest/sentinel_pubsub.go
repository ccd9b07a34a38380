package mainttest

import (
	"crypto/sha1"
	"encoding/hex"
	"sort"

	"github.com/maintkit/maint/internal/resp"
)

func shaHex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// subscribedLocked reports a connection in the subscribed state; the caller
// holds c.mu.
func (c *sconn) subscribedLocked() bool { return len(c.channels)+len(c.patterns) > 0 }

// appendPubSubHeader appends the header of a pub/sub frame of n elements:
// a push in RESP3, an array in RESP2.
func (c *sconn) appendPubSubHeader(dst []byte, n int) []byte {
	if c.resp3 {
		return resp.AppendPushHeader(dst, n)
	}
	return resp.AppendArrayHeader(dst, n)
}

func (c *sconn) subscribe(r *reply, pattern bool, args [][]byte) {
	kind, set := "subscribe", &c.channels
	if pattern {
		kind, set = "psubscribe", &c.patterns
	}
	if len(args) == 0 {
		r.arity(kind)
		return
	}
	if *set == nil {
		*set = make(map[string]struct{})
	}
	for _, a := range args {
		(*set)[string(a)] = struct{}{}
		r.out = c.appendPubSubHeader(r.out, 3)
		r.out = resp.AppendBulk(r.out, kind)
		r.out = resp.AppendBulk(r.out, a)
		r.out = resp.AppendInt(r.out, int64(len(c.channels)+len(c.patterns)))
	}
}

func (c *sconn) unsubscribe(r *reply, pattern bool, args [][]byte) {
	kind, set := "unsubscribe", &c.channels
	if pattern {
		kind, set = "punsubscribe", &c.patterns
	}
	var names []string
	if len(args) == 0 {
		for n := range *set {
			names = append(names, n)
		}
		sort.Strings(names)
	} else {
		for _, a := range args {
			names = append(names, string(a))
		}
	}
	if len(names) == 0 { // nothing to leave: one reply with a null name
		r.out = c.appendPubSubHeader(r.out, 3)
		r.out = resp.AppendBulk(r.out, kind)
		if c.resp3 {
			r.out = resp.AppendNull(r.out)
		} else {
			r.out = append(r.out, "$-1\r\n"...)
		}
		r.out = resp.AppendInt(r.out, int64(len(c.channels)+len(c.patterns)))
		return
	}
	for _, n := range names {
		delete(*set, n)
		r.out = c.appendPubSubHeader(r.out, 3)
		r.out = resp.AppendBulk(r.out, kind)
		r.out = resp.AppendBulk(r.out, n)
		r.out = resp.AppendInt(r.out, int64(len(c.channels)+len(c.patterns)))
	}
}

// publish writes message to every connection of s subscribed to channel
// (message) or to a pattern matching it (pmessage), and returns how many
// messages it wrote.
func (s *Sentinel) publish(channel, message string) int {
	s.mu.Lock()
	conns := make([]*sconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	n := 0
	var buf []byte
	for _, c := range conns {
		c.mu.Lock()
		buf = buf[:0]
		k := 0
		if _, ok := c.channels[channel]; ok {
			buf = c.appendPubSubHeader(buf, 3)
			buf = resp.AppendBulk(buf, "message")
			buf = resp.AppendBulk(buf, channel)
			buf = resp.AppendBulk(buf, message)
			k++
		}
		for p := range c.patterns {
			if globMatch(p, channel) {
				buf = c.appendPubSubHeader(buf, 4)
				buf = resp.AppendBulk(buf, "pmessage")
				buf = resp.AppendBulk(buf, p)
				buf = resp.AppendBulk(buf, channel)
				buf = resp.AppendBulk(buf, message)
				k++
			}
		}
		var err error
		if k > 0 {
			err = c.writeLocked(buf)
		}
		c.mu.Unlock()
		if err != nil {
			c.shutdown("client")
			continue
		}
		n += k
	}
	s.mu.Lock()
	s.stats.SwitchMessages += int64(n)
	s.mu.Unlock()
	return n
}

// globMatch reports whether s matches the Redis glob pattern p: * (any
// run), ? (any byte), [abc], [^abc], [a-z] and \ (escape).
func globMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			if len(p) == 0 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(p, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			p, s = p[1:], s[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			rest, ok := matchClass(p[1:], s[0])
			if !ok {
				return false
			}
			p, s = rest, s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || p[0] != s[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
	}
	return len(s) == 0
}

// matchClass matches b against the class at the start of p (just after
// '['), and returns the pattern after the class. An unterminated class
// runs to the end of the pattern, as in Redis.
func matchClass(p string, b byte) (rest string, ok bool) {
	neg := len(p) > 0 && p[0] == '^'
	if neg {
		p = p[1:]
	}
	match := false
	for len(p) > 0 && p[0] != ']' {
		switch {
		case p[0] == '\\' && len(p) >= 2:
			if p[1] == b {
				match = true
			}
			p = p[2:]
		case len(p) >= 3 && p[1] == '-' && p[2] != ']':
			lo, hi := p[0], p[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			if b >= lo && b <= hi {
				match = true
			}
			p = p[3:]
		default:
			if p[0] == b {
				match = true
			}
			p = p[1:]
		}
	}
	if len(p) > 0 {
		p = p[1:] // the ']'
	}
	return p, match != neg
}
