package request

import (
	"net/http"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeCheck: decoding a check body needs no server. It never panics; a refusal is a
// 400 naming what is wrong, and what is accepted has a domain and entries of valid UTF-8
// (the decoder refuses strings encoding/json would silently repair).
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range []string{
		`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`,
		`{"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"a","value":"✓"}],"hits_addend":0}]}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":"5","unit":"SECOND"}}]}`,
		"{\"domain\":\"\xff\"}", `{"domain":"d","extra":1}`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var c Check
		p := DecodeJSON(body, &c)
		if p == nil {
			p = c.Normalize()
		}
		if p != nil {
			if p.Status != http.StatusBadRequest || p.Detail == "" {
				t.Fatalf("refusal %+v: want a 400 with a detail", *p)
			}
			return
		}
		if !utf8.ValidString(c.Domain) {
			t.Fatalf("accepted domain %q", c.Domain)
		}
		for i, d := range c.Descriptors {
			for _, e := range d.Entries {
				if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
					t.Fatalf("descriptor %d: accepted entry %q=%q", i, e.Key, e.Value)
				}
			}
		}
	})
}
