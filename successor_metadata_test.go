package maint

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maintkit/maint/internal/resp"
)

// metadataEndpoints are the cloud metadata endpoints a MOVING may name,
// with a port, by address and by name.
var metadataEndpoints = []string{
	"169.254.169.254:80", "169.254.170.2:80", "169.254.170.23:80", "169.254.0.23:80",
	"100.100.100.200:80", "168.63.129.16:80", "192.0.0.192:80",
	"[fd00:ec2::254]:80", "[fd00:ec2::23]:80", "[::ffff:169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]:80",
	"[::ffff:100.100.100.200]:80", "[fd00:ec2::254%eth0]:80",
	"metadata.google.internal:80", "METADATA.GOOGLE.INTERNAL.:80", "metadata:80", "instance-data:80",
	"metadata.tencentyun.com:80",
}

// With no AllowSuccessor, a MOVING naming a cloud metadata endpoint is
// treated as null, whether the node that sent it is remote or local (a
// local node allows local successors, never these); an AllowSuccessor
// policy decides for itself.
func TestSuccessorMetadataEndpointsRefusedByDefault(t *testing.T) {
	for _, ep := range metadataEndpoints {
		t.Run(ep, func(t *testing.T) {
			m := New(WithLogf(t.Logf))
			defer m.Close()
			d := &fakeDialer{remotes: []string{"192.0.2.10:6379"}}
			c, err := m.dialVia(d.dial)(context.Background(), "tcp", "redis.test:6379")
			require.NoError(t, err)
			c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, ep, false))
			assert.Nil(t, c.(*conn).t.pin.Load(), "pinned to a metadata endpoint named by a remote node")

			local, _ := wrapScript(t, m, nil) // a node reached at 127.0.0.2
			local.onNotification(resp.AppendMoving(nil, 2, 30, ep, false))
			assert.Nil(t, local.t.pin.Load(), "pinned to a metadata endpoint named by a local node")
			assert.EqualValues(t, 2, m.Stats().RefusedSuccessors)

			allowed := New(WithLogf(t.Logf), WithAllowSuccessor(func(string) bool { return true }))
			defer allowed.Close()
			c, err = allowed.dialVia(d.dial)(context.Background(), "tcp", "redis.test:6379")
			require.NoError(t, err)
			c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, ep, false))
			assert.NotNil(t, c.(*conn).t.pin.Load(), "AllowSuccessor decides")
		})
	}
	for _, ep := range []string{"10.0.0.7:6379", "[fd00:ec3::254]:6379", "[2001:db8::254]:6379", "redis-2.example:6379", "100.100.100.201:6379"} {
		assert.False(t, isMetadataAddr(ep), ep)
	}
}

// A successor named by a host name that resolves to a metadata endpoint is
// refused where the dial lands, even when the node that named it is local.
func TestSuccessorNameLandingOnMetadataIsRefused(t *testing.T) {
	for _, landed := range []string{"169.254.169.254:6379", "[fd00:ec2::254]:6379", "100.100.100.200:6379"} {
		t.Run(landed, func(t *testing.T) {
			m := New(WithLogf(t.Logf))
			defer m.Close()
			d := &fakeDialer{remotes: []string{"127.0.0.2:6379"}}
			dial := m.dialVia(d.dial)
			c, err := dial(context.Background(), "tcp", "redis.test:6379")
			require.NoError(t, err)
			c.(*conn).onNotification(resp.AppendMoving(nil, 1, 30, "next.example:6379", false))
			require.NotNil(t, c.(*conn).t.pin.Load())
			d.mu.Lock()
			d.remotes = []string{landed}
			d.mu.Unlock()
			_, err = dial(context.Background(), "tcp", "redis.test:6379")
			require.ErrorIs(t, err, ErrSuccessorRejected)
			assert.Contains(t, err.Error(), "metadata")
			assert.Nil(t, c.(*conn).t.pin.Load(), "the pin is dropped")
		})
	}
}
