package client_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/httpx"
)

var t0 = time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)

// The client reads exactly what the server's header writer writes.
func TestParseRateLimitOfHTTPX(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	httpx.SetRateLimitHeaders(h, httpx.RateLimit{Policy: `orders "per" merchant`, Limit: 100, Remaining: 0,
		Reset: 1500 * time.Millisecond, Window: 10 * time.Second, RetryAfter: 2100 * time.Millisecond})
	rl := client.ParseRateLimit(h, t0)
	if rl.Limit != 100 || rl.Remaining != 0 || rl.Reset != 2*time.Second || rl.RetryAfter != 3*time.Second {
		t.Fatalf("%+v", rl)
	}
	if len(rl.Policies) != 1 || rl.Policies[0] != (client.Policy{Name: `orders "per" merchant`, Quota: 100, Window: 10 * time.Second}) {
		t.Fatalf("policies %+v", rl.Policies)
	}
	if len(rl.Current) != 1 || rl.Current[0] != (client.PolicyState{Name: `orders "per" merchant`, Remaining: 0, Reset: 2 * time.Second}) {
		t.Fatalf("current %+v", rl.Current)
	}
	if d, ok := client.ParseRetryAfter(h.Get("Retry-After"), t0); !ok || d != 3*time.Second {
		t.Fatalf("Retry-After %v %v", d, ok)
	}
}

func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header map[string][]string
		want   client.RateLimit
	}{
		{"none", nil, client.RateLimit{}},
		{"x-only", map[string][]string{"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"3"}, "X-Ratelimit-Reset": {"7"}},
			client.RateLimit{Limit: 10, Remaining: 3, Reset: 7 * time.Second}},
		{"x-reset-as-unix-time", map[string][]string{"X-Ratelimit-Reset": {"1795323630"}}, // t0 + 30s
			client.RateLimit{Reset: 30 * time.Second}},
		{"x-garbage", map[string][]string{"X-Ratelimit-Limit": {"ten"}, "X-Ratelimit-Remaining": {"-1"}}, client.RateLimit{}},
		{"ietf-only-fills-x", map[string][]string{"Ratelimit-Policy": {`"day";q=5;w=86400`}, "Ratelimit": {`"day";r=2;t=3600`}},
			client.RateLimit{Limit: 5, Remaining: 2, Reset: time.Hour,
				Policies: []client.Policy{{Name: "day", Quota: 5, Window: 24 * time.Hour}},
				Current:  []client.PolicyState{{Name: "day", Remaining: 2, Reset: time.Hour}}}},
		{"ietf-two-policies-two-lines-and-params", map[string][]string{
			"Ratelimit-Policy": {`"burst";q=100;w=60;qu="requests", "daily";q=1000;w=86400;pk=:cHsx:`},
			"Ratelimit":        {`"burst";r=50;t=30`, `daily;r=999;t=600;ext=?1`}},
			client.RateLimit{Limit: 100, Remaining: 50, Reset: 30 * time.Second,
				Policies: []client.Policy{{Name: "burst", Quota: 100, Window: time.Minute, QuotaUnit: "requests"}, {Name: "daily", Quota: 1000, Window: 24 * time.Hour, Partition: "cHsx"}},
				Current:  []client.PolicyState{{Name: "burst", Remaining: 50, Reset: 30 * time.Second}, {Name: "daily", Remaining: 999, Reset: 10 * time.Minute}}}},
		{"ietf-malformed-keeps-what-was-read", map[string][]string{"Ratelimit": {`"a";r=1;t=2, "b;r=3`}},
			client.RateLimit{Remaining: 1, Reset: 2 * time.Second, Current: []client.PolicyState{{Name: "a", Remaining: 1, Reset: 2 * time.Second}}}},
		{"escaped-name", map[string][]string{"Ratelimit-Policy": {`"we\"ird\\name";q=5;w=1`}},
			client.RateLimit{Limit: 5, Policies: []client.Policy{{Name: `we"ird\name`, Quota: 5, Window: time.Second}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := client.ParseRateLimit(http.Header(tc.header), t0)
			if !equalRL(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func equalRL(a, b client.RateLimit) bool {
	if a.Limit != b.Limit || a.Remaining != b.Remaining || a.Reset != b.Reset || a.RetryAfter != b.RetryAfter ||
		len(a.Policies) != len(b.Policies) || len(a.Current) != len(b.Current) {
		return false
	}
	for i := range a.Policies {
		if a.Policies[i] != b.Policies[i] {
			return false
		}
	}
	for i := range a.Current {
		if a.Current[i] != b.Current[i] {
			return false
		}
	}
	return true
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"99999999999999999", 365 * 24 * time.Hour, true},
		{t0.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Sun, 22 Nov 2026 05:01:30 GMT", 90 * time.Second, true},
		{"Sunday, 22-Nov-26 05:01:30 GMT", 90 * time.Second, true}, // RFC 850, still to be accepted
		{"Sun Nov 22 05:01:30 2026", 90 * time.Second, true},       // asctime
		{t0.Add(-time.Hour).Format(http.TimeFormat), 0, true},      // in the past: retry now
	} {
		got, ok := client.ParseRetryAfter(tc.in, t0)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseRateLimit(f *testing.F) {
	f.Add(`"a";q=1;w=2`, `"a";r=1;t=2`, "3")
	f.Add(`"\`, `:x`, "Sun, 22 Nov 2026 05:01:30 GMT")
	f.Fuzz(func(t *testing.T, policy, current, retryAfter string) {
		h := http.Header{"Ratelimit-Policy": {policy}, "Ratelimit": {current}, "Retry-After": {retryAfter}}
		rl := client.ParseRateLimit(h, t0)
		if rl.Limit < 0 || rl.Reset < 0 {
			t.Fatalf("%+v", rl)
		}
		if d, ok := client.ParseRetryAfter(retryAfter, t0); d < 0 || !ok && d != 0 {
			t.Fatalf("%v %v", d, ok)
		}
	})
}
