// Package mainttest is an in-process Redis Enterprise maintenance emulator for
// tests, in the spirit of net/http/httptest. It lets any Redis client (maint,
// go-redis's built-in handler, a client with no handler at all) live through
// the maintenance push notifications MOVING, MIGRATING, MIGRATED,
// FAILING_OVER, FAILED_OVER, SMIGRATING and SMIGRATED with the timings real
// servers show (docs/protocol.md, section 3).
//
// # Model
//
// An Emulator owns one backend, an embedded miniredis by default
// (Config.Backend names any Redis server instead), and any number of
// endpoints. An Endpoint is a RESP proxy listening on a loopback address
// and relaying to the backend; it stands for the proxy of one Redis
// Enterprise node. Several endpoints front the same data, so an endpoint
// move can change the IP, the port or both: on Linux all of 127.0.0.0/8 is
// loopback, and an old node on 127.0.0.2:P with a new one on 127.0.0.3:P is
// a realistic rebind.
//
// Each client connection gets its own backend connection (so MULTI, WATCH,
// SELECT and SUBSCRIBE state is per connection, as on a real server) and four
// goroutines: one reads the client's commands, one relays them to the
// backend, one frames the backend's replies and one, the only writer to the
// client, puts replies and injected pushes on the wire. Pushes therefore land
// only between whole frames, never inside a reply; one may land between the
// replies of a pipeline. An ordered queue of owed replies keeps intercepted
// replies in their place among relayed ones. Backend pushes (RESP3 pub/sub,
// invalidations) are relayed as they come; RESP2 pub/sub messages are
// relayed as unsolicited frames. A reply is relayed whole whatever its size
// (an LRANGE of millions of elements, a value of hundreds of megabytes): the
// relay frames replies without a server's limits, while commands keep them
// (arguments up to 512 MB, at most 1<<20 of them, inline commands up to
// 64 KB; a command over them is answered "-ERR Protocol error" and its
// connection closed, as Redis does).
//
// # Handshake
//
// CLIENT MAINT_NOTIFICATIONS ON [moving-endpoint-type T] and OFF, in any
// case, are answered by the endpoint itself (+OK, in order with the other
// replies) and never forwarded. T is one of internal-ip, internal-fqdn,
// external-ip, external-fqdn or none; a bare ON is treated as an IP type.
// Anything else gets -ERR. With Config.Unsupported the endpoint answers
// like a server without support:
//
//	-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.
//
// with the subcommand echoed as sent, and records nothing (per endpoint:
// Endpoint.SetUnsupported). Endpoint.SetHandshake (and Config.Handshake)
// choose any answer, per endpoint and over time: an arbitrary error line
// ("-LOADING Redis is loading the dataset in memory"), no answer at all
// (the connection hangs until closed), or a close of the connection; a
// temporary answer covers the next N handshakes only:
//
//	ep.SetHandshake(mainttest.Handshake{Answer: mainttest.AnswerError,
//		Error: "LOADING Redis is loading the dataset in memory", Times: 3})
//
// Stats.Handshakes counts the handshakes read, Stats.OptedIn the
// connections they opted in. The handshake is answered at once even inside
// MULTI, where a real server would queue it. HELLO is
// forwarded and tracked: only connections that are both opted in and on
// RESP3 receive pushes. A RESP2 connection may opt in (it is answered +OK
// and counted in Stats.OptedIn) but never receives a push. HELLO without a
// version leaves the protocol unchanged, as on Redis; a failed HELLO 3 too.
//
// # Events
//
// Endpoint methods inject events into that endpoint's opted-in RESP3
// connections, each connection getting its own copy with the same seq. Seq
// ids come from one counter per Emulator, shared by all types and
// endpoints; a completion gets its own id. Every method returns at once;
// whatever follows runs on timers the Emulator owns.
//
//   - Moving: MOVING with a grace window and a named successor or a null
//     endpoint. The endpoint string follows each connection's requested
//     type (To's IP:port, or To's FQDN:port, see SetFQDN; null for none).
//     Connections opting in during the window get MOVING with the whole
//     seconds left. At Window+CloseJitter every connection still on the old
//     endpoint is closed; with StopAccepting the old endpoint's listener is
//     closed at that moment, just before the connections, so clients
//     reconnecting on the close get "connection refused". Moving.DNSHost schedules the DNS change that real
//     deployments show trailing the MOVING by seconds, before or after the
//     window's end.
//   - Migrating/Migrated and FailingOver/FailedOver, in their full wire form
//     (seq, starts-in seconds, shards). From the "starts in" until the
//     completion, SetMaintLatency's latency applies to every command. The
//     latest completion is replayed to each newly opted-in connection right
//     after its +OK, as real servers do for hours.
//   - SMigrating/SMigrated inject those pushes as they are (a whole slot
//     migration is Cluster.MigrateSlots, see Cluster); SendRaw sends
//     malformed input.
//
// Durations are sent as whole seconds rounded up (a positive MOVING window
// is at least 1 s); the emulator itself acts at the exact durations, so
// sub-second windows work in tests.
//
// # DNS
//
// DNS is a resolver the Emulator controls. Emulator.Dialer returns a dial
// function for redis.Options.Dialer that resolves host names through it
// (and dials anything else as given), so every client using it sees the
// same answers, including a change scheduled with DNS.SetAfter. A host may
// have several addresses, dialled in order (the first that accepts wins),
// or, with DNS.SetRoundRobin, starting one address further at each dial:
// two nodes behind one name, as a round-robin DNS answer gives.
//
// # Cluster
//
// Emulator.NewCluster starts an emulated Redis Enterprise OSS Cluster API:
// N endpoints (3 by default, on 127.0.0.2, 127.0.0.3, ... sharing one port)
// that split the 16384 hash slots as redis-cli does (0-5460, 5461-10922,
// 10923-16383) or as ClusterConfig.Slots says. They still front the one
// backend, so moving a slot copies no data: only its owner changes. Each
// node answers CLUSTER SLOTS, SHARDS, NODES, INFO, MYID, MYSHARDID and
// KEYSLOT from the emulated topology (RESP3 maps and verbatim strings on
// RESP3 connections, as Redis 7 does), and ASKING, READONLY and READWRITE.
// A key command is routed as a cluster node routes it: keys in several slots
// get -CROSSSLOT, a slot owned elsewhere -MOVED <slot> <ip:port>, an
// unassigned one -CLUSTERDOWN. Key positions come from a table of the common
// commands (EVAL and the others with numkeys, XREAD's STREAMS included);
// commands without keys, or not in the table, are served by any node.
// Slots are computed with KeySlot (CRC16 and hash tags); ParseSlots and
// FormatSlots read and write slot lists such as "0-100,200".
//
// MULTI/EXEC behaves as on a cluster: a queued command for a slot not owned
// here gets -MOVED (or -ASK) at queue time and EXEC then answers -EXECABORT;
// at EXEC the queued keys are checked together (-CROSSSLOT when they span
// slots, -MOVED when their slot moved meanwhile), and the backend's
// transaction is discarded.
//
// Cluster.MigrateSlots is a slot migration as maintenance announces it: at
// once SMIGRATING [seq, "0-1000,2000"] to the source's opted-in RESP3
// connections and the destinations' (and, on an endpoint with
// SetReplayActive, to each connection opting in until the SMIGRATED, right
// after its +OK), and SlotMigration.Latency on the source; after Duration
// the ownership change, then SMIGRATED
// [seq, [[src, dst, slots], ...]] (addresses as CLUSTER SLOTS gives them;
// several destinations, or TripletPerRange, give several triplets) and,
// with RemoveSource, the emptied source's removal: it leaves the topology,
// stops accepting and closes its connections CloseAfter later. During the
// migration SlotMigration.KeyMoved says which keys already left: the source
// answers -ASK for them (-TRYAGAIN for a multi-key command whose keys are
// split) and the destination serves them after ASKING. SetOwner moves slots
// with no notification (clients learn it from -MOVED); AddNode, RemoveNode
// and ReplaceNode change the nodes. A MOVING of a node is the Endpoint's
// Moving, as for a standalone endpoint; ReplaceNode hands its slots to the
// successor. Stats.Cluster counts, per node, the redirects served (MOVED,
// ASK, TRYAGAIN, CROSSSLOT), the ASKINGs and the slot-map requests
// (CLUSTER SLOTS, SHARDS, NODES), each also logged as a KindSlotMap event,
// so a client's slot-map reload can be waited for; with
// ClusterConfig.LogRedirects every redirect is logged too (KindRedirect,
// with its connection), to tell which came after a notification.
// CLUSTER, ASKING, READONLY and READWRITE are answered at once even inside
// MULTI, where a real node would queue them:
//
//	cl, _ := emu.NewCluster(mainttest.ClusterConfig{})
//	client := redis.NewClusterClient(&redis.ClusterOptions{
//		Addrs: cl.Addrs(), Dialer: emu.Dialer(), Protocol: 3})
//	nodes := cl.Nodes()
//	cl.MigrateSlots(mainttest.SlotMigration{From: nodes[0], To: nodes[1],
//		Slots: "0-1000", Duration: time.Second, Latency: 20 * time.Millisecond})
//
// # Faults and timing knobs
//
// Endpoint.SetLatency (every command), SetCommandLatency (one command name)
// and SetMaintLatency (during maintenance) add up and delay each command
// before it is relayed, so a client sees slow replies and a pipeline sees
// the delay per command. With SetLatencyAfterExecution(true) the command is
// relayed at once and its reply is delayed instead: a command the client
// gives up on has run, so a client that retries it runs a write twice, which
// a verified INCR shows. RefuseNew closes and reopens the listener on the
// same address; CloseAll closes every connection now. Moving.Window,
// CloseJitter and DNSLag and the starts-in of MIGRATING and FAILING_OVER set
// the rest of the timeline.
//
// For example, the Redis Enterprise run in protocol.md (a MOVING declaring
// 15 s, DNS following 4.4 to 18.7 s later, sockets closed 15.7 to 19.1 s
// later), scaled down 10 times:
//
//	old.Moving(mainttest.Moving{
//		Window: 1500 * time.Millisecond, CloseJitter: 120 * time.Millisecond,
//		To: successor, Null: true,
//		DNSHost: "redis-12000.example", DNSLag: 1800 * time.Millisecond, // after the close
//	})
//
// # Evidence
//
// Endpoint.Stats counts connections (open, opened, opted in, closed at a
// window's end), requests served, replies pending now and replies still
// owed when the Emulator closed a connection: the commands a client lost.
// Emulator.Events is a timestamped log of everything above, with stable
// Kind names; WaitEvent lets a test block until an event happened instead
// of sleeping. A Recorder, set as the client's Dialer over Emulator.Dialer,
// gives the client's side: where each connection landed, whether it ever
// carried a byte, and when the client closed it. It hands the socket on
// (SyscallConn), so the client's health checks and socket reads behave as
// they do without it.
//
// Emulator.Close closes every endpoint and connection and stops every
// goroutine and timer the Emulator started; it is safe to call twice.
//
// # Discovery Service
//
// Emulator.AddSentinel starts an emulated Redis Enterprise Discovery Service
// for one database: a loopback server speaking the Redis Sentinel API, so
// that go-redis's FailoverClient (redis.NewFailoverClient, or
// redis.NewUniversalClient with MasterName) finds its master through it:
//
//	ds, _ := emu.AddSentinel("127.0.0.1:0", "db1", primary)
//	ds.SetReplicas(replica)
//	client := redis.NewFailoverClient(&redis.FailoverOptions{
//		MasterName: "db1", SentinelAddrs: []string{ds.Addr()}, Dialer: emu.Dialer(),
//	})
//
// It answers from the emulated topology and never relays to the backend:
// SENTINEL get-master-addr-by-name, master, masters, replicas (slaves),
// sentinels, myid, ckquorum and failover; PING, ECHO, HELLO (AUTH,
// SETNAME), AUTH, CLIENT SETNAME/GETNAME/ID/SETINFO, ROLE, INFO, QUIT and
// RESET; SUBSCRIBE, PSUBSCRIBE and their UNSUBSCRIBEs, with Redis's RESP2
// subscribed-context rules. Replies have the shapes and error texts of
// redis-sentinel 7 (checked against redis-server --sentinel) in RESP2 and
// RESP3: maps as flat arrays in RESP2, a null for an unknown master name,
// the fields go-redis reads in SENTINEL master, replicas and sentinels. Any other command gets Redis's unknown command error. It
// sends no maintenance push, and refuses CLIENT MAINT_NOTIFICATIONS as
// redis-sentinel does: `-ERR unknown subcommand 'maint_notifications'. Try
// CLIENT HELP.` (SentinelStats.Handshakes counts them, KindUnsupported logs
// them). Sentinel.AddPeer starts more nodes of the same service: they share
// the topology, list each other in SENTINEL sentinels and all publish.
//
// The named master moves with the emulated maintenance, each move logged
// as KindSentinelSwitch with its own seq and published on the
// +switch-master channel ("name old-ip old-port new-ip new-port"), which
// go-redis acts on by dropping its pooled connections to the old master
// (SetSwitchMessages(false) models a service without pub/sub):
//
//   - Sentinel.SetMaster switches now.
//   - Sentinel.Moving sends a MOVING on the master (Endpoint.Moving) and
//     names its successor NameAfter later, as DNS follows a MOVING with
//     Moving.DNSLag: 0 before the MOVING is sent, Window as the window
//     ends, or any delay; Never keeps the old master named.
//   - Sentinel.Failover sends FAILING_OVER on the old master, and
//     SwitchAfter later names the new one, optionally makes the old one
//     refuse connections (RefuseOld), sends FAILED_OVER, and closes the old
//     master's connections (CloseOld, CloseOldAfter).
//   - Sentinel.SetMasterAfter switches later; SENTINEL FAILOVER from a
//     client promotes the first replica.
//
// For example, a MOVING with a null endpoint whose successor the service
// names one second later, while the window lasts two:
//
//	ds.Moving(mainttest.SentinelMoving{
//		Moving:    mainttest.Moving{Window: 2 * time.Second, CloseJitter: 100 * time.Millisecond, To: successor, Null: true},
//		NameAfter: time.Second,
//	})
//
// A FailoverClient asks get-master-addr-by-name before every dial, so each
// answer is where a new connection lands: every answer is logged as
// KindSentinelQuery with the address named, which counts the dials sent to
// a retiring master. Sentinel.SetLatency slows the answers (and so every
// dial), Sentinel.RefuseNew takes a node down (go-redis then asks a peer).
// Sentinel.Stats counts connections, commands served, master addresses
// given, refused handshakes, errors, unknown commands, subscribers, switches
// and +switch-master messages written. Emulator.Close closes every Sentinel
// with the endpoints.
//
// # Fault injector
//
// Emulator.NewFaultInjector serves, on a loopback HTTP port, the API of
// Redis's fault injector as the client libraries' scenario suites use it
// (POST /action {type, parameters}, GET /action/{id} until success or
// failed, the slot_migrate and standalone effects), driving the databases
// registered with FaultInjector.AddDatabase: a standalone one whose DNS
// name a bind moves between its nodes, or a Cluster. Its actions keep the
// real service's order (notification, LeadTime, action, completion) and
// EndpointsConfig writes the endpoints file those suites read
// (REDIS_ENDPOINTS_CONFIG_PATH). The conformance package runs on it.
//
// go-redis v9.23.0's FailoverClusterClient (a UniversalClient with
// MasterName and RouteByLatency, RouteRandomly or IsClusterMode) rewrites
// loopback node addresses to ":port", so it reaches only nodes on
// 127.0.0.1, and its Close leaves its sentinel goroutines running.
package mainttest
