package request

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// decodeArrayByDecoder is decodeArray without scanArray: encoding/json's decoder alone.
func decodeArrayByDecoder(body []byte, max int) ([]Submit, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, false
	}
	var reqs []Submit
	for dec.More() {
		if len(reqs) == max {
			return nil, false
		}
		reqs = append(reqs, Submit{})
		if err := dec.Decode(&reqs[len(reqs)-1]); err != nil {
			return nil, false
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim(']') {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return reqs, true
}

// scanPayloads are the payloads the scanner tests put in their bodies: plain, spaced,
// escaped, of every JSON type, and broken in the ways a scan of their extent could miss.
var scanPayloads = []string{`{"order":"x"}`, ` { "a" : [1, 2.5e3, {"b":"c\"}]"}] , "d":null } `, `"s,}]"`, `12`, `-0.5`, `true`, `[]`,
	`{"u":"\u00e9\ud83d\ude00 é"}`, `null`, `{"a":1`, `{"a":1}}`, `[1,]`, `"\x"`, "\"a\x01\"", `nul`, ``, "\"\xff\""}

// TestScanArrayDecodesAsTheDecoder: every body scanArray takes, it decodes exactly as
// encoding/json's decoder does (payloads byte for byte); the others it leaves to it.
func TestScanArrayDecodesAsTheDecoder(t *testing.T) {
	item := func(fields ...string) string { return "{" + strings.Join(fields, ",") + "}" }
	desc := `"descriptor":[{"key":"merchant_id","value":"m-1"}]`
	var bodies []string
	for _, p := range scanPayloads {
		bodies = append(bodies, "["+item(`"domain":"orders"`, desc, `"payload":`+p)+"]")
		bodies = append(bodies, "[ "+item(`"payload":`+p, `"domain":"orders"`, desc)+" ,\n"+item(`"domain":"orders"`, desc, `"payload":`+p, `"ttl":"1m"`)+" ]\n")
	}
	bodies = append(bodies,
		"["+item(`"domain":"orders"`, `"descriptor":[{"value":"v","key":"k"},{"key":"a","value":"b"}]`, `"payload":1`, `"idempotency_key":"k-1"`,
			`"deliver_at":"2026-01-01T00:00:00Z"`, `"delay":"1h"`, `"expires_at":"2027-01-01T00:00:00Z"`)+"]",
		"["+item(`"domain":"orders"`, `"descriptor":[{"key":"k"}]`, `"payload":1`)+"]",
		"["+item(`"domain":"orders"`, `"descriptor":[]`, `"payload":1`)+"]",
		"["+item(`"domain":"orders"`, `"descriptor":null`, `"payload":1`)+"]",
		"["+item(`"Domain":"orders"`, desc, `"payload":1`)+"]",
		"["+item(`"domain":"orders"`, `"domain":"other"`, desc, `"payload":1`)+"]",
		"["+item(`"domain":"or\"ders"`, desc, `"payload":1`)+"]",
		"["+item(`"domain":"ordérs"`, desc, `"payload":1`)+"]",
		"["+item(`"domain":"orders"`, desc, `"payload":1`, `"headers":{"X-A":"b"}`)+"]",
		"["+item(`"domain":"orders"`, desc, `"payload":1`, `"time_zone":"Asia/Seoul"`)+"]",
		"["+item(`"domain":"orders"`, desc, `"payload":1`, `"time_zone":"Asia/Seoul"`, `"time_zone":"UTC"`)+"]",
		"["+item(`"domain":"orders"`, desc, `"payload":1`, `"unknown":1`)+"]",
		"["+item(`"domain":null`, desc, `"payload":1`)+"]",
		"["+item(`"domain":1`, desc, `"payload":1`)+"]",
		"["+item()+"]",
		"["+item(`"domain":"orders"`)+","+item(`"domain":"b"`)+"]",
		"["+item(`"domain":"orders"`)+"] x",
		"["+item(`"domain":"orders"`)+",]",
		"["+item(`"domain":"orders"`)+"",
		"[1]", "[]", "[", "", "{}", `["a"]`,
	)
	for _, max := range []int{500, 1} {
		for _, body := range bodies {
			want, wantOK := decodeArrayByDecoder([]byte(body), max)
			got, ok := scanArray([]byte(body), max, nil)
			if ok && (!wantOK || !reflect.DeepEqual(got, want)) {
				t.Errorf("max %d, %s:\n scanArray %+v\n decoder   %+v (ok %v)", max, body, got, want, wantOK)
			}
			if all, allOK := decodeArray([]byte(body), max, nil); allOK != wantOK || len(all)+len(want) > 0 && !reflect.DeepEqual(all, want) {
				t.Errorf("max %d, %s: decodeArray %+v %v, decoder %+v %v", max, body, all, allOK, want, wantOK)
			}
		}
	}
	// The report's body is taken.
	payload := fmt.Sprintf(`{"order":%q}`, strings.Repeat("x", 116))
	var parts []string
	for i := range 100 {
		parts = append(parts, fmt.Sprintf(`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-%d"}],"payload":%s}`, i, payload))
	}
	body := []byte("[" + strings.Join(parts, ",") + "]")
	got, ok := scanArray(body, 500, nil)
	want, _ := decodeArrayByDecoder(body, 500)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("the report's batch: scanArray ok %v", ok)
	}
}

// TestScanOneDecodesAsTheDecoder: a single submission the scanner takes is decoded as
// encoding/json decodes it; every other body goes to encoding/json, which answers it.
func TestScanOneDecodesAsTheDecoder(t *testing.T) {
	item := func(fields ...string) string { return "{" + strings.Join(fields, ",") + "}" }
	desc := `"descriptor":[{"key":"merchant_id","value":"m-1"}]`
	var bodies []string
	for _, p := range scanPayloads {
		bodies = append(bodies, item(`"domain":"orders"`, desc, `"payload":`+p), " "+item(`"payload":`+p, `"domain":"orders"`, desc, `"ttl":"1m"`)+"\n")
	}
	bodies = append(bodies,
		item(`"domain":"orders"`, `"descriptor":[{"value":"v","key":"k"},{"key":"a","value":"b"}]`, `"payload":1`, `"idempotency_key":"k-1"`,
			`"deliver_at":"2026-01-01T00:00:00Z"`, `"delay":"1h"`, `"expires_at":"2027-01-01T00:00:00Z"`),
		item(`"domain":"orders"`, `"descriptor":[]`, `"payload":1`),
		item(`"domain":"orders"`, `"domain":"other"`, desc, `"payload":1`),
		item(`"domain":"or\"ders"`, desc, `"payload":1`),
		item(`"domain":"orders"`, desc, `"payload":1`, `"headers":{"X-A":"b"}`),
		item(`"domain":"orders"`, desc, `"payload":1`, `"time_zone":"Asia/Seoul"`),
		item(`"domain":"orders"`, desc, `"payload":1`, `"time_zone":7`),
		item(`"domain":"orders"`, desc, `"payload":1`, `"unknown":1`),
		item(`"domain":1`, desc, `"payload":1`),
		item(), item(`"domain":"orders"`)+" x", item(`"domain":"orders"`)+item(), "{", "", "[]", `"a"`,
	)
	req, _ := http.NewRequest(http.MethodPost, "/v1/messages", nil)
	req.Header.Set("Content-Type", "application/json")
	for _, body := range bodies {
		var want Submit
		wantP := DecodeSubmitJSON(req, []byte(body), &want)
		var got Submit
		gotP := DecodeSubmit(req, []byte(body), &got)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotP, wantP) {
			t.Errorf("%s:\n DecodeSubmit %+v %v\n DecodeSubmitJSON   %+v %v", body, got, gotP, want, wantP)
		}
		var one Submit
		if ScanOne([]byte(body), &one) && (wantP != nil || !reflect.DeepEqual(one, want)) {
			t.Errorf("%s: ScanOne took it as %+v; DecodeSubmitJSON %+v %v", body, one, want, wantP)
		}
	}
	// The report's body is scanned.
	body := fmt.Sprintf(`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"order":%q}}`, strings.Repeat("x", 116))
	var one Submit
	if !ScanOne([]byte(body), &one) {
		t.Fatal("the report's body is not scanned")
	}
}
