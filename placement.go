package maint

import (
	"runtime"
	"strings"
	"sync/atomic"
)

// Where the hook was added. maint acts on the connections a client dials,
// through the client's DialHook; a *redis.ClusterClient or *redis.Ring
// dials none of its own (its node clients do), so rdb.AddHook(maint.New())
// on one of them gets every command and protects nothing. The hook cannot
// see which client it was added to, so at its first commands it asks the
// stack: the first go-redis frame above maint's ProcessHook (past
// go-redis's hook plumbing and the application's hooks) is the Process
// of the client whose hooks run it (TestContractHookCallerNamesTheClient).
// A hook on a ClusterClient or Ring is said once at Warn, naming the
// routes that protect that kind, and its commands are counted in
// Stats.Misplaced. Once the kind is known (or after placementTries
// commands that told nothing, such as commands from a kind maint does not
// know), a command costs one atomic load.

const (
	placeUnknown uint32 = iota
	placeOK
	placeMisplaced
)

// placementTries bounds the commands whose stack is read before the hook's
// place is taken as fine.
const placementTries = 8

// placement is what the Maint knows of where its hook is.
type placement struct {
	state atomic.Uint32
	tries atomic.Uint32
}

// notePlace runs on a command while the hook's place is not known to be
// fine (st is the state read).
func (m *Maint) notePlace(st uint32) {
	if st == placeMisplaced {
		m.c.misplaced.Add(1)
		return
	}
	kind := callerClient()
	switch kind {
	case "ClusterClient", "Ring":
		if m.place.state.CompareAndSwap(placeUnknown, placeMisplaced) {
			m.c.misplaced.Add(1)
			m.emit(Event{Kind: EventMisuse, Detail: misplacedAdvice(kind)})
		}
	case "":
		if m.place.tries.Add(1) >= placementTries {
			m.place.state.CompareAndSwap(placeUnknown, placeOK)
		}
	default:
		m.place.state.CompareAndSwap(placeUnknown, placeOK)
	}
}

// misplacedAdvice says what a hook on a client of kind does, and the
// routes that protect that kind.
func misplacedAdvice(kind string) string {
	routes := "maint.NewGroup().NewClusterClient(opt) (or Group.ConfigureCluster(opt) before redis.NewClusterClient)"
	if kind == "Ring" {
		routes = "maint.NewGroup().NewRing(opt) (or Group.ConfigureRing(opt) before redis.NewRing)"
	}
	return "AddHook on a *redis." + kind + " protects nothing: its commands run on node clients, " +
		"whose connections maint does not see. Use " + routes +
		", or maint.Instrument(client) / Group.Instrument(client) on this client, which put a Maint on every node client"
}

// goRedisPrefix is the package path go-redis's functions are named by.
const goRedisPrefix = "github.com/redis/go-redis/v9."

// callerClient returns the client type ("Client", "ClusterClient",
// "Ring", "Conn", ...) of the first go-redis method on the stack above
// its caller that is not go-redis's hook plumbing, or "" when none is
// found. It reads at most 32 frames and does not allocate for them on
// the heap beyond runtime.CallersFrames' iterator.
func callerClient() string {
	var pcs [32]uintptr
	n := runtime.Callers(2, pcs[:]) // from its caller: maint's frames are not go-redis's
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if name, ok := strings.CutPrefix(f.Function, goRedisPrefix); ok {
			if kind, ok := receiverOf(name); ok && kind != "hooksMixin" && kind != "hooksState" {
				return kind
			}
		}
		if !more {
			return ""
		}
	}
}

// receiverOf returns the receiver type of a pointer method named
// "(*T).m...", and whether name is one (go-redis's clients have pointer
// receivers only).
func receiverOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "(*")
	if !ok {
		return "", false
	}
	i := strings.IndexByte(rest, ')')
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}
