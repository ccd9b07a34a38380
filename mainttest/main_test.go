package mainttest

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("MAINTTEST_GOREDIS_LOG") == "" {
		redis.SetLogger(quietLogger{}) // go-redis logs every handoff
	}
	goleak.VerifyTestMain(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...interface{}) {}
