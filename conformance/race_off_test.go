//go:build !race

package conformance_test

// raceOn: the race detector is on (see race_on_test.go).
const raceOn = false
