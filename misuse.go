package maint

import (
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Misuse that would switch part of maint off without a word is detected and
// said once.
//
// A hidden health check: go-redis asks the outermost net.Conn, through
// SyscallConn, whether an idle connection may be reused. A DialHook added
// after maint that wraps maint's connection in a type without SyscallConn
// hides that question from maint, and a retired connection can then no
// longer be refused to the pool. maint notices when connections are reused
// again and again (replies read, commands written after them) without one
// health check ever reaching it, and says so once.

// uncheckedReuses is how many writes after a connection's handshake, with
// no health check ever seen, make maint say that its health check is hidden.
const uncheckedReuses = 512

// noteUnchecked counts a write on a connection past its handshake while no
// health check has reached the Maint yet.
func (m *Maint) noteUnchecked(c *conn) {
	if c.replies.Load() < 4 || c.sub.Load() {
		return // the handshake, or a subscriber: never health-checked
	}
	if m.uncheckedWrites.Add(1) == uncheckedReuses && !m.sawCheck.Load() {
		m.misuse("no pool health check reaches maint's connections (a DialHook added after maint wraps its net.Conn without SyscallConn?): connections retired by a handoff cannot be refused to the pool, and the server may close them under commands; add maint's hook last, or forward SyscallConn")
	}
}

// misuse says once what switches part of maint off.
func (m *Maint) misuse(what string) {
	m.misuseOnce.Do(func() {
		m.emit(Event{Kind: EventMisuse, Detail: what})
	})
}

// configured maps the maintnotifications.Config that Configure puts in a
// client's options to the Maint that put it there, so that Configure on the
// same options again is a no-op. An entry goes with its Maint's Close.
var configured sync.Map // *maintnotifications.Config → *Maint

// claim reports whether opt is free for m to configure: it is not, when m
// or another Maint has configured it already.
func (m *Maint) claim(opt *redis.Options) bool {
	if cfg := opt.MaintNotificationsConfig; cfg != nil {
		if owner, ok := configured.Load(cfg); ok {
			if owner.(*Maint) != m {
				m.warn("Configure: these options are already configured by another Maint; left as they are")
			}
			return false
		}
	}
	cfg := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opt.MaintNotificationsConfig = cfg
	configured.Store(cfg, m)
	m.mu.Lock()
	m.configs = append(m.configs, cfg)
	m.mu.Unlock()
	return true
}

// unclaim forgets the options m configured (at Close).
func (m *Maint) unclaim() {
	m.mu.Lock()
	cfgs := m.configs
	m.configs = nil
	m.mu.Unlock()
	for _, cfg := range cfgs {
		configured.Delete(cfg)
	}
}

// isMonitor reports whether p is exactly a MONITOR command, as go-redis
// writes it: a monitoring connection is a subscriber.
func isMonitor(p []byte) bool {
	const cmd = "*1\r\n$7\r\nmonitor\r\n"
	if len(p) != len(cmd) || p[0] != '*' {
		return false
	}
	for i := 0; i < len(cmd); i++ {
		if p[i]|0x20 != cmd[i]|0x20 {
			return false
		}
	}
	return true
}
