package maint

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
	"github.com/maintkit/maint/internal/slot"
)

func rawCommand(args ...string) []byte {
	b := resp.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = resp.AppendBulk(b, a)
	}
	return b
}

func TestShardCommand(t *testing.T) {
	for _, c := range []struct {
		p    []byte
		want uint8
	}{
		{rawCommand("ssubscribe", "a"), shardSubscribe},
		{rawCommand("SSUBSCRIBE", "a", "b"), shardSubscribe},
		{rawCommand("sunsubscribe"), shardUnsubscribe},
		{rawCommand("SUnsubscribe", "a"), shardUnsubscribe},
		{rawCommand("subscribe", "a"), shardNone},
		{rawCommand("unsubscribe"), shardNone},
		{rawCommand("spublish", "a", "b"), shardNone},
		{rawCommand("get", "ssubscribe"), shardNone},
		{rawCommand("ssubscribx", "a"), shardNone},
		{[]byte("*2\r\n$10\r\nssubscri"), shardNone}, // too short to tell
		{[]byte("SSUBSCRIBE a b c d e f g h\r\n"), shardNone},
		{[]byte{}, shardNone},
	} {
		assert.Equal(t, c.want, shardCommand(c.p), "%q", c.p)
	}
}

// TestShardRecord: what a connection records of its sharded subscriptions,
// and the confirmations its own SUNSUBSCRIBEs owe.
func TestShardRecord(t *testing.T) {
	c := &conn{}
	write := func(args ...string) {
		p := rawCommand(args...)
		k := shardCommand(p)
		require.NotEqual(t, shardNone, k)
		c.noteShardWrite(k, p)
	}
	write("ssubscribe", "{a}x", "{a}y")
	write("ssubscribe", "{b}x")
	rec := c.shard.Load()
	assert.Len(t, rec.chans, 3)
	slots, complete := c.shardSlots()
	assert.Len(t, slots, 2, "one entry per slot")
	assert.True(t, complete)
	write("sunsubscribe", "{a}x")
	assert.Equal(t, 1, rec.own)
	write("sunsubscribe")
	assert.Equal(t, 3, rec.own, "all: one confirmation per channel left")
	assert.Empty(t, rec.chans)
	write("sunsubscribe")
	assert.Equal(t, 4, rec.own, "all with none left: one (nil) confirmation")

	// Bounds: a long name and channels past the cap are not recorded.
	c = &conn{}
	write("ssubscribe", strings.Repeat("n", maxShardChannelLen+1))
	assert.True(t, c.shard.Load().incomplete)
	assert.Empty(t, c.shard.Load().chans)
	args := []string{"ssubscribe"}
	for i := 0; i < maxShardChannels+10; i++ {
		args = append(args, "c"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+strings.Repeat("y", i/182))
	}
	write(args...)
	assert.LessOrEqual(t, len(c.shard.Load().chans), maxShardChannels)

	// A write that is not exactly one command leaves the record incomplete.
	c = &conn{}
	p := append(rawCommand("ssubscribe", "a"), rawCommand("ping")...)
	c.noteShardWrite(shardCommand(p), p)
	assert.True(t, c.shard.Load().incomplete)
	assert.Empty(t, c.shard.Load().chans)
}

// FuzzShardWrite: any bytes written, recognised or not, never panic and
// never record more than the bounds allow; what is recorded is a channel
// with its own slot.
func FuzzShardWrite(f *testing.F) {
	f.Add(rawCommand("ssubscribe", "{a}x", "{a}y"))
	f.Add(rawCommand("sunsubscribe"))
	f.Add(rawCommand("SUNSUBSCRIBE", "x"))
	f.Add([]byte("*3\r\n$10\r\nssubscribe\r\n$-1\r\n$3\r\nabc\r\n"))
	f.Add([]byte("*2\r\n$12\r\nsunsubscribe\r\n$99999999999\r\n"))
	f.Fuzz(func(t *testing.T, p []byte) {
		k := shardCommand(p)
		if k == shardNone {
			return
		}
		c := &conn{}
		c.noteShardWrite(k, p)
		rec := c.shard.Load()
		require.NotNil(t, rec)
		require.LessOrEqual(t, len(rec.chans), maxShardChannels)
		for ch, sl := range rec.chans {
			require.LessOrEqual(t, len(ch), maxShardChannelLen)
			require.Equal(t, slot.Of(ch), sl)
		}
		require.GreaterOrEqual(t, rec.own, 0)
	})
}
