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
// The load is open loop, as wrk2 and HdrHistogram measure: commands (SET and
// GET in turn on a key of their own) are scheduled at --rate from the start
// of the load, and each starts at its scheduled time on its own goroutine,
// whatever is still in flight. A client that stalls is therefore charged
// every command that came due during the stall, not just the one it stalled
// on (closed-loop load, where a stalled goroutine stops sending, hides
// them: coordinated omission), and latency runs from the scheduled start,
// including how late the generator itself started the command (reported as
// "started late by the generator"). A generator that fell behind starts
// what was due at once and nothing more. At most --goroutines commands are
// in flight: one due while that many are is not started, and is counted
// apart from the failed ones ("not started"). At the end of the load the
// commands in flight get 5s to finish; any still running then are cancelled
// and counted as unfinished (JSON only).
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
//	--rate N            commands per second, scheduled open loop (default 2000)
//	--goroutines N      most commands in flight at once, each on its own
//	                    goroutine; a command due when N are in flight is not
//	                    started (default 4096)
//	--pool N            PoolSize of every client (default 16)
//	--window D          MOVING window, or how long the migration is slow (default 2s)
//	--before D          steady load before the event (default 1s)
//	--duration D        load per run; 0: the scenario's span plus 0.5s (default 0)
//	--read-timeout D    ReadTimeout and WriteTimeout of every client (default 1s)
//	--redis ADDR        a Redis server to relay to instead of the embedded miniredis
//	--maint-route R     addhook (default) or configure
//	--json              print one JSON object instead of the tables
//	--check             exit with status 1 if maint failed a command or left
//	                    one unstarted
//	--verbose           log go-redis, maint and the emulator to stderr
//
// While it runs, a progress line on stderr shows the run and its counts (one
// line per run when stderr is not a terminal). Then, per scenario, a table
// with one column per client:
//
//   - failed commands with MaxRetries -1 and with the default, commands not
//     started (only when there were some), and the commands served;
//   - the timeline of the default-retries run, in seconds from the start of
//     the load: when the event was sent, when DNS moved, when the old node
//     last served a command, when the client closed its last connection to
//     the old node, when the old node closed what was left at the window's
//     end, how many connections it had to close and how many replies they
//     still owed, and how many connections the client opened to the old node
//     after the MOVING (connections that never carried a byte, such as
//     maint's DNS probes, are not counted) and how many dials failed;
//   - p50, p99 and max latency of successful commands, from their scheduled
//     start, before the event and during it (from the event to 0.5s after
//     the disturbance ends), with each client's ratio to maint's, and the
//     p99 of how late the generator started them.
//
// # JSON
//
// With --json the output is one object:
//
//	settings      goroutines (most in flight), rate, pool, window, before,
//	              read_timeout (seconds), maint_route, backend, go_redis
//	scenarios[]   name, summary, runs[]
//	  runs[]      client ("none", "builtin", "maint"), max_retries (-1 or 3),
//	              ok, failed, not_started, unfinished, errors[] {error, count},
//	              latency_before and latency_during {count, p50_ms, p99_ms,
//	              max_ms, start_lag_p99_ms},
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
//	maint_not_started  commands of maint's runs not started
//	maint_runs    runs of the maint client
//
// # Exit status
//
// 0 on success; 1 when --check is given and maint failed at least one
// command or left one unstarted; 2 for bad flags or when the emulator cannot
// start.
package main
