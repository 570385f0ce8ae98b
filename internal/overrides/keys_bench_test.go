package overrides_test

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
)

// TestKeyOverrideStorageStudy measures what 100,000 per-key overrides cost: bytes per
// override in the KV bucket's stream (one entry per (rule, key), the layout in use) and
// in a process's index, and the same overrides packed as one JSON blob per rule shard
// (256 shards) for comparison. Run with SLUICE_BENCH=1 (make bench).
func TestKeyOverrideStorageStudy(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench) for the per-key override storage study")
	}
	const n = 100_000
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	ctx := ctxFor(t)
	s := openKeys(t, js, bucketName(t), nil)
	ws := make([]overrides.KeyWrite, n)
	until := time.Now().Add(24 * time.Hour)
	for i := range ws {
		ws[i] = overrides.KeyWrite{Key: fmt.Sprintf("merchant-%07d", i),
			Override: overrides.KeyOverride{Outflow: rules.Rate{Requests: 20, Interval: time.Second}, Until: until}}
	}
	start := time.Now()
	if _, err := s.PutKeys(ctx, "orders-per-merchant", ws); err != nil {
		t.Fatal(err)
	}
	write := time.Since(start)
	info, err := js.Stream(ctx, "KV_"+s.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	si, _ := info.Info(ctx)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start = time.Now()
	x := startIndex(t, s, overrides.KeyIndexConfig{SweepEvery: -1})
	load := time.Since(start)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if x.Len() != n {
		t.Fatalf("index holds %d", x.Len())
	}
	lookup := testing.Benchmark(func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			x.Lookup("orders-per-merchant", ws[i%n].Key)
		}
	})

	// The alternative: one blob per shard of the rule (key → "20/1s,until"), 256 shards.
	const shards = 256
	blobs := make([]map[string]string, shards)
	for i := range blobs {
		blobs[i] = map[string]string{}
	}
	for i, w := range ws {
		blobs[i%shards][w.Key] = fmt.Sprintf("20/1s,%d", until.Unix())
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketName(t) + "_blob", History: 1, MaxValueSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range blobs {
		data, _ := jsonMarshal(m)
		if _, err := kv.Put(ctx, fmt.Sprintf("orders-per-merchant.%d", i), data); err != nil {
			t.Fatal(err)
		}
	}
	bstream, _ := js.Stream(ctx, "KV_"+kv.Bucket())
	bi, _ := bstream.Info(ctx)

	indexBytes := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	t.Logf("per-key overrides, %d keys of ~16 bytes with outflow and until:", n)
	t.Logf("  KV entry per (rule, key)   %6.1f bytes/override on disk (stream %d bytes, %d msgs); written in %v (%.0f/s)",
		float64(si.State.Bytes)/n, si.State.Bytes, si.State.Msgs, write.Round(time.Millisecond), n/write.Seconds())
	t.Logf("  index in memory            %6.1f bytes/override (heap); loaded at start in %v; Lookup %v, %d allocs",
		indexBytes/n, load.Round(time.Millisecond), time.Duration(lookup.NsPerOp()), lookup.AllocsPerOp())
	t.Logf("  one blob per shard (256)   %6.1f bytes/override on disk (stream %d bytes); but one key's change rewrites ~%d bytes and races every writer of its shard",
		float64(bi.State.Bytes)/n, bi.State.Bytes, bi.State.Bytes/shards)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// BenchmarkKeyIndexLookup is the drainer's per-delivery read: a key with an override and
// one without, among 10,000 overrides.
func BenchmarkKeyIndexLookup(b *testing.B) {
	node := natstest.Start(b)
	_, js := natstest.Connect(b, node.URL())
	s := openKeys(b, js, bucketName(b), nil)
	ws := make([]overrides.KeyWrite, 10_000)
	for i := range ws {
		ws[i] = overrides.KeyWrite{Key: fmt.Sprintf("merchant-%07d", i), Override: overrides.KeyOverride{Outflow: rules.Rate{Requests: 20, Interval: time.Second}}}
	}
	if _, err := s.PutKeys(ctxFor(b), "orders", ws); err != nil {
		b.Fatal(err)
	}
	x := startIndex(b, s, overrides.KeyIndexConfig{SweepEvery: -1})
	r := keyRules(b, true).Rule("orders-per-merchant")
	for _, c := range []struct{ name, key string }{{"with", "merchant-0004711"}, {"without", "merchant-x"}} {
		b.Run("Lookup/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				x.Lookup("orders", c.key)
			}
		})
		b.Run("Effective/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			now := time.Now()
			for b.Loop() {
				x.Effective(*r, c.key, now)
			}
		})
	}
}
