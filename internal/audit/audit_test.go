package audit_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/internal/natstest"
)

// The trail is bounded by count and age as configured (defaults 100,000 and 90 days),
// lists newest first across pages, and logs every record.
func TestTrailBoundedAndPaged(t *testing.T) {
	t.Parallel()
	n := natstest.Start(t)
	_, js := natstest.Connect(t, n.URL())
	ctx := context.Background()

	def := audit.New(js, audit.Config{})
	if c := def.StreamConfig(); c.Name != "SLUICE_AUDIT" || c.MaxAge != 90*24*time.Hour || c.MaxMsgs != 100_000 {
		t.Fatalf("defaults: %s %v %d", c.Name, c.MaxAge, c.MaxMsgs)
	}

	var logs bytes.Buffer
	l := audit.New(js, audit.Config{Stream: "AUDIT_TEST", Subject: "test.audit", MaxMsgs: 3, MaxAge: time.Hour, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err := l.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for i, action := range []string{"tune", "pause", "resume", "purge", "reset"} {
		if err := l.Append(ctx, audit.Record{Actor: "alice", Action: action, Queue: "orders", Result: "ok", After: map[string]any{"i": i}}); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := js.Stream(ctx, "AUDIT_TEST")
	info, _ := s.Info(ctx)
	if info.Config.MaxAge != time.Hour || info.State.Msgs != 3 {
		t.Fatalf("stream: max age %v, %d records, want 1h and 3", info.Config.MaxAge, info.State.Msgs)
	}
	var got []string
	before := uint64(0)
	for range 5 {
		page, next, err := l.List(ctx, 2, before)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			got = append(got, r.Action)
			if r.Actor != "alice" || r.At.IsZero() || r.Seq == 0 {
				t.Errorf("record %+v", r)
			}
		}
		if next == 0 {
			break
		}
		before = next
	}
	if strings.Join(got, ",") != "reset,purge,resume" {
		t.Fatalf("listed %v, want the 3 newest, newest first", got)
	}
	if c := strings.Count(logs.String(), `"msg":"audit: `); c != 5 {
		t.Fatalf("%d log lines, want 5:\n%s", c, logs.String())
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"audit: purge"`) {
		t.Error("a purge is not logged at WARN")
	}
}
