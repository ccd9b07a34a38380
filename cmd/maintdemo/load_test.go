package main

import (
	"context"
	"testing"
	"time"
)

// TestOpenLoopCountsNotStarted: with every slot stuck, the commands due
// meanwhile are counted as not started, one for one with the schedule.
func TestOpenLoopCountsNotStarted(t *testing.T) {
	release := make(chan struct{})
	do := func(ctx context.Context, s *slot) error {
		<-release
		return nil
	}
	start := time.Now()
	l := startLoad(do, 1000, 4, start, start.Add(200*time.Millisecond), nil)
	<-l.schedDone
	close(release)
	l.stop(time.Second)
	// Commands 0..199 are due before the end: 4 ran, the rest found no slot.
	if got := l.ok.Load(); got != 4 {
		t.Errorf("ok %d, want 4", got)
	}
	if got := l.notStarted.Load(); got != 196 {
		t.Errorf("not started %d, want 196", got)
	}
	if l.failed.Load() != 0 || l.unfinished.Load() != 0 {
		t.Errorf("failed %d, unfinished %d", l.failed.Load(), l.unfinished.Load())
	}
}

// TestOpenLoopChargesTheStall: a client that stalls for 100ms is charged
// every command scheduled during the stall, each from its scheduled time,
// not one command per goroutine.
func TestOpenLoopChargesTheStall(t *testing.T) {
	gate := make(chan struct{})
	start := time.Now()
	time.AfterFunc(100*time.Millisecond, func() { close(gate) })
	do := func(ctx context.Context, s *slot) error {
		<-gate
		return nil
	}
	l := startLoad(do, 1000, 4096, start, start.Add(300*time.Millisecond), nil)
	l.wait(time.Second)
	if got := l.ok.Load(); got != 300 {
		t.Fatalf("ok %d, want 300", got)
	}
	// The commands due in the first 50ms waited at least until the gate
	// opened at 100ms: 50ms or more each.
	early := l.latency(0, 50*time.Millisecond)
	if early.Count != 50 {
		t.Fatalf("%d commands due in the first 50ms, want 50", early.Count)
	}
	if early.P50 < 45 {
		t.Errorf("commands due in the first 50ms: p50 %.1fms, want at least 45ms (the stall)", early.P50)
	}
}

// TestOpenLoopCancelsAfterTheGrace: commands still in flight when the grace
// runs out are cancelled and counted as unfinished.
func TestOpenLoopCancelsAfterTheGrace(t *testing.T) {
	do := func(ctx context.Context, s *slot) error {
		<-ctx.Done()
		return ctx.Err()
	}
	start := time.Now()
	l := startLoad(do, 100, 4096, start, start.Add(50*time.Millisecond), nil)
	l.wait(10 * time.Millisecond)
	if got := l.unfinished.Load(); got != 5 {
		t.Errorf("unfinished %d, want 5", got)
	}
	if l.ok.Load()+l.failed.Load() != 0 {
		t.Errorf("ok %d, failed %d", l.ok.Load(), l.failed.Load())
	}
}
