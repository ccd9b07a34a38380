//go:build !goredis_v9_24

package maint_test

// ctxDeadlineErr: v9.23 returns a socket timeout that a context's deadline
// caused as the timeout it is (checked by the caller), matching no
// context error.
func ctxDeadlineErr(err error) bool { return err != nil }
