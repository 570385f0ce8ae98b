package process_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/rules"
)

// TestStreamBytesFitSmallStore: the retry and dead-letter streams are sized by
// -retry-max-bytes and -dead-max-bytes. On a NATS whose file store is smaller than a
// stream, the start fails at once (not after the 30 s of retries) and names the flag to
// lower; with sizes that fit, it starts. (They were 8 GiB + 4 GiB, fixed, so a NATS on
// the Helm chart's 10 Gi volume refused them with only "insufficient storage resources".)
func TestStreamBytesFitSmallStore(t *testing.T) {
	t.Parallel()
	node := natstest.StartLimited(t, 256<<20)
	rs := redistest.Shared(t)
	empty := func() *rules.Set { return &rules.Set{} }
	open := func(retry, dead int64) (*process.Stack, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		return process.Open(ctx, process.StackConfig{Name: "test", NATSURL: node.URL(), RedisURL: rs.URL(),
			Replicas: 1, Rules: empty, Logger: slog.New(slog.DiscardHandler), RetryMaxBytes: retry, DeadMaxBytes: dead})
	}

	start := time.Now()
	st, err := open(process.DefaultRetryMaxBytes, process.DefaultDeadMaxBytes)
	if err == nil {
		st.Close()
		t.Fatal("a 1 GiB retry stream was accepted by a 256 MiB store")
	}
	t.Logf("refused: %v", err)
	if !strings.Contains(err.Error(), "-retry-max-bytes") || !strings.Contains(err.Error(), "insufficient") {
		t.Errorf("error %q, want it to name -retry-max-bytes and JetStream's reason", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("refused after %s: a stream that does not fit is not worth retrying", took)
	}

	st, err = open(64<<20, 1<<30)
	if err == nil {
		st.Close()
		t.Fatal("a 1 GiB dead-letter stream was accepted by a 256 MiB store")
	}
	if !strings.Contains(err.Error(), "-dead-max-bytes") {
		t.Errorf("error %q, want it to name -dead-max-bytes", err)
	}

	st, err = open(64<<20, 64<<20)
	if err != nil {
		t.Fatalf("64 MiB streams on a 256 MiB store: %v", err)
	}
	st.Close()
}
