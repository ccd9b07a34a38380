package maint_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

// Any legal reply, any size. A reply of more than 1<<20 elements
// is framed like any other: the connection keeps removing notifications
// after it, and the next MOVING on it is acted on by maint, never by
// go-redis's built-in handler.
func TestHugeReplyKeepsMaintOn(t *testing.T) {
	if testing.Short() {
		t.Skip("a reply of a million elements")
	}
	for _, r := range []route{routes[0], routes[1]} { // AddHook keeps go-redis's built-in handler registered
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			const n = 1<<20 + 10
			vals := make([]string, 0, 1<<16)
			for i := 0; i < n; i += len(vals) {
				vals = vals[:0]
				for j := i; j < min(n, i+cap(vals)); j++ {
					vals = append(vals, strconv.Itoa(j))
				}
				_, err := e.emu.Miniredis().RPush("big", vals...)
				require.NoError(t, err)
			}
			opt := e.options(1)
			opt.ReadTimeout = time.Minute
			rdb, m, ev := e.client(r, opt)
			ctx := context.Background()
			got, err := rdb.LRange(ctx, "big", 0, -1).Result()
			require.NoError(t, err)
			require.Len(t, got, n)
			assert.Equal(t, strconv.Itoa(n-1), got[n-1])
			assert.Zero(t, m.Stats().Malformed, "a legal reply is not malformed")

			e.old.Moving(mainttest.Moving{Window: 3 * time.Second, To: e.new})
			pingUntilRetired(t, rdb, ev)
			assert.EqualValues(t, 1, m.Stats().Handoffs, "maint acted on the MOVING read after the big reply")
			waitFor(t, "the new node", 10*time.Second, func() bool {
				require.NoError(t, rdb.Ping(ctx).Err())
				return e.new.Stats().Served > 0
			})
			_, moved := ev.first(maint.EventRetire)
			assert.True(t, moved)
		})
	}
}
