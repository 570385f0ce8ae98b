package ingress

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/httpx"
)

// typicalSubmit is a submit body of the size and shape clients send (about 250 bytes).
const typicalSubmit = `{"domain":"webhooks","descriptor":[{"key":"tenant","value":"acme-7f3a"},` +
	`{"key":"endpoint","value":"hooks.example.com/v1/ingest"}],"payload":{"event":"invoice.paid",` +
	`"id":"evt_1NqZ8b2e","amount":12900,"currency":"eur"},"idempotency_key":"evt_1NqZ8b2e"}`

// nested returns depth arrays nested in one another.
func nested(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }

// entries returns a descriptor of n entries.
func entries(n int) string {
	es := make([]string, n)
	for i := range es {
		es[i] = `{"key":"k","value":"v"}`
	}
	return "[" + strings.Join(es, ",") + "]"
}

// decodeCases are bodies of POST /v1/messages; fast says whether decodeSubmitFast takes the
// body itself rather than leaving it to encoding/json.
var decodeCases = []struct {
	name string
	body string
	fast bool
}{
	{"typical", typicalSubmit, true},
	{"empty object", `{}`, true},
	{"fields in another order", `{"idempotency_key":"i","payload":1,"descriptor":[{"value":"v","key":"k"}],"domain":"d"}`, true},
	{"white space everywhere", " \t\r\n{ \"domain\" :\t\"d\" ,\n\"descriptor\" : [ { \"key\" : \"k\" , \"value\" : \"v\" } , null ] ,\r\"payload\" : [ 1 , { \"a\" : [ ] } ] } \n\t", true},
	{"empty descriptor", `{"domain":"d","descriptor":[],"payload":{}}`, true},
	{"null descriptor", `{"domain":"d","descriptor":null,"payload":{}}`, true},
	{"null entry", `{"descriptor":[null,{"key":"k"}]}`, true},
	{"empty entry", `{"descriptor":[{}]}`, true},
	{"null key and value", `{"descriptor":[{"key":null,"value":null}]}`, true},
	{"repeated key in an entry", `{"descriptor":[{"key":"a","key":"b","value":"v","key":null}]}`, true},
	{"null strings", `{"domain":null,"idempotency_key":null,"payload":0}`, true},
	{"repeated domain", `{"domain":"a","domain":"b"}`, true},
	{"null after a domain", `{"domain":"a","domain":null}`, true},
	{"empty strings", `{"domain":"","descriptor":[{"key":"","value":""}],"idempotency_key":""}`, true},
	{"UTF-8 strings", `{"domain":"café","descriptor":[{"key":"日本","value":"😀"}],"idempotency_key":"ü"}`, true},
	{"16 entries", `{"descriptor":` + entries(16) + `}`, true},
	{"null payload", `{"payload":null}`, true},
	{"true payload", `{"payload":true}`, true},
	{"false payload", `{"payload": false }`, true},
	{"string payload with escapes", `{"payload":"a\"b\\c\/\b\f\n\r\t\u00e9\uD83D\uDE00"}`, true},
	{"string payload with invalid UTF-8", "{\"payload\":\"\xff\xfe\xed\xa0\x80\"}", true},
	{"number payloads", `{"payload":[0,-0,1,-12,3.25,-0.5e10,1E+2,2e-3,123456789012345678901234567890]}`, true},
	{"nested payload", `{"payload":{"a":{"b":[1,{"c":null}],"":"x"},"a":2}}`, true},
	{"repeated payload", `{"payload":{"first":1},"payload":[2]}`, true},
	{"payload nested as deep as encoding/json allows", `{"payload":` + nested(maxNestingDepth-1) + `}`, true},

	// Left to encoding/json.
	{"empty body", ``, false},
	{"only white space", " \n", false},
	{"null body", `null`, false},
	{"array body", `[]`, false},
	{"string body", `"x"`, false},
	{"escape in a string", `{"domain":"a\nb"}`, false},
	{"unicode escape in a string", `{"domain":"\u0041"}`, false},
	{"escape in a field name", `{"dom\u0061in":"d"}`, false},
	{"invalid UTF-8 in a string", "{\"domain\":\"a\xffb\"}", false},
	{"UTF-8 surrogate in a string", "{\"domain\":\"\xed\xa0\x80\"}", false},
	{"truncated UTF-8 in a string", "{\"domain\":\"\xe6\x97\"}", false},
	{"control character in a string", "{\"domain\":\"a\tb\"}", false},
	{"field name in another case", `{"Domain":"d"}`, false},
	{"field name in upper case", `{"descriptor":[{"KEY":"k"}]}`, false},
	{"field name with the Kelvin sign", "{\"descriptor\":[{\"\u212aey\":\"k\"}]}", false},
	{"unknown field", `{"domain":"d","extra":1}`, false},
	{"unknown field in an entry", `{"descriptor":[{"key":"k","extra":1}]}`, false},
	{"number domain", `{"domain":1}`, false},
	{"boolean idempotency key", `{"idempotency_key":true}`, false},
	{"object descriptor", `{"descriptor":{}}`, false},
	{"string descriptor", `{"descriptor":"x"}`, false},
	{"string entry", `{"descriptor":["x"]}`, false},
	{"number key", `{"descriptor":[{"key":1}]}`, false},
	{"repeated descriptor", `{"descriptor":[{"key":"a","value":"b"}],"descriptor":[{"key":"c"}]}`, false},
	{"repeated null descriptor", `{"descriptor":null,"descriptor":[]}`, false},
	{"17 entries", `{"descriptor":` + entries(17) + `}`, false},
	{"missing colon", `{"domain" "d"}`, false},
	{"missing comma", `{"domain":"d" "payload":1}`, false},
	{"trailing comma in the object", `{"domain":"d",}`, false},
	{"trailing comma in the descriptor", `{"descriptor":[{"key":"k"},]}`, false},
	{"trailing comma in an entry", `{"descriptor":[{"key":"k",}]}`, false},
	{"unterminated string", `{"domain":"d`, false},
	{"unterminated object", `{"domain":"d"`, false},
	{"second object", `{}{}`, false},
	{"trailing garbage", `{} x`, false},
	{"trailing bracket", `{}]`, false},
	{"missing payload value", `{"payload":}`, false},
	{"leading zero in the payload", `{"payload":01}`, false},
	{"bare minus in the payload", `{"payload":-}`, false},
	{"fraction without digits in the payload", `{"payload":1.}`, false},
	{"exponent without digits in the payload", `{"payload":1e+}`, false},
	{"trailing comma in the payload", `{"payload":[1,]}`, false},
	{"object payload without a value", `{"payload":{"a"}}`, false},
	{"bad escape in the payload", `{"payload":"\x"}`, false},
	{"short unicode escape in the payload", `{"payload":"\u12"}`, false},
	{"control character in the payload", "{\"payload\":\"\x01\"}", false},
	{"misspelt literal in the payload", `{"payload":tru}`, false},
	{"literal with a tail in the payload", `{"payload":nulls}`, false},
	{"null with a tail in the domain", `{"domain":nul}`, false},
	{"payload nested too deep", `{"payload":` + nested(maxNestingDepth) + `}`, false},
}

func TestDecodeSubmitAgreesWithDecodeJSON(t *testing.T) {
	t.Parallel()
	for _, c := range decodeCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var req submitRequest
			if fast := decodeSubmitFast([]byte(c.body), &req); fast != c.fast {
				t.Errorf("decodeSubmitFast = %v, want %v", fast, c.fast)
			}
			if !c.fast && !reflect.DeepEqual(req, submitRequest{}) {
				t.Errorf("decodeSubmitFast gave up but changed the request to %+v", req)
			}
			checkDecodeSubmit(t, "application/json", []byte(c.body))
		})
	}
}

func TestDecodeSubmitContentType(t *testing.T) {
	t.Parallel()
	for _, ct := range []string{"", "application/json", "application/json; charset=utf-8", "Application/JSON",
		"APPLİCATION/JSON", "text/plain", "application/jso", "application/x-www-form-urlencoded"} {
		checkDecodeSubmit(t, ct, []byte(typicalSubmit))
		checkDecodeSubmit(t, ct, []byte(`{"Domain":1}`))
	}
}

// TestDecodeSubmitMerges: a request that already holds values is decoded into as encoding/json
// does, merging (the server never does this; the fast path leaves it to encoding/json).
func TestDecodeSubmitMerges(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	body := []byte(`{"descriptor":[{"key":"k"}]}`)
	prior := func() submitRequest {
		return submitRequest{Domain: "d", Descriptor: []entry{{Key: "a", Value: "b"}}, IdempotencyKey: "i"}
	}
	want, got := prior(), prior()
	wantP := decodeJSON(r, body, &want)
	gotP := decodeSubmit(r, body, &got)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotP, wantP) {
		t.Errorf("decodeSubmit = %+v, %v; decodeJSON = %+v, %v", got, gotP, want, wantP)
	}
}

// checkDecodeSubmit fails t unless decodeSubmit and decodeJSON give the same request and the
// same problem for body, and decodeSubmit's request does not alias body.
func checkDecodeSubmit(t *testing.T, contentType string, body []byte) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	var want submitRequest
	wantP := decodeJSON(r, body, &want)

	// The server reuses the body's buffer for the next request: overwrite it.
	scratch := append([]byte(nil), body...)
	var got submitRequest
	gotP := decodeSubmit(r, scratch, &got)
	for i := range scratch {
		scratch[i] = 'X'
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("body %q, Content-Type %q:\ndecodeSubmit gave %#v\ndecodeJSON gave   %#v", body, contentType, got, want)
	}
	if !reflect.DeepEqual(gotP, wantP) {
		t.Errorf("body %q, Content-Type %q:\ndecodeSubmit answered %s\ndecodeJSON answered   %s", body, contentType, problemString(gotP), problemString(wantP))
	}
}

func problemString(p *httpx.Problem) string {
	if p == nil {
		return "no problem"
	}
	return strings.Join([]string{p.Type, p.Title, p.Field, p.Detail}, " | ")
}

func FuzzDecodeSubmit(f *testing.F) {
	for _, c := range decodeCases {
		// The deeply nested bodies are left to the table: mutating 20 kB makes the fuzzer crawl.
		if len(c.body) < 1000 {
			f.Add([]byte(c.body), "")
		}
	}
	f.Add([]byte(typicalSubmit), "application/json; charset=utf-8")
	f.Add([]byte(typicalSubmit), "Application/Json")
	f.Add([]byte(typicalSubmit), "text/plain")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		checkDecodeSubmit(t, contentType, body)
	})
}

// validJSON is json.Valid written with skipJSONValue.
func validJSON(data []byte) bool {
	end, ok := skipJSONValue(data, skipJSONSpace(data, 0), 0)
	return ok && skipJSONSpace(data, end) == len(data)
}

func TestSkipJSONValue(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		``, ` `, `null`, ` true `, `false`, `nul`, `nulll`, `0`, `-0`, `-`, `01`, `1.5`, `1.`, `.5`, `1e5`, `1E-5`,
		`1e`, `1e+`, `+1`, `""`, `"\u00e9"`, `"\u00e"`, `"\uZZZZ"`, `"\q"`, "\"\x1f\"", "\"\xff\"", `"`, `"\`,
		`[]`, `[1,2]`, `[1,]`, `[,1]`, `[1 2]`, `{}`, `{"a":1}`, `{"a":1,}`, `{"a"}`, `{1:1}`, `{"a":1 "b":2}`,
		`[] []`, `{}x`, nested(maxNestingDepth), nested(maxNestingDepth + 1),
		`{"a":` + nested(maxNestingDepth-1) + `}`, `{"a":` + nested(maxNestingDepth) + `}`,
	} {
		if got, want := validJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("validJSON(%.40q) = %v; json.Valid says %v", s, got, want)
		}
	}
}

func FuzzSkipJSONValue(f *testing.F) {
	for _, c := range decodeCases {
		if len(c.body) < 1000 {
			f.Add([]byte(c.body))
		}
	}
	for _, s := range []string{`-0.5e+10`, `"\u00e9\n"`, `[{"a":[true,false,null]}]`, "\"\xed\xa0\x80\"", `1 2`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Errorf("validJSON(%q) = %v; json.Valid says %v", data, got, want)
		}
	})
}

func BenchmarkDecodeSubmit(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	r.Header.Set("Content-Type", "application/json")
	body := []byte(typicalSubmit)
	for _, bm := range []struct {
		name   string
		decode func(*http.Request, []byte, *submitRequest) *httpx.Problem
	}{
		{"fast", decodeSubmit},
		{"std", func(r *http.Request, body []byte, req *submitRequest) *httpx.Problem { return decodeJSON(r, body, req) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var req submitRequest
				if p := bm.decode(r, body, &req); p != nil {
					b.Fatal(p.Detail)
				}
			}
		})
	}
}
