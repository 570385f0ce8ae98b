package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// BenchmarkClaimRelease measures the Redis side of one pop: a batch of keys claimed and,
// with the next claim, released (as a drainer does), per key.
// With partitions=8 the rule is split in 8 (as on a cluster by default), on one server:
// what partitions cost where they spread nothing.
func BenchmarkClaimRelease(b *testing.B) {
	for _, tc := range []struct {
		batch, parts int
	}{{1, 1}, {8, 1}, {32, 1}, {1, 8}, {8, 8}, {32, 8}} {
		batch := tc.batch
		name := fmt.Sprintf("batch=%d", batch)
		if tc.parts > 1 {
			name += fmt.Sprintf(",partitions=%d", tc.parts)
		}
		b.Run(name, func(b *testing.B) {
			s, err := queue.NewScheduler(redistest.Shared(b).Client(b), queue.SchedulerConfig{Prefix: redistest.Prefix(b),
				Partitions: func(string) int { return tc.parts }})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = fmt.Sprintf("merchant-%06d", i)
			}
			now := time.Now()
			if _, err := s.Claims.MarkDueAt(ctx, "bench", now, keys...); err != nil {
				b.Fatal(err)
			}
			var rels []queue.Release
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				c, err := s.Claims.Claim(ctx, "bench", now, queue.ClaimRequest{Owner: "b", Max: batch, Lease: time.Minute, Releases: rels})
				if err != nil {
					b.Fatal(err)
				}
				rels = rels[:0]
				for _, cl := range c.Claims {
					rels = append(rels, queue.Release{Key: cl.Key, Mode: queue.Released})
				}
			}
		})
	}
}

func BenchmarkMarkDue(b *testing.B) {
	s := newBenchScheduler(b)
	ctx := context.Background()
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("merchant-%06d", i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += len(keys) {
		if _, err := s.Claims.MarkDueAt(ctx, "bench", time.Now(), keys...); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKeyToken(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = queue.KeyToken("merchant-0042")
	}
}
