package queue

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

var pubAckSeeds = []string{
	`{"stream":"SL_orders","seq":1}`,
	`{"stream":"SL_orders","seq":18446744073709551615}`,
	`{"stream":"SL_orders","seq":18446744073709551616}`,
	`{"stream":"SL_orders","seq":42,"duplicate":true}`,
	`{"stream":"SL_orders","seq":42,"duplicate":false}`,
	`{"stream":"SL_orders","seq":42,"domain":"hub"}`,
	`{"stream":"SL_orders","seq":042}`,
	`{"stream":"SL_orders","seq":0}`,
	`{"stream":"SL_orders","seq":-1}`,
	`{"stream":"SL_orders","seq":1.5}`,
	`{"stream":"S\u004c","seq":7}`,
	`{"stream":"","seq":7}`,
	`{"stream":"SL","seq":7} `,
	`{"stream":"SL","seq":7}}`,
	`{"error":{"code":503,"err_code":10077,"description":"maximum messages per subject exceeded"},"stream":"SL_orders","seq":0}`,
	`{"type":"io.nats.jetstream.api.v1.pub_ack_response","error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}`,
	`not json`,
	``,
}

// TestReadPubAck: the answers a publish gets read as jetstream reads them, the usual two
// without encoding/json (jetstream too wraps the server's error in a second "nats: ").
func TestReadPubAck(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // the ack, or the error
		fast bool   // read by scanPubAck
	}{
		{`{"stream":"SL_orders","seq":1}`, "SL_orders 1 false", true},
		{`{"stream":"SL_orders","seq":42,"duplicate":true}`, "SL_orders 42 true", true},
		{`{"stream":"SL_orders","seq":18446744073709551615}`, "SL_orders 18446744073709551615 false", true},
		{`{"stream":"SL_orders","seq":42,"domain":"hub"}`, "SL_orders 42 false", false},
		{`{"stream":"SL_orders","seq":18446744073709551616}`, jetstream.ErrInvalidJSAck.Error(), false},
		{`{"stream":"SL_orders","seq":042}`, jetstream.ErrInvalidJSAck.Error(), false},
		{pubAckSeeds[14], "nats: nats: API error: code=503 err_code=10077 description=maximum messages per subject exceeded", false},
		{`{"stream":"","seq":7}`, jetstream.ErrInvalidJSAck.Error(), false},
	} {
		_, fast := scanPubAck([]byte(tc.in))
		ack, err := readPubAck([]byte(tc.in))
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = fmt.Sprint(ack.Stream, " ", ack.Sequence, " ", ack.Duplicate)
		}
		if got != tc.want || fast != tc.fast {
			t.Errorf("%s: %q (scanned %v), want %q (scanned %v)", tc.in, got, fast, tc.want, tc.fast)
		}
	}
	var apiErr *jetstream.APIError
	if _, err := readPubAck([]byte(pubAckSeeds[14])); !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 {
		t.Errorf("a refusal reads as %v, want a *jetstream.APIError with its code", err)
	}
}

// FuzzReadPubAck: whatever a publish is answered, readPubAck reads it as encoding/json does.
func FuzzReadPubAck(f *testing.F) {
	for _, s := range pubAckSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := readPubAck(b)
		want, werr := decodePubAck(b)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) || (got == nil) != (want == nil) || (got != nil && *got != *want) {
			t.Fatalf("%q: read %+v, %v; encoding/json reads %+v, %v", b, got, gerr, want, werr)
		}
	})
}
