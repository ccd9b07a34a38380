package maint_test

// Contract tests: what maint assumes of go-redis v9.23, pinned against a
// real go-redis client.
//
// maint is a go-redis Hook and a net.Conn wrapper handed to go-redis by its
// dial path. It relies on how go-redis calls that net.Conn: when it asks
// SyscallConn (the pool's health check, maint's retirement check), which
// deadlines it sets, what it writes first on a new connection, what it
// retries. None of that is API; all of it can change in a minor release.
// Each test here drives a real go-redis client through a recording net.Conn
// against the emulator and fails with a message naming the assumption that
// broke and what in maint depends on it. docs/design.md ("What maint assumes
// of go-redis") lists them with their tests.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// holdHook makes commands on key "held" wait in the ProcessHook until
// release is closed, as maint's hold does.
type holdHook struct {
	hookLog
	waiting chan struct{}
	release chan struct{}
}

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && args[1] == "held" {
			close(h.waiting)
			<-h.release
		}
		return next(ctx, cmd)
	}
}

// TestGoRedisProcessHookRunsBeforePoolTurn: a command waiting in a
// ProcessHook holds no connection and no pool turn, and no deadline runs
// for it: with a pool of one, another command goes through meanwhile.
// maint holds commands there during a handoff, bounded by their context.
func TestGoRedisProcessHookRunsBeforePoolTurn(t *testing.T) {
	c := newContract(t)
	rdb := c.client(c.options()) // PoolSize 1
	h := &holdHook{waiting: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(h)
	c.ping(rdb, "first command")
	done := make(chan error, 1)
	go func() { done <- rdb.Get(context.Background(), "held").Err() }()
	<-h.waiting
	mark := c.w.mark()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		close(h.release)
		t.Fatalf("a command waiting in a ProcessHook now holds the only pool connection (PING: %v): maint's hold would starve the pool", err)
	}
	for _, o := range c.w.since(mark, 0) {
		if o.kind == opWrite && strings.Contains(fmt.Sprint(wireCommands(o.data)), "held") {
			t.Fatalf("the held GET was written while its ProcessHook waited")
		}
	}
	close(h.release)
	if err := <-done; err != redis.Nil {
		t.Fatalf("held GET: %v", err)
	}
}

// ---------------------------------------------------------------------------
// h. Every dial goes through the DialHook chain and Options.Dialer.

// dialLog is a hook that counts the dials passing through its DialHook.
type dialLog struct {
	hookLog
	n atomic.Int64
}

func (d *dialLog) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}

// TestGoRedisDialsThroughHookAndDialer: the main pool, the pipeline pool
// (v9.23 has one: Pipelined and TxPipelined dial it even with an idle
// main-pool connection), pub/sub and Conn() all dial through the DialHook
// chain and then Options.Dialer. maint sees every connection either way.
func TestGoRedisDialsThroughHookAndDialer(t *testing.T) {
	c := newContract(t)
	rdb := c.client(c.options())
	hook := &dialLog{}
	rdb.AddHook(hook)
	ctx := context.Background()
	step := func(what string, f func() error, newDials int) {
		t.Helper()
		before, hooked := c.w.dialed(), hook.n.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		dialed, viaHook := c.w.dialed()-before, int(hook.n.Load()-hooked)
		if dialed != newDials || viaHook != newDials {
			t.Fatalf("%s: %d dials through Options.Dialer, %d through the DialHook, want %d through both: maint would miss connections", what, dialed, viaHook, newDials)
		}
	}
	step("main pool", func() error { return rdb.Ping(ctx).Err() }, 1)
	step("main pool, idle connection", func() error { return rdb.Ping(ctx).Err() }, 0)
	step("pipeline pool", func() error {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); return nil })
		return err
	}, 1)
	step("pipeline pool, transaction", func() error {
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); return nil })
		return err
	}, 0)
	step("pub/sub", func() error {
		sub := rdb.Subscribe(ctx, "ch")
		defer sub.Close()
		_, err := sub.Receive(ctx)
		return err
	}, 1)
	step("Conn(), the pool's idle connection", func() error {
		cn := rdb.Conn()
		defer cn.Close()
		return cn.Ping(ctx).Err()
	}, 0)
}
