//go:build race

package conformance_test

// raceOn: the race detector is on (see builtinUnderRace).
const raceOn = true
