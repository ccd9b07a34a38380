package maint_test

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maintkit/maint/internal/resp"
)

// replayServer is a minimal RESP3 server that, like Redis Enterprise,
// replays a retained MIGRATED some milliseconds after answering the opt-in,
// asynchronously, so that it lands on a connection idle in the pool.
type replayServer struct {
	addr     string
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func newReplayServer(t *testing.T, delay time.Duration) *replayServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &replayServer{addr: ln.Addr().String()}
	var conns sync.Map
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(k, _ any) bool { _ = k.(net.Conn).Close(); return true })
		s.wg.Wait()
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			conns.Store(c, nil)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c, delay)
			}()
		}
	}()
	return s
}

func (s *replayServer) serve(c net.Conn, delay time.Duration) {
	defer c.Close()
	var mu sync.Mutex
	write := func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = c.Write(b)
	}
	r := bufio.NewReader(c)
	for {
		frame, err := resp.ReadCommand(r, nil)
		if err != nil {
			return
		}
		name, args, err := resp.CommandName(frame)
		if err != nil {
			return
		}
		switch name {
		case "HELLO":
			write([]byte("%1\r\n$5\r\nproto\r\n:3\r\n"))
		case "PING":
			write([]byte("+PONG\r\n"))
		case "CLIENT":
			write([]byte("+OK\r\n"))
			if len(args) > 0 && strings.EqualFold(string(args[0]), "MAINT_NOTIFICATIONS") {
				time.AfterFunc(delay, func() { write(resp.AppendMigrated(nil, 7, `["1"]`)) })
			}
		default:
			write([]byte("+OK\r\n"))
		}
	}
}
