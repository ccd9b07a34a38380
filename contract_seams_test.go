package maint_test

// Contract tests of the seams go-redis v9.23 does not open to a hook added
// to a client already built: why maint frames every reply and counts every
// command it writes (docs/design.md, "Never a command twice";
// docs/performance.md, "Never a command twice, and what it costs"). If one of these fails after an upgrade of
// go-redis, a cheaper design may have become possible: revisit issue 19.
//
// The third seam missing, per-connection pool events, cannot be pinned by a
// test: go-redis's pool hooks take its internal *pool.Conn, which no package
// outside go-redis can name, so no such hook compiles here.

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
	"github.com/stretchr/testify/assert"
)

// nopPushHandler is a push handler that does nothing.
type nopPushHandler struct{}

func (nopPushHandler) HandlePushNotification(context.Context, push.NotificationHandlerContext, []any) error {
	return nil
}

// maintenanceNames are the seven maintenance notifications' names.
var maintenanceNames = []string{"MOVING", "MIGRATING", "MIGRATED", "FAILING_OVER", "FAILED_OVER", "SMIGRATING", "SMIGRATED"}

// TestGoRedisBuiltClientKeepsTheMaintenanceNames: on a client built with
// go-redis's defaults (RESP3, maintenance notifications in auto mode),
// none of the seven names can be given a push handler of another's: the
// built-in handler holds them. So a hook added to such a client learns of
// a notification only from the bytes (maint's Stripper frames every reply
// to find them). Only a client built with the built-in disabled lets them
// be registered, which only the options route can arrange.
func TestGoRedisBuiltClientKeepsTheMaintenanceNames(t *testing.T) {
	for _, mode := range []maintnotifications.Mode{"", maintnotifications.ModeAuto, maintnotifications.ModeEnabled} {
		opt := &redis.Options{Addr: "127.0.0.9:1", Protocol: 3}
		if mode != "" {
			opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: mode}
		}
		rdb := redis.NewClient(opt)
		for _, name := range maintenanceNames {
			assert.Error(t, rdb.RegisterPushNotificationHandler(name, nopPushHandler{}, false),
				"go-redis lets a handler of another's take %s on a client built in mode %q: maint could learn of it without framing replies", name, mode)
		}
		_ = rdb.Close()
	}
	opt := &redis.Options{Addr: "127.0.0.9:1", Protocol: 3,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}
	rdb := redis.NewClient(opt)
	defer func() { _ = rdb.Close() }()
	for _, name := range maintenanceNames {
		assert.NoError(t, rdb.RegisterPushNotificationHandler(name, nopPushHandler{}, false),
			"with the built-in disabled, %s can be registered", name)
	}
}
