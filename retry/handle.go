package retry

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// streamHandle creates a stream and caches its handle, for the retry stream and the
// dead letters alike. The zero value is ready; it is safe for concurrent use.
type streamHandle struct {
	mu     sync.Mutex
	stream jetstream.Stream // nil until Ensure or the first use
}

// ensure creates the stream or updates it to cfg (idempotent; any process may) and keeps
// the handle.
func (h *streamHandle) ensure(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("retry: ensure stream %s: %w", cfg.Name, err)
	}
	h.mu.Lock()
	h.stream = st
	h.mu.Unlock()
	return nil
}

// get returns the stream handle, looked up once.
func (h *streamHandle) get(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	h.mu.Lock()
	st := h.stream
	h.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("retry: stream %s: %w", name, err)
	}
	h.mu.Lock()
	h.stream = st
	h.mu.Unlock()
	return st, nil
}
