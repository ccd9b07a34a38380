//go:build !maintbroken

package maint

// brokenRelax, set only by the maintbroken build tag (brokenbuild_on.go),
// makes maint ignore a MIGRATING, FAILING_OVER or SMIGRATING (no timeout is
// relaxed): a build of maint broken on purpose, so that cmd/maintdemo's test
// can show that `maintdemo --check` fails on it. It is a constant: the
// normal build compiles the check away.
const brokenRelax = false
