package httpx

import (
	"net/http"
	"strconv"
	"time"
)

// RateLimit is what the rate-limit headers of one response say.
type RateLimit struct {
	Policy    string        // policy name (rule or limit name), quoted in the IETF headers
	Limit     int64         // capacity of the queue, or the admission limit
	Remaining int64         // free places in the key's queue, or requests left in the window
	Reset     time.Duration // until one more place frees up / the window resets
	Window    time.Duration // the policy's window (w=): for a queue, capacity ÷ outflow
	// RetryAfter is set on refusals (429): until a request would be accepted.
	RetryAfter time.Duration
}

// SetRateLimitHeaders writes X-RateLimit-* and the IETF draft-ietf-httpapi-ratelimit-headers-10
// RateLimit-Policy / RateLimit fields; on a refusal (RetryAfter > 0) also Retry-After and
// X-RateLimit-Retry-After, in whole seconds rounded up, at least 1.
//
// Every value is appended to one buffer and cut out of one string, and the header slices
// share one array: a 202 carries five of these fields and this runs on every admission.
func SetRateLimitHeaders(h http.Header, rl RateLimit) {
	remaining := max(rl.Remaining, 0)
	reset := Seconds(rl.Reset, 0)
	var ends [7]int
	b := make([]byte, 0, 96+2*len(rl.Policy))
	b = strconv.AppendInt(b, rl.Limit, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, remaining, 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	ends[2] = len(b)
	b = appendSFString(b, rl.Policy)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, rl.Limit, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, Seconds(rl.Window, 1), 10)
	ends[3] = len(b)
	b = appendSFString(b, rl.Policy)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	ends[4] = len(b)
	n := 5
	if rl.RetryAfter > 0 {
		b = strconv.AppendInt(b, Seconds(rl.RetryAfter, 1), 10)
		ends[5] = len(b)
		n = 6
	}
	all := string(b)
	vals := make([]string, n+1)
	for i, from := 0, 0; i < n; i++ {
		vals[i] = all[from:ends[i]]
		from = ends[i]
	}
	one := func(i int) []string { return vals[i : i+1 : i+1] }
	h["X-Ratelimit-Limit"] = one(0)
	h["X-Ratelimit-Remaining"] = one(1)
	h["X-Ratelimit-Reset"] = one(2)
	h["Ratelimit-Policy"] = one(3)
	h["Ratelimit"] = one(4)
	if n == 6 {
		vals[6] = vals[5]
		h["Retry-After"] = one(5)
		h["X-Ratelimit-Retry-After"] = one(6)
	}
}

// appendSFString appends s as an RFC 8941 structured-field string: quoted, with '"' and
// '\' escaped and anything outside printable ASCII replaced, so a name can never break the
// header.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
