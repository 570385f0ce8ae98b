package audit_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/internal/natstest"
)

// TestTheTrailIsAChainADeletionBreaks: records appended by two processes at once form one
// chain (each links to the one stored before it), Verify finds it whole; a record deleted
// from the middle is a break Verify names, and the oldest records aging out is not.
func TestTheTrailIsAChainADeletionBreaks(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	_, js2 := natstest.Connect(t, node.URL())
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	a := audit.New(js, audit.Config{Logger: quiet})
	b := audit.New(js2, audit.Config{Logger: quiet}) // a second ingress on the same stream
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, l := range []*audit.Log{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 15 {
				if err := l.Append(ctx, audit.Record{Actor: fmt.Sprintf("p%d", i), Action: audit.ActionPurge, Target: fmt.Sprint(j), Result: "ok"}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	v, err := a.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Records != 30 || len(v.Breaks) != 0 || v.First != 1 || v.Last != 30 {
		t.Fatalf("after 30 appends from two processes: %+v, want 30 records, no break", v)
	}
	recs, _, err := a.List(ctx, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if recs[len(recs)-1].Prev != "" || recs[0].Prev == "" {
		t.Fatalf("first record's prev %q, last's %q: want none, then a hash", recs[len(recs)-1].Prev, recs[0].Prev)
	}

	// Someone with access to NATS deletes record 12.
	s, err := js.Stream(ctx, "SLUICE_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, 12); err != nil {
		t.Fatal(err)
	}
	v, _ = a.Verify(ctx)
	if len(v.Breaks) == 0 || v.Breaks[0].Seq != 13 || !strings.Contains(v.Breaks[0].Reason, "12") {
		t.Fatalf("after deleting record 12: %+v, want a break at 13 naming 12", v)
	}
	// Retention removes the oldest: the chain starts later, whole.
	if err := s.DeleteMsg(ctx, 1); err != nil {
		t.Fatal(err)
	}
	v, _ = a.Verify(ctx)
	if v.First != 2 || len(v.Breaks) != 2 { // the deletion of 12 still shows (gap and link)
		t.Fatalf("after the oldest aged out: %+v, want the chain from 2 with only 12's breaks", v)
	}
	// A record appended after the deletion links to the last one stored.
	if err := a.Append(ctx, audit.Record{Actor: "p0", Action: audit.ActionCancel, Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	if v2, _ := a.Verify(ctx); len(v2.Breaks) != len(v.Breaks) || v2.Last != 31 {
		t.Fatalf("after one more append: %+v", v2)
	}
}
