package maint_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// fullDuplexThroughMoving runs autopipelined INCRs through a full-duplex
// AutoPipeliner of a maint client (Maint.NewClient: maint knows the
// client) across a MOVING with a named successor whose window (2 s) is
// shorter than the pipeliner's FullDuplexMaxHold (5 s, go-redis's
// default): the held connections must leave the old node before its
// close, with nothing failed and nothing run twice. A pipe owing replies
// at the drain cap is let go by go-redis itself, at its next clean turn
// (release.go): every release asked is marked, none is closed at a write.
func fullDuplexThroughMoving(t *testing.T, maxRetries int, apo *redis.AutoPipelineOptions, tune func(*redis.Options)) {
	e := newEnv(t)
	opt := e.options(16)
	opt.MaxRetries = maxRetries
	if tune != nil {
		tune(opt)
	}
	rdb, m, ev := e.client(routes[1], opt)
	ap, err := rdb.AutoPipelineWithOptions(apo)
	require.NoError(t, err)
	defer func() { _ = ap.Close() }()
	l := startIncrOp(32, "fd:", 1, func(key string) (int64, error) {
		return ap.Incr(context.Background(), key).Result()
	})
	waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 500 })
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new})
	e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
	base := e.new.Stats().Served
	waitFor(t, "load on the new node", 10*time.Second, func() bool { return e.new.Stats().Served > base+500 })
	l.stop()
	st := m.Stats()
	t.Logf("maint %+v; old node %+v; events:\n%s", st, e.old.Stats(), ev)
	l.check(t, e.emu.Miniredis(), "fd:")
	assert.Zero(t, e.old.Stats().OwedAtClose, "no reply was still owed when the server closed")
	assert.Equal(t, st.OwedAtCap, st.ReleasesAsked, "every pipe owing at the drain cap is handed to go-redis")
	assert.Equal(t, st.ReleasesAsked, st.ReleasesMarked, "go-redis marks every pipe maint asks it to let go")
	assert.Zero(t, st.ReleasesUnmarked, "no pipe is closed at a write")
}

// Full-duplex autopipelining holds its connection for up to
// FullDuplexMaxHold under continuous load, outside the pool's health check:
// through a MOVING it fails no command and runs none twice, with retries
// off and at go-redis's default.
func TestFullDuplexAutoPipelineThroughMoving(t *testing.T) {
	for _, tc := range []struct {
		name    string
		retries int
	}{{"NoRetries", -1}, {"DefaultRetries", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			fullDuplexThroughMoving(t, tc.retries, &redis.AutoPipelineOptions{FullDuplex: true}, nil)
		})
	}
}

// On a client maint does not know (AddHook alone), go-redis cannot be
// asked to let a pipe go: a pipe written while replies are owed that meets
// the drain cap, owing or not, is said once at Warn, naming the routes
// that protect it, and counted nowhere as released.
func TestFullDuplexOnAnUnknownClientIsSaid(t *testing.T) {
	e := newEnv(t)
	logs := &records{level: slog.LevelWarn}
	opt := e.options(16)
	opt.MaxRetries = 3
	rdb, m, _ := e.client(routes[0], opt, maint.WithLogger(slog.New(logs)))
	ap, err := rdb.AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true})
	require.NoError(t, err)
	defer func() { _ = ap.Close() }()
	l := startIncrOp(32, "fdu:", 1, func(key string) (int64, error) {
		return ap.Incr(context.Background(), key).Result()
	})
	defer l.stop()
	waitFor(t, "load", 10*time.Second, func() bool { return e.old.Stats().Served > 500 })
	window := 2 * time.Second
	e.old.Moving(mainttest.Moving{Window: window, To: e.new})
	e.waitEvent(e.old, mainttest.KindWindowEndClose, window+10*time.Second)
	l.stop()
	assert.Zero(t, m.Stats().ReleasesAsked, "no handler on this client: nothing is put into its stream")
	n := 0
	for msg, k := range logs.byMessage() {
		if strings.Contains(msg, "full-duplex autopipelining") {
			n += k
			assert.Contains(t, msg, "maint.Instrument(rdb)")
		}
	}
	assert.Equal(t, 1, n, "said once: %v", logs.byMessage())
}
