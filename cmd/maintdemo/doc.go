// Maintdemo shows what a Redis Enterprise maintenance event does to a go-redis
// application, with and without maint, on one machine and with no server
// installed.
//
// What it measured (each scenario's output, the guarantees side by side,
// the chaos soak's table), with the date and go-redis release of each run,
// is in README.md in this directory.
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
//	reshard         a ClusterClient on a 3-endpoint emulated cluster
//	                (127.0.0.2 to 127.0.0.4): node 0's slots, a third, migrate
//	                to the two others over one window (SMIGRATING, its replies
//	                2ms slower, SMIGRATED), then node 0 is removed (it leaves
//	                the slot map, refuses new connections and closes the rest
//	                a window later, at least 2s). From 0.2s after the
//	                SMIGRATING to the SMIGRATED, node 0 answers one kind of
//	                write, a verified INCRBY on a key it owns, ReadTimeout +
//	                0.5s late, after running it; these are few (a quarter of
//	                the pool busy with them), the rest of the load is not
//	                slowed. The load mixes verified INCRs, SET/GET, pipelines
//	                of INCRs over three slots and MULTI/EXEC of two INCRs on a
//	                hash tag (one scheduled command each). Four clients: no
//	                handler, go-redis's built-in with default options, with
//	                MaintNotificationsConfig set (the only one that reloads on
//	                SMIGRATED), and maint (maint.Instrument). A client that
//	                times a slow write out retries it (a ClusterClient does up
//	                to MaxRedirects times, whatever MaxRetries says): the write
//	                runs twice; with a longer window (--window 6s) the
//	                slowness outlasts its attempts and it fails commands too.
//	                Its table: failed commands, INCRs applied
//	                twice or lost, MOVED/ASK the nodes served (total, and
//	                after the SMIGRATED was sent), slot maps served from the
//	                SMIGRATING on, connections the removed node had to close,
//	                p99 before and during, slow writes sent, and the command
//	                deadlines met on the wire, on nodes maint had relaxed and
//	                on others (a reply later than ReadTimeout where nothing
//	                was relaxed: on a busy machine, before the SMIGRATING is
//	                read, go-redis's own retry then runs a write twice); JSON
//	                under "reshard". --check also fails on a write maint ran
//	                twice or lost there, on a run whose SMIGRATED handoff was
//	                not in force (an SMIGRATED acted on and no reload
//	                answered from maint's map: maint_handoff_off), and on a
//	                connection of maint's the removed node had to close
//	                (maint_removed_node_closed).
//	failover        go-redis's FailoverClient through an emulated Discovery
//	                Service (three nodes): a null MOVING of the master named
//	                0.5s after the window, then a failover (FAILING_OVER,
//	                replies 200ms slow, switch 1s later, the old master
//	                refusing and closing 0.5s after); SET, GET and INCR
//	                verified against the backend (failover.go). go-redis
//	                forces its built-in handler off for failover clients, so
//	                "builtin" is "none" with the mode shown; maint goes
//	                through a Group (Instrument, or NewFailoverClient with
//	                --maint-route configure)
//
// The default is null-dns-late, which takes about 25 seconds; all takes about
// two minutes. --scenario soak runs the soak instead (see below).
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
//	--duration D        load per run; 0: the scenario's span plus 0.5s, in the
//	                    soak 20s (default 0)
//	--read-timeout D    ReadTimeout and WriteTimeout of every client (default 1s)
//	--pool-timeout D    PoolTimeout of every client; 0: go-redis's default
//	                    (ReadTimeout + 1s), in the soak 10s (default 0)
//	--seed N            soak: the seed of its sequence of events (default 1)
//	--max-retries N     soak: MaxRetries of every client; 0 or -1: none (default 3)
//	--redis ADDR        a Redis server to relay to instead of the embedded miniredis
//	--maint-route R     addhook (default) or configure
//	--json              print one JSON object instead of the tables
//	--check             exit with status 1 if maint failed a command or left
//	                    one unstarted (except in migrating, whose slow
//	                    replies fill --goroutines by design: there the
//	                    commands not started are the generator's limit);
//	                    soak: or lost, duplicated or mixed up a write
//	--verbose           log go-redis, maint and the emulator to stderr
//	--metrics           print what each maint client recorded, under
//	                    maintotel's metric names, and each handoff's report
//	--metrics-addr ADDR serve the maint clients' metrics at http://ADDR/metrics
//	                    in the Prometheus text format while the demo runs,
//	                    under the names the OpenTelemetry Prometheus exporter
//	                    gives maintotel's, job="maintdemo" on every series
//	--metrics-linger D  with --metrics-addr: how long /metrics stays up after
//	                    the runs; an interrupt ends it (default 30s)
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
// # Soak
//
// go run ./cmd/maintdemo --scenario soak --seed N --duration D plays, for
// each client in turn and against a fresh emulator each time, the same
// seeded random sequence of maintenance events under open-loop load, and
// verifies the data. Four nodes, 127.0.0.2 to 127.0.0.5 on one port, front
// the same miniredis; "redis.test" names the serving node in the emulator's
// DNS, and the serving node moves as the events proceed. The episodes
// (math/rand/v2 with the seed; windows of 1 to 3s, so that 20s hold
// several):
//
//	named               MOVING naming the successor; DNS follows before or
//	                    after the window's end
//	null-dns-early      MOVING with a null endpoint, DNS within the window
//	null-dns-late       the same, DNS 0.2 to 0.8s after the window's end
//	zero-window         MOVING announcing 0 seconds (named or null); the node
//	                    closes 0.3 to 0.6s later, DNS moves within 0.8s
//	chained             a MOVING, then a MOVING on its successor while the
//	                    first window runs or right after it (DNS may go from
//	                    the first node straight to the last)
//	superseded          a MOVING naming one successor, a newer MOVING of the
//	                    same node naming another, a late copy of the first
//	                    (its older seq), and a MOVING of the first successor
//	                    to the second (so clients that went there follow)
//	migrating           MIGRATING (starts in 0 or 1s), every reply
//	                    ReadTimeout + 0.5s late for 1 to 2s, MIGRATED
//	migrating+moving    the same, with a MOVING of the node (2 or 3s window)
//	                    while its replies are slow
//	failing-over        FAILING_OVER, slow replies, FAILED_OVER
//	failing-over+moving the same, with a MOVING while slow
//
// Every node stops accepting at its window's end and accepts again just
// before a MOVING names it; a MOVING sometimes gets another copy (same seq)
// during its window, and a completion or the start it ends sometimes gets a
// late copy (Endpoint.SendRaw) after the completion; new connections get
// the latest completion replayed by the emulator itself. The plan is
// printed with the results, one line per step.
//
// The load (--rate, default 1000 in the soak) is open loop as in the
// scenarios. Each command in flight holds one of --goroutines slots, and
// works on that slot's own keys, so that every reply can be checked: INCR
// of a counter (half of the commands), SET of a unique value, GET, and a
// pipeline or a MULTI/EXEC of three INCRs (one command in ten). A slot runs
// one command at a time, so its commands are in order. An INCR reply must be above the previous
// acknowledged one and at most acked + failed + 1 (a failed INCR may have
// executed, even late); more means an increment was applied twice. A GET
// must read the last acknowledged SET's value or a failed SET's; an older
// acknowledged value, or nothing, is a lost write. A reply the command's
// key could not hold (another slot's counter range or value, a value never
// written, a reply of another type) is mixed up. At the end every key is
// read from the backend directly, bypassing the emulator: a counter below
// its acknowledged INCRs lost writes, one above acknowledged + failed
// duplicated them.
//
// The soak's clients wait up to 10s for a pool connection (--pool-timeout):
// while every reply takes ReadTimeout + 0.5s, a pool of 16 serves about ten
// commands a second and the rest wait; with go-redis's default of
// ReadTimeout + 1s they would fail for want of a connection whatever the
// maintenance handling. The commands in flight at the end get 15s to finish
// (more than maint's 10s hold budget).
//
// The report has one column per client: commands scheduled, failed, not
// started, lost writes, duplicated writes, mixed-up replies, INCRs
// acknowledged and failed, connections the server closed at windows' ends
// and the replies they owed, failed dials, events played (notifications
// and DNS changes) and latency; then the errors and the first few writes
// and replies that did not add up, with the slot, the key and the time.
// With --json: settings, seed, duration, max_retries, nodes, plan[] (one
// line per step), episodes[] {kind, at, end, first_step}, runs[] {client,
// max_retries, commands, ok, failed, not_started, unfinished, lost,
// duplicated, mixed_up, incr_acked, incr_unknown, keys, server_closed,
// replies_lost, failed_dials, events, latency, per_second[] (latency of
// the commands scheduled in each second), errors[], anomalies[],
// anomaly_count, maint}, and maint_bad (what --check counts).
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
//	  failover    (failover scenario) builtin_mode, duplicated_writes,
//	              lost_writes, mixed_up_replies, sentinel_handshakes,
//	              data_conns_opted_in, events[] {name, queries_naming_
//	              retiring_master, conns_accepted_by_retiring_master,
//	              retiring_last_served_after_switch_ms, server_closed,
//	              replies_lost}
//	maint_failed  commands maint failed over all runs
//	maint_not_started  commands of maint's runs not started
//	maint_runs    runs of the maint client
//
// # Exit status
//
// 0 on success; 1 when --check is given and maint failed at least one
// command or left one unstarted outside migrating (in the soak: or lost, duplicated or mixed
// up a write; in the reshard: or ran a write twice, lost one, had its
// SMIGRATED handoff not in force, or left the removed node a connection
// to close); 2 for bad flags or when the emulator cannot start.
package main
