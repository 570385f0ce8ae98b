package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// answer is a check's answer, whichever transport carried it.
type answer struct {
	Overall  string
	Statuses []answerStatus
	Headers  map[string]string
	Error    string // the field and detail of a refused request
}

type answerStatus struct {
	Code      string
	Limit     string // name/requests/unit×multiplier, "" without one
	Remaining uint64
	Reset     time.Duration
}

// TestCheckParity sends one random sequence of check requests to POST /v1/check of one
// ingress and to the gRPC ShouldRateLimit of another (same rules, each with its own
// Redis, the same frozen clock moved alike) and requires the same answer to every request:
// codes, limits, remaining, reset, headers and the refusal of bad input.
func TestCheckParity(t *testing.T) {
	t.Parallel()
	hc, gc := newFrozen(), newFrozen()
	h := startGRPC(t, hc.clock())
	g := startGRPC(t, gc.clock(), "-grpc-response-headers")

	type pick struct {
		domain string
		kv     [][]string // descriptors
	}
	pool := []pick{
		{"rls", [][]string{{"login", "a"}, {"login", "b"}, {"api", "a"}, {"shadow", "a"}, {"tb", "a"}, {"swc", "a"},
			{"swl", "a"}, {"leaky", "a"}, {"multi", "a"}, {"thirty", "a"}, {"unknown", "a"}, {"login", "a", "deeper", "x"}}},
		{"messaging", [][]string{{"message_type", "marketing", "user_id", "u1"}, {"message_type", "other", "user_id", "u1"}}},
		{"orders", [][]string{{"merchant_id", "m1"}}},
		{"ex2_messaging", [][]string{{"message_type", "marketing", "to_number", "1"}, {"to_number", "1"}}},
		{"ex3_edge", [][]string{{"remote_address", "50.0.0.5"}, {"remote_address", "50.0.0.1"}}},
		{"ex5_internal", [][]string{{"ldap", "x"}, {"azure", "x"}}},
		{"ex6_shadow", [][]string{{"service", "s", "user", "user-a"}, {"service", "s", "user", "user-b"}}},
		{"ex7_replaces", [][]string{{"key_1", "value_1", "user", "alice"}, {"key_2", "value_2", "user", "alice"}}},
		{"ex9_wildcard", [][]string{{"key1", "value1"}, {"key1", "valueX"}, {"key1", "nope"}}},
		{"ex_multiplier", [][]string{{"key1", "a"}}},
		{"nowhere", [][]string{{"k", "v"}}},
	}
	rng := rand.New(rand.NewPCG(12, 25))
	const steps = 400
	seen := map[string]int{}
	for step := 0; step < steps; step++ {
		p := pool[rng.IntN(len(pool))]
		req := &rlsv3.RateLimitRequest{Domain: p.domain, HitsAddend: uint32(rng.IntN(4))}
		type jsonDesc struct {
			Entries    []map[string]string `json:"entries"`
			HitsAddend *uint64             `json:"hits_addend,omitempty"`
			Limit      map[string]any      `json:"limit,omitempty"`
		}
		var jds []jsonDesc
		for n := 1 + rng.IntN(3); n > 0; n-- {
			kv := p.kv[rng.IntN(len(p.kv))]
			d := desc(kv...)
			jd := jsonDesc{}
			for i := 0; i+1 < len(kv); i += 2 {
				jd.Entries = append(jd.Entries, map[string]string{"key": kv[i], "value": kv[i+1]})
			}
			switch rng.IntN(20) {
			case 0:
				hits := uint64(rng.IntN(3))
				d.HitsAddend, jd.HitsAddend = wrapperspb.UInt64(hits), &hits
			case 1:
				d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
				jd.Limit = map[string]any{"requests_per_unit": 2, "unit": "MINUTE"}
			case 2: // bad input, refused alike
				d.Entries[0].Key = ""
				jd.Entries[0]["key"] = ""
			}
			req.Descriptors = append(req.Descriptors, d)
			jds = append(jds, jd)
		}
		body, _ := json.Marshal(map[string]any{"domain": req.Domain, "hits_addend": req.HitsAddend, "descriptors": jds})

		viaHTTP := httpAnswer(t, h, string(body))
		viaGRPC := grpcAnswer(t, g, req)
		a, b := fmt.Sprintf("%+v", viaHTTP), fmt.Sprintf("%+v", viaGRPC)
		if a != b {
			t.Fatalf("step %d: %s\n  /v1/check: %s\n  gRPC:      %s", step, body, a, b)
		}
		switch {
		case viaHTTP.Error != "":
			seen["refused"]++
		case viaHTTP.Overall == "OVER_LIMIT":
			seen["over"]++
		default:
			seen["ok"]++
		}
		if viaHTTP.Headers["RateLimit-Policy"] != "" {
			seen["headers"]++
		}
		d := time.Duration(rng.IntN(900)) * time.Millisecond
		hc.Add(d)
		gc.Add(d)
	}
	// The sequence must have exercised every kind of answer, or it proved little.
	t.Logf("answers: %v", seen)
	for _, k := range []string{"refused", "over", "ok", "headers"} {
		if seen[k] < 10 {
			t.Fatalf("only %d %q answers in %d steps: %v", seen[k], k, steps, seen)
		}
	}
}

var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After", "X-RateLimit-Retry-After"}

func httpAnswer(t *testing.T, e *grpcEnv, body string) answer {
	t.Helper()
	r := e.do("POST", "/v1/check", body)
	if r.code == http.StatusBadRequest {
		return answer{Error: fmt.Sprint(r.body["field"]) + ": " + fmt.Sprint(r.body["detail"])}
	}
	var resp struct {
		OverallCode string `json:"overall_code"`
		Statuses    []struct {
			Code         string `json:"code"`
			CurrentLimit *struct {
				Name            string `json:"name"`
				RequestsPerUnit int64  `json:"requests_per_unit"`
				Unit            string `json:"unit"`
				UnitMultiplier  uint32 `json:"unit_multiplier"`
			} `json:"current_limit"`
			LimitRemaining     uint64 `json:"limit_remaining"`
			DurationUntilReset string `json:"duration_until_reset"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal([]byte(r.raw), &resp); err != nil || (r.code != 200 && r.code != 429) {
		t.Fatalf("/v1/check %s: %d %s", body, r.code, r.raw)
	}
	a := answer{Overall: resp.OverallCode, Headers: map[string]string{}}
	for _, st := range resp.Statuses {
		s := answerStatus{Code: st.Code, Remaining: st.LimitRemaining}
		if cl := st.CurrentLimit; cl != nil {
			s.Limit = fmt.Sprintf("%s/%d/%s×%d", cl.Name, cl.RequestsPerUnit, cl.Unit, max(cl.UnitMultiplier, 1))
		}
		if st.DurationUntilReset != "" {
			d, err := time.ParseDuration(st.DurationUntilReset)
			if err != nil {
				t.Fatalf("duration_until_reset %q: %v", st.DurationUntilReset, err)
			}
			s.Reset = d
		}
		a.Statuses = append(a.Statuses, s)
	}
	for _, name := range rateLimitHeaders {
		if v := r.header.Get(name); v != "" {
			a.Headers[name] = v
		}
	}
	return a
}

func grpcAnswer(t *testing.T, e *grpcEnv, req *rlsv3.RateLimitRequest) answer {
	t.Helper()
	resp, err := e.rls.ShouldRateLimit(context.Background(), req)
	if err != nil {
		msg := status.Convert(err).Message()
		if i := strings.Index(msg, ": "); i >= 0 && status.Code(err).String() == "InvalidArgument" {
			return answer{Error: msg}
		}
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	a := answer{Overall: resp.OverallCode.String(), Headers: map[string]string{}}
	for _, st := range resp.Statuses {
		s := answerStatus{Code: st.Code.String(), Remaining: uint64(st.LimitRemaining)}
		if cl := st.CurrentLimit; cl != nil {
			s.Limit = fmt.Sprintf("%s/%d/%s×%d", cl.Name, cl.RequestsPerUnit, cl.Unit, max(cl.UnitMultiplier.GetValue(), 1))
		}
		if st.DurationUntilReset != nil {
			s.Reset = st.DurationUntilReset.AsDuration()
		}
		a.Statuses = append(a.Statuses, s)
	}
	for _, hv := range resp.ResponseHeadersToAdd {
		a.Headers[hv.Key] = hv.Value
	}
	return a
}
