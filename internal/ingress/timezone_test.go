package ingress_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"
	_ "time/tzdata" // zones from the test binary, not the machine (the console test uses one too)

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const tzRules = `
domain: tz
descriptors:
  - key: user_id
    rate_limit: {unit: day, requests_per_unit: 2, time_zone: America/New_York}
---
domain: tzq
descriptors:
  - key: user_id
    name: tz-queue
    rate_limit: {unit: day, requests_per_unit: 1, time_zone: America/New_York}
    overflow: park
    queue: {capacity: 5, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:1/unused"}
`

// TestTimeZoneDayWindowOverTheWire: a rule with time_zone: America/New_York counts a
// day from New York's midnight, and every answer agrees on when it turns — across the
// DST changes of next year (the second Sunday of March is a 23-hour day, the first of
// November 25 hours; next year's, so that a parked message's retry_at is in the future
// of the real NATS server that schedules it): POST /v1/check's Retry-After,
// X-RateLimit-Reset and duration_until_reset, the gRPC duration_until_reset, and the
// retry_at of a message parked by the same kind of limit.
func TestTimeZoneDayWindowOverTheWire(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(tzRules), 0o644); err != nil {
		t.Fatal(err)
	}
	year := time.Now().Year() + 1
	spring := sunday(year, time.March, 8)  // 02:00 EST → 03:00 EDT
	fall := sunday(year, time.November, 1) // 02:00 EDT → 01:00 EST
	clock := newFrozen()
	// 08:00 EDT and 0.4 ms (the limiter counts whole ms); midnight EDT is 04:00Z tomorrow
	clock.ns.Store(spring.Add(12*time.Hour + 400*time.Microsecond).UnixNano())
	midnight := spring.Add(28 * time.Hour)
	// With envoy's local over-limit cache: a refusal is answered from memory until the
	// window ends — New York's midnight too.
	e := launch(t, path, clock.clock(), nil, "-local-cache-bytes", "100000")
	e.main.Stack.Admitter.Now = clock.Now // admissions too (Main.Now reaches the checks)
	rls := rlsv3.NewRateLimitServiceClient(dialGRPC(t, e))
	g := &grpcEnv{env: e, rls: rls}

	check := `{"domain":"tz","descriptors":[{"entries":[{"key":"user_id","value":"u-1"}]}]}`
	for i := 0; i < 2; i++ {
		if r := e.do("POST", "/v1/check", check); r.code != 200 {
			t.Fatalf("check %d: %d %s", i, r.code, r.raw)
		}
	}
	const untilMidnight = 16 * 3600 // 12:00Z to 04:00Z
	r := e.do("POST", "/v1/check", check)
	if r.code != 429 {
		t.Fatalf("third check: %d %s", r.code, r.raw)
	}
	wantHeaderInt(t, r.header, "Retry-After", untilMidnight)
	wantHeaderInt(t, r.header, "X-RateLimit-Reset", untilMidnight)
	if got, want := r.header.Get("RateLimit-Policy"), `"tz_user_id";q=2;w=82800`; got != want { // a 23-hour day
		t.Errorf("RateLimit-Policy %s, want %s", got, want)
	}
	if st := r.body["statuses"].([]any)[0].(map[string]any); st["duration_until_reset"] != "57600s" {
		t.Errorf("duration_until_reset %v, want 57600s", st["duration_until_reset"])
	}
	resp := g.call(t, "tz", 1, desc("user_id", "u-1")) // from the local cache
	if st := resp.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.DurationUntilReset.AsDuration() != untilMidnight*time.Second {
		t.Errorf("gRPC: %v %v, want OVER_LIMIT %ds", st.Code, st.DurationUntilReset.AsDuration(), untilMidnight)
	}

	// A queue rule's admission limit parks the second message until New York's midnight.
	rs := e.admin("GET", "/v1/admin/rules", "")
	if l := rs.body["rules"].([]any)[0].(map[string]any)["rate_limits"].([]any)[0].(map[string]any); l["time_zone"] != "America/New_York" || l["unit"] != "day" {
		t.Errorf("GET /v1/admin/rules: %v", l)
	}

	user := [][2]string{{"user_id", "u-9"}}
	if r := e.do("POST", "/v1/messages", submit("tzq", user, `"first"`)); r.code != 202 || r.body["state"] != "queued" {
		t.Fatalf("first message: %d %s", r.code, r.raw)
	}
	r = e.do("POST", "/v1/messages", submit("tzq", user, `"second"`))
	if want := midnight.Format(time.RFC3339); r.code != 202 || r.body["state"] != "parked" || r.body["retry_at"] != want {
		t.Fatalf("second message: %d %s; want parked until %s", r.code, r.raw, want)
	}

	// One ms before New York's midnight the day is still full; at midnight it is new.
	clock.Add(16*time.Hour - time.Millisecond)
	if r := e.do("POST", "/v1/check", check); r.code != 429 {
		t.Fatalf("23:59:59.999 EDT: %d %s", r.code, r.raw)
	}
	clock.Add(time.Millisecond)
	if r := e.do("POST", "/v1/check", check); r.code != 200 {
		t.Fatalf("midnight EDT: %d %s", r.code, r.raw)
	}

	// The first Sunday of November lasts 25 hours: from 04:00Z to 05:00Z the next day.
	clock.Add(fall.Add(4 * time.Hour).Sub(clock.Now()))
	fallCheck := `{"domain":"tz","descriptors":[{"entries":[{"key":"user_id","value":"u-2"}]}]}`
	r = e.do("POST", "/v1/check", fallCheck)
	wantHeaderInt(t, r.header, "X-RateLimit-Reset", 25*3600)
	if st := g.call(t, "tz", 1, desc("user_id", "u-2")).Statuses[0]; st.DurationUntilReset.AsDuration() != 25*time.Hour {
		t.Errorf("gRPC on %s: duration_until_reset %v, want 25h", fall.Format(time.DateOnly), st.DurationUntilReset.AsDuration())
	}
	clock.Add(24 * time.Hour) // 23:00 EST: still Sunday, both used
	r = e.do("POST", "/v1/check", fallCheck)
	if r.code != 429 {
		t.Fatalf("23:00 EST on %s: %d %s", fall.Format(time.DateOnly), r.code, r.raw)
	}
	wantHeaderInt(t, r.header, "Retry-After", 3600)
}

// sunday is the first Sunday on or after day of month in year, at 00:00 UTC.
func sunday(year int, month time.Month, day int) time.Time {
	d := time.Date(year, month, day, 0, 0, 0, 0, time.UTC)
	return d.AddDate(0, 0, (7-int(d.Weekday()))%7)
}
