package maint_test

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// goRedisAtLeast reports whether the go-redis release the tests are built
// with (go.mod's, or the one `-modfile` names: .ci/goredis) is
// major.minor or later: the contract tests assert each release's
// behaviour, so that a release that moves a seam fails them first.
func goRedisAtLeast(major, minor int) bool {
	f := strings.SplitN(redis.Version(), ".", 3)
	if len(f) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(f[0])
	mi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
