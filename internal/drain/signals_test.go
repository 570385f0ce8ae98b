package drain

import "testing"

func TestResponseClass(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o    Outcome
		want string
	}{
		{Outcome{Verdict: Delivered, Status: 200}, "2xx"},
		{Outcome{Verdict: Delivered, Status: 204}, "2xx"},
		{Outcome{Verdict: Delivered}, "2xx"}, // a NATS sink's acknowledged publish
		{Outcome{Verdict: Dead, Status: 301}, "3xx"},
		{Outcome{Verdict: Dead, Status: 404}, "4xx"},
		{Outcome{Verdict: Retry, Status: 429}, "4xx"},
		{Outcome{Verdict: Retry, Status: 503}, "5xx"},
		{Outcome{Verdict: Retry, Timeout: true}, "timeout"},
		{Outcome{Verdict: Retry, Err: "sink: dial tcp: connection refused"}, "error"},
		{Outcome{Verdict: Dead, Err: "sink: bad url"}, "error"},
	} {
		if got := responseClass(tc.o); got != tc.want {
			t.Errorf("responseClass(%+v) = %q, want %q", tc.o, got, tc.want)
		}
	}
}
