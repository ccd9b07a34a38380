package maint_test

import (
	"context"
	"fmt"
	"strings"
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

// ---------------------------------------------------------------------------
// c. Deadlines.

// setterBefore returns the op right before the first op of kind next in
// ops, checking that it is a call of setter.
func setterBefore(t *testing.T, ops []wireOp, setter, next, assumption string) wireOp {
	t.Helper()
	i := index(ops, next)
	if i < 1 || ops[i-1].kind != setter {
		t.Fatalf("%s: %s is no longer called right before %s:%s", assumption, setter, next, dump(ops))
	}
	return ops[i-1]
}

// checkDeadline checks that a setter set its deadline timeout after the call.
func checkDeadline(t *testing.T, o wireOp, timeout time.Duration, assumption string) {
	t.Helper()
	if timeout == 0 {
		if !o.dl.IsZero() {
			t.Fatalf("%s: %s set %v, want zero time", assumption, o.kind, o.dl.Sub(o.at))
		}
		return
	}
	// go-redis reads the clock before the call: the distance is at most the
	// timeout, less by however long the machine took to make the call.
	d := o.dl.Sub(o.at)
	if o.dl.IsZero() || d > timeout || d < timeout/2 {
		t.Fatalf("%s: %s set +%v (zero=%v), want +%v (now + the timeout)", assumption, o.kind, d, o.dl.IsZero(), timeout)
	}
}

// TestGoRedisSetsDeadlinesFromTimeouts pins the deadlines maint relaxes in
// its setters: before writing a command go-redis sets a write deadline of
// now+WriteTimeout, before reading its reply a read deadline of
// now+ReadTimeout; -1 sets zero time; -2 calls no setter; a blocking
// command's read deadline is its own timeout + 10 s (0: zero time); with
// ContextTimeoutEnabled a closer context deadline wins.
func TestGoRedisSetsDeadlinesFromTimeouts(t *testing.T) {
	cases := []struct {
		name         string
		read, write  time.Duration // options
		wantR, wantW time.Duration // expected distance; 0: zero time; -1: no setter
	}{
		{"3s_2s", 3 * time.Second, 2 * time.Second, 3 * time.Second, 2 * time.Second},
		{"defaults", 0, 0, 5 * time.Second, 5 * time.Second},
		{"write_follows_read", 1500 * time.Millisecond, 0, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"minus1_block", -1, -1, 0, 0},
		{"minus2_no_setter", -2, -2, -1, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newContract(t)
			opt := c.options()
			opt.ReadTimeout, opt.WriteTimeout = tc.read, tc.write
			rdb := c.client(opt)
			c.ping(rdb, "first command")
			mark := c.w.mark()
			if err := rdb.Get(context.Background(), "k").Err(); err != redis.Nil {
				t.Fatal(err)
			}
			ops := c.w.since(mark, 1)
			t.Logf("ReadTimeout %v, WriteTimeout %v: GET on an idle connection:%s", tc.read, tc.write, dump(ops))
			w := index(ops, opWrite)
			cmd := ops[w-1:] // from the setter before the write on
			a := fmt.Sprintf("go-redis (ReadTimeout %v, WriteTimeout %v)", tc.read, tc.write)
			if tc.wantW < 0 {
				if n := count(cmd, opSetWrite) + count(cmd, opSetRead) + count(cmd, opSetDeadline); n != 0 {
					t.Fatalf("%s now sets deadlines around a command with -2 (it called no setter): maint relaxes only deadlines that are set:%s", a, dump(cmd))
				}
				return
			}
			checkDeadline(t, setterBefore(t, ops, opSetWrite, opWrite, a), tc.wantW, a+" sets the write deadline before writing a command")
			after := ops[w+1:]
			checkDeadline(t, setterBefore(t, after, opSetRead, opRead, a), tc.wantR, a+" sets the read deadline before reading the reply")
			if n := count(after, opSetRead); n != 1 {
				t.Fatalf("%s set the read deadline %d times for one reply: maint's refloor re-applies the last one only:%s", a, n, dump(after))
			}
		})
	}

	t.Run("blocking_command", func(t *testing.T) {
		c := newContract(t)
		rdb := c.client(c.options()) // ReadTimeout 3s
		c.ping(rdb, "first command")
		for _, tc := range []struct {
			timeout, want time.Duration
		}{{time.Second, 11 * time.Second}, {0, 0}} {
			if tc.timeout == 0 {
				go func() { // unblock BLPOP q 0 once it waits
					for deadline := time.Now().Add(10 * time.Second); c.ep.Stats().Pending == 0 && time.Now().Before(deadline); {
						time.Sleep(2 * time.Millisecond)
					}
					_, _ = c.emu.Miniredis().Lpush("q", "x")
				}()
			}
			mark := c.w.mark()
			err := rdb.BLPop(context.Background(), tc.timeout, "q").Err()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			ops := c.w.since(mark, 1)
			after := ops[index(ops, opWrite)+1:]
			a := fmt.Sprintf("go-redis sets the read deadline of BLPOP with timeout %v to its timeout + 10 s (0: none)", tc.timeout)
			checkDeadline(t, setterBefore(t, after, opSetRead, opRead, a), tc.want, a)
		}
	})

	t.Run("context_deadline", func(t *testing.T) {
		for _, enabled := range []bool{false, true} {
			c := newContract(t)
			opt := c.options()
			opt.ContextTimeoutEnabled = enabled
			rdb := c.client(opt)
			c.ping(rdb, "first command")
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			mark := c.w.mark()
			_ = rdb.Get(ctx, "k").Err()
			cancel()
			ops := c.w.since(mark, 1)
			after := ops[index(ops, opWrite)+1:]
			want := 3 * time.Second
			if enabled {
				want = time.Second
			}
			a := fmt.Sprintf("go-redis with ContextTimeoutEnabled=%v and a 1 s context sets the read deadline to +%v", enabled, want)
			o := setterBefore(t, after, opSetRead, opRead, a)
			checkDeadline(t, o, want, a)
			// maint floors go-redis's own deadlines and never the context's
			// (deadline.go, callersOwn): it tells them by the monotonic reading.
			if mono := strings.Contains(o.dl.String(), " m="); mono != enabled {
				t.Fatalf("go-redis with ContextTimeoutEnabled=%v passes a read deadline with a monotonic reading: %v, want %v (a context's deadline has one, go-redis's own none): %v", enabled, mono, enabled, o.dl)
			}
		}
	})
}
