package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that a demo run leaves no goroutine behind: every client,
// Maint and emulator it starts is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
