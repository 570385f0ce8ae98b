package overrides

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
)

// ErrNoQueue is returned when an override of outflow, total_outflow or capacity meets a
// check-only rule: there is no queue to tune.
var ErrNoQueue = errors.New("overrides: rule has no queue")

// Override is what an operator changed on one rule. A nil field is not overridden: the
// rules file's value applies.
type Override struct {
	Outflow      *rules.Rate // per key
	TotalOutflow *rules.Rate // whole rule, fair across keys
	Capacity     *int64      // messages waiting per key
	Paused       *bool       // drainers claim nothing while true; admission goes on

	// UpdatedAt is when the override was last written (the Store's clock).
	UpdatedAt time.Time
	// Revision is the KV revision the override was read at (0 when it was never stored).
	// It is not part of the stored value; Patch.IfRevision compares against it.
	Revision uint64
}

// IsZero reports whether o overrides nothing.
func (o Override) IsZero() bool {
	return o.Outflow == nil && o.TotalOutflow == nil && o.Capacity == nil && o.Paused == nil
}

// IsPaused reports whether the rule is paused by this override.
func (o Override) IsPaused() bool { return o.Paused != nil && *o.Paused }

// touchesQueue reports whether o changes anything only a queue rule has.
func (o Override) touchesQueue() bool {
	return o.Outflow != nil || o.TotalOutflow != nil || o.Capacity != nil
}

// Equal reports whether a and b override the same values (UpdatedAt and Revision aside).
func (o Override) Equal(b Override) bool {
	return eqPtr(o.Outflow, b.Outflow) && eqPtr(o.TotalOutflow, b.TotalOutflow) &&
		eqPtr(o.Capacity, b.Capacity) && eqPtr(o.Paused, b.Paused)
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Effective returns r with o applied: a copy with o's outflow, total_outflow and
// capacity where o sets them and the rules file's values elsewhere, validated with
// rules.Rule.Validate. Paused is not part of a rule: read it with o.IsPaused().
//
// When o changes no queue field, r itself is returned (no copy), so calling Effective
// before every claim costs nothing for the usual rule without an override. When the
// result is invalid — o touches a check-only rule (ErrNoQueue), or the rules file changed
// under an override so that, say, total_outflow is now below the overridden outflow —
// Effective returns r unchanged together with the error: the caller keeps draining at
// the rules file's values and logs the error, rather than stopping the queue.
func Effective(r *rules.Rule, o Override) (*rules.Rule, error) {
	if !o.touchesQueue() {
		return r, nil
	}
	if r.Queue == nil {
		return r, fmt.Errorf("%w: %q", ErrNoQueue, r.Name)
	}
	cp := *r
	q := *r.Queue
	if o.Outflow != nil {
		q.Outflow = *o.Outflow
	}
	if o.TotalOutflow != nil {
		q.TotalOutflow = *o.TotalOutflow
	}
	if o.Capacity != nil {
		q.Capacity = *o.Capacity
	}
	cp.Queue = &q
	if err := cp.Validate(); err != nil {
		return r, fmt.Errorf("overrides: override of %q does not apply: %w", r.Name, err)
	}
	return &cp, nil
}

// RateJSON is a rate in the shape of the rules file and of the PATCH body:
// {unit | interval, requests_per_unit}. EncodeRate writes `unit` when the interval is
// exactly one unit (so GET shows what an operator would type) and `interval` otherwise.
type RateJSON struct {
	Unit            string `json:"unit,omitempty"`
	Interval        string `json:"interval,omitempty"`
	RequestsPerUnit int64  `json:"requests_per_unit"`
}

// EncodeRate returns r in the rules file's shape.
func EncodeRate(r rules.Rate) RateJSON {
	if u, ok := rules.UnitOf(r.Interval); ok {
		return RateJSON{Unit: u, RequestsPerUnit: r.Requests}
	}
	return RateJSON{Interval: r.Interval.String(), RequestsPerUnit: r.Requests}
}

// storedOverride is the JSON value in the KV bucket. It is also what GET shows for the
// override itself (MarshalJSON). Unknown fields are ignored when reading, so a newer
// version may add fields during a rolling upgrade without breaking older drainers.
type storedOverride struct {
	Outflow      *RateJSON `json:"outflow,omitempty"`
	TotalOutflow *RateJSON `json:"total_outflow,omitempty"`
	Capacity     *int64    `json:"capacity,omitempty"`
	Paused       *bool     `json:"paused,omitempty"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// MarshalJSON writes o as {"outflow":{…},"total_outflow":{…},"capacity":N,"paused":b,
// "updated_at":"…"}, leaving out the fields o does not override.
func (o Override) MarshalJSON() ([]byte, error) {
	s := storedOverride{Capacity: o.Capacity, Paused: o.Paused, UpdatedAt: o.UpdatedAt.UTC()}
	if o.Outflow != nil {
		r := EncodeRate(*o.Outflow)
		s.Outflow = &r
	}
	if o.TotalOutflow != nil {
		r := EncodeRate(*o.TotalOutflow)
		s.TotalOutflow = &r
	}
	return json.Marshal(s)
}

// UnmarshalJSON reads what MarshalJSON wrote. It checks the values as strictly as a
// Patch does: a stored override that could not have been written is an error.
func (o *Override) UnmarshalJSON(data []byte) error {
	var s storedOverride
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("overrides: stored override: %w", err)
	}
	out := Override{Capacity: s.Capacity, Paused: s.Paused, UpdatedAt: s.UpdatedAt}
	var errs patchErrors
	if s.Outflow != nil {
		r, ok := decodeRate(*s.Outflow, "outflow", &errs)
		if ok {
			out.Outflow = &r
		}
	}
	if s.TotalOutflow != nil {
		r, ok := decodeRate(*s.TotalOutflow, "total_outflow", &errs)
		if ok {
			out.TotalOutflow = &r
		}
	}
	if s.Capacity != nil && *s.Capacity < 1 {
		errs.add("capacity", "must be ≥ 1 (got %d)", *s.Capacity)
	}
	if err := errs.err(); err != nil {
		return fmt.Errorf("overrides: stored override: %w", err)
	}
	*o = out
	return nil
}

// String shows what o overrides, e.g. "outflow=5/1s capacity=500 paused", or "none".
func (o Override) String() string {
	var parts []string
	if o.Outflow != nil {
		parts = append(parts, fmt.Sprintf("outflow=%d/%s", o.Outflow.Requests, o.Outflow.Interval))
	}
	if o.TotalOutflow != nil {
		parts = append(parts, fmt.Sprintf("total_outflow=%d/%s", o.TotalOutflow.Requests, o.TotalOutflow.Interval))
	}
	if o.Capacity != nil {
		parts = append(parts, fmt.Sprintf("capacity=%d", *o.Capacity))
	}
	if o.Paused != nil {
		if *o.Paused {
			parts = append(parts, "paused")
		} else {
			parts = append(parts, "paused=false")
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// LogValue logs o as its String (pointers would log as addresses).
func (o Override) LogValue() slog.Value { return slog.StringValue(o.String()) }
