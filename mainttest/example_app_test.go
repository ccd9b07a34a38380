package mainttest_test

// How an application tests itself through a maintenance with mainttest,
// as the README shows it: the README's test is TestOrdersSurviveAMove,
// word for word (the root package's TestReadmeSnippetsCompile checks it),
// and TestOrdersWithoutMaintFailTheSameMove runs the same test without
// maint to prove that it can fail: a test that passes without maint too
// proves nothing about maint.

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maintkit/maint"
	"github.com/maintkit/maint/mainttest"
)

func TestOrdersSurviveAMove(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{}) // emulated nodes in front of an embedded Redis
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	old, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	next, err := emu.AddEndpoint("127.0.0.3:" + old.Port())
	if err != nil {
		t.Fatal(err)
	}
	emu.DNS().Set("db.test", old.IP())

	m := maint.New(maint.WithLogf(t.Logf))
	defer m.Close()
	rdb := m.NewClient(&redis.Options{Addr: "db.test:" + old.Port(), Dialer: emu.Dialer(),
		MaxRetries: -1}) // a retry would hide a command the server cut
	defer rdb.Close()

	// Redis Enterprise's usual MOVING: no successor named, DNS follows after the window.
	old.Moving(mainttest.Moving{Window: time.Second, To: next, Null: true, StopAccepting: true,
		DNSHost: "db.test", DNSLag: 2 * time.Second})
	ctx := context.Background()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if err := rdb.Incr(ctx, "orders").Err(); err != nil {
			t.Fatal(err) // without maint: cut at the window's end, then "connection refused"
		}
	}
}

// The same test without maint: redis.NewClient with the same options (go-redis's
// built-in handler in its default auto mode, as an application has it) fails
// commands from the window's end until DNS moves. Counted, not stopped at the
// first, so that the log says how many.
func TestOrdersWithoutMaintFailTheSameMove(t *testing.T) {
	emu, err := mainttest.New(mainttest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	old, err := emu.AddEndpoint("127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	next, err := emu.AddEndpoint("127.0.0.3:" + old.Port())
	if err != nil {
		t.Fatal(err)
	}
	emu.DNS().Set("db.test", old.IP())

	rdb := redis.NewClient(&redis.Options{Addr: "db.test:" + old.Port(), Dialer: emu.Dialer(),
		MaxRetries: -1})
	defer rdb.Close()

	old.Moving(mainttest.Moving{Window: time.Second, To: next, Null: true, StopAccepting: true,
		DNSHost: "db.test", DNSLag: 2 * time.Second})
	ctx := context.Background()
	ok, failed := 0, 0
	var first error
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if err := rdb.Incr(ctx, "orders").Err(); err != nil {
			if failed++; first == nil {
				first = err
			}
			continue
		}
		ok++
	}
	t.Logf("without maint: %d commands ok, %d failed, the first: %v", ok, failed, first)
	if failed == 0 {
		t.Fatal("no command failed without maint: the test cannot tell maint's work from go-redis's alone")
	}
}
