//go:build goredis_v9_24

package maint_test

import (
	"context"
	"errors"
)

// ctxDeadlineErr: v9.24 returns a socket timeout that a context's deadline
// caused as a ContextDeadlineError, which matches context.DeadlineExceeded.
func ctxDeadlineErr(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
