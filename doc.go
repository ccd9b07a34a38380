// Package maint keeps go-redis v9 applications serving through Redis
// Enterprise and Redis Cloud maintenance (endpoint moves, shard migrations,
// failovers) without failing a command.
//
// The servers announce maintenance with RESP3 push notifications: MOVING,
// MIGRATING, MIGRATED, FAILING_OVER and FAILED_OVER (SMIGRATING and SMIGRATED
// on the cluster API). A Maint reads them on every connection of the clients
// it is installed on, and acts for the whole node that sent them. At a MOVING:
//
//   - retire: every connection to the retiring node leaves circulation as soon
//     as a replacement can be had (a named successor, or DNS naming another
//     node); the pool never hands one out again;
//   - hold: while none can be had and the node's last call has come, new
//     commands wait in the process hook, bounded by their context and the hold
//     budget, and the old connections serve only the commands already past it;
//   - drain: commands already written finish; at the drain cap the idle old
//     connections close, before the server closes them, and one that owes a
//     reply is never closed by maint (no command is cut or run twice);
//   - reclassify: each new connection is judged before go-redis gets it, and
//     one that landed back on the retiring node never carries a command.
//
// During MIGRATING, FAILING_OVER and SMIGRATING the read and write deadlines of
// that node's connections are relaxed to at least the relaxed timeout, and
// during a MOVING those of every connection of the address the client dials;
// relaxation is a floor and never shortens a longer or infinite timeout.
//
// # Installing
//
// On an existing client, one line:
//
//	rdb.AddHook(maint.New())
//
// For a new client, Configure its options first, so that Maint sends the
// opt-in handshake itself (once per endpoint that lacks support, not once per
// connection) and go-redis's built-in handler stays off:
//
//	m := maint.New()
//	opt := &redis.Options{Addr: "redis.example:12000"}
//	m.Configure(opt)
//	rdb := redis.NewClient(opt)
//	rdb.AddHook(m)
//
// One Maint may serve several clients: its state is keyed by the address each
// client dials and the node each connection reached, so a MOVING of one
// node retires that node's connections only. A hold, though, delays every
// client of the Maint: give clients that must not wait for each other a Maint
// each. Cluster, Ring and failover clients take a Group (NewGroup), which
// installs Maints where each kind needs them (one per node client of a
// ClusterClient or a Ring). Close a Maint after its clients.
//
// Whichever way it is installed, go-redis's built-in maintnotifications
// handler never sees a maintenance notification: Maint removes them from the
// byte stream before go-redis reads it.
//
// The guarantees, the design and how to operate it are in the docs/ folder of
// the repository. Package mainttest is an in-process emulator of a Redis
// Enterprise endpoint under maintenance, for tests.
package maint
