package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// BenchmarkClaimRelease measures the Redis side of one pop: a batch of keys claimed and,
// with the next claim, released (as a drainer does), per key.
func BenchmarkClaimRelease(b *testing.B) {
	for _, batch := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := newBenchScheduler(b)
			ctx := context.Background()
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = fmt.Sprintf("merchant-%06d", i)
			}
			now := time.Now()
			if _, err := s.MarkDueAt(ctx, "bench", now, keys...); err != nil {
				b.Fatal(err)
			}
			var rels []queue.Release
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				c, err := s.Claim(ctx, "bench", now, queue.ClaimRequest{Owner: "b", Max: batch, Lease: time.Minute, Releases: rels})
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
		if _, err := s.MarkDueAt(ctx, "bench", time.Now(), keys...); err != nil {
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
