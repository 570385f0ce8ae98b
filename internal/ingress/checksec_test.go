package ingress_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/tlsx/tlstest"
)

// Rules of the check-security tests: a marketing queue rule (5 a day, parked when over),
// one that shares its counters with checks, check rules with and without
// limit_override, and a blocked one.
const checkSecRules = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    name: marketing
    rate_limit: {unit: day, requests_per_unit: 5}
    overflow: park
    queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:1/unused"}
  - key: message_type
    value: promo
    name: promo
    checks: share
    rate_limit: {unit: day, requests_per_unit: 5}
    overflow: park
    queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:1/unused"}
---
domain: api
descriptors:
  - key: user
    name: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tight
    name: tight
    rate_limit: {unit: minute, requests_per_unit: 10}
    limit_override: {max_factor: 3, max_window: 1h}
  - key: fixed
    name: fixed
    rate_limit: {unit: minute, requests_per_unit: 10}
    limit_override: {max_factor: 0}
  - key: blocked
    name: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: k
    name: override
    rate_limit: {unit: minute, requests_per_unit: 1}
`

const (
	checkAll  = "check-any-0123456789abcdef"
	checkAPI  = "check-api-0123456789abcdef"
	submitAny = "submit-any-0123456789abcdef"
)

func writeTokens(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "submit-tokens")
	if err := os.WriteFile(file, []byte("checker check "+checkAll+"\napi-checker check:api "+checkAPI+"\napp submit "+submitAny+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func rlsCall(ctx context.Context, conn *grpc.ClientConn, token string, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
}

func rlsReq(domain string, kv ...string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{desc(kv...)}}
}

// With -submit-tokens set, the check API — POST /v1/check, POST /json and gRPC — needs a
// token of scope check (check:DOMAIN: that domain only): none or an unknown one is 401
// (Unauthenticated), a submit token or another domain's is 403 (PermissionDenied). A
// check token does not submit. Before, all three were open to anyone.
func TestCheckTokens(t *testing.T) {
	t.Parallel()
	m := startRules(t, checkSecRules, io.Discard, "-submit-tokens", writeTokens(t))
	base := "http://" + m.Addr.String()
	check := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u-1"}]}]}`
	other := `{"domain":"messaging","descriptors":[{"entries":[{"key":"message_type","value":"marketing"}]}]}`
	envoy := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u-2"}]}]}`
	for _, c := range []struct {
		path, token, body string
		want              int
	}{
		{"/v1/check", "", check, 401},
		{"/v1/check", "unknown-0123456789abcdef", check, 401},
		{"/v1/check", routesToken, check, 401}, // an admin token is no check token
		{"/v1/check", submitAny, check, 403},
		{"/v1/check", checkAPI, other, 403},
		{"/v1/check", checkAPI, check, 200},
		{"/v1/check", checkAll, other, 200},
		{"/json", "", envoy, 401},
		{"/json", submitAny, envoy, 403},
		{"/json", checkAPI, `{"domain":"messaging","descriptors":[{"entries":[{"key":"message_type","value":"marketing"}]}]}`, 403},
		{"/json", checkAPI, envoy, 200},
	} {
		a := call(t, "POST", base+c.path, c.token, c.body)
		if a.status != c.want {
			t.Errorf("%s with %q: %d %v, want %d", c.path, c.token, a.status, a.body, c.want)
		}
		if c.want == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s with %q: 401 without a Bearer challenge", c.path, c.token)
		}
		if c.want >= 400 && a.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s with %q: %s, want a problem", c.path, c.token, a.header.Get("Content-Type"))
		}
	}
	// A check token does not submit.
	sub := `{"domain":"api","descriptor":[{"key":"user","value":"u-1"}],"payload":{"n":1}}`
	if a := call(t, "POST", base+"/v1/messages", checkAll, sub); a.status != 403 {
		t.Errorf("submit with a check token: %d %v, want 403", a.status, a.body)
	}

	conn, err := grpc.NewClient(m.GRPCAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	for _, c := range []struct {
		name, token string
		req         *rlsv3.RateLimitRequest
		want        codes.Code
	}{
		{"no metadata", "", rlsReq("api", "user", "g-1"), codes.Unauthenticated},
		{"unknown token", "unknown-0123456789abcdef", rlsReq("api", "user", "g-1"), codes.Unauthenticated},
		{"submit token", submitAny, rlsReq("api", "user", "g-1"), codes.PermissionDenied},
		{"another domain", checkAPI, rlsReq("messaging", "message_type", "marketing"), codes.PermissionDenied},
		{"its domain", checkAPI, rlsReq("api", "user", "g-1"), codes.OK},
		{"any domain", checkAll, rlsReq("messaging", "message_type", "marketing"), codes.OK},
	} {
		if _, err := rlsCall(ctx, conn, c.token, c.req); status.Code(err) != c.want {
			t.Errorf("gRPC %s: %v, want %v", c.name, err, c.want)
		}
	}
	// Not Bearer: refused, whatever follows.
	bad := metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+checkAll)
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(bad, rlsReq("api", "user", "g-1")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC with Basic: %v, want Unauthenticated", err)
	}
	// Every refusal is counted, by reason and transport.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sluice_checks_refused_total{reason="unauthenticated",transport="http"} 4`,
		`sluice_checks_refused_total{reason="forbidden",transport="http"} 4`,
		`sluice_checks_refused_total{reason="unauthenticated",transport="grpc"} 3`,
		`sluice_checks_refused_total{reason="forbidden",transport="grpc"} 2`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The issue's reproduction: a check of hits_addend 5 on the marketing rule (5 a day,
// overflow: park) spent the whole day's quota of submissions, and the user's next
// marketing message was parked until tomorrow. Checks now count on counters of their own
// (checks: own, the default); only checks: share spends the admission quota.
func TestCheckDoesNotSpendAdmissionQuota(t *testing.T) {
	t.Parallel()
	m := startRules(t, checkSecRules, io.Discard)
	base := "http://" + m.Addr.String()
	for _, c := range []struct {
		rule, state string
	}{{"marketing", "queued"}, {"promo", "parked"}} {
		body := fmt.Sprintf(`{"domain":"messaging","hits_addend":5,"descriptors":[{"entries":[{"key":"message_type","value":%q}]}]}`, c.rule)
		if a := call(t, "POST", base+"/v1/check", "", body); a.status != 200 || a.body["overall_code"] != "OK" {
			t.Fatalf("%s: check of 5: %d %v", c.rule, a.status, a.body)
		}
		// The checks' own count is spent: a further check is over.
		if a := call(t, "POST", base+"/v1/check", "", strings.Replace(body, `"hits_addend":5`, `"hits_addend":1`, 1)); a.status != 429 {
			t.Fatalf("%s: check after 5: %d %v, want 429", c.rule, a.status, a.body)
		}
		sub := fmt.Sprintf(`{"domain":"messaging","descriptor":[{"key":"message_type","value":%q}],"payload":{"n":1}}`, c.rule)
		if a := call(t, "POST", base+"/v1/messages", "", sub); a.status != 202 || a.body["state"] != c.state {
			t.Fatalf("%s: submit after the checks: %d %v, want 202 %s", c.rule, a.status, a.body, c.state)
		}
	}
}

// An mTLS deployment: -tls-client-names admits only the listed identities to the
// listeners (a certificate the same CA signed for anyone else fails the handshake), and
// -check-client-names lets the envoy sidecar's identity check without a token, over HTTP
// and gRPC, while another admitted identity still needs one.
func TestCheckClientNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sluice test CA")
	leaf := ca.Issue(t, "ingress")
	clientCA := tlstest.NewCA(t, "mesh CA")
	m := startRules(t, checkSecRules, io.Discard, "-submit-tokens", writeTokens(t),
		"-tls-cert", tlstest.Write(t, dir, "server.crt", leaf.CertPEM), "-tls-key", tlstest.Write(t, dir, "server.key", leaf.KeyPEM),
		"-tls-client-ca", tlstest.Write(t, dir, "client-ca.crt", clientCA.CertPEM),
		"-tls-client-names", "envoy,app", "-check-client-names", "envoy")
	base := "https://" + m.Addr.String()
	as := func(cn string) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientCA.Issue(t, cn).TLS(t)}}
	}
	check := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u-1"}]}]}`
	post := func(tc *tls.Config, token string) (int, error) {
		req, _ := http.NewRequest("POST", base+"/v1/check", strings.NewReader(check))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpsClient(tc).Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post(as("stranger"), checkAll); err == nil {
		t.Fatalf("a certificate not in -tls-client-names was served: %d", code)
	}
	if code, err := post(as("envoy"), ""); err != nil || code != 200 {
		t.Fatalf("envoy's certificate without a token: %d %v, want 200", code, err)
	}
	if code, err := post(as("app"), ""); err != nil || code != 401 {
		t.Fatalf("app's certificate without a token: %d %v, want 401", code, err)
	}
	if code, err := post(as("app"), checkAll); err != nil || code != 200 {
		t.Fatalf("app's certificate with a check token: %d %v, want 200", code, err)
	}
	for cn, want := range map[string]codes.Code{"envoy": codes.OK, "app": codes.Unauthenticated} {
		conn, err := grpc.NewClient(m.GRPCAddr.String(), grpc.WithTransportCredentials(credentials.NewTLS(as(cn))))
		if err != nil {
			t.Fatal(err)
		}
		_, err = rlsCall(context.Background(), conn, "", rlsReq("api", "user", "g-"+cn))
		conn.Close()
		if status.Code(err) != want {
			t.Errorf("gRPC as %s: %v, want %v", cn, err, want)
		}
	}
	conn, err := grpc.NewClient(m.GRPCAddr.String(), grpc.WithTransportCredentials(credentials.NewTLS(as("stranger"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := rlsCall(context.Background(), conn, checkAll, rlsReq("api", "user", "g-x")); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC as a stranger: %v, want a failed handshake (Unavailable)", err)
	}
}

// A descriptor's limit override is bounded: its window by the rule's
// limit_override.max_window or -override-max-window (24h), its rate by max_factor × the
// rule's (default 10); max_factor: 0 refuses overrides. DAY × 106000 made counters that
// lived 233 years and YEAR × 1048576 answered 500: both are 400 problems (gRPC
// InvalidArgument) now, and every counter the accepted overrides made expires within
// their window.
func TestLimitOverrideBounds(t *testing.T) {
	t.Parallel()
	m := startRules(t, checkSecRules, io.Discard)
	base := "http://" + m.Addr.String()
	override := func(key, value string, rpu uint64, unit string, mult uint64) string {
		return fmt.Sprintf(`{"domain":"api","descriptors":[{"entries":[{"key":%q,"value":%q}],"limit":{"requests_per_unit":%d,"unit":%q,"unit_multiplier":%d}}]}`,
			key, value, rpu, unit, mult)
	}
	for _, c := range []struct {
		name, body string
		want       int
		detail     string
	}{
		{"DAY × 106000", override("nobody", "x", 50, "DAY", 106000), 400, "106000 × DAY is longer than a limit override's longest window"},
		{"YEAR × 1048576", override("nobody", "x", 50, "YEAR", 1048576), 400, "1048576 × YEAR is longer"},
		{"YEAR × 1048576 on a rule", override("user", "u-1", 50, "YEAR", 1048576), 400, "1048576 × YEAR is longer"},
		{"2 days, unmatched", override("nobody", "x", 50, "DAY", 2), 400, "a window of 48h0m0s is longer than -override-max-window allows (24h0m0s)"},
		{"a day, unmatched", override("nobody", "x", 50, "DAY", 1), 200, ""},
		{"beyond what the limiter counts", override("nobody", "y", 4294967295, "DAY", 1), 400, "4294967295 per 24h0m0s is more than the limiter can count"},
		{"10× the rule", override("user", "u-1", 100, "MINUTE", 1), 200, ""},
		{"more than 10×", override("user", "u-2", 101, "MINUTE", 1), 400, `101 per 1m0s is more than 10 × rule "user"'s 10 per 1m0s (-override-max-factor)`},
		{"more than 10× per second", override("user", "u-3", 2, "SECOND", 1), 400, "more than 10 ×"},
		{"3× in an hour", override("tight", "t-1", 1800, "HOUR", 1), 200, ""},
		{"more than 3×", override("tight", "t-2", 31, "MINUTE", 1), 400, `rule "tight"'s limit_override.max_factor`},
		{"longer than max_window", override("tight", "t-3", 1, "HOUR", 2), 400, `longer than rule "tight"'s limit_override.max_window allows (1h0m0s)`},
		{"max_factor 0", override("fixed", "f-1", 1, "MINUTE", 1), 400, `rule "fixed" takes no limit override`},
		{"blocked stays blocked", override("blocked", "b-1", 1, "MINUTE", 1), 400, "more than 10 ×"},
	} {
		for _, path := range []string{"/v1/check", "/json"} {
			body := c.body
			if path == "/json" {
				body = strings.NewReplacer(`"requests_per_unit"`, `"requestsPerUnit"`, `"unit_multiplier"`, `"unitMultiplier"`).Replace(body)
			}
			a := call(t, "POST", base+path, "", body)
			if a.status != c.want {
				t.Errorf("%s %s: %d %v, want %d", c.name, path, a.status, a.body, c.want)
				continue
			}
			if c.want == 400 {
				detail, _ := a.body["detail"].(string)
				field, _ := a.body["field"].(string)
				if !strings.Contains(detail, c.detail) || !strings.HasPrefix(field, "descriptors[0].limit") {
					t.Errorf("%s %s: field %q detail %q, want descriptors[0].limit… and %q", c.name, path, field, detail, c.detail)
				}
			}
		}
	}
	// gRPC answers the same refusals with InvalidArgument, never Internal.
	conn, err := grpc.NewClient(m.GRPCAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		unit typev3.RateLimitUnit
		mult uint32
		key  string
	}{{typev3.RateLimitUnit_YEAR, 1 << 20, "nobody"}, {typev3.RateLimitUnit_DAY, 106000, "user"}, {typev3.RateLimitUnit_DAY, 2, "nobody"}} {
		req := rlsReq("api", c.key, "g-1")
		req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 50, Unit: c.unit, UnitMultiplier: wrapperspb.UInt32(c.mult)}
		if _, err := rlsCall(context.Background(), conn, "", req); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "descriptors[0].limit") {
			t.Errorf("gRPC %v × %d: %v, want InvalidArgument naming descriptors[0].limit", c.unit, c.mult, err)
		}
	}
	// GET /v1/admin/rules shows each rule's checks and limit_override.
	a := call(t, "GET", base+"/v1/admin/rules", routesToken, "")
	got := map[string]string{}
	for _, r := range a.body["rules"].([]any) {
		r := r.(map[string]any)
		got[r["name"].(string)] = fmt.Sprint(r["checks"], " ", r["limit_override"])
	}
	for name, want := range map[string]string{
		"marketing": "own <nil>", "promo": "share <nil>", "user": "<nil> <nil>",
		"tight": "<nil> map[max_factor:3 max_window:1h0m0s]", "fixed": "<nil> map[max_factor:0]",
	} {
		if got[name] != want {
			t.Errorf("GET /v1/admin/rules %s: checks, limit_override %s, want %s", name, got[name], want)
		}
	}
	// No counter in the store outlives a day (the longest accepted window).
	ctx := context.Background()
	keys, err := m.Stack.Redis.Keys(ctx, "sl:lim:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("limiter keys: %v %v", keys, err)
	}
	for _, k := range keys {
		ttl, err := m.Stack.Redis.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > 24*time.Hour+time.Minute {
			t.Errorf("key %s expires in %v (%v), want within a day", k, ttl, err)
		}
	}
}

// gRPC server reflection is off unless -grpc-reflection (`sluice dev` turns it on:
// TestGRPCDev).
func TestGRPCReflectionOffByDefault(t *testing.T) {
	t.Parallel()
	g := startGRPC(t, nil)
	if err := listServices(g.conn); status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection without -grpc-reflection: %v, want Unimplemented", err)
	}
}

// listServices asks conn's server reflection for its services.
func listServices(conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return err
	}
	// A Send that finds the stream already ended by the server (Unimplemented comes back
	// at once) is io.EOF: the status is what Recv returns then.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = stream.Recv()
	return err
}

// Submit token files take check and check:DOMAIN lines beside submit ones.
func TestParseCheckTokens(t *testing.T) {
	t.Parallel()
	toks, err := ingress.ParseTokens([]byte("a check "+checkAll+"\nb check:api "+checkAPI+"\nc submit:api "+submitAny+"\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, scope, domain string }{{"a", "check", ""}, {"b", "check", "api"}, {"c", "submit", "api"}}
	for i, w := range want {
		if toks[i].Name != w.name || toks[i].Scope != w.scope || toks[i].Domain != w.domain {
			t.Errorf("token %d: %+v, want %+v", i, toks[i], w)
		}
	}
	for _, line := range []string{"x check: " + checkAll, "x checks " + checkAll, "x check:api:b " + checkAll} {
		_, err := ingress.ParseTokens([]byte(line), false)
		if line == "x check:api:b "+checkAll {
			// a domain is any non-empty string after the first ':' (as submit:DOMAIN)
			if err != nil {
				t.Errorf("%q: %v", line, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "want submit, submit:DOMAIN, check or check:DOMAIN") {
			t.Errorf("%q: %v", line, err)
		}
	}
	if _, err := ingress.ParseTokens([]byte("x check "+checkAll), true); err == nil {
		t.Error("an admin token file took a check token")
	}
}

// The counters of limit overrides are apart from every rule's, even a rule named
// "override" whose key spells an override's: before, the two shared one counter.
func TestOverrideCountersApart(t *testing.T) {
	t.Parallel()
	m := startRules(t, checkSecRules, io.Discard)
	base := "http://" + m.Addr.String()
	over := `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":"MINUTE"}}]}`
	if a := call(t, "POST", base+"/v1/check", "", over); a.status != 200 {
		t.Fatalf("override: %d %v", a.status, a.body)
	}
	// The override's counter is "<len>:api<len>:k<len>:v" under its name.
	spelled := `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"3:api1:k1:v"}]}]}`
	if a := call(t, "POST", base+"/v1/check", "", spelled); a.status != 200 {
		t.Fatalf("the rule's own first check: %d %v, want 200 (its counter is not the override's)", a.status, a.body)
	}
}
