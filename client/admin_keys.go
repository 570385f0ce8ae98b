package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// KeyOverride is one key's own override as the server shows it.
type KeyOverride struct {
	Outflow   *Rate     `json:"outflow,omitempty"`
	Paused    bool      `json:"paused,omitempty"`
	Window    *Window   `json:"window,omitempty"`
	Until     time.Time `json:"until,omitzero"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Window is when deliveries may happen, as a rule's delivery.window: from From to To
// ("09:00", "18:00"; From after To crosses midnight) on Days (["mon-fri"], ["sat",
// "sun"]; empty: every day) in TimeZone (an IANA zone, or "from_message": each message's
// time_zone, DefaultTimeZone for those without one).
type Window struct {
	Days            []string `json:"days,omitempty"`
	From            string   `json:"from"`
	To              string   `json:"to"`
	TimeZone        string   `json:"time_zone"`
	DefaultTimeZone string   `json:"default_time_zone,omitempty"`
}

// KeyPatch changes one key of a queue (TuneKey): a JSON merge patch of its override.
// Nil fields are left as they are. For or Until (not both) end the override, after which
// the rule's value returns by itself; NoEnd removes an end; Reset drops the override.
type KeyPatch struct {
	Outflow *Rate
	// Paused true holds the key's messages; false resumes it.
	Paused *bool
	// RestoreOutflow drops the key's outflow (the rule's applies again).
	RestoreOutflow bool
	// Window gives the key a delivery window of its own instead of the rule's;
	// RestoreWindow drops it (the rule's delivery.window applies again).
	Window        *Window
	RestoreWindow bool
	For           time.Duration
	Until         time.Time
	NoEnd         bool
	Reset         bool
}

// MarshalJSON writes the PATCH body.
func (p KeyPatch) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if p.Outflow != nil {
		m["outflow"] = p.Outflow
	} else if p.RestoreOutflow {
		m["outflow"] = nil
	}
	if p.Paused != nil {
		m["paused"] = *p.Paused
	}
	if p.Window != nil {
		m["window"] = p.Window
	} else if p.RestoreWindow {
		m["window"] = nil
	}
	switch {
	case p.For > 0:
		m["for"] = p.For.String()
	case !p.Until.IsZero():
		m["until"] = p.Until.UTC().Format(time.RFC3339)
	case p.NoEnd:
		m["until"] = nil
	}
	if p.Reset {
		m["reset"] = true
	}
	return json.Marshal(m)
}

// TuneKey overrides one key of a queue: its outflow, or pausing it, optionally for a
// while — e.g. 20/s for merchant m-42 for 24 hours:
//
//	k, err := admin.TuneKey(ctx, "orders", "m-42", client.KeyPatch{
//		Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 20}, For: 24 * time.Hour})
//
// or its own delivery window instead of the rule's, office hours in Paris for a day:
//
//	k, err := admin.TuneKey(ctx, "orders", "m-42", client.KeyPatch{Window: &client.Window{
//		Days: []string{"mon-fri"}, From: "09:00", To: "18:00", TimeZone: "Europe/Paris"}, For: 24 * time.Hour})
//
// Every drainer obeys it within 1 s. The answer shows the key's effective outflow and
// its Source, and its effective Window and WindowSource. Setting the same patch twice is harmless, so TuneKey is retried like a GET.
func (a *Admin) TuneKey(ctx context.Context, name, key string, p KeyPatch) (*QueueKey, error) {
	if name == "" {
		return nil, invalidf("TuneKey: empty queue name")
	}
	if p.Outflow == nil && p.Paused == nil && !p.RestoreOutflow && p.Window == nil && !p.RestoreWindow && p.For == 0 && p.Until.IsZero() && !p.NoEnd && !p.Reset {
		return nil, invalidf("TuneKey: empty patch")
	}
	if p.For > 0 && !p.Until.IsZero() {
		return nil, invalidf("TuneKey: give For or Until, not both")
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("client: TuneKey: %w", err)
	}
	path := "/v1/admin/queues/" + escapeSegment(name) + "/keys/" + escapeSegment(key)
	resp, err := a.c.do(ctx, a.call(http.MethodPatch, path, body, anyTransient))
	if err != nil {
		return nil, err
	}
	var k QueueKey
	if err := json.Unmarshal(resp.body, &k); err != nil {
		return nil, fmt.Errorf("sluice: PATCH %s: %w", path, err)
	}
	return &k, nil
}

// KeyLine is one key of TuneKeys: its whole override (Outflow, Paused and/or Window,
// ending after For or at Until), or Reset to drop it.
type KeyLine struct {
	Key     string
	Outflow *Rate
	Paused  bool
	Window  *Window
	For     time.Duration
	Until   time.Time
	Reset   bool
}

// KeysResult is TuneKeys's answer: lines sent, keys set, keys reset, entries written.
type KeysResult struct {
	Queue   string `json:"queue"`
	Lines   int    `json:"lines"`
	Set     int    `json:"set"`
	Reset   int    `json:"reset"`
	Written int    `json:"written"`
}

// MaxKeyLines is the most keys one TuneKeys call sends (the server's bulk limit).
const MaxKeyLines = 100_000

// TuneKeys sets (or drops) the overrides of many keys of a queue in one request (POST
// /v1/admin/queues/{name}/keys, NDJSON). The server checks every line first: when any is
// refused nothing is written and the error is a *ProblemError whose Field names the first
// bad line ("line 3: outflow"; lines count from 1 in the order given). Each line replaces
// its key's override; sending the same lines again is harmless, so it is retried.
func (a *Admin) TuneKeys(ctx context.Context, name string, lines []KeyLine) (*KeysResult, error) {
	if name == "" {
		return nil, invalidf("TuneKeys: empty queue name")
	}
	if len(lines) == 0 || len(lines) > MaxKeyLines {
		return nil, invalidf("TuneKeys: want 1 to %d keys, got %d", MaxKeyLines, len(lines))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, l := range lines {
		m := map[string]any{"key": l.Key}
		if l.Reset {
			m["reset"] = true
		} else {
			if l.Outflow != nil {
				m["outflow"] = l.Outflow
			}
			if l.Paused {
				m["paused"] = true
			}
			if l.Window != nil {
				m["window"] = l.Window
			}
			if l.For > 0 {
				m["for"] = l.For.String()
			} else if !l.Until.IsZero() {
				m["until"] = l.Until.UTC().Format(time.RFC3339)
			}
		}
		if err := enc.Encode(m); err != nil {
			return nil, fmt.Errorf("client: TuneKeys: %w", err)
		}
	}
	path := "/v1/admin/queues/" + escapeSegment(name) + "/keys"
	resp, err := a.c.do(ctx, a.call(http.MethodPost, path, b.Bytes(), anyTransient))
	if err != nil {
		return nil, err
	}
	var r KeysResult
	if err := json.Unmarshal(resp.body, &r); err != nil {
		return nil, fmt.Errorf("sluice: POST %s: %w", path, err)
	}
	return &r, nil
}
