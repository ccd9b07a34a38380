// Maintdemo shows what a Redis Enterprise maintenance event does to a go-redis
// application, with and without maint, on one machine and with no server
// installed.
//
// It starts the in-process emulator of package mainttest (two nodes,
// 127.0.0.2 and 127.0.0.3 on the same port, in front of an embedded
// miniredis, with the host name "redis.test" in the emulator's DNS), runs
// steady load through three clients in turn and triggers the same
// maintenance event in the middle of each run:
//
//   - none: go-redis with maintenance notifications off
//     (MaintNotificationsConfig Mode disabled);
//   - builtin: go-redis's built-in handler (Mode enabled, EndpointType
//     internal-ip);
//   - maint: a go-redis client left at its defaults, with
//     rdb.AddHook(maint.New()) (or, with --maint-route configure,
//     m.NewClient(opt)).
//
// Every client runs twice per scenario, with MaxRetries -1 (no retry hides a
// failure) and with go-redis's default of 3, each time alone and against a
// fresh emulator. Apart from the maintenance handling the clients are the
// same: address, RESP3, pool size, timeouts and a dialer that records every
// connection, so the same measurements apply to all three.
//
// Usage:
//
//	go run ./cmd/maintdemo [flags]
//
// The scenarios (--scenario, comma-separated, or all):
//
//	named           MOVING naming the successor; the old node stops accepting
//	                at the window's end
//	null-dns-early  MOVING with a null endpoint; DNS names the new node at 40%
//	                of the window
//	null-dns-late   MOVING with a null endpoint; DNS names the new node 0.5s
//	                after the window's end (the old node refuses by then)
//	migrating       MIGRATING, then every reply slower than ReadTimeout
//	                (ReadTimeout + 0.5s) for the window, then MIGRATED
//	blocking        a BLPOP q 0 in flight at a MOVING naming the successor
//	                (DNS at 40%), plus the steady load; q is pushed to 0.3s
//	                after the window's end
//
// The default is null-dns-late, which takes about 25 seconds; all takes about
// two minutes.
//
// Flags:
//
//	--scenario LIST     scenarios to run (default null-dns-late)
//	--clients LIST      none, builtin, maint, or all (default all)
//	--goroutines N      goroutines issuing SET and GET in turn (default 32)
//	--rate N            commands per second in all; 0: as fast as they go (default 2000)
//	--pool N            PoolSize of every client (default 16)
//	--window D          MOVING window, or how long the migration is slow (default 2s)
//	--before D          steady load before the event (default 1s)
//	--duration D        load per run; 0: the scenario's span plus 0.5s (default 0)
//	--read-timeout D    ReadTimeout and WriteTimeout of every client (default 1s)
//	--redis ADDR        a Redis server to relay to instead of the embedded miniredis
//	--maint-route R     addhook (default) or configure
//	--json              print one JSON object instead of the tables
//	--check             exit with status 1 if maint failed any command
//	--verbose           log go-redis, maint and the emulator to stderr
//
// While it runs, a progress line on stderr shows the run and its counts (one
// line per run when stderr is not a terminal). Then, per scenario, a table
// with one column per client:
//
//   - failed commands with MaxRetries -1 and with the default, and the
//     commands served;
//   - the timeline of the default-retries run, in seconds from the start of
//     the load: when the event was sent, when DNS moved, when the old node
//     last served a command, when the client closed its last connection to
//     the old node, when the old node closed what was left at the window's
//     end, how many connections it had to close and how many replies they
//     still owed, and how many connections the client opened to the old node
//     after the MOVING (connections that never carried a byte, such as
//     maint's DNS probes, are not counted) and how many dials failed;
//   - p50, p99 and max latency of successful commands before the event and
//     during it (from the event to 0.5s after the disturbance ends), with
//     each client's ratio to maint's.
//
// # JSON
//
// With --json the output is one object:
//
//	settings      goroutines, rate, pool, window, before, read_timeout
//	              (seconds), maint_route, backend, go_redis
//	scenarios[]   name, summary, runs[]
//	  runs[]      client ("none", "builtin", "maint"), max_retries (-1 or 3),
//	              ok, failed, errors[] {error, count},
//	              latency_before and latency_during {count, p50_ms, p99_ms, max_ms},
//	              timeline, blocking (blocking scenario), maint (maint's
//	              counters: notifications, handoffs, retired, closed_at_cap,
//	              busy_at_cap, doomed, held, held_timeouts, relaxations),
//	              builtin {active_handoffs_at_end}
//	  timeline    seconds from the start of the load, absent when it did not
//	              happen: event, dns_moved, slow_from, completion, window_end,
//	              old_last_served, old_conns_closed (absent while some were
//	              open at the end); counts: old_conns_open_at_end,
//	              old_conns_opened_after_event, server_closed, replies_lost,
//	              old_served, new_served; load_end and during_end
//	  blocking    sent_at, pushed_at, done_at, value, error
//	maint_failed  commands maint failed over all runs
//	maint_runs    runs of the maint client
//
// # Exit status
//
// 0 on success; 1 when --check is given and maint failed at least one
// command; 2 for bad flags or when the emulator cannot start.
package main
