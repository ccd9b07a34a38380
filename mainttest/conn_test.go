package mainttest

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/maintkit/maint/internal/resp"
	"github.com/redis/go-redis/v9"
)

// bigClient is a go-redis client on ep, with timeouts generous enough for
// replies of many megabytes under the race detector on a shared machine.
func bigClient(t *testing.T, ep *Endpoint, protocol int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: ep.Addr(), Protocol: protocol, MaxRetries: -1, PoolSize: 1,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestBigAggregateReply: a reply of more elements than a command may hold
// (resp.MaxAggregateLen) is relayed whole, on RESP2 and RESP3.
func TestBigAggregateReply(t *testing.T) {
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	const n = resp.MaxAggregateLen + 10
	vals := make([]string, 0, 1<<16)
	for i := 0; i < n; i += len(vals) {
		vals = vals[:0]
		for j := i; j < min(n, i+cap(vals)); j++ {
			vals = append(vals, strconv.Itoa(j))
		}
		if _, err := e.Miniredis().RPush("big", vals...); err != nil {
			t.Fatal(err)
		}
	}
	for _, protocol := range []int{3, 2} {
		c := bigClient(t, ep, protocol)
		got, err := c.LRange(context.Background(), "big", 0, -1).Result()
		if err != nil {
			t.Fatalf("RESP%d: LRANGE of %d elements through the endpoint: %v", protocol, n, err)
		}
		if len(got) != n || got[0] != "0" || got[n-1] != strconv.Itoa(n-1) {
			t.Fatalf("RESP%d: LRANGE returned %d elements, want %d", protocol, len(got), n)
		}
		for i, v := range got {
			if v != strconv.Itoa(i) {
				t.Fatalf("RESP%d: element %d is %q", protocol, i, v)
			}
		}
		// The connection is still in step after the big reply.
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("RESP%d: PING after the big reply: %v", protocol, err)
		}
	}
}

// TestBigBlobReply: a 100 MB value is relayed whole.
func TestBigBlobReply(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MB through the relay")
	}
	e := newEmu(t, Config{})
	ep := addEndpoint(t, e, "127.0.0.2:0")
	val := bytes.Repeat([]byte("0123456789abcdef"), 100<<20/16)
	val[len(val)/2] = 'X'
	if err := e.Miniredis().Set("blob", string(val)); err != nil {
		t.Fatal(err)
	}
	c := bigClient(t, ep, 3)
	got, err := c.Get(context.Background(), "blob").Bytes()
	if err != nil {
		t.Fatalf("GET of a 100 MB value through the endpoint: %v", err)
	}
	if !bytes.Equal(got, val) {
		t.Fatalf("GET returned %d bytes, not the %d stored", len(got), len(val))
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after the big reply: %v", err)
	}
	if s := ep.Stats(); s.Served < 2 {
		t.Fatalf("stats %+v", s)
	}
}
