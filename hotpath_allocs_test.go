//go:build unix

package maint

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The regression guard of the per-command path: while no maintenance is
// going on, maint allocates nothing per command, in its hooks and in its
// connection wrapper, whatever the command and the reply. Allocation counts
// are exact (testing.AllocsPerRun), not times: these tests cannot flake on
// a busy machine.

// scriptConn is a raw connection that serves a fixed reply stream, in reads
// of at most chunk bytes, and swallows writes. reset rewinds it.
type scriptConn struct {
	*echoConn
	script []byte
	out    []byte
	chunk  int
}

func (s *scriptConn) Write(p []byte) (int, error) { return len(p), nil }
func (s *scriptConn) Read(p []byte) (int, error) {
	n := copy(p[:min(len(p), s.chunk)], s.out)
	s.out = s.out[n:]
	return n, nil
}
func (s *scriptConn) reset() { s.out = s.script }

// hotCase is one command (or pipeline) and its replies as the server sends
// them.
type hotCase struct {
	name string
	// writes are the command bytes as go-redis's buffered writer hands them
	// to the connection (a large argument goes past the buffer in a write
	// of its own).
	writes []string
	reply  string
	// replies is the number of replies in reply; 0 for pushes only.
	replies int
	// chunk is the most bytes one raw read returns.
	chunk int
}

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

func command(args ...string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "*%d\r\n", len(args))
	for _, a := range args {
		sb.WriteString(bulk(a))
	}
	return sb.String()
}

func hotCases() []hotCase {
	get := command("get", "maint:bench:key")
	small := bulk("0123456789abcdef")
	v16k, v1m := strings.Repeat("v", 16<<10), strings.Repeat("v", 1<<20)
	mgetKeys := []string{"mget"}
	mgetReply := "*100\r\n"
	for k := range 100 {
		mgetKeys = append(mgetKeys, fmt.Sprintf("key:%d", k))
		mgetReply += small
	}
	msg := ">3\r\n" + bulk("message") + bulk("channel") + bulk(strings.Repeat("p", 64))
	return []hotCase{
		{name: "GET", writes: []string{get}, reply: small, replies: 1, chunk: 32 << 10},
		{name: "pipeline of 20", writes: []string{strings.Repeat(get, 20)}, reply: strings.Repeat(small, 20), replies: 20, chunk: 32 << 10},
		{name: "pipeline of 100, replies in 1 KiB reads", writes: []string{strings.Repeat(get, 100)}, reply: strings.Repeat(small, 100), replies: 100, chunk: 1 << 10},
		{name: "GET 16 KiB", writes: []string{get}, reply: bulk(v16k), replies: 1, chunk: 32 << 10},
		{name: "GET 1 MiB in 32 KiB reads", writes: []string{get}, reply: bulk(v1m), replies: 1, chunk: 32 << 10},
		{name: "SET 1 MiB", writes: []string{"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1048576\r\n", v1m, "\r\n"}, reply: "+OK\r\n", replies: 1, chunk: 32 << 10},
		{name: "MGET of 100", writes: []string{command(mgetKeys...)}, reply: mgetReply, replies: 1, chunk: 32 << 10},
		{name: "pub/sub messages", reply: strings.Repeat(msg, 10), chunk: 32 << 10},
	}
}

// TestConnPerCommandAllocatesNothing: the connection wrapper's health check,
// deadlines, Write and Read allocate nothing per command, for single
// commands, pipelines, large values in many reads and writes, arrays and
// pub/sub pushes; and it counts every command and reply (nothing owed after).
func TestConnPerCommandAllocatesNothing(t *testing.T) {
	for _, hc := range hotCases() {
		t.Run(hc.name, func(t *testing.T) {
			m := New(WithLogf(t.Logf))
			defer m.Close()
			raw := &scriptConn{echoConn: newEchoConn(t, ""), script: []byte(hc.reply), chunk: hc.chunk}
			c := m.wrap(m.target("redis.test:6379"), raw, raw.remote)
			p := newPerCommand(len(hc.reply), hc.writes...)
			one := func() {
				raw.reset()
				p.run(t, c)
			}
			one()
			replies := c.rd.Replies()
			assert.Zero(t, testing.AllocsPerRun(100, one))
			assert.EqualValues(t, 0, c.owed(), "every command counted, every reply counted")
			assert.Equal(t, replies*102, c.rd.Replies(), "the replies of 102 runs")
			assert.EqualValues(t, hc.replies, replies)
			assert.False(t, c.rd.Passthrough())
		})
	}
}

// TestHooksAllocateNothing: the process hooks, for a command and for a
// pipeline, allocate nothing while no maintenance is going on.
func TestHooksAllocateNothing(t *testing.T) {
	m := New(WithLogf(t.Logf))
	defer m.Close()
	ctx := context.Background()
	hook := m.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	pipe := m.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
	cmd := redis.NewStringCmd(ctx, "get", "k")
	cmds := []redis.Cmder{cmd, redis.NewStringCmd(ctx, "get", "k2")}
	require.Zero(t, testing.AllocsPerRun(1000, func() { _ = hook(ctx, cmd) }))
	require.Zero(t, testing.AllocsPerRun(1000, func() { _ = pipe(ctx, cmds) }))
}
