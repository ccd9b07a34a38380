//go:build !linux

package maint

import "time"

// arrivedAgo cannot ask the socket on this platform: a notification is
// taken to have arrived when it is read.
func (c *conn) arrivedAgo() time.Duration { return 0 }
