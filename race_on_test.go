//go:build race

package maint_test

// raceOn: the race detector is on. It makes sync.Pool drop items at random,
// so allocation counts of code that pools (go-redis) vary from run to run.
const raceOn = true
