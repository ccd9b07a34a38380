package maint

import (
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Misuse that would switch part of maint off without a word is detected and
// said once.
//
// A hidden health check: go-redis asks the outermost net.Conn, through
// SyscallConn, whether an idle connection may be reused. In go-redis the
// first hook added is the outermost: a DialHook added before maint's that
// wraps maint's connection in a type without SyscallConn hides that
// question from maint, and a retired connection can then no
// longer be refused to the pool. maint notices when connections are reused
// again and again (replies read, commands written after them) without one
// health check ever reaching it, and says so once.

// misuseWatch is what the Maint watches to tell misuse: whether a health
// check reached it, the writes seen before one did, the options Configure
// claimed (so that they can be unclaimed at Close), and the one report.
type misuseWatch struct {
	sawCheck        atomic.Bool   // a pool health check reached a connection
	uncheckedWrites atomic.Uint64 // writes past the handshake before any health check
	once            sync.Once     // misuse is said once

	mu      sync.Mutex // guards configs
	configs []*maintnotifications.Config
}

// checked reports whether a pool health check has reached one of the
// Maint's connections: one atomic load, on every write until it has.
func (w *misuseWatch) checked() bool { return w.sawCheck.Load() }

// noteCheck records that a pool health check reached a connection.
func (w *misuseWatch) noteCheck() {
	if !w.sawCheck.Load() {
		w.sawCheck.Store(true)
	}
}

// addConfig remembers cfg, claimed by Configure.
func (w *misuseWatch) addConfig(cfg *maintnotifications.Config) {
	w.mu.Lock()
	w.configs = append(w.configs, cfg)
	w.mu.Unlock()
}

// takeConfigs returns the options claimed, and forgets them.
func (w *misuseWatch) takeConfigs() []*maintnotifications.Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	cfgs := w.configs
	w.configs = nil
	return cfgs
}

// uncheckedReuses is how many writes after a connection's handshake, with
// no health check ever seen, make maint say that its health check is hidden.
const uncheckedReuses = 512

// noteUnchecked counts a write on a connection past its handshake while no
// health check has reached the Maint yet.
func (m *Maint) noteUnchecked(c *conn) {
	if c.replies.Load() < 4 || c.sub.Load() {
		return // the handshake, or a subscriber: never health-checked
	}
	if m.mis.uncheckedWrites.Add(1) == uncheckedReuses && !m.mis.checked() {
		m.misuse("no pool health check reaches maint's connections (a DialHook added before maint's wraps its net.Conn without SyscallConn? in go-redis the first hook added is the outermost): connections retired by a handoff cannot be refused to the pool, and the server may close them under commands; add maint's hook first (AddHook before the others, or m.NewClient), or have that hook's net.Conn forward SyscallConn")
	}
}

// misuse says once what switches part of maint off.
func (m *Maint) misuse(what string) {
	m.mis.once.Do(func() {
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
	m.mis.addConfig(cfg)
	return true
}

// unclaim forgets the options m configured (at Close).
func (m *Maint) unclaim() {
	for _, cfg := range m.mis.takeConfigs() {
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
