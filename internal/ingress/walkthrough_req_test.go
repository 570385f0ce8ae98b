package ingress_test

import (
	"strings"
	"testing"
)

// The API walkthrough's findings on request checking: each case is a request and the
// status and problem field it must answer (docs/http-api.md "Conventions").

type fieldCase struct {
	name, path, body string
	header           []string
	code             int
	field            string // the problem's field (400), or the batch's first item's
}

func (e *env) wantFields(t *testing.T, cases []fieldCase) {
	t.Helper()
	for _, c := range cases {
		r := e.do("POST", c.path, c.body, c.header...)
		if r.code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, r.code, r.raw, c.code)
			continue
		}
		got := r.body["field"]
		if items, ok := r.body["items"].([]any); ok { // a batch: the first refused item's field
			got = nil
			for _, it := range items {
				if f, ok := it.(map[string]any)["field"]; ok {
					got = f
					break
				}
			}
		}
		if c.field != "" && got != c.field {
			t.Errorf("%s: field %v, want %q (%s)", c.name, got, c.field, r.raw)
		}
		if c.code >= 400 && r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", c.name, r.header.Get("Content-Type"))
		}
	}
}

// Keys are data: a string that is not UTF-8 (raw bytes, or an unpaired surrogate escape)
// was decoded as U+FFFD and accepted, so two different invalid keys shared one queue. Now
// it is a 400 naming the field, on both decoding paths (the scanner takes only ASCII, so
// such a body reaches encoding/json), in a batch item and in a check.
func TestInvalidUTF8IsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	item := func(value string) string {
		return `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"` + value + `"}],"payload":1}`
	}
	e.wantFields(t, []fieldCase{
		{"value", "/v1/messages", item("\xff\xfe"), nil, 400, "descriptor[0].value"},
		{"value, second entry", "/v1/messages", "{\"domain\":\"orders\",\"descriptor\":[{\"key\":\"merchant_id\",\"value\":\"m\"},{\"key\":\"x\",\"value\":\"a\xc3\"}],\"payload\":1}", nil, 400, "descriptor[1].value"},
		{"lone surrogate escape", "/v1/messages", item(`\ud800`), nil, 400, "descriptor[0].value"},
		{"low surrogate first", "/v1/messages", item(`\udc00\ud800`), nil, 400, "descriptor[0].value"},
		{"entry key", "/v1/messages", "{\"domain\":\"orders\",\"descriptor\":[{\"key\":\"merchant_id\x80\",\"value\":\"m\"}],\"payload\":1}", nil, 400, "descriptor[0].key"},
		{"domain", "/v1/messages", "{\"domain\":\"ord\xffers\",\"descriptor\":[{\"key\":\"merchant_id\",\"value\":\"m\"}],\"payload\":1}", nil, 400, "domain"},
		{"idempotency_key", "/v1/messages", "{\"domain\":\"orders\",\"descriptor\":[{\"key\":\"merchant_id\",\"value\":\"m\"}],\"payload\":1,\"idempotency_key\":\"k\xff\"}", nil, 400, "idempotency_key"},
		{"header value", "/v1/messages", "{\"domain\":\"orders\",\"descriptor\":[{\"key\":\"merchant_id\",\"value\":\"m\"}],\"payload\":1,\"headers\":{\"X-A\":\"\xff\"}}", nil, 400, "headers.X-A"},
		{"header name", "/v1/messages", "{\"domain\":\"orders\",\"descriptor\":[{\"key\":\"merchant_id\",\"value\":\"m\"}],\"payload\":1,\"headers\":{\"X-\xff\":\"a\"}}", nil, 400, "headers"},
		{"batch item", "/v1/messages", "[" + item("ok") + "," + item("\xff") + "]", nil, 200, "[1].descriptor[0].value"},
		{"ndjson item", "/v1/messages", item("ok2") + "\n" + item(`\udfff`) + "\n", []string{"Content-Type", "application/x-ndjson"}, 200, "[1].descriptor[0].value"},
		{"check", "/v1/check", "{\"domain\":\"auth\",\"descriptors\":[{\"entries\":[{\"key\":\"auth_type\",\"value\":\"log\xffin\"}]}]}", nil, 400, "descriptors[0].entries[0].value"},
		{"check, second descriptor", "/v1/check", `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}]},{"entries":[{"key":"auth_type","value":"\ud83d"}]}]}`, nil, 400, "descriptors[1].entries[0].value"},
		// Valid UTF-8 stays a key, written as it is or escaped (a surrogate pair).
		{"emoji", "/v1/messages", item("m-\U0001F600"), nil, 202, ""},
		{"escaped emoji", "/v1/messages", item(`m-\ud83d\ude01`), nil, 202, ""},
		{"escaped U+FFFD", "/v1/messages", item(`m-\ufffd`), nil, 202, ""},
		// The payload is not looked into: it reaches the sink byte for byte, as submitted
		// (docs/http-api.md), on both decoding paths.
		{"payload, scanned", "/v1/messages", "{\"domain\":\"orders\",\"descriptor\":[{\"key\":\"merchant_id\",\"value\":\"p1\"}],\"payload\":\"\xff\"}", nil, 202, ""},
		{"payload, decoded", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"p2"}],"payload":"\ud800","headers":{"X-A":"b"}}`, nil, 202, ""},
	})
}

// A problem's field is the whole path, array indexes included (docs/http-api.md's
// descriptor[0].value), for a value of the wrong type and for an unknown member, however
// deep; a batch item's is prefixed [i]. encoding/json's own errors gave descriptor.value,
// or the bare member name.
func TestProblemFieldsNameTheWholePath(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	ok := `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1}`
	e.wantFields(t, []fieldCase{
		{"value not a string", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":5}],"payload":1}`, nil, 400, "descriptor[0].value"},
		{"second entry's value", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"},{"key":"x","value":{"a":1}}],"payload":1}`, nil, 400, "descriptor[1].value"},
		{"unknown in an entry", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m","extra":1}],"payload":1}`, nil, 400, "descriptor[0].extra"},
		{"unknown at the top", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":{"extra":1},"extra":1}`, nil, 400, "extra"},
		{"descriptor not an array", "/v1/messages", `{"domain":"orders","descriptor":{"key":"merchant_id"},"payload":1}`, nil, 400, "descriptor"},
		{"header value not a string", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1,"headers":{"X-A":1}}`, nil, 400, "headers.X-A"},
		{"not an object", "/v1/messages", `"orders"`, nil, 400, "(body)"},
		{"check value", "/v1/check", `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":5}]}]}`, nil, 400, "descriptors[0].entries[0].value"},
		{"check unknown, nested", "/v1/check", `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login","x":1}]}]}`, nil, 400, "descriptors[0].entries[0].x"},
		{"check unknown in a descriptor", "/v1/check", `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}]},{"entries":[],"x":1}]}`, nil, 400, "descriptors[1].x"},
		{"check limit unit", "/v1/check", `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}],"limit":{"requests_per_unit":1,"unit":7}}]}`, nil, 400, "descriptors[0].limit.unit"},
		{"check hits_addend negative", "/v1/check", `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}],"hits_addend":-1}]}`, nil, 400, "descriptors[0].hits_addend"},
		{"batch item", "/v1/messages", "[" + ok + `,{"domain":"orders","descriptor":[{"key":"merchant_id","value":5}],"payload":1}]`, nil, 200, "[1].descriptor[0].value"},
		{"batch item unknown", "/v1/messages", "[" + ok + `,{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m","extra":1}],"payload":1}]`, nil, 200, "[1].descriptor[0].extra"},
	})
}

// An idempotency key is 1–256 bytes (docs/http-api.md, OpenAPI minLength 1): an empty one
// in the body, or an empty Idempotency-Key header, is a 400, not a submission without a
// key. A bad header is named as the header, not as the body's field.
func TestIdempotencyKeyLimitsNameWhereTheKeyCameFrom(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	body := func(key string, extra ...string) string {
		return submit("orders", merchant("idem-"+key), `1`, extra...)
	}
	long := strings.Repeat("k", 257)
	e.wantFields(t, []fieldCase{
		{"empty in the body", "/v1/messages", body("a", "idempotency_key", ""), nil, 400, "idempotency_key"},
		{"empty in the body, decoded", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1,"headers":{"X-A":"b"},"Idempotency_Key":""}`, nil, 400, "idempotency_key"},
		{"empty in the body, a header given", "/v1/messages", body("b", "idempotency_key", ""), []string{"Idempotency-Key", "k1"}, 400, "idempotency_key"},
		{"empty header", "/v1/messages", body("c"), []string{"Idempotency-Key", ""}, 400, "Idempotency-Key"},
		{"too long in the body", "/v1/messages", body("d", "idempotency_key", long), nil, 400, "idempotency_key"},
		{"too long header", "/v1/messages", body("e"), []string{"Idempotency-Key", long}, 400, "Idempotency-Key"},
		{"empty in a batch item", "/v1/messages", "[" + body("f", "idempotency_key", "") + "]", nil, 200, "[0].idempotency_key"},
		{"empty in a decoded batch item", "/v1/messages", `[{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1,"headers":{"X-A":"b"},"idempotency_key":""}]`, nil, 200, "[0].idempotency_key"},
		{"empty header on a batch", "/v1/messages", "[" + body("g") + "]", []string{"Idempotency-Key", ""}, 400, "Idempotency-Key"},
		// null is no key, as any absent field; 256 bytes is a key.
		{"null", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"n"}],"payload":1,"idempotency_key":null}`, nil, 202, ""},
		{"256 bytes", "/v1/messages", body("h"), []string{"Idempotency-Key", long[:256]}, 202, ""},
	})
}

// Header values are visible ASCII (docs/http-api.md): the sink receives them as HTTP
// headers, where bytes ≥ 0x80 are read as Latin-1, as UTF-8, or refused.
func TestHeaderValuesAreVisibleASCII(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	with := func(key, headers string) string {
		return `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"` + key + `"}],"payload":1,"headers":` + headers + `}`
	}
	e.wantFields(t, []fieldCase{
		{"emoji", "/v1/messages", with("h1", `{"X-A":"🙂"}`), nil, 400, "headers.X-A"},
		{"escaped", "/v1/messages", with("h2", `{"X-A":"caf\u00e9"}`), nil, 400, "headers.X-A"},
		{"control", "/v1/messages", with("h3", `{"X-A":"a\u0001"}`), nil, 400, "headers.X-A"},
		{"visible ASCII, space and tab", "/v1/messages", with("h4", `{"X-A":"a b\tc ~!"}`), nil, 202, ""},
	})
}

// The auth scheme is case-insensitive (RFC 9110 11.1): bearer, BEARER are Bearer.
func TestBearerSchemeInAnyCase(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for _, h := range []string{"Bearer s3cret-0123456789", "bearer s3cret-0123456789", "BEARER s3cret-0123456789", "bEaReR  s3cret-0123456789"} {
		if r := e.do("GET", "/v1/admin/whoami", "", "Authorization", h); r.code != 200 {
			t.Errorf("%q: %d %s", h, r.code, r.raw)
		}
	}
	for _, h := range []string{"Basic s3cret-0123456789", "Bearers3cret-0123456789", "Bearer", "Bearer ", "s3cret-0123456789", "Bearer wrong"} {
		if r := e.do("GET", "/v1/admin/whoami", "", "Authorization", h); r.code != 401 {
			t.Errorf("%q: %d %s", h, r.code, r.raw)
		}
	}
}

// A check's 415 says what a check takes; a submission's mentions NDJSON for a batch.
func TestUnsupportedMediaTypeSaysWhatTheEndpointTakes(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	xml := []string{"Content-Type", "application/xml"}
	check := `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}]}]}`
	if r := e.do("POST", "/v1/check", check, xml...); r.code != 415 || r.body["detail"] != "Content-Type must be application/json" {
		t.Errorf("check: %d %s", r.code, r.raw)
	}
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m"), `1`), xml...); r.code != 415 || !strings.Contains(r.raw, "application/x-ndjson") {
		t.Errorf("submit: %d %s", r.code, r.raw)
	}
}
