package submit

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/status"
)

// The hand-written 202 body must be exactly what encoding/json writes for submitResponse.
func TestWriteQueuedMatchesEncodingJSON(t *testing.T) {
	for _, eta := range []time.Time{
		time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 22, 7, 0, 0, 123456789, time.FixedZone("x", 3600)),
	} {
		depth, capacity := int64(7), int64(10000)
		got := httptest.NewRecorder()
		WriteQueued(got, "0196b7a0-0000-7000-8000-000000000001", depth, capacity, eta)
		want := httptest.NewRecorder()
		httpx.WriteJSON(want, http.StatusAccepted, submitResponse{ID: "0196b7a0-0000-7000-8000-000000000001", State: status.Queued,
			Depth: &depth, Capacity: &capacity, ETA: eta.UTC().Format(time.RFC3339Nano)})
		if got.Code != want.Code || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Errorf("WriteQueued: %d %s, encoding/json: %d %s", got.Code, got.Body, want.Code, want.Body)
		}
		if ct := got.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		var v map[string]any
		if err := json.Unmarshal(got.Body.Bytes(), &v); err != nil {
			t.Errorf("not JSON: %v", err)
		}
	}
}
