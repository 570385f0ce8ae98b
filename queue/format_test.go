package queue_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/queue"
)

// The stored format's version: written as "2", read from 1 (no header, what v0.3.0
// wrote) to 2, refused above as a bad message that names the reason.
func TestMessageFormatVersion(t *testing.T) {
	t.Parallel()
	nm := queue.EncodeMessage("q.r.x", queue.Message{ID: "id-1", Rule: "r", Key: "k", Payload: []byte(`{}`)})
	if got := nm.Header.Get("Sluice-Format"); got != "2" {
		t.Errorf("Sluice-Format = %q, want 2", got)
	}
	// A v0.3.0 message, header by header as that release wrote it.
	v1 := nats.Header{"Nats-Msg-Id": {"id-1"}, "Sluice-Rule": {"r"}, "Sluice-Key": {"a%2Fb"},
		"Sluice-Created-At": {"2026-01-02T03:04:05.000000006Z"}, "Sluice-Attempt": {"2"}}
	m, err := queue.DecodeMessage(v1, []byte(`{"x":1}`))
	if err != nil || m.ID != "id-1" || m.Key != "a/b" || m.Attempt != 2 || string(m.Payload) != `{"x":1}` {
		t.Errorf("format 1: %+v, %v", m, err)
	}
	for _, tc := range []struct {
		v    string
		want string // "" = accepted
	}{
		{"1", ""},
		{"2", ""},
		{"3", "written by a newer sluice"},
		{"10", "written by a newer sluice"},
		{"0", "not a format version"},
		{"two", "not a format version"},
	} {
		h := nats.Header{}
		for k, vs := range v1 {
			h[k] = vs
		}
		h.Set("Sluice-Format", tc.v)
		_, err := queue.DecodeMessage(h, []byte(`{}`))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Sluice-Format %s: %v", tc.v, err)
		case tc.want != "" && (!errors.Is(err, queue.ErrBadMessage) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Sluice-Format %s: err %v, want ErrBadMessage saying %q", tc.v, err, tc.want)
		}
	}
}
