package client

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateLimit is what the rate-limit headers of one answer say. Every 202 and 429 of
// POST /v1/messages and every answer of POST /v1/check carries them; a field whose header
// was absent or unreadable is zero.
type RateLimit struct {
	// Limit is X-RateLimit-Limit: the queue's capacity, or the admission limit.
	Limit int64
	// Remaining is X-RateLimit-Remaining: free places in the key's queue, or requests
	// left in the window.
	Remaining int64
	// Reset is X-RateLimit-Reset: until one more place frees up or the window resets.
	// sluice sends seconds from now; a value that can only be a Unix time (> 10⁹) is
	// read as one, for servers in front of sluice that do that.
	Reset time.Duration
	// RetryAfter is X-RateLimit-Retry-After (on 429s).
	RetryAfter time.Duration
	// Policies is RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-10).
	Policies []Policy
	// Current is RateLimit: the state of each policy for this request.
	Current []PolicyState
}

// Policy is one item of RateLimit-Policy: `"<name>";q=<quota>;w=<window seconds>`.
type Policy struct {
	Name      string
	Quota     int64
	Window    time.Duration
	QuotaUnit string // qu: "requests" (the default when absent), "content-bytes", …
	Partition string // pk, as sent (a byte sequence, base64)
}

// PolicyState is one item of RateLimit: `"<name>";r=<remaining>;t=<seconds to reset>`.
type PolicyState struct {
	Name      string
	Remaining int64
	Reset     time.Duration
	Partition string
}

// PolicyName is the name of the first policy of RateLimit-Policy, else of RateLimit.
func (rl RateLimit) PolicyName() string {
	if len(rl.Policies) > 0 {
		return rl.Policies[0].Name
	}
	if len(rl.Current) > 0 {
		return rl.Current[0].Name
	}
	return ""
}

// ParseRateLimit reads the rate-limit headers of an answer received at now (now turns a
// Unix-time reset into a duration). The X-RateLimit-* fields fall back to the first IETF
// policy when only the draft headers were sent.
func ParseRateLimit(h http.Header, now time.Time) RateLimit {
	var rl RateLimit
	rl.Policies = parsePolicies(h.Values("RateLimit-Policy"))
	rl.Current = parseCurrent(h.Values("RateLimit"))

	limit, hasLimit := headerInt(h, "X-RateLimit-Limit")
	remaining, hasRemaining := headerInt(h, "X-RateLimit-Remaining")
	reset, hasReset := headerInt(h, "X-RateLimit-Reset")
	if ra, ok := headerInt(h, "X-RateLimit-Retry-After"); ok {
		rl.RetryAfter = time.Duration(min(ra, maxSeconds)) * time.Second
	}
	if hasReset && reset > 1_000_000_000 {
		reset = max(0, int64(time.Unix(reset, 0).Sub(now).Seconds()+0.999))
	}
	reset = min(reset, maxSeconds)
	rl.Limit, rl.Remaining, rl.Reset = limit, remaining, time.Duration(reset)*time.Second
	if !hasLimit && len(rl.Policies) > 0 {
		rl.Limit = rl.Policies[0].Quota
	}
	if len(rl.Current) > 0 {
		if !hasRemaining {
			rl.Remaining = rl.Current[0].Remaining
		}
		if !hasReset {
			rl.Reset = rl.Current[0].Reset
		}
	}
	return rl
}

func headerInt(h http.Header, name string) (int64, bool) {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// retryAfter reads Retry-After (delay-seconds or an HTTP-date, RFC 9110 §10.2.3), else
// X-RateLimit-Retry-After. A date in the past is a zero wait; an unreadable value is absent.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := ParseRetryAfter(h.Get("Retry-After"), now); ok {
		return d, true
	}
	if n, ok := headerInt(h, "X-RateLimit-Retry-After"); ok {
		return time.Duration(min(n, maxSeconds)) * time.Second, true
	}
	return 0, false
}

// ParseRetryAfter reads a Retry-After value received at now: delay-seconds or an HTTP-date.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, maxSeconds)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

func parsePolicies(vals []string) []Policy {
	var out []Policy
	for _, it := range parseSFList(vals) {
		p := Policy{Name: it.name, QuotaUnit: it.params["qu"], Partition: it.params["pk"]}
		p.Quota = sfInt(it.params["q"])
		p.Window = time.Duration(min(sfInt(it.params["w"]), maxSeconds)) * time.Second
		out = append(out, p)
	}
	return out
}

func parseCurrent(vals []string) []PolicyState {
	var out []PolicyState
	for _, it := range parseSFList(vals) {
		s := PolicyState{Name: it.name, Partition: it.params["pk"]}
		s.Remaining = sfInt(it.params["r"])
		s.Reset = time.Duration(min(sfInt(it.params["t"]), maxSeconds)) * time.Second
		out = append(out, s)
	}
	return out
}

// sfInt reads a non-negative integer parameter; anything else is 0.
func sfInt(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// maxSeconds caps every header number read as seconds: a year is "never" for a client.
const maxSeconds = int64(365 * 24 * time.Hour / time.Second)

// sfItem is one member of an RFC 8941 List: a bare item (string or token) and its
// parameters, every value kept as text (strings unquoted).
type sfItem struct {
	name   string
	params map[string]string
}

// parseSFList parses the RFC 8941 List made of the header's field lines. It is lenient
// where the RFC says "fail": a member it cannot read ends the parse, and what was read
// before it is kept — a client should not lose the headers it understands because of
// one it does not.
func parseSFList(vals []string) []sfItem {
	var out []sfItem
	for _, v := range vals {
		p := sfParser{s: v}
		for {
			p.skipSP()
			if p.done() {
				break
			}
			it, ok := p.item()
			if !ok {
				return out
			}
			out = append(out, it)
			p.skipSP()
			if p.done() {
				break
			}
			if p.s[p.i] != ',' {
				return out
			}
			p.i++
		}
	}
	return out
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, bool) {
	name, ok := p.bare()
	if !ok {
		return sfItem{}, false
	}
	it := sfItem{name: name, params: map[string]string{}}
	for !p.done() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k := p.key()
		if k == "" {
			return sfItem{}, false
		}
		val := "?1" // a parameter without a value is boolean true
		if !p.done() && p.s[p.i] == '=' {
			p.i++
			if val, ok = p.bare(); !ok {
				return sfItem{}, false
			}
		}
		it.params[k] = val
	}
	return it, true
}

// key is an RFC 8941 key: lcalpha or "*", then lcalpha / DIGIT / "_" / "-" / "." / "*".
func (p *sfParser) key() string {
	start := p.i
	for !p.done() {
		c := p.s[p.i]
		if c >= 'a' && c <= 'z' || c == '*' || p.i > start && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

// bare reads a bare item: a quoted string (unescaped), a byte sequence (without its
// colons), or a token, number or boolean (as written).
func (p *sfParser) bare() (string, bool) {
	if p.done() {
		return "", false
	}
	switch c := p.s[p.i]; {
	case c == '"':
		var b strings.Builder
		for p.i++; !p.done(); p.i++ {
			switch c := p.s[p.i]; c {
			case '\\':
				p.i++
				if p.done() || p.s[p.i] != '"' && p.s[p.i] != '\\' {
					return "", false
				}
				b.WriteByte(p.s[p.i])
			case '"':
				p.i++
				return b.String(), true
			default:
				b.WriteByte(c)
			}
		}
		return "", false
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return "", false
		}
		v := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		return v, true
	default:
		start := p.i
		for !p.done() {
			c := p.s[p.i]
			if c == ';' || c == ',' || c == ' ' || c == '\t' || c == '=' || c == '"' {
				break
			}
			p.i++
		}
		return p.s[start:p.i], p.i > start
	}
}
