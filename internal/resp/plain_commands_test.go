package resp

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// classified are the command names classify singles out, by class.
var classified = map[uint8][]string{
	cmdBlocking: {"BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP", "WAIT", "WAITAOF"},
	cmdXRead:    {"XREAD", "XREADGROUP"},
	cmdMulti:    {"MULTI"},
	cmdEndMulti: {"EXEC", "DISCARD", "RESET"},
}

// No command classify singles out is taken for a plain one, in any letter
// case: plainRun counts it as neither blocking nor a MULTI's bracket, and
// would lose what makes it so. The list is checked against classify, so a
// name classify learns must be added here, and to special.
func TestPlainRunLeavesClassifiedCommandsToWholes(t *testing.T) {
	for class, names := range classified {
		for _, name := range names {
			assert.Equal(t, class, classify([]byte(name)), name)
			for _, n := range []string{name, strings.ToLower(name), mixedCase(name)} {
				for _, in := range [][]byte{cmd(n), cmd(n, "q", "0"), cmds(cmd("GET", "k"), cmd(n, "q", "0"))} {
					k, next, _, _ := plainRun(in, 0)
					assert.Less(t, next, len(in), "%q framed as plain", in)
					assert.LessOrEqual(t, k, 1, "%q", in)
				}
			}
		}
	}
}

// A run of plain commands is framed whole, and a classified command after
// it decides what is blocking, inside MULTI or not.
func TestPlainRunThenClassified(t *testing.T) {
	for _, tc := range []struct {
		in       []byte
		n        int
		blocking bool
	}{
		{cmds(cmd("GET", "a"), cmd("SET", "b", strings.Repeat("v", 300)), cmd("MGET", "a", "b", "c")), 3, false},
		{cmds(cmd("GET", "a"), cmd("blpop", "q", "0")), 2, true},
		{cmds(cmd("blpop", "q", "0"), cmd("GET", "a")), 2, false},
		{cmds(cmd("MULTI"), cmd("GET", "a"), cmd("BLPOP", "q", "0")), 3, false},
		{cmds(cmd("MULTI"), cmd("GET", "a"), cmd("EXEC"), cmd("INCR", "n"), cmd("BRPOP", "q", "0")), 5, true},
	} {
		var w Written
		assert.Equal(t, tc.n, w.Feed(tc.in), "%q", tc.in)
		assert.Equal(t, tc.blocking, w.LastBlocking(), "%q", tc.in)
		assert.False(t, w.Lost())
	}
}
