package maint_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeSentinel is a minimal Sentinel (a Discovery Service) on loopback: it
// names a master and records every command it reads.
type fakeSentinel struct {
	ln     net.Listener
	mu     sync.Mutex
	master string
	cmds   []string
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newFakeSentinel(t *testing.T, master string) *fakeSentinel {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &fakeSentinel{ln: ln, master: master, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *fakeSentinel) addr() string { return s.ln.Addr().String() }

func (s *fakeSentinel) setMaster(addr string) {
	s.mu.Lock()
	s.master = addr
	s.mu.Unlock()
}

func (s *fakeSentinel) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cmds...)
}

func (s *fakeSentinel) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *fakeSentinel) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.handle(c)
		}()
	}
}

func (s *fakeSentinel) handle(c net.Conn) {
	rd := bufio.NewReader(c)
	for {
		args, err := readCommand(rd)
		if err != nil {
			return
		}
		if len(args) == 0 {
			continue
		}
		name := strings.ToLower(args[0])
		s.mu.Lock()
		s.cmds = append(s.cmds, strings.ToLower(strings.Join(args, " ")))
		master := s.master
		s.mu.Unlock()
		var out string
		switch {
		case name == "hello":
			out = "-ERR unknown command 'HELLO'\r\n"
		case name == "ping":
			out = "+PONG\r\n"
		case name == "sentinel" && len(args) > 1 && strings.EqualFold(args[1], "get-master-addr-by-name"):
			host, port, _ := net.SplitHostPort(master)
			out = fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(host), host, len(port), port)
		case name == "sentinel":
			out = "*0\r\n"
		case name == "subscribe":
			for i, ch := range args[1:] {
				out += fmt.Sprintf("*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:%d\r\n", len(ch), ch, i+1)
			}
		default:
			out = "+OK\r\n"
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, n)
	for i := 0; i < n; i++ {
		h, err := rd.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, err := strconv.Atoi(strings.TrimRight(h, "\r\n")[1:])
		if err != nil {
			return nil, err
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		args = append(args, string(b[:l]))
	}
	return args, nil
}
