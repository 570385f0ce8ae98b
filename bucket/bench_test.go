package bucket_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-io/sluice/bucket"
)

// The memory store against golang.org/x/time/rate: one key, the time passed in
// (AllowN) as ours does, and Allow (which reads the clock itself) for reference.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	for _, alg := range []bucket.Algorithm{bucket.TokenBucket, bucket.LeakyBucket, bucket.FixedWindow, bucket.SlidingWindowLog, bucket.SlidingWindowCounter} {
		b.Run(string(alg), func(b *testing.B) {
			m := bucket.NewMemory(bucket.MemoryConfig{})
			limits := []bucket.Limit{{Algorithm: alg, Rate: 1000, Interval: time.Millisecond}}
			now := t0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now = now.Add(time.Microsecond)
				if _, err := m.Allow(ctx, "merchant-42", limits, 1, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("token_bucket+fixed_window", func(b *testing.B) {
		m := bucket.NewMemory(bucket.MemoryConfig{})
		limits := []bucket.Limit{{Algorithm: bucket.TokenBucket, Rate: 1000, Interval: time.Millisecond}, {Rate: 1 << 30, Interval: time.Hour}}
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			m.Allow(ctx, "merchant-42", limits, 1, now)
		}
	})
	// A fixed window in a time zone: the caller's window (zone.go) costs a zone lookup
	// or three per decision.
	b.Run("fixed_window/time_zone", func(b *testing.B) {
		loc, err := time.LoadLocation("America/New_York")
		if err != nil {
			b.Fatal(err)
		}
		m := bucket.NewMemory(bucket.MemoryConfig{})
		limits := []bucket.Limit{{Rate: 1 << 20, Interval: 24 * time.Hour, Location: loc}}
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			if _, err := m.Allow(ctx, "merchant-42", limits, 1, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("token_bucket/parallel", func(b *testing.B) {
		m := bucket.NewMemory(bucket.MemoryConfig{})
		limits := []bucket.Limit{{Algorithm: bucket.TokenBucket, Rate: 1000, Interval: time.Millisecond}}
		keys := benchKeys(1024)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			now, i := t0, 0
			for pb.Next() {
				now = now.Add(time.Microsecond)
				i++
				m.Allow(ctx, keys[i&1023], limits, 1, now)
			}
		})
	})
}

func BenchmarkXTimeRate(b *testing.B) {
	b.Run("AllowN", func(b *testing.B) {
		l := rate.NewLimiter(1e6, 1000)
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			l.AllowN(now, 1)
		}
	})
	b.Run("Allow", func(b *testing.B) {
		l := rate.NewLimiter(1e6, 1000)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
	// What a keyed limiter built on x/time/rate costs: a map of limiters under a lock.
	b.Run("keyed-AllowN", func(b *testing.B) {
		var mu sync.Mutex
		limiters := map[string]*rate.Limiter{}
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			mu.Lock()
			l := limiters["merchant-42"]
			if l == nil {
				l = rate.NewLimiter(1e6, 1000)
				limiters["merchant-42"] = l
			}
			mu.Unlock()
			l.AllowN(now, 1)
		}
	})
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "merchant-" + itoa(i)
	}
	return keys
}

func itoa(i int) string {
	var b [20]byte
	p := len(b)
	for {
		p--
		b[p] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[p:])
		}
	}
}
