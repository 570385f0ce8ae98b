package overrides_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
)

func rate(n int64, d time.Duration) *rules.Rate { return &rules.Rate{Requests: n, Interval: d} }
func i64(n int64) *int64                        { return &n }
func boolp(b bool) *bool                        { return &b }

func TestParsePatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want overrides.Patch
	}{
		{"outflow unit", `{"outflow":{"unit":"second","requests_per_unit":5}}`,
			overrides.Patch{Outflow: rate(5, time.Second)}},
		{"unit is case-insensitive", `{"outflow":{"unit":"MINUTE","requests_per_unit":60}}`,
			overrides.Patch{Outflow: rate(60, time.Minute)}},
		{"week", `{"total_outflow":{"unit":"week","requests_per_unit":7}}`,
			overrides.Patch{TotalOutflow: rate(7, 7*24*time.Hour)}},
		{"interval", `{"outflow":{"interval":"250ms","requests_per_unit":1}}`,
			overrides.Patch{Outflow: rate(1, 250*time.Millisecond)}},
		{"all fields", `{"outflow":{"unit":"second","requests_per_unit":5},"total_outflow":{"unit":"second","requests_per_unit":50},"capacity":500,"paused":true}`,
			overrides.Patch{Outflow: rate(5, time.Second), TotalOutflow: rate(50, time.Second), Capacity: i64(500), Paused: boolp(true)}},
		{"null unsets", `{"outflow":null,"total_outflow":null,"capacity":null,"paused":null}`,
			overrides.Patch{Unset: overrides.FieldOutflow | overrides.FieldTotalOutflow | overrides.FieldCapacity | overrides.FieldPaused}},
		{"paused false unsets", `{"paused":false}`, overrides.Patch{Unset: overrides.FieldPaused}},
		{"reset", `{"reset":true}`, overrides.Patch{Reset: true}},
		{"whitespace around", " \n{\"capacity\": 1}\n ", overrides.Patch{Capacity: i64(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := overrides.ParsePatch([]byte(tt.body))
			if err != nil {
				t.Fatalf("ParsePatch(%s): %v", tt.body, err)
			}
			if !patchEqual(got, tt.want) {
				t.Fatalf("ParsePatch(%s) = %+v, want %+v", tt.body, got, tt.want)
			}
		})
	}
}

func patchEqual(a, b overrides.Patch) bool {
	eq := func(x, y overrides.Override) bool { return x.Equal(y) }
	return eq(overrides.Override{Outflow: a.Outflow, TotalOutflow: a.TotalOutflow, Capacity: a.Capacity, Paused: a.Paused},
		overrides.Override{Outflow: b.Outflow, TotalOutflow: b.TotalOutflow, Capacity: b.Capacity, Paused: b.Paused}) &&
		a.Unset == b.Unset && a.Reset == b.Reset && a.IfRevision == b.IfRevision
}

func TestParsePatchErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want []string // each must appear in the error, field first
	}{
		{"rpu zero", `{"outflow":{"unit":"second","requests_per_unit":0}}`,
			[]string{"outflow.requests_per_unit: must be ≥ 1 (got 0)"}},
		{"rpu negative total", `{"total_outflow":{"unit":"second","requests_per_unit":-3}}`,
			[]string{"total_outflow.requests_per_unit: must be ≥ 1 (got -3)"}},
		{"rpu not integer", `{"outflow":{"unit":"second","requests_per_unit":1.5}}`,
			[]string{"outflow.requests_per_unit: must be an integer (got 1.5)"}},
		{"rpu string", `{"outflow":{"unit":"second","requests_per_unit":"10"}}`,
			[]string{`outflow.requests_per_unit: must be an integer (got "10")`}},
		{"rpu missing", `{"outflow":{"unit":"second"}}`,
			[]string{"outflow.requests_per_unit: required"}},
		{"unit unknown", `{"outflow":{"unit":"fortnight","requests_per_unit":1}}`,
			[]string{`outflow.unit: must be one of second, minute, hour, day, week, month, year (got "fortnight")`}},
		{"unit and interval", `{"outflow":{"unit":"second","interval":"1s","requests_per_unit":1}}`,
			[]string{"outflow.interval: set either unit or interval, not both"}},
		{"neither unit nor interval", `{"outflow":{"requests_per_unit":1}}`,
			[]string{"outflow.unit: required (or interval)"}},
		{"bad interval", `{"outflow":{"interval":"soon","requests_per_unit":1}}`,
			[]string{`outflow.interval: must be a duration like 30s, 5m or 24h (got "soon")`}},
		{"negative interval", `{"outflow":{"interval":"-1s","requests_per_unit":1}}`,
			[]string{"outflow.interval: must be > 0 (got -1s)"}},
		{"too fast", `{"outflow":{"unit":"second","requests_per_unit":2000000}}`,
			[]string{"outflow: must be at most 1000000 per second"}},
		{"unknown rate field", `{"outflow":{"unit":"second","requests_per_unit":1,"burst":3}}`,
			[]string{"outflow.burst: unknown field (allowed: unit, interval, requests_per_unit)"}},
		{"rate not object", `{"outflow":10}`,
			[]string{"outflow: must be a JSON object {unit, interval, requests_per_unit} (got 10)"}},
		{"capacity zero", `{"capacity":0}`, []string{"capacity: must be ≥ 1 (got 0)"}},
		{"capacity string", `{"capacity":"100"}`, []string{`capacity: must be an integer (got "100")`}},
		{"paused string", `{"paused":"yes"}`, []string{`paused: must be true or false (got "yes")`}},
		{"reset null", `{"reset":null}`, []string{"reset: must be true; omit it otherwise (got null)"}},
		{"reset false", `{"reset":false}`, []string{"reset: must be true; omit it otherwise"}},
		{"reset with others", `{"reset":true,"capacity":5}`, []string{"reset: cannot be combined with other fields"}},
		{"unknown field", `{"outflw":{"unit":"second","requests_per_unit":1}}`,
			[]string{"outflw: unknown field (allowed: outflow, total_outflow, capacity, paused, reset)"}},
		{"empty object", `{}`, []string{"needs at least one of outflow, total_outflow, capacity, paused, reset"}},
		{"not an object", `[1]`, []string{"must be a JSON object"}},
		{"null body", `null`, []string{"must be a JSON object"}},
		{"empty body", ``, []string{"must be a JSON object"}},
		{"syntax error", `{"capacity":`, []string{"invalid JSON"}},
		{"trailing data", `{"capacity":1} {"capacity":2}`, []string{"unexpected data after the JSON object"}},
		{"total below outflow", `{"outflow":{"unit":"second","requests_per_unit":10},"total_outflow":{"unit":"second","requests_per_unit":5}}`,
			[]string{"total_outflow: must be ≥ outflow (5/s < 10/s)"}},
		{"every problem reported", `{"capacity":0,"paused":1,"outflow":{"unit":"x","requests_per_unit":0}}`,
			[]string{"capacity: must be ≥ 1", "paused: must be true or false", "outflow.unit: must be one of", "outflow.requests_per_unit: must be ≥ 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := overrides.ParsePatch([]byte(tt.body))
			if err == nil {
				t.Fatalf("ParsePatch(%s): no error", tt.body)
			}
			if !errors.Is(err, overrides.ErrInvalidPatch) {
				t.Errorf("error %v does not match ErrInvalidPatch", err)
			}
			var pe *overrides.PatchError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *PatchError", err)
			}
			if !strings.HasPrefix(err.Error(), "overrides: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParsePatch(%s) = %q, want it to contain %q", tt.body, err, w)
				}
			}
			var all overrides.PatchErrors
			if !errors.As(err, &all) || len(all) < len(tt.want) {
				t.Errorf("PatchErrors = %v, want at least %d", all, len(tt.want))
			}
			// Error and the ingress's problem put the field in front: a message naming
			// it again would read "capacity: capacity must …".
			for _, e := range all {
				if e.Field != "" && strings.HasPrefix(e.Message, e.Field) {
					t.Errorf("message %q repeats its field %s", e.Message, e.Field)
				}
			}
		})
	}
}

// Detail names the first problem's field nowhere (the problem's field member does) and
// every other problem's once.
func TestPatchErrorsDetail(t *testing.T) {
	t.Parallel()
	_, err := overrides.ParsePatch([]byte(`{"capacity":0,"outflow":{"unit":"second","requests_per_unit":0}}`))
	var all overrides.PatchErrors
	if !errors.As(err, &all) || len(all) != 2 || all[0].Field != "capacity" {
		t.Fatalf("ParsePatch: %v", err)
	}
	if got, want := all.Detail(), "must be ≥ 1 (got 0); outflow.requests_per_unit: must be ≥ 1 (got 0)"; got != want {
		t.Errorf("Detail() = %q, want %q", got, want)
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	base := overrides.Override{Outflow: rate(5, time.Second), Capacity: i64(10), Paused: boolp(true)}

	// Unmentioned fields keep their override; mentioned ones are replaced.
	got := base.Merge(overrides.Patch{Capacity: i64(20), TotalOutflow: rate(100, time.Second)})
	want := overrides.Override{Outflow: rate(5, time.Second), TotalOutflow: rate(100, time.Second), Capacity: i64(20), Paused: boolp(true)}
	if !got.Equal(want) {
		t.Errorf("merge = %v, want %v", got, want)
	}
	// Merge copies: changing the patch's values later does not change the result.
	p := overrides.Patch{Capacity: i64(30)}
	got = base.Merge(p)
	*p.Capacity = 31
	if *got.Capacity != 30 {
		t.Errorf("merge aliases the patch: capacity %d", *got.Capacity)
	}
	// null drops one field.
	got = base.Merge(overrides.Patch{Unset: overrides.FieldPaused | overrides.FieldOutflow})
	if !got.Equal(overrides.Override{Capacity: i64(10)}) {
		t.Errorf("unset = %v, want capacity=10", got)
	}
	// reset drops all.
	if got := base.Merge(overrides.Patch{Reset: true}); !got.IsZero() {
		t.Errorf("reset = %v, want none", got)
	}
	// the base is untouched.
	if !base.Equal(overrides.Override{Outflow: rate(5, time.Second), Capacity: i64(10), Paused: boolp(true)}) {
		t.Errorf("base changed: %v", base)
	}
}

func testRule(t testing.TB) *rules.Rule {
	t.Helper()
	set, err := rules.Parse("orders.yaml", []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders-per-merchant
    queue:
      capacity: 100
      outflow: {unit: second, requests_per_unit: 10}
      total_outflow: {unit: second, requests_per_unit: 200}
    sink: {url: "http://127.0.0.1:8090/sink/orders"}
`))
	if err != nil {
		t.Fatal(err)
	}
	return set.Rule("orders-per-merchant")
}

func checkOnlyRule(t testing.TB) *rules.Rule {
	t.Helper()
	set, err := rules.Parse("auth.yaml", []byte(`
domain: auth
descriptors:
  - key: login
    name: logins
    rate_limit: {unit: minute, requests_per_unit: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	return set.Rule("logins")
}

func TestEffective(t *testing.T) {
	t.Parallel()
	r := testRule(t)

	// No queue field overridden: the rule itself, no copy.
	if got, err := overrides.Effective(r, overrides.Override{Paused: boolp(true)}); err != nil || got != r {
		t.Fatalf("Effective(paused only) = %p, %v; want the rule itself", got, err)
	}

	got, err := overrides.Effective(r, overrides.Override{Outflow: rate(2, time.Second), Capacity: i64(7)})
	if err != nil {
		t.Fatal(err)
	}
	if got == r || got.Queue == r.Queue {
		t.Fatal("Effective did not copy the rule")
	}
	if got.Queue.Outflow != *rate(2, time.Second) || got.Queue.Capacity != 7 || got.Queue.TotalOutflow != *rate(200, time.Second) {
		t.Errorf("effective queue = %+v", *got.Queue)
	}
	if r.Queue.Outflow != *rate(10, time.Second) || r.Queue.Capacity != 100 {
		t.Errorf("the rules file's rule changed: %+v", *r.Queue)
	}
	if got.Name != r.Name || got.Sink != r.Sink {
		t.Errorf("effective rule lost fields: %+v", got)
	}

	// Invalid result: the rule file's values and an error.
	got, err = overrides.Effective(r, overrides.Override{Outflow: rate(500, time.Second)})
	if err == nil || got != r {
		t.Errorf("Effective(outflow > total_outflow) = %p, %v; want the rule and an error", got, err)
	}

	// Check-only rule.
	co := checkOnlyRule(t)
	got, err = overrides.Effective(co, overrides.Override{Capacity: i64(3)})
	if !errors.Is(err, overrides.ErrNoQueue) || got != co {
		t.Errorf("Effective(check-only) = %p, %v; want the rule and ErrNoQueue", got, err)
	}
}

func TestOverrideJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	o := overrides.Override{Outflow: rate(5, time.Second), TotalOutflow: rate(3, 1500*time.Millisecond),
		Capacity: i64(9), Paused: boolp(true), UpdatedAt: at}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"outflow":{"unit":"second","requests_per_unit":5},"total_outflow":{"interval":"1.5s","requests_per_unit":3},"capacity":9,"paused":true,"updated_at":"2026-11-22T05:00:00Z"}`
	if string(data) != want {
		t.Errorf("json = %s\nwant   %s", data, want)
	}
	var back overrides.Override
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(o) || !back.UpdatedAt.Equal(at) {
		t.Errorf("round trip = %v, want %v", back, o)
	}
	// Unknown fields from a newer version are ignored; bad values are not.
	if err := json.Unmarshal([]byte(`{"capacity":3,"priority":1,"updated_at":"2026-11-22T05:00:00Z"}`), &back); err != nil || *back.Capacity != 3 {
		t.Errorf("unknown field: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"capacity":0}`), &back); err == nil {
		t.Error("capacity 0 read back without error")
	}
	if s := o.String(); s != "outflow=5/1s total_outflow=3/1.5s capacity=9 paused" {
		t.Errorf("String = %q", s)
	}
}

func FuzzParsePatch(f *testing.F) {
	for _, s := range []string{
		`{"outflow":{"unit":"second","requests_per_unit":5}}`,
		`{"total_outflow":{"interval":"1m30s","requests_per_unit":5},"capacity":3}`,
		`{"paused":true}`, `{"reset":true}`, `{"capacity":null}`, `{}`, `[]`, `{"outflow":{"unit":"Day"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := overrides.ParsePatch(body)
		if err != nil {
			if !errors.Is(err, overrides.ErrInvalidPatch) {
				t.Fatalf("error %v does not match ErrInvalidPatch", err)
			}
			return
		}
		// A valid patch's result survives the stored form.
		o := overrides.Override{}.Merge(p)
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var back overrides.Override
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatalf("stored form of %q does not read back: %v (%s)", body, err, data)
		}
		if !back.Equal(o) {
			t.Fatalf("round trip of %q: %v, want %v", body, back, o)
		}
	})
}
