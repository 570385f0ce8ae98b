package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// Sentinel errors of this package.
var (
	// ErrInvalidConfig is wrapped by every Validate error.
	ErrInvalidConfig = errors.New("sink: invalid config")
)

// HTTPConfig configures the HTTP sink. The zero value is valid: WithDefaults fills every
// unset field.
type HTTPConfig struct {
	// Client sends the requests. Default: a client on a shared, tuned transport (see
	// NewTransport) that never follows redirects. Tests may inject their own.
	Client *http.Client

	// DefaultTimeout bounds one delivery when the rule has no sink timeout. Default 10s
	// (the rules file's default).
	DefaultTimeout time.Duration

	// MaxIdleConnsPerHost for the default transport: every drainer worker may hold one
	// keep-alive connection to the same sink, so this must be at least the number of
	// workers or connections are closed and re-dialled on every delivery. Default 256.
	MaxIdleConnsPerHost int

	// MaxRetryAfter caps the sink's Retry-After. A bogus "Retry-After: 31536000" would
	// otherwise hold a strict-order key for a year. Default 1h.
	MaxRetryAfter time.Duration

	// BodySnippet is how many bytes of an error response's body go into the outcome's
	// error text (last_error, dead-letter reason). Default 256.
	BodySnippet int

	// MaxDrain is how much of a response body is read and discarded before closing it,
	// so the keep-alive connection can be reused; a longer body closes the connection
	// instead of being read to the end. Default 64 KiB.
	MaxDrain int64

	// UserAgent sent with every request. Default "sluice".
	UserAgent string

	// Signer signs every delivery (internal/sign) of a rule without its own sink.sign_keys;
	// nil = none.
	Signer *sign.Signer

	// SignScheme lays out the signature headers of a rule without its own
	// sink.sign_scheme (-sign-scheme). Default sign.SchemeSluice (Sluice-Signature).
	SignScheme sign.Scheme
}

// WithDefaults returns a copy of c with every unset field set to its default.
func (c HTTPConfig) WithDefaults() HTTPConfig {
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = 10 * time.Second
	}
	if c.MaxIdleConnsPerHost <= 0 {
		c.MaxIdleConnsPerHost = 256
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = time.Hour
	}
	if c.BodySnippet <= 0 {
		c.BodySnippet = 256
	}
	if c.MaxDrain <= 0 {
		c.MaxDrain = 64 << 10
	}
	if c.UserAgent == "" {
		c.UserAgent = "sluice"
	}
	if c.SignScheme == "" {
		c.SignScheme = sign.SchemeSluice
	}
	if c.Client == nil {
		c.Client = &http.Client{
			Transport:     NewTransport(c.MaxIdleConnsPerHost),
			CheckRedirect: noRedirects,
		}
	}
	return c
}

// Validate reports a config that cannot work (after WithDefaults).
func (c HTTPConfig) Validate() error {
	if c.BodySnippet > 64<<10 {
		return fmt.Errorf("%w: BodySnippet %d > 64 KiB", ErrInvalidConfig, c.BodySnippet)
	}
	return nil
}

// NewTransport returns the transport the HTTP sink uses by default: keep-alive with up to
// maxIdlePerHost idle connections per sink host (one per drainer worker), HTTP/2 when the
// sink offers it, and no response-header timeout of its own because every delivery
// carries the rule's timeout in its context.
func NewTransport(maxIdlePerHost int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = maxIdlePerHost
	t.MaxIdleConns = 4 * maxIdlePerHost
	t.IdleConnTimeout = 90 * time.Second
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.ForceAttemptHTTP2 = true
	return t
}

// noRedirects stops net/http from following a redirect: a 301/302/303 would be re-sent as
// a GET without the payload, which no sink wants. The 3xx is reported as Dead instead.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// HTTP delivers by POSTing the payload to rule.Sink.URL. Safe for concurrent use.
type HTTP struct {
	cfg     HTTPConfig
	signers signers
}

// NewHTTP returns an HTTP sink. It fails only on an invalid config.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &HTTP{cfg: cfg}, nil
}

var _ delivery.Sink = (*HTTP)(nil)

// Deliver makes one delivery attempt of m (attempt m.Attempt+1) and classifies the
// result; see the package doc for the outcome table. It returns when the sink answered,
// the rule's timeout passed, or ctx was cancelled (reported as Retry: the message stays
// queued).
func (h *HTTP) Deliver(ctx context.Context, rule *rules.Rule, m queue.Message) delivery.Outcome {
	if rule == nil || rule.Sink.URL == "" {
		return delivery.OutcomeDead("sink: rule has no sink url")
	}
	timeout := timeoutFor(rule, h.cfg.DefaultTimeout)
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// bytes.Reader: NewRequest sets ContentLength and GetBody, so the body is sent as is
	// (no chunking) and can be replayed by the transport on a dead keep-alive connection.
	req, err := http.NewRequestWithContext(actx, http.MethodPost, rule.Sink.URL, bytes.NewReader(m.Payload))
	if err != nil {
		// A URL that does not parse will never work: say so rather than retry forever.
		return delivery.OutcomeDead(fmt.Sprintf("sink: bad url: %v", err))
	}
	deliveryHeaders(rule, m, req.Header.Set)
	telemetry.Inject(ctx, req.Header.Set) // the delivery span's traceparent: the sink's span joins the trace
	req.Header.Set("User-Agent", h.cfg.UserAgent)
	if signer, scheme, err := h.signers.signerFor(rule, h.cfg.Signer, h.cfg.SignScheme); err != nil {
		return delivery.OutcomeRetry(0, "sink: "+err.Error())
	} else if signer != nil {
		// The message id is signed with the body (id.timestamp.body): a captured delivery
		// replayed as another message is refused by a sink that checks it.
		signer.Sign(scheme, m.ID, time.Now(), m.Payload, req.Header.Set)
	}

	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return delivery.OutcomeRetry(0, "sink: delivery cancelled: "+context.Cause(ctx).Error())
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			o := delivery.OutcomeRetry(0, fmt.Sprintf("sink: timeout after %s", timeout))
			o.Timeout = true
			return o
		default:
			return delivery.OutcomeRetry(0, "sink: "+err.Error())
		}
	}
	defer h.discard(resp.Body)

	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		o := delivery.OutcomeDelivered()
		o.Status = code
		return o
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		o := delivery.OutcomeRetry(
			ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now(), h.cfg.MaxRetryAfter),
			statusText(code, h.snippet(resp.Body)))
		o.Status = code
		return o
	case code >= 500:
		o := delivery.OutcomeRetry(0, statusText(code, h.snippet(resp.Body)))
		o.Status = code
		return o
	case code >= 400:
		o := delivery.OutcomeDead(statusText(code, h.snippet(resp.Body)))
		o.Status = code
		return o
	default:
		// 1xx never reach here; 3xx because redirects are not followed.
		reason := statusText(code, "")
		if loc := resp.Header.Get("Location"); loc != "" {
			reason += " to " + truncate(loc, h.cfg.BodySnippet)
		}
		o := delivery.OutcomeDead(reason + " (redirects are not followed)")
		o.Status = code
		return o
	}
}

// snippet reads at most BodySnippet bytes of body as one printable line.
func (h *HTTP) snippet(body io.Reader) string {
	buf := make([]byte, h.cfg.BodySnippet+1)
	n, _ := io.ReadFull(body, buf)
	truncated := n > h.cfg.BodySnippet
	if truncated {
		n = h.cfg.BodySnippet
	}
	s := oneLine(string(buf[:n]))
	if truncated {
		s += "…"
	}
	return s
}

// discard reads what is left of body, up to MaxDrain, so the connection returns to the
// keep-alive pool, then closes it.
func (h *HTTP) discard(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, h.cfg.MaxDrain)
	_ = body.Close()
}

func statusText(code int, snippet string) string {
	s := fmt.Sprintf("sink: http %d %s", code, http.StatusText(code))
	if snippet != "" {
		s += ": " + snippet
	}
	return s
}

// oneLine makes s safe for a log line and a NATS header: valid UTF-8, no control
// characters, runs of whitespace collapsed.
func oneLine(s string) string {
	s = strings.ToValidUTF8(s, "�")
	var b strings.Builder
	space := false
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == ' ' {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ParseRetryAfter reads an HTTP Retry-After value — delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3) — relative to now, capped at limit (0: no cap). It returns 0 (meaning "use the
// backoff") for an absent, malformed, or past value.
func ParseRetryAfter(v string, now time.Time, limit time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		const maxSecs = 1 << 31 // ~68 years: keeps the multiplication below from overflowing
		d = time.Duration(min(secs, maxSecs)) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
		if d <= 0 {
			return 0
		}
	} else {
		return 0
	}
	if limit > 0 && d > limit {
		d = limit
	}
	return d
}
