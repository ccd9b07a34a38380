// Package maint keeps go-redis v9 applications serving through Redis
// Enterprise and Redis Cloud maintenance (endpoint moves, shard migrations,
// failovers) without failing a command.
//
// The servers announce maintenance with RESP3 push notifications: MOVING,
// MIGRATING, MIGRATED, FAILING_OVER and FAILED_OVER. A Maint reads them on
// every connection of a client and acts for the whole node:
//
//   - hold: every connection to a retiring node leaves circulation as soon as
//     a replacement can be had (a named successor, or DNS naming another node);
//     the pool never hands one out again;
//   - drain: commands already written finish, within a bounded drain cap;
//   - retire: the old connections close before the server closes them;
//   - reclassify: each new connection is judged before go-redis gets it, and
//     one that landed back on the retiring node never carries a command.
//
// During MIGRATING and FAILING_OVER the read and write deadlines of that
// node's connections are relaxed to at least the relaxed timeout; relaxation
// is a floor and never shortens a longer or infinite timeout.
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
// One Maint serves one client. Close it after the client.
//
// Whichever way it is installed, go-redis's built-in maintnotifications
// handler never sees a maintenance notification: Maint removes them from the
// byte stream before go-redis reads it.
//
// The guarantees, the design and how to operate it are in the docs/ folder of
// the repository. Package mainttest is an in-process emulator of a Redis
// Enterprise endpoint under maintenance, for tests.
package maint
