package retry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-io/sluice/internal/natstest"
)

// A full dead-letter stream refuses a new dead letter (ErrDeadFull, counted per rule) and
// keeps every one it has: by default no dead letter disappears unseen. With DropOldest the
// oldest go, each counted, and the new one is stored.
func TestDeadLettersFullPolicy(t *testing.T) {
	t.Parallel()
	for _, dropOldest := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop_oldest=%v", dropOldest), func(t *testing.T) {
			t.Parallel()
			node := natstest.Start(t)
			_, js := natstest.Connect(t, node.URL())
			reg := prometheus.NewRegistry()
			dead, err := NewDeadLetters(js, DeadConfig{Stream: "FULL_DEAD", MaxBytes: 100_000, DropOldest: dropOldest, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := dead.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			rule := parkRule("orders", time.Hour)
			var ids []string
			var full error
			for i := range 40 {
				m := newMessage(rule.Name, fmt.Sprint("k", i))
				m.Payload = []byte(`"` + strings.Repeat("x", 10_000) + `"`)
				if full = dead.Dead(ctx, rule.Name, m, "test"); full != nil {
					break
				}
				ids = append(ids, m.ID)
			}
			if dropOldest {
				if full != nil {
					t.Fatalf("with DropOldest: %v", full)
				}
				dropped := testutil.ToFloat64(dead.dropped)
				n, _ := dead.Count(ctx, rule.Name)
				if dropped < 25 || uint64(dropped)+n != 40 {
					t.Errorf("40 dead letters into a 100 kB stream: %v dropped, %d kept", dropped, n)
				}
				if _, err := dead.Get(ctx, ids[0]); !errors.Is(err, ErrNotFound) {
					t.Errorf("the oldest dead letter is still there: %v", err)
				}
				if _, err := dead.Get(ctx, ids[len(ids)-1]); err != nil {
					t.Errorf("the newest dead letter: %v", err)
				}
				return
			}
			if !errors.Is(full, ErrDeadFull) {
				t.Fatalf("after %d dead letters of 10 kB in a 100 kB stream: %v, want ErrDeadFull", len(ids), full)
			}
			if got := testutil.ToFloat64(dead.refused.WithLabelValues(rule.Name)); got != 1 {
				t.Errorf("sluice_dead_letters_refused_total{rule=orders} = %v, want 1", got)
			}
			for _, id := range ids {
				if _, err := dead.Get(ctx, id); err != nil {
					t.Fatalf("dead letter %s lost when the stream filled: %v", id, err)
				}
			}
			if testutil.ToFloat64(dead.dropped) != 0 {
				t.Error("dropped without DropOldest")
			}
		})
	}
}
