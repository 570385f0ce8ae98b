package decide

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/request"
	"github.com/sluice-io/sluice/internal/rules"
)

// FuzzCheckRequest: decoding a /v1/check body never panics; a refusal is a 400 (or 415)
// with a reason, and what is accepted is within every documented limit.
func FuzzCheckRequest(f *testing.F) {
	for _, s := range []string{
		`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`,
		`{"domain":"d","hits_addend":3,"descriptors":[{"entries":[{"key":"a","value":""},{"key":"b","value":"✓"}],"hits_addend":0}]}`,
		`{"domain":"d","hitsAddend":"7","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":"5","unit":"SECOND","unitMultiplier":2}}]}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":5,"unit":"HOUR"},"isNegativeHits":true}]}`,
		`{"domain":"d","hits_addend":-1,"descriptors":[]}`,
		`{"domain":"","descriptors":[{}]}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]} {}`,
		// the reproductions: DAY × 106000 (counters for 233 years), YEAR × 1048576 (500)
		`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":50,"unit":"DAY","unit_multiplier":106000}}]}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":50,"unit":"YEAR","unit_multiplier":1048576}}]}`,
	} {
		f.Add([]byte(s), "application/json")
	}
	f.Add([]byte(`{}`), "text/plain")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/check", nil)
		r.Header.Set("Content-Type", contentType)
		domain, hits, descs, p := decodeCheck(r, body)
		if p != nil {
			if (p.Status != http.StatusBadRequest && p.Status != http.StatusUnsupportedMediaType) || p.Detail == "" {
				t.Fatalf("a refusal without a reason: %+v", p)
			}
			return
		}
		if domain == "" || len(domain) > request.MaxDomainBytes || !utf8.ValidString(domain) {
			t.Fatalf("accepted domain %q", domain)
		}
		if hits > request.MaxHitsAddend {
			t.Fatalf("accepted hits_addend %d", hits)
		}
		if len(descs) == 0 || len(descs) > request.MaxCheckDescriptors {
			t.Fatalf("accepted %d descriptors", len(descs))
		}
		for i, d := range descs {
			if len(d.Entries) == 0 || len(d.Entries) > request.MaxDescriptorEntries || d.Hits < 0 || d.Hits > request.MaxHitsAddend {
				t.Fatalf("descriptor %d: %d entries, %d hits", i, len(d.Entries), d.Hits)
			}
			for _, e := range d.Entries {
				if e.Key == "" || len(e.Key) > request.MaxKeyBytes || len(e.Value) > request.MaxKeyBytes || !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
					t.Fatalf("descriptor %d: accepted entry %q=%q", i, e.Key, e.Value)
				}
			}
			// An accepted override is one the limiter counts and no longer-lived than a
			// limit override's longest window.
			if o := d.Override; o != nil {
				err := (bucket.Limit{Algorithm: bucket.FixedWindow, Rate: o.Rate.Requests, Interval: o.Rate.Interval}).Validate()
				if o.Rate.Interval > rules.MaxOverrideWindow || err != nil {
					t.Fatalf("descriptor %d: accepted override %+v (%v)", i, o, err)
				}
			}
		}
	})
}
