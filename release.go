package maint

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/push"
)

// A release asks go-redis itself to let a retired connection go at its
// next clean turn, for a connection that owes replies when the drain cap
// passes and that maint cannot close without cutting them.
//
// Why: go-redis v9.24's full-duplex autopipeliner holds a connection
// outside the pool (up to FullDuplexMaxHold, 5 s) and writes while replies
// are owed. maint cannot close such a connection at any write: go-redis's
// reader may not yet have parsed replies whose bytes maint has delivered,
// and a connection error makes the autopipeliner replay every command it
// has not parsed, so commands that ran would run again. Only go-redis
// knows when its reader is at a clean point, and it looks for one mark
// there: the pool connection's handoff mark (ShouldHandoff), which
// go-redis's own handler sets at a MOVING. The autopipeliner then ends its
// session cleanly (its reader drains every reply owed) and puts the
// connection back; marked to close on its put (MarkCloseOnPut), the pool
// removes it. An ordinary connection is removed at its put the same way.
//
// How maint reaches the mark: through go-redis's public push seam. The
// Maint registers a handler for a push of its own (releasePush) on every
// client it knows (NewClient, a Group's clients, Instrument), and puts
// that push into the connection's read stream at a frame boundary, before
// the next reply owed. go-redis reads pushes before each reply and hands
// them, with the pool connection they came on, to the handler, which
// marks it. The push never reaches the server or the application.
//
// Where maint does not know the client (AddHook or Configure alone), or
// the connection is held by a redis.Conn (its own push processor), no
// handler runs: the connection is closed at its next write once nothing
// is owed, as before (drainBeforeWrite), and a full-duplex connection met
// there is said once at Warn, since that close can run commands twice.
// Pinned by TestContractReleasePushMarksThePoolConn.

// releasePush is the name of maint's release push; releaseFrame the push
// as go-redis reads it (RESP3, a one-element push).
const releasePush = "maint-release"

var releaseFrame = []byte(">1\r\n$13\r\n" + releasePush + "\r\n")

// releaseWait bounds how long a write waits for the handler of a release
// already in the read stream: go-redis's reader runs it as soon as the
// read that brought it returns, on the same goroutine, so only a
// connection whose push no handler takes (a redis.Conn's) waits it out.
const releaseWait = 100 * time.Millisecond

// releases is the Maint's side: whether a handler is registered on a
// client of the Maint, and the one warning. Counted in Stats
// (ReleasesAsked, ReleasesMarked, ReleasesUnmarked).
type releases struct {
	registered atomic.Bool
	warnOnce   sync.Once
}

// connRelease is a connection's side, one word of flags (the connection
// is sized to its allocation class): set by the drain cap (drain at write,
// ask), the writer (duplex), the reader (fresh, sent) and the handler
// (marked).
type connRelease struct{ f atomic.Uint32 }

const (
	// rlDuplex: a write deadline was set while replies were owed, which
	// only a full-duplex autopipeliner does (go-redis writes a pipeline
	// under one deadline, and an ordinary command after the reply before
	// it). Such a connection is never closed at the drain cap while a
	// release can be asked: the reply bytes maint counted as read may not
	// have been parsed yet, owed or not.
	rlDuplex uint32 = 1 << iota
	// rlDrainAtWrite: the drain cap left the connection open, a reply owed
	// (or full-duplex); its next write waits for what is owed, then closes
	// it, unless go-redis was asked to let it go (drainBeforeWrite).
	rlDrainAtWrite
	rlAsk // put the push into the read stream at the next fresh read at a frame boundary
	// rlFresh: a read deadline was set since the last read, while a release
	// was asked. go-redis sets one before each read of replies (WithReader)
	// and reads pushes first (a peek): only that first read may carry the
	// push. A later read may be a reply's parse going on (a blocking
	// command's, after its read returned), which would take the push for
	// its reply.
	rlFresh
	rlSent   // the push is in the read stream
	rlMarked // go-redis handed it to the handler: the pool connection is marked
)

func (r *connRelease) has(b uint32) bool { return r.f.Load()&b != 0 }
func (r *connRelease) set(b uint32)      { r.f.Or(b) }

// take clears b and reports whether it was set.
func (r *connRelease) take(b uint32) bool { return r.f.And(^b)&b != 0 }

// register registers the release handler on cli, once per client; a
// client of RESP2, whose connections carry no pushes, gets none.
func (r *releases) register(cli *redis.Client) {
	if cli == nil {
		return
	}
	if p := cli.Options().Protocol; p != 0 && p != 3 {
		return
	}
	if cli.GetPushNotificationHandler(releasePush) == nil {
		if err := cli.RegisterPushNotificationHandler(releasePush, releaseHandler{}, false); err != nil {
			return // registered meanwhile, by another route to the same client
		}
	}
	r.registered.Store(true)
}

// noteReadDeadline marks the next read fresh (rlFresh) while a release
// is asked: one atomic load otherwise.
func (c *conn) noteReadDeadline() {
	if c.rl.has(rlAsk) {
		c.rl.set(rlFresh)
	}
}

// askRelease asks for c's release if go-redis can be asked: a handler is
// registered on a client of the Maint, the connection speaks RESP3 with
// the server (it opted in) and is not a subscriber. It reports whether
// the release was asked.
func (c *conn) askRelease() bool {
	if !c.m.rel.registered.Load() || !c.optedIn.Load() || c.sub.Load() {
		return false
	}
	c.rl.set(rlAsk)
	return true
}

// noteWriteDeadline records, at a write deadline, whether the connection
// is written while replies are owed (rlDuplex): four atomic loads until
// it is.
func (c *conn) noteWriteDeadline() {
	if !c.rl.has(rlDuplex) && c.owed() > 0 {
		c.rl.set(rlDuplex)
	}
}

// keptForRelease reports whether the drain cap leaves c, owing nothing by
// maint's count, open for its release: a full-duplex connection whose
// release go-redis can be asked for (see rlDuplex). A
// full-duplex connection it closes is said once (warnUnreleased).
func (c *conn) keptForRelease() bool {
	if !c.rl.has(rlDuplex) || c.sub.Load() {
		return false
	}
	if c.askRelease() {
		return true
	}
	c.warnUnreleased()
	return false
}

// putRelease puts the release push into p, in place of a read, when it is
// asked, the read is the first since a read deadline (go-redis's peek for
// pushes, rlFresh), the stream stands at a frame boundary and a reply is
// owed: go-redis takes it at once, before the reply. It runs on the
// connection's reader, before a read.
func (c *conn) putRelease(p []byte) (int, bool) {
	if !c.rl.take(rlFresh) || c.awaitOptIn || len(p) < len(releaseFrame) || !c.rd.AtBoundary() || c.owed() <= 0 {
		return 0, false
	}
	if !c.rl.take(rlAsk) {
		return 0, false
	}
	c.rl.set(rlSent)
	c.m.c.releasesAsked.Add(1)
	return copy(p, releaseFrame), true
}

// waitMarked waits, up to releaseWait, for the handler of a release in
// the read stream, and reports whether it ran.
func (c *conn) waitMarked() bool {
	limit := time.Now().Add(releaseWait)
	for !c.rl.has(rlMarked) {
		if !c.rl.has(rlSent|rlAsk) || time.Now().After(limit) || c.m.stopped.Load() {
			return false
		}
		time.Sleep(drainWritePoll)
	}
	return true
}

// warnUnreleased says once at Warn that a full-duplex connection (one
// written while replies were owed) met the drain cap on a Maint that
// cannot ask go-redis for its release: it is closed at the cap or at a
// write once nothing is owed, and go-redis may run commands whose replies
// it had read but not parsed again.
func (c *conn) warnUnreleased() {
	c.m.rel.warnOnce.Do(func() {
		c.m.warn("a connection written while replies are owed (go-redis's full-duplex autopipelining) "+
			"was closed at the drain cap; go-redis may run commands it had not parsed again. "+
			"Install maint where it knows the client: maint.Instrument(rdb), a Group, or Maint.NewClient",
			"node", c.n.key)
	})
}

// releaseHandler is the push handler of maint's release push: it marks
// the pool connection the push came on for handoff, and to close on put.
type releaseHandler struct{}

// poolConnMarks is what the handler needs of go-redis's pool connection
// (its methods are exported; the type is internal).
type poolConnMarks interface {
	GetNetConn() net.Conn
	MarkCloseOnPut(reason string)
	MarkForHandoff(newEndpoint string, seqID int64) error
}

// HandlePushNotification marks the connection the push came on.
func (releaseHandler) HandlePushNotification(_ context.Context, hctx push.NotificationHandlerContext, _ []interface{}) error {
	pc, ok := hctx.Conn.(poolConnMarks)
	if !ok {
		return nil
	}
	c, ok := pc.GetNetConn().(*conn)
	if !ok || !c.rl.has(rlSent) {
		return nil // not one of maint's, or not asked: nothing of maint's to mark
	}
	pc.MarkCloseOnPut(ErrDrainCap.Error())
	_ = pc.MarkForHandoff("", 0) // already marked: go-redis's own handler did
	if c.rl.f.Or(rlMarked)&rlMarked == 0 {
		c.m.c.releasesMarked.Add(1)
	}
	return nil
}
