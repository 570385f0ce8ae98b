package httpx

import (
	"net/http"
	"strconv"
	"strings"
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
func SetRateLimitHeaders(h http.Header, rl RateLimit) {
	remaining := rl.Remaining
	if remaining < 0 {
		remaining = 0
	}
	reset := Seconds(rl.Reset, 0)
	h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(rl.Limit, 10)}
	h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(remaining, 10)}
	h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(reset, 10)}

	var b strings.Builder
	b.Grow(64)
	name := sfString(rl.Policy)
	b.WriteString(name)
	b.WriteString(";q=")
	b.WriteString(strconv.FormatInt(rl.Limit, 10))
	b.WriteString(";w=")
	b.WriteString(strconv.FormatInt(Seconds(rl.Window, 1), 10))
	h["Ratelimit-Policy"] = []string{b.String()}
	b.Reset()
	b.WriteString(name)
	b.WriteString(";r=")
	b.WriteString(strconv.FormatInt(remaining, 10))
	b.WriteString(";t=")
	b.WriteString(strconv.FormatInt(reset, 10))
	h["Ratelimit"] = []string{b.String()}

	if rl.RetryAfter > 0 {
		ra := strconv.FormatInt(Seconds(rl.RetryAfter, 1), 10)
		h["Retry-After"] = []string{ra}
		h["X-Ratelimit-Retry-After"] = []string{ra}
	}
}

// sfString renders s as an RFC 8941 structured-field string: quoted, with '"' and '\'
// escaped and anything outside printable ASCII replaced, so a name can never break the header.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
