package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The answers a publish is sent again after, and the ones it fails with.
func TestElectingErrors(t *testing.T) {
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("wrapped: %w", &jetstream.APIError{Code: 409, ErrorCode: code})
	}
	for _, tc := range []struct {
		name     string
		err      error
		timedOut bool
		again    bool
	}{
		{"no responders", nats.ErrNoResponders, false, true},
		{"no stream response", jetstream.ErrNoStreamResponse, false, true},
		{"attempt timed out", context.DeadlineExceeded, true, true},
		{"caller's deadline", context.DeadlineExceeded, false, false},
		{"temporarily unavailable", api(jsErrClusterNotAvailable), false, true},
		// An attempt given up on and answered by a new leader is still being stored: the
		// next attempt is answered "duplicate" once it is, the message's own.
		{"earlier attempt in process", api(jsErrDuplicateInProcess), false, true},
		{"wrong last sequence", api(10071), false, false},
		{"other", errors.New("boom"), false, false},
	} {
		if got := electing(tc.err, tc.timedOut); got != tc.again {
			t.Errorf("%s: electing = %v, want %v", tc.name, got, tc.again)
		}
	}
	if !inProcess(api(jsErrDuplicateInProcess)) || inProcess(api(jsErrClusterNotAvailable)) {
		t.Error("inProcess tells 10158 from the rest")
	}
}
