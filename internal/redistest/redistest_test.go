package redistest_test

import (
	"context"
	"testing"

	"github.com/sluice-io/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestSharedServerAndPrefixes(t *testing.T) {
	t.Parallel()
	s := redistest.Shared(t)
	c := s.Client(t)
	ctx := context.Background()
	p1, p2 := redistest.Prefix(t), redistest.Prefix(t)
	if p1 == p2 {
		t.Fatalf("prefixes repeat: %q", p1)
	}
	if err := c.Set(ctx, p1+"k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Get(ctx, p2+"k").Result(); got != "" {
		t.Fatalf("prefix %q sees %q's data", p2, p1)
	}
}

func TestRestartKeepsAddressAndAppendOnlyData(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{TCP: true, AppendOnly: true})
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// AOF fsyncs every second; force it so the crash below cannot lose the write.
	if err := c.Do(ctx, "BGREWRITEAOF").Err(); err != nil {
		t.Fatal(err)
	}
	for {
		info, _ := c.Info(ctx, "persistence").Result()
		if contains(info, "aof_rewrite_in_progress:0") && contains(info, "aof_rewrite_scheduled:0") {
			break
		}
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("after restart: %q, %v", got, err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
