//go:build goredis_v9_24

package maint_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// v9.24's full-duplex options: several pipes (held connections) and a warm
// spare in the pipeline pool. Every pipe leaves the old node owing nothing
// after the drain cap, and the spare, dialled before the MOVING and idle
// since, is refused by the pool's health check, not used: nothing fails,
// nothing runs twice.
func TestFullDuplexPipesAndSpareThroughMoving(t *testing.T) {
	for _, tc := range []struct {
		name    string
		retries int
	}{{"NoRetries", -1}, {"DefaultRetries", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			fullDuplexThroughMoving(t, tc.retries,
				&redis.AutoPipelineOptions{FullDuplex: true, FullDuplexPipes: 4},
				func(opt *redis.Options) { opt.PipelineMinIdleConns = 1 })
		})
	}
}
