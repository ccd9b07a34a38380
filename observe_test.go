package maint

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Emitting with no observer (and its level logged nowhere) allocates
// nothing; observers get every event until cancelled; cancel is idempotent.
func TestObserve(t *testing.T) {
	m := New(WithLogger(slog.New(slog.DiscardHandler)))
	defer m.Close()
	e := Event{At: time.Now(), Kind: EventHeld, Node: "127.0.0.1:1", Duration: time.Millisecond}
	assert.Zero(t, testing.AllocsPerRun(100, func() { m.emit(e) }), "emit without observers allocates")

	var mu sync.Mutex
	var a, b []EventKind
	cancelA := m.Observe(func(e Event) { mu.Lock(); a = append(a, e.Kind); mu.Unlock() })
	cancelB := m.Observe(func(e Event) { mu.Lock(); b = append(b, e.Kind); mu.Unlock() })
	assert.Zero(t, testing.AllocsPerRun(100, func() { m.emit(e) }), "emit to observers allocates")
	cancelA()
	cancelA()
	m.emit(Event{Kind: EventHandoff})
	cancelB()
	m.emit(Event{Kind: EventRelease})
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, a, 100+1) // AllocsPerRun runs once more to warm up
	assert.Len(t, b, 100+2)
	assert.Equal(t, EventHandoff, b[len(b)-1])
	assert.Nil(t, m.obs.list.Load(), "the list is empty again")
}

// A Group's observer reaches the Maints installed after it subscribed.
func TestGroupObserveLaterMaints(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	g, err := Instrument(ring, WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer g.Close()
	var mu sync.Mutex
	var nodes []string
	cancel := g.Observe(func(e Event) { mu.Lock(); nodes = append(nodes, e.Node); mu.Unlock() })
	ring.SetAddrs(map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}) // a new shard: a new Maint
	deadline := time.Now().Add(10 * time.Second)
	for len(g.Maints()) < 2 {
		require.True(t, time.Now().Before(deadline), "the new shard got no Maint")
		time.Sleep(time.Millisecond)
	}
	ms := g.Maints()
	for _, m := range ms {
		m.emit(Event{Kind: EventRetire, Node: "n"})
	}
	cancel()
	cancel()
	ms[1].emit(Event{Kind: EventRetire, Node: "after"})
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"n", "n"}, nodes)
}

// WithLogf keeps working: Info-or-above records as "msg key=value" lines,
// Debug ones dropped, the line passed as the format.
func TestLogfAdapter(t *testing.T) {
	var lines []string
	m := New(WithLogf(func(format string, args ...any) {
		assert.Empty(t, args)
		lines = append(lines, format)
	}))
	defer m.Close()
	m.emit(Event{Kind: EventHandoff, Node: "127.0.0.2:6379", Seq: 7, Duration: 15 * time.Second, Successor: "127.0.0.3:6379", Detail: "identifying=true"})
	m.emit(Event{Kind: EventRetire, Node: "127.0.0.2:6379", Count: 3})              // Debug: dropped
	m.emit(Event{Kind: EventMalformed, Node: "127.0.0.2:6379", Detail: "100% bad"}) // Warn
	m.warn("an example warning", "endpoint_type", "x")
	require.Len(t, lines, 3)
	assert.Equal(t, `maint: handoff started kind=handoff node=127.0.0.2:6379 seq=7 window=15s successor=127.0.0.3:6379 detail="identifying=true"`, lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "maint: notification ignored as malformed kind=malformed"), lines[1])
	assert.Contains(t, lines[1], `detail="100%% bad"`)
	assert.Equal(t, "maint: an example warning endpoint_type=x", lines[2])
}
