package decide

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/rules"
)

// The over-limit cache never holds more bytes than it is given: the oldest entries go
// first, an entry larger than the cache is not kept, and entries end with their window.
func TestOverLimitCacheBounded(t *testing.T) {
	t.Parallel()
	const max = 10 * (overLimitEntryBytes + 8) // room for ten 8-byte keys
	c := newOverLimitCache(max)
	now := time.Unix(1_700_000_000, 0)
	for i := 0; i < 5000; i++ {
		c.put(fmt.Sprintf("key%05d", i), overLimitEntry{until: now.Add(time.Minute), ivl: time.Minute})
		if c.size > max {
			t.Fatalf("after %d puts: %d bytes, more than %d", i+1, c.size, max)
		}
	}
	if c.len() != 10 {
		t.Fatalf("%d entries, want the 10 newest", c.len())
	}
	if _, ok := c.get("key04999", now); !ok {
		t.Fatal("the newest entry was dropped")
	}
	if _, ok := c.get("key00000", now); ok {
		t.Fatal("the oldest entry was kept")
	}
	if _, ok := c.get("key04999", now.Add(time.Minute)); ok {
		t.Fatal("an entry outlived its window")
	}
	if c.len() != 9 || c.size != 9*(overLimitEntryBytes+8) {
		t.Fatalf("after expiry: %d entries, %d bytes", c.len(), c.size)
	}
	big := make([]byte, max)
	c.put(string(big), overLimitEntry{until: now.Add(time.Minute)})
	if c.len() != 9 {
		t.Fatal("an entry larger than the cache was kept (or evicted the others)")
	}
	// The same keys over again window after window (each expiring in between): the
	// bookkeeping stays proportional to the live entries.
	c = newOverLimitCache(1 << 20)
	for w := 0; w < 200; w++ {
		at := now.Add(time.Duration(w) * time.Minute)
		for k := 0; k < 50; k++ {
			key := fmt.Sprintf("k%d", k)
			if _, over := c.get(key, at); over {
				t.Fatalf("window %d: %s still over from the last window", w, key)
			}
			c.put(key, overLimitEntry{until: at.Add(time.Minute), ivl: time.Minute})
		}
	}
	if c.len() != 50 || len(c.order)-c.head > 2*50+64 {
		t.Fatalf("%d entries, %d order slots: the bookkeeping grows without bound", c.len(), len(c.order)-c.head)
	}
}

func TestWholeSeconds(t *testing.T) {
	t.Parallel()
	for in, want := range map[time.Duration]time.Duration{
		0: 0, time.Millisecond: time.Second, time.Second: time.Second, 39600 * time.Millisecond: 40 * time.Second,
		time.Minute: time.Minute, time.Minute + 1: time.Minute + time.Second,
	} {
		if got := wholeSeconds(in); got != want {
			t.Errorf("wholeSeconds(%v) = %v, want %v", in, got, want)
		}
	}
}

// A long descriptor value makes a short label, cut on a rune boundary.
func TestDetailedValueCut(t *testing.T) {
	t.Parallel()
	e := newEnvoyState(EnvoyConfig{DetailedMetricValues: 10}, nil)
	long := strings.Repeat("é", 200) // 400 bytes
	e.countDetailed("r", []rules.Entry{{Key: "k", Value: long}}, codeOK)
	for v := range e.values["r"] {
		if len(v) > maxDetailedValueBytes+len("…") || !utf8.ValidString(v) || !strings.HasSuffix(v, "…") || !strings.HasPrefix(v, "k_é") {
			t.Fatalf("label value %q (%d bytes)", v, len(v))
		}
	}
}

// BenchmarkShouldRateLimit decides one descriptor in process (no gRPC transport): a key
// answered from the local over-limit cache, and one under its limit counted in a memory
// store. The cached answer is what 90 % of the calls of TestEnvoyRatelimitReport's hot
// workload cost sluice beyond grpc-go.
func BenchmarkShouldRateLimit(b *testing.B) {
	set, err := rules.Parse("bench.yaml", []byte(envoyBenchRulesInternal))
	if err != nil {
		b.Fatal(err)
	}
	s := New(Config{Rules: func() *rules.Set { return set }, Limits: bucket.NewMemory(bucket.MemoryConfig{}),
		Envoy: EnvoyConfig{LocalCacheBytes: 4 << 20}})
	g := &rlsService{s: s}
	ctx := context.Background()
	hot := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "hot", Value: "h-1"}}}}}
	cold := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c-1"}}}}}
	for range 2 { // over the hour's limit of 1, then cached
		if _, err := g.ShouldRateLimit(ctx, hot); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want rlsv3.RateLimitResponse_Code
	}{{"over-limit-cached", hot, rlsv3.RateLimitResponse_OVER_LIMIT}, {"under-limit-memory", cold, rlsv3.RateLimitResponse_OK}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := g.ShouldRateLimit(ctx, c.req)
				if err != nil || resp.OverallCode != c.want {
					b.Fatal(resp, err)
				}
			}
		})
	}
}

const envoyBenchRulesInternal = `domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 1000000
  - key: hot
    rate_limit:
      unit: hour
      requests_per_unit: 1
`

// The over-limit cache is looked up with appendLimitKey and filled with admit.LimitKey:
// the two must spell a key alike, or every cached key would miss.
func TestAppendLimitKey(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{{"api", "user=42"}, {"r", ""}, {"long-rule_name", strings.Repeat("v", 300)}} {
		if got, want := string(appendLimitKey(nil, c[0], c[1])), admit.LimitKey(c[0], c[1]); got != want {
			t.Fatalf("appendLimitKey(%q, %q) = %q, admit.LimitKey = %q", c[0], c[1], got, want)
		}
	}
}
