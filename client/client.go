package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Defaults of a Client; every one can be changed with an Option.
const (
	// DefaultMaxAttempts bounds the HTTP requests one call makes (the first try included).
	DefaultMaxAttempts = 10
	// DefaultBackoffBase is the back-off ceiling before the first retry; it doubles per retry.
	DefaultBackoffBase = 250 * time.Millisecond
	// DefaultBackoffCap is the most the back-off ceiling grows to.
	DefaultBackoffCap = 20 * time.Second
	// DefaultMaxRetryAfter is the longest Retry-After a call sleeps through by itself; a
	// server asking for a longer wait (a daily quota, a deep queue) gets its answer returned
	// at once, so a caller never hangs for hours inside Submit.
	DefaultMaxRetryAfter = time.Minute
	// DefaultMaxRetryWait bounds the time one call spends sleeping between its attempts, all
	// retries together (429s honoured, 503s, transport errors): a call that would sleep
	// longer returns its last error instead. Without it, ten 429s each asking for a minute
	// kept a Submit with context.Background() asleep for nine minutes.
	DefaultMaxRetryWait = 2 * time.Minute
	// DefaultTimeout is the per-request timeout of the http.Client made when none is given.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxCallTime bounds one call from its start to its end, every attempt and wait
	// included, when the context has no sooner deadline: without it a call could run
	// MaxAttempts × DefaultTimeout + MaxRetryWait (7 minutes). It leaves room for
	// DefaultMaxRetryWait of honoured Retry-Afters and a few slow requests.
	DefaultMaxCallTime = 3 * time.Minute
	// DefaultConcurrency is the number of idle connections to the ingress the client's own
	// transport keeps (WithConcurrency): as many as the goroutines expected to call at once,
	// so that none of them has to open a connection because an idle one was closed.
	// net/http's default keeps 2, and 32 goroutines then opened 445 connections for 1,229
	// requests.
	DefaultConcurrency = 64
	// DefaultUserAgent is sent unless WithUserAgent says otherwise.
	DefaultUserAgent = "sluice-go-client/1"

	// maxResponseBytes bounds what is read of one response body (admin listings are the largest).
	maxResponseBytes = 16 << 20
)

// Client talks to a sluice ingress. It is safe for concurrent use; make one and share it.
type Client struct {
	base *url.URL
	hc   *http.Client
	// tokens returns the bearer tokens. A closure, because fmt prints a func as an address
	// whatever the verb, while it prints the strings of a struct or pointer it reaches
	// through a Client held in an unexported field (String is not called there, and %s
	// prints pointed-to values). opts holds the tokens only while New applies the options.
	tokens        func() credentials
	opts          *credentials
	userAgent     string
	maxAttempts   int
	backoffBase   time.Duration
	backoffCap    time.Duration
	maxRetryAfter time.Duration
	maxRetryWait  time.Duration
	retryOverLim  bool
	maxCallTime   time.Duration
	concurrency   int
	ownHC         bool // hc was given by WithHTTPClient
	now           func() time.Time
	sleep         func(ctx context.Context, d time.Duration) error
	jitter        func(max time.Duration) time.Duration
}

// credentials are the bearer tokens of a Client.
type credentials struct {
	admin, submit, check string
}

// Option configures a Client in New.
type Option func(*Client) error

// WithHTTPClient sets the http.Client used for every request (transport, TLS, proxies,
// per-request Timeout). Default: a fresh http.Client with DefaultTimeout and a transport
// keeping DefaultConcurrency idle connections (WithConcurrency). Its CheckRedirect is not
// used: the client never follows a redirect (a copy of hc with that one change is kept;
// the transport is shared). Size the idle pool of hc's transport yourself
// (http.Transport.MaxIdleConnsPerHost): WithConcurrency does not change a given client.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient: nil http.Client")
		}
		c.hc, c.ownHC = hc, true
		return nil
	}
}

// WithConcurrency sizes the pool of idle connections of the client's own transport to n,
// the number of goroutines expected to call at once (default DefaultConcurrency): a
// goroutine that finishes a call leaves its connection for the next instead of closing
// it. More goroutines than n still work; they open connections that are then closed.
// Ignored with WithHTTPClient, whose transport is the caller's.
func WithConcurrency(n int) Option {
	return func(c *Client) error {
		if n < 1 {
			return fmt.Errorf("client: WithConcurrency(%d): must be at least 1", n)
		}
		c.concurrency = n
		return nil
	}
}

// WithMaxCallTime bounds one call (Submit, SubmitBatch as a whole, an admin call, …) from
// start to end, attempts and waits included, when its context has no sooner deadline:
// default DefaultMaxCallTime (3 min); 0 leaves calls bounded only by their context,
// MaxAttempts × the http.Client's Timeout and MaxRetryWait. A call that reaches it ends
// with the context's deadline error (an *OutcomeUnknownError if a request that may act
// was out at that moment).
func WithMaxCallTime(d time.Duration) Option {
	return func(c *Client) error {
		if d < 0 {
			return fmt.Errorf("client: WithMaxCallTime(%v): negative", d)
		}
		c.maxCallTime = d
		return nil
	}
}

// WithAdminToken sets the bearer token sent by the Admin methods ($SLUICE_ADMIN_TOKEN).
// It is never sent on the public endpoints.
func WithAdminToken(token string) Option {
	return func(c *Client) error { c.opts.admin = token; return nil }
}

// WithSubmitToken sets the bearer token sent with Submit, Status and Cancel (the
// /v1/messages endpoints), for an ingress run with -submit-tokens. Without it, such an
// ingress answers 401 (ErrUnauthorized); a token for another domain, 403.
func WithSubmitToken(token string) Option {
	return func(c *Client) error { c.opts.submit = token; return nil }
}

// WithCheckToken sets the bearer token sent with Check and CheckDescriptors (/v1/check), for
// an ingress run with -submit-tokens: such an ingress answers checks only with a token of
// scope check or check:DOMAIN (401 ErrUnauthorized without one, 403 ErrForbidden for a
// token of another scope or domain). Submit tokens are not sent with checks.
func WithCheckToken(token string) Option {
	return func(c *Client) error { c.opts.check = token; return nil }
}

// WithMaxAttempts bounds the HTTP requests one call makes, the first included; 1 disables
// retries. Default DefaultMaxAttempts.
func WithMaxAttempts(n int) Option {
	return func(c *Client) error {
		if n < 1 {
			return fmt.Errorf("client: WithMaxAttempts(%d): must be at least 1", n)
		}
		c.maxAttempts = n
		return nil
	}
}

// WithBackoff sets the back-off of retry n (1-based): a uniformly random wait in
// [0, min(cap, base·2^(n-1))] ("full jitter"). Defaults DefaultBackoffBase, DefaultBackoffCap.
func WithBackoff(base, cap time.Duration) Option {
	return func(c *Client) error {
		if base <= 0 || cap < base {
			return fmt.Errorf("client: WithBackoff(%v, %v): need 0 < base ≤ cap", base, cap)
		}
		c.backoffBase, c.backoffCap = base, cap
		return nil
	}
}

// WithMaxRetryAfter sets the longest Retry-After a call waits for by itself before retrying
// a 429 or 503; a longer one is returned to the caller at once. Default DefaultMaxRetryAfter.
func WithMaxRetryAfter(d time.Duration) Option {
	return func(c *Client) error {
		if d < 0 {
			return fmt.Errorf("client: WithMaxRetryAfter(%v): negative", d)
		}
		c.maxRetryAfter = d
		return nil
	}
}

// WithMaxRetryWait bounds the total time one call sleeps between its attempts; a call
// whose next wait would pass it returns its last error at once. Default
// DefaultMaxRetryWait (2 min). The context's deadline, when sooner, still wins.
func WithMaxRetryWait(d time.Duration) Option {
	return func(c *Client) error {
		if d < 0 {
			return fmt.Errorf("client: WithMaxRetryWait(%v): negative", d)
		}
		c.maxRetryWait = d
		return nil
	}
}

// WithOverLimitRetry says whether Submit, SubmitBatch (its items) and Status retry a 429
// after its Retry-After (default true: the client then paces a producer at the queue's
// outflow, which is what a deferred-work producer wants). With false, they return the
// *OverLimitError of the first 429 at once, for callers that pass the refusal on to their
// own caller. The other calls never retry a 429. See also SubmitOverLimitRetry.
func WithOverLimitRetry(retry bool) Option {
	return func(c *Client) error { c.retryOverLim = retry; return nil }
}

// WithUserAgent sets the User-Agent header. Default DefaultUserAgent.
func WithUserAgent(ua string) Option {
	return func(c *Client) error { c.userAgent = ua; return nil }
}

// WithClock replaces the clock and the sleep between retries, so tests never wait.
// now turns HTTP-date Retry-After values into durations and decides whether a wait still
// fits the context's deadline; sleep must return ctx.Err() if ctx ends first. Either may be nil to keep the default.
func WithClock(now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) error {
		if now != nil {
			c.now = now
		}
		if sleep != nil {
			c.sleep = sleep
		}
		return nil
	}
}

// New returns a Client for the ingress at baseURL (e.g. "http://localhost:8080" or
// "https://gw.example.com/sluice"; a path prefix is kept). A query string or a fragment
// is refused: it would be dropped, or sent on every call, and neither is meant.
//
// User info in baseURL (http://user:password@host) is sent as basic auth and never printed:
// errors, BaseURL and String show the password as "xxxxx". Nil options are ignored.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redactRawURL(ue.URL)
		}
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: need http(s)://host[:port][/prefix]", u.Redacted())
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(baseURL, "#") {
		return nil, fmt.Errorf("client: base URL %q: a query string or fragment is not allowed (the client sends its own per call)", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	c := &Client{
		base:          u,
		opts:          &credentials{},
		maxCallTime:   DefaultMaxCallTime,
		concurrency:   DefaultConcurrency,
		userAgent:     DefaultUserAgent,
		maxAttempts:   DefaultMaxAttempts,
		backoffBase:   DefaultBackoffBase,
		backoffCap:    DefaultBackoffCap,
		maxRetryAfter: DefaultMaxRetryAfter,
		maxRetryWait:  DefaultMaxRetryWait,
		retryOverLim:  true,
		now:           time.Now,
		sleep:         sleepCtx,
		jitter:        fullJitter,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	cred := *c.opts
	c.opts = nil
	c.tokens = func() credentials { return cred }
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = c.concurrency
		tr.MaxIdleConns = max(tr.MaxIdleConns, c.concurrency)
		c.hc = &http.Client{Timeout: DefaultTimeout, Transport: tr}
	}
	// No call follows a redirect: a POST turned into a GET by a 301/302/303 would read as a
	// Submit accepted that was never made, a 307/308 would send it (and a token, to another
	// port of the same host) where it was not meant to go. The 3xx is the answer.
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	return c, nil
}

// BaseURL is the base URL the client was made with, without a trailing slash, its
// password (if any) shown as "xxxxx".
func (c *Client) BaseURL() string { return c.base.Redacted() }

// String describes the client without its tokens or password, so that printing a Client
// (%v, %+v, a log line) never leaks them. (A value receiver, so a Client printed by
// value is covered too.)
func (c Client) String() string {
	var t credentials
	if c.tokens != nil {
		t = c.tokens()
	}
	return fmt.Sprintf("sluice.Client{%s, admin token set: %t, submit token set: %t, check token set: %t}", c.BaseURL(), t.admin != "", t.submit != "", t.check != "")
}

// GoString is String, for %#v.
func (c Client) GoString() string { return c.String() }

// redactRawURL hides the password of a URL that did not parse: the text between the ':'
// of its user info and the last '@' before the path.
func redactRawURL(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	rest := s[i+3:]
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[:j]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	colon := strings.Index(rest[:at], ":")
	if colon < 0 {
		return s
	}
	return s[:i+3] + rest[:colon+1] + "xxxxx" + s[i+3+at:]
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fullJitter is uniform in [0, max].
func fullJitter(max time.Duration) time.Duration {
	switch {
	case max <= 0:
		return 0
	case max == math.MaxInt64:
		return rand.N(max)
	}
	return rand.N(max + 1)
}

// backoffCeiling is min(cap, base·2^(retry-1)) for retry ≥ 1, without overflowing.
func backoffCeiling(base, cap time.Duration, retry int) time.Duration {
	d := base
	for i := 1; i < retry && d < cap; i++ {
		d *= 2
	}
	return min(d, cap)
}

// backoff is the full-jitter wait before retry n: uniform in [0, backoffCeiling].
func (c *Client) backoff(retry int) time.Duration {
	return c.jitter(backoffCeiling(c.backoffBase, c.backoffCap, retry))
}

// retryTransport says which transport errors (no HTTP answer) a call may retry.
type retryTransport int

const (
	// neverSent: only errors that prove the request never left (dial failures), and only
	// the ingress's own 503 problem among the answers: never a 502 or 504, which a proxy
	// may send after passing the request on. For calls that are not idempotent (Check
	// counts hits, Replay and ReplayAll enqueue, purges delete).
	neverSent retryTransport = iota
	// anyTransient: also resets, timeouts and cut-off answers. For idempotent calls
	// (GET, PATCH) and Submit, whose idempotency key makes a repeat harmless.
	anyTransient
)

// call is one logical API call, retried as a whole.
type call struct {
	method  string
	path    string // escaped, from the base URL's path on ("/v1/messages")
	query   url.Values
	body    []byte
	header  http.Header
	admin   bool
	conn    retryTransport
	retry   func(status int) bool // statuses worth retrying (besides transport errors)
	ok      func(status int) bool // statuses that are answers, not errors
	overLim bool                  // 429 is retried (when retry says so) — Submit's switch
	// resend: the call is a submission, whose repeat after an attempt that may have stored
	// it must come within JetStream's duplicate window (resendWindow).
	resend bool
	budget *budget // shared across SubmitBatch's rounds; nil: this call's own
	// mutates: the call changes something (every call but the GETs), so a request sent
	// without an answer that says what it did leaves its outcome unknown (ErrOutcomeUnknown).
	mutates bool
	idemKey string // a Submit's idempotency key, for its *OutcomeUnknownError
}

// response is one HTTP answer, body read in full.
type response struct {
	status   int
	header   http.Header
	body     []byte
	attempts int
}

func (c *Client) url(path string, q url.Values) string {
	s := c.base.String() + path
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// budget is what one logical call has spent so far, shared by the requests of
// SubmitBatch's rounds so that the whole call stays within MaxAttempts and MaxRetryWait.
type budget struct {
	attempts int           // requests made
	waited   time.Duration // slept between them
	// landedAt is when the first attempt that may have stored the message (a 503 or 502/504,
	// or a transport error other than a failed dial) was sent; zero while none was.
	landedAt time.Time
}

// resendWindow is how long after an attempt that may have stored a submission a retry
// still counts as its repeat: JetStream's duplicate window is 2 minutes
// (docs/http-api.md), and the client stops 20 s short of it to leave room for the
// request itself and for clock drift.
const resendWindow = 100 * time.Second

// unavailableError is a transport error (no HTTP answer) that a call gave up on after its
// retries: it matches ErrUnavailable and says how many attempts were made.
type unavailableError struct {
	attempts int
	err      error
}

func (e *unavailableError) Error() string {
	if e.attempts == 1 {
		return fmt.Sprintf("%v (no answer, 1 attempt)", e.err)
	}
	return fmt.Sprintf("%v (no answer, after %d attempts)", e.err, e.attempts)
}
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }
func (e *unavailableError) Unwrap() error        { return e.err }

// bound gives ctx the client's MaxCallTime unless it already ends sooner.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.maxCallTime <= 0 {
		return ctx, func() {}
	}
	if dl, ok := ctx.Deadline(); ok && !dl.After(time.Now().Add(c.maxCallTime)) {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.maxCallTime)
}

// do runs call with the retry policy of doc.go and returns the answer that ended it. A
// non-nil error is either a transport error, a context error, the typed error for the
// last answer (from errorFor), or, for a call that changes something, an
// *OutcomeUnknownError wrapping one of these when an attempt was sent and nothing says
// what it did; resp is set whenever an answer was received.
func (c *Client) do(ctx context.Context, cl call) (*response, error) {
	b := cl.budget
	if b == nil {
		b = &budget{}
		var cancel context.CancelFunc
		ctx, cancel = c.bound(ctx)
		defer cancel()
	}
	var last *response
	// unsure: an attempt of this call was sent and no answer said what it did (a reset
	// after sending, a cut-off answer, a proxy's 502/504 or 503). Once set, a call that
	// changes something and fails ends in an *OutcomeUnknownError.
	unsure := false
	fail := func(err error) error {
		if !cl.mutates || !unsure {
			return err
		}
		return &OutcomeUnknownError{Method: cl.method, Path: cl.path, IdempotencyKey: cl.idemKey, Attempts: b.attempts, Err: err}
	}
	for {
		b.attempts++
		attempt := b.attempts
		sent := c.now()
		resp, err := c.once(ctx, cl)
		if resp != nil {
			resp.attempts = attempt
			last = resp
		}
		var wait time.Duration
		mayHaveStored := false
		switch {
		case err != nil:
			unsure = unsure || maybeSent(err)
			if ctx.Err() != nil {
				return last, fail(fmt.Errorf("sluice: %s %s: %w", cl.method, cl.path, ctx.Err()))
			}
			err = fmt.Errorf("sluice: %s %s: %w", cl.method, cl.path, err)
			if !c.transientTransport(cl.conn, err) {
				return last, fail(err)
			}
			mayHaveStored = !c.transientTransport(neverSent, err)
			err = &unavailableError{attempts: attempt, err: err}
			wait = c.backoff(attempt)
		case cl.ok(resp.status):
			return resp, nil
		default:
			err = c.errorFor(resp)
			// A 502 or 504, or a 503 that is not the ingress's own problem, comes from a proxy
			// that may have passed the request on: done or not, nobody says.
			if retryUnavailable(resp.status) && !fromSluice(err, ProblemUnavailable) && !fromSluice(err, "https://sluice.dev/problems#store-full") {
				unsure = true
			}
			if !cl.retry(resp.status) || resp.status == http.StatusTooManyRequests && !cl.overLim {
				if resp.status >= 500 {
					return resp, fail(err)
				}
				return resp, err
			}
			if cl.conn == neverSent && !fromSluice(err, ProblemUnavailable) {
				// A call that is not idempotent is repeated only on the ingress's own "not
				// done" (its 503 problem); a proxy's 5xx may have been sent on, and done.
				return resp, fail(err)
			}
			mayHaveStored = resp.status != http.StatusTooManyRequests
			ra, has := retryAfter(resp.header, c.now())
			if !has {
				var pe *ProblemError
				if errors.As(err, &pe) && pe.RetryAfter > 0 {
					ra, has = pe.RetryAfter, true
				}
			}
			if has && ra > c.maxRetryAfter {
				return resp, fail(err) // the server says "much later": that is the caller's decision
			}
			// Retry-After is a floor; the jittered back-off on top of it only matters once
			// the retries pile up, and spreads clients that were refused in the same second.
			wait = max(ra, c.backoff(attempt))
		}
		if mayHaveStored && b.landedAt.IsZero() {
			b.landedAt = sent
		}
		if attempt >= c.maxAttempts || b.waited+wait > c.maxRetryWait {
			return last, fail(err)
		}
		if cl.resend && !b.landedAt.IsZero() && c.now().Add(wait).Sub(b.landedAt) > resendWindow {
			// A later repeat might not be recognised as one: JetStream forgets the key
			// after 2 minutes. The caller must decide, and soon.
			return last, fail(&resendError{err: err, since: c.now().Sub(b.landedAt)})
		}
		if dl, ok := ctx.Deadline(); ok && c.now().Add(wait).After(dl) {
			// Sleeping would only end in a deadline error; the last answer says more.
			return last, fail(err)
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return last, fail(fmt.Errorf("%w (stopped waiting to retry: %w)", err, serr))
		}
		b.waited += wait
	}
}

// maybeSent reports whether a request that failed with err may have reached the server:
// false only when it surely did not (the name did not resolve, the connection or the TLS
// handshake failed).
func maybeSent(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &dns), errors.As(err, &op) && op.Op == "dial", errors.Is(err, syscall.ECONNREFUSED),
		errors.As(err, &rh), errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &he), errors.As(err, &ci):
		return false
	}
	return true
}

// resendError is a Submit's retry given up because it would come too late to be
// recognised as a repeat of an attempt that may have stored the message.
type resendError struct {
	err   error
	since time.Duration
}

func (e *resendError) Error() string {
	return fmt.Sprintf("%v (stopped retrying %v after the first attempt that may have been stored: resubmit with the same idempotency key within 2 minutes of that attempt, JetStream's duplicate window, to be sure of one message)",
		e.err, e.since.Round(time.Second))
}
func (e *resendError) Unwrap() error { return e.err }

// once makes one HTTP request and reads the whole answer.
func (c *Client) once(ctx context.Context, cl call) (*response, error) {
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, c.url(cl.path, cl.query), body)
	if err != nil {
		return nil, err
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if t := c.tokens(); cl.admin && t.admin != "" {
		req.Header.Set("Authorization", "Bearer "+t.admin)
	} else if !cl.admin && t.submit != "" && strings.HasPrefix(cl.path, "/v1/messages") {
		req.Header.Set("Authorization", "Bearer "+t.submit)
	} else if !cl.admin && t.check != "" && cl.path == "/v1/check" {
		req.Header.Set("Authorization", "Bearer "+t.check)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	if err != nil {
		// An answer cut off mid-body: for Submit this is exactly the case the idempotency
		// key exists for (was it stored or not?), so it is a transport error, not an answer.
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}, nil
}

// transientTransport says whether a transport error may be retried under policy p.
func (c *Client) transientTransport(p retryTransport, err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return false // a misspelt host does not appear by waiting
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) {
		return true // nothing was sent
	}
	if p == neverSent {
		return false
	}
	// Every *url.Error is a net.Error, so only its Timeout says something; TLS and
	// certificate failures are neither OpErrors nor timeouts, and are not retried.
	var ne net.Error
	return errors.As(err, &op) || errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Policies of status retries.
func retryUnavailable(status int) bool {
	// 503 is sluice's "cannot store durably now"; 502 and 504 come from proxies in front of
	// an ingress that is restarting. Nothing else can succeed by repeating it.
	return status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout
}

// retryNotDone is the status policy of calls that are not idempotent: only 503, and do
// retries it only when it is the ingress's own problem (fromSluice).
func retryNotDone(status int) bool { return status == http.StatusServiceUnavailable }

// fromSluice reports whether err is a problem of the ingress itself of type typ (a
// proxy's error page is "about:blank").
func fromSluice(err error, typ string) bool {
	var pe *ProblemError
	return errors.As(err, &pe) && pe.Type == typ
}

func retryOverLimitOrUnavailable(status int) bool {
	return status == http.StatusTooManyRequests || retryUnavailable(status)
}

func is2xx(status int) bool { return status >= 200 && status < 300 }

// escapeSegment percent-encodes s as exactly one path segment: "/" becomes %2F, and "."
// and ".." are encoded too, since clients and proxies would otherwise resolve them as
// dot-segments and address another resource (a key is data, never syntax).
func escapeSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// etagValue is an ETag header's opaque value: the quotes and a weak prefix taken off. A
// proxy that compresses answers weakens the ingress's strong tags (W/"3"), whose revision
// is still "3": kept weak, it would be refused as an If-Match (400).
func etagValue(h string) string {
	h = strings.TrimSpace(h)
	h = strings.TrimPrefix(h, "W/")
	return strings.Trim(h, `"`)
}
