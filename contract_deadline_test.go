package maint_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint/internal/resp"
)

// TestGoRedisReplyDeadlinesOweAReply pins how maint tells a command's read
// deadline from one of go-redis's own probes (deadline.go, floor): by what
// it is, not by its length. go-redis sets a reply's read deadline after
// writing the command, so the connection owes a reply when the deadline is
// set, however short the ReadTimeout (here 50 ms), and in ordinary traffic
// (commands, pipelines) it sets no other read deadline but zero time (its
// socket peeks). Its push drain under a 50 ms hard deadline, after 5 s idle,
// runs before the command is written, with no reply owed
// (TestGoRedisReadsPushesBeforeCommand). maint relaxes the first kind and
// leaves the others as asked; if go-redis ever set a reply's deadline before
// the write, or probed with a reply owed, a short timeout would go unrelaxed
// or a probe would wait the relaxed timeout.
func TestGoRedisReplyDeadlinesOweAReply(t *testing.T) {
	const readTimeout = 50 * time.Millisecond
	c := newContract(t)
	opt := c.options()
	opt.ReadTimeout, opt.WriteTimeout = readTimeout, readTimeout
	short := c.client(opt)
	ctx := context.Background()
	mark := c.w.mark()
	for i := 0; i < 20; i++ { // a starved machine may time one out: enough of them pass
		_ = short.Get(ctx, "k").Err()
		_, _ = short.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Get(ctx, "a")
			p.Get(ctx, "b")
			return nil
		})
	}
	ops := c.w.since(mark, 0)

	type state struct {
		wr      resp.Written
		written int
		replies int
		buf     []byte
	}
	conns := map[int]*state{}
	var replyDeadlines, probes int
	for _, o := range ops {
		s := conns[o.conn]
		if s == nil {
			s = &state{}
			conns[o.conn] = s
		}
		switch o.kind {
		case opWrite:
			s.written += s.wr.Feed(o.data)
		case opRead:
			s.buf = append(s.buf, o.data...)
			for {
				l := resp.FrameLen(s.buf)
				if l == 0 {
					break
				}
				if _, push := resp.PushName(s.buf[:l]); !push {
					s.replies++
				}
				s.buf = s.buf[l:]
			}
		case opSetRead, opSetDeadline:
			if o.dl.IsZero() {
				continue // zero time: nothing to relax
			}
			d := o.dl.Sub(o.at)
			if s.written > s.replies {
				replyDeadlines++
				continue
			}
			probes++
			t.Errorf("go-redis set a %v read deadline while no reply was owed, in ordinary traffic: maint takes it for a probe and never relaxes it", d)
		}
	}
	t.Logf("reply deadlines %d, probe deadlines %d", replyDeadlines, probes)
	if replyDeadlines < 20 {
		t.Fatalf("go-redis no longer sets a reply's read deadline after writing the command (%d of at least 20 seen with a reply owed): maint would leave short reply deadlines unrelaxed:%s", replyDeadlines, dump(ops))
	}
	if probes > 0 {
		t.Logf("%s", dump(ops))
	}
}
