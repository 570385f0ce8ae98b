package ingress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/submit"
	"github.com/sluice-io/sluice/queue"
)

// Scopes of a token. operate includes read.
const (
	ScopeRead    = "read"    // GET of the admin API: the console's views
	ScopeOperate = "operate" // every admin call: tune, reset, pause, purge, replay, key delete
	ScopeSubmit  = "submit"  // POST /v1/messages and DELETE /v1/messages/{id} (-submit-tokens)
	// ScopeCheck is the scope of the check API (POST /v1/check, POST /json and the envoy
	// RLS over gRPC) once -submit-tokens is set: "check" or "check:DOMAIN" lines of that
	// file. A submit token does not check, nor a check token submit.
	ScopeCheck = "check"
)

// Token is a named, scoped bearer token. Only a SHA-256 digest of its secret is kept.
type Token struct {
	Name   string
	Scope  string
	Domain string // submit and check tokens: the one domain it may submit to or check; empty = any
	digest [32]byte
}

// TokenFile is a file of tokens, one per line: "name scope secret" ("#" comments and blank
// lines are skipped). Admin scopes are read and operate; submit tokens are "submit" or
// "submit:DOMAIN", check tokens "check" or "check:DOMAIN". The file is re-read when its modification time or size changes (checked
// once per second: by Auth.Watch, and on a request when nothing watches).
//
// Revoking a token is editing its file, so a reload fails closed: what is in force is
// exactly the lines of the file as it is now that parse. A line that does not parse is
// refused (its token stops working too) and the file is reported broken — an error log
// (never the secrets), sluice_token_reload_failures_total and sluice_token_file_broken,
// which the TokenFileBroken alert watches. A file that is empty (-admin-token-file),
// missing or unreadable puts none of its tokens in force. Only at start does a broken
// file stop the process.
type TokenFile struct {
	path, flag string
	admin      bool // scopes read/operate (else submit)
	single     bool // the whole file is one operate token named "admin-token" (-admin-token-file)
	log        *slog.Logger

	// The request path reads current and checked without a lock; one caller at a time
	// (reloading, guarded by mu) looks at the file when checked is a second old.
	current atomic.Pointer[[]Token]
	checked atomic.Int64 // unix nanoseconds of the last look at the file

	failures atomic.Int64 // loads that found the file broken (sluice_token_reload_failures_total)
	broken   atomic.Bool  // the file as it is now is broken (sluice_token_file_broken)

	mu      sync.Mutex // reload
	stamp   [2]int64
	loaded  bool  // stamp is the file's version in force
	loadErr error // what was wrong with that version
	lastErr string
}

// reloadInterval is how often a token file is looked at: a token removed from its file
// stops working within it.
const reloadInterval = time.Second

// OpenTokenFile reads path now; an error names the flag, file and line.
func OpenTokenFile(flag, path string, admin bool, log *slog.Logger) (*TokenFile, error) {
	if log == nil {
		log = slog.Default()
	}
	f := &TokenFile{path: path, flag: flag, admin: admin, log: log}
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// reload reads the file if it changed and puts what it holds in force; the error says
// what is wrong with the file as it is now (nil: nothing), the tokens in force then being
// its good lines, or none.
func (f *TokenFile) reload() error {
	fi, err := os.Stat(f.path)
	if err != nil {
		return f.install(nil, [2]int64{}, false, fmt.Errorf("%s: %w", f.flag, err))
	}
	st := [2]int64{fi.ModTime().UnixNano(), fi.Size()}
	if f.loaded && st == f.stamp {
		return f.loadErr
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return f.install(nil, [2]int64{}, false, fmt.Errorf("%s: %w", f.flag, err))
	}
	var toks []Token
	var bad error
	if f.single {
		switch secret := strings.TrimSpace(string(data)); {
		case secret == "":
			toks, bad = []Token{}, fmt.Errorf("%s: %s is empty", f.flag, f.path)
		case len(secret) < MinTokenLength:
			toks, bad = []Token{}, fmt.Errorf("%s: %s holds %d characters, want at least %d (e.g. openssl rand -hex 32)", f.flag, f.path, len(secret), MinTokenLength)
		default:
			toks = []Token{NewStaticToken("admin-token", ScopeOperate, secret)}
		}
	} else {
		var errs []error
		toks, errs = parseTokens(data, f.admin)
		if len(errs) > 0 {
			bad = fmt.Errorf("%s: %s:%w", f.flag, f.path, errors.Join(errs...))
		}
	}
	return f.install(toks, st, true, bad)
}

// install puts toks in force (nil: none) for the file's version st, broken when err.
func (f *TokenFile) install(toks []Token, st [2]int64, loaded bool, err error) error {
	if toks == nil {
		toks = []Token{}
	}
	if f.current.Load() != nil && err == nil {
		f.log.Info("auth: tokens reloaded", "flag", f.flag, "file", f.path, "tokens", len(toks))
	}
	if err != nil {
		f.failures.Add(1)
	}
	f.tokens(toks)
	f.stamp, f.loaded, f.loadErr = st, loaded, err
	f.broken.Store(err != nil)
	f.checked.Store(time.Now().UnixNano())
	return err
}

func (f *TokenFile) tokens(toks []Token) { f.current.Store(&toks) }

// check re-reads the file when reloadInterval has passed since the last look (force: now)
// and logs a broken file once per new error.
func (f *TokenFile) check(force bool) {
	now := time.Now().UnixNano()
	if !force && now-f.checked.Load() < int64(reloadInterval) {
		return
	}
	if force {
		f.mu.Lock()
	} else if !f.mu.TryLock() {
		return
	}
	defer f.mu.Unlock()
	f.checked.Store(now)
	if err := f.reload(); err != nil {
		if err.Error() != f.lastErr {
			f.log.Error("auth: token file broken: its bad lines' tokens are refused, and only the tokens of its good lines are in force",
				"flag", f.flag, "file", f.path, "tokens", len(*f.current.Load()), "err", err)
		}
		f.lastErr = err.Error()
	} else {
		f.lastErr = ""
	}
}

// Tokens returns the tokens in force, re-reading the file when it changed. It takes no
// lock on the request path.
func (f *TokenFile) Tokens() []Token {
	if f == nil {
		return nil
	}
	f.check(false)
	return *f.current.Load()
}

// ParseTokens reads "name scope secret" lines. Errors say "LINE: what" (the secret is
// never repeated).
func ParseTokens(data []byte, admin bool) ([]Token, error) {
	toks, errs := parseTokens(data, admin)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return toks, nil
}

// parseTokens reads every line: the tokens of the lines that parse, and an error per line
// that does not ("LINE: what"; the secret is never repeated).
func parseTokens(data []byte, admin bool) ([]Token, []error) {
	toks := []Token{}
	var errs []error
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseToken(n, line, admin)
		if err == nil && names[t.Name] {
			err = fmt.Errorf("%d: name %q used twice", n, t.Name)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		names[t.Name] = true
		toks = append(toks, t)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return toks, errs
}

func parseToken(n int, line string, admin bool) (Token, error) {
	fields := strings.Fields(line)
	if len(fields) != 3 {
		return Token{}, fmt.Errorf("%d: want three fields \"name scope token\", found %d", n, len(fields))
	}
	t := Token{Name: fields[0], Scope: fields[1]}
	if admin {
		if t.Scope != ScopeRead && t.Scope != ScopeOperate {
			return Token{}, fmt.Errorf("%d: scope %q: want read or operate", n, t.Scope)
		}
	} else {
		scope, domain, hasDomain := strings.Cut(t.Scope, ":")
		if (scope != ScopeSubmit && scope != ScopeCheck) || (hasDomain && domain == "") {
			return Token{}, fmt.Errorf("%d: scope %q: want submit, submit:DOMAIN, check or check:DOMAIN", n, t.Scope)
		}
		t.Scope, t.Domain = scope, domain
	}
	if len(fields[2]) < MinTokenLength {
		return Token{}, fmt.Errorf("%d: token of %q: at least %d characters (e.g. openssl rand -hex 32)", n, t.Name, MinTokenLength)
	}
	t.digest = sha256.Sum256([]byte(fields[2]))
	return t, nil
}

// MinTokenLength is the shortest secret a token file, -admin-token-file or (outside
// `sluice dev`) -admin-token may hold.
const MinTokenLength = 16

// Auth decides who a bearer token is. Comparisons are constant-time over SHA-256 digests
// and visit every token, so neither a token's content, length nor position leaks through
// timing.
type Auth struct {
	Static []Token    // -admin-token (scope operate)
	File   *TokenFile // -admin-token-file (scope operate)
	Admin  *TokenFile
	Submit *TokenFile
}

// files are the token files of a, in flag order.
func (a *Auth) files() []*TokenFile {
	var fs []*TokenFile
	for _, f := range []*TokenFile{a.File, a.Admin, a.Submit} {
		if f != nil {
			fs = append(fs, f)
		}
	}
	return fs
}

// Watch looks at the token files every reloadInterval until ctx ends, so a token removed
// from its file stops working within that interval even while no request comes, and a
// file that breaks is reported when it breaks, not at the next request. checked, when not
// nil, is called after each look (tests wait on it instead of sleeping).
func (a *Auth) Watch(ctx context.Context, checked func()) {
	if a == nil || len(a.files()) == 0 {
		return
	}
	t := time.NewTicker(reloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, f := range a.files() {
			f.check(true)
		}
		if checked != nil {
			checked()
		}
	}
}

var (
	tokenReloadFailuresDesc = prometheus.NewDesc("sluice_token_reload_failures_total",
		"Loads of a token file (-admin-token-file, -admin-tokens, -submit-tokens) that found it broken: a bad line, empty, missing or unreadable.",
		[]string{"flag"}, nil)
	tokenFileBrokenDesc = prometheus.NewDesc("sluice_token_file_broken",
		"1 while a token file is broken: its bad lines' tokens are refused (and all of its tokens when it is empty, missing or unreadable).",
		[]string{"flag"}, nil)
)

// Describe and Collect make a the collector of its token files' health.
func (a *Auth) Describe(ch chan<- *prometheus.Desc) {
	ch <- tokenReloadFailuresDesc
	ch <- tokenFileBrokenDesc
}

func (a *Auth) Collect(ch chan<- prometheus.Metric) {
	for _, f := range a.files() {
		broken := 0.0
		if f.broken.Load() {
			broken = 1
		}
		ch <- prometheus.MustNewConstMetric(tokenReloadFailuresDesc, prometheus.CounterValue, float64(f.failures.Load()), f.flag)
		ch <- prometheus.MustNewConstMetric(tokenFileBrokenDesc, prometheus.GaugeValue, broken, f.flag)
	}
}

// NewStaticToken makes the token of -admin-token.
func NewStaticToken(name, scope, secret string) Token {
	return Token{Name: name, Scope: scope, digest: sha256.Sum256([]byte(secret))}
}

func match(secret string, lists ...[]Token) (Token, bool) {
	d := sha256.Sum256([]byte(secret))
	var found Token
	ok := 0
	for _, l := range lists {
		for _, t := range l {
			if subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1 {
				found, ok = t, 1
			}
		}
	}
	return found, ok == 1
}

// bearer is the token of r's Authorization header: the scheme "Bearer" in any case (RFC
// 9110 11.1: auth schemes are case-insensitive), one or more spaces, the token.
func bearer(r *http.Request) (string, bool) {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	got = strings.TrimLeft(got, " ")
	return got, ok && strings.EqualFold(scheme, "Bearer") && got != ""
}

// admin returns the admin token of r.
func (a *Auth) admin(r *http.Request) (Token, bool) {
	if a == nil {
		return Token{}, false
	}
	secret, ok := bearer(r)
	if !ok {
		return Token{}, false
	}
	return match(secret, a.Static, a.File.Tokens(), a.Admin.Tokens())
}

// Enabled reports whether any admin token is configured.
func (a *Auth) Enabled() bool {
	return a != nil && (len(a.Static) > 0 || a.File != nil || a.Admin != nil)
}

type tokenKey struct{}

// TokenOf returns the token that authenticated the request (admin or submit).
func TokenOf(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok
}

// adminScope is the scope an admin request needs: read for GET and HEAD, else operate.
func adminScope(r *http.Request) string {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return ScopeRead
	}
	return ScopeOperate
}

func allows(have, need string) bool {
	return have == need || (have == ScopeOperate && need == ScopeRead)
}

// authorized reports whether r carries a known admin token (any scope).
func (s *Server) authorized(r *http.Request) bool {
	_, ok := s.cfg.Auth.admin(r)
	return ok
}

// unauthorized answers 401 with the Bearer challenge; a token that was sent but is not known
// adds error="invalid_token" (RFC 6750 §3.1).
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, detail string) {
	challenge := `Bearer realm="sluice"`
	if _, sent := bearer(r); sent {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	httpx.WriteProblem(w, httpx.Unauthorized(detail))
}

func forbidden(w http.ResponseWriter, detail string) {
	httpx.WriteProblem(w, httpx.Forbidden(detail))
}

// authenticate guards the admin API: 401 without a known token, 403 for a read token on a
// call that changes something (RFC 9110 §15.5.2, §15.5.4).
func (s *Server) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := s.cfg.Auth.admin(r)
		if !ok {
			s.unauthorized(w, r, "the admin API needs Authorization: Bearer <an admin token>")
			return
		}
		if need := adminScope(r); !allows(t.Scope, need) {
			forbidden(w, fmt.Sprintf("token %q has scope %s; %s %s needs %s", t.Name, t.Scope, r.Method, r.URL.Path, need))
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
	})
}

// submitAuth guards POST /v1/messages and DELETE /v1/messages/{id} when -submit-tokens is
// set: a submit token is needed, and a token for one domain submits to that domain only.
// A cancel's domain (that of the id's rule) is checked here; a submission's domains are
// checked by the handler once the body is decoded (internal/submit), for a single
// submission and for every item of a batch alike — a check here that read one object's
// "domain" saw nothing in a JSON array or NDJSON and let a batch through to any domain.
func (s *Server) submitAuth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Auth == nil || s.cfg.Auth.Submit == nil {
			h(w, r)
			return
		}
		secret, ok := bearer(r)
		if !ok {
			s.unauthorized(w, r, "submitting needs Authorization: Bearer <a submit token>")
			return
		}
		t, ok := match(secret, s.cfg.Auth.Submit.Tokens())
		if !ok {
			s.unauthorized(w, r, "unknown submit token")
			return
		}
		if t.Scope != ScopeSubmit {
			forbidden(w, fmt.Sprintf("token %q has scope %s; submitting needs scope submit", t.Name, t.Scope))
			return
		}
		if t.Domain != "" && r.Method == http.MethodDelete {
			domain, ok := s.cancelDomain(r)
			if !ok {
				h(w, r) // the handler answers the unknown id as it always does
				return
			}
			if domain != t.Domain {
				forbidden(w, fmt.Sprintf("token %q may submit to domain %q only", t.Name, t.Domain))
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
	}
}

// statusAuth guards GET /v1/messages/{id} when -submit-tokens is set: a message's status
// shows its key and its last error, which belong to whoever submitted it. A submit token
// for the domain of the id's rule (or for every domain) reads it, and so does an admin
// token (any scope: read is enough). The domain is the one the id names, so a refused
// lookup costs no read of any store; an id that names no rule (never seen, or an id of an
// earlier version) is checked again on the answer (internal/submit).
func (s *Server) statusAuth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Auth == nil || s.cfg.Auth.Submit == nil {
			h(w, r)
			return
		}
		if t, ok := s.cfg.Auth.admin(r); ok {
			h(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
			return
		}
		secret, ok := bearer(r)
		if !ok {
			s.unauthorized(w, r, "reading a message's status needs Authorization: Bearer <a submit token of its domain, or an admin token>")
			return
		}
		t, ok := match(secret, s.cfg.Auth.Submit.Tokens())
		if !ok {
			s.unauthorized(w, r, "unknown token")
			return
		}
		if t.Scope != ScopeSubmit {
			forbidden(w, fmt.Sprintf("token %q has scope %s; reading a message's status needs a submit or an admin token", t.Name, t.Scope))
			return
		}
		if t.Domain != "" {
			if domain, ok := s.idDomain(r.PathValue("id")); ok && domain != t.Domain {
				forbidden(w, fmt.Sprintf("token %q reads messages of domain %q only", t.Name, t.Domain))
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
	}
}

// idDomain is the domain of the queue rule message id names; false when it names none in
// force (or is not an id of this version).
func (s *Server) idDomain(id string) (string, bool) {
	ref, ok := queue.ParseID(id)
	if !ok {
		return "", false
	}
	for _, rule := range s.cfg.Rules().QueueRules() {
		if queue.RuleToken(rule.Name) == ref.RuleToken {
			return rule.Domain, true
		}
	}
	return "", false
}

// cancelDomain is the domain of the rule of a cancel's message id; false when the id names
// no rule in force.
func (s *Server) cancelDomain(r *http.Request) (string, bool) {
	ref, ok := queue.ParseID(r.PathValue("id"))
	if !ok {
		return "", false
	}
	for _, rule := range s.cfg.Rules().Rules() {
		if queue.RuleToken(rule.Name) == ref.RuleToken {
			return rule.Domain, true
		}
	}
	return "", false
}

// AuthFiles says where the ingress's tokens come from: -admin-token, -admin-token-file,
// -admin-tokens and -submit-tokens. Empty fields are off.
type AuthFiles struct {
	AdminToken       string
	AdminTokenFile   string
	AdminTokensFile  string
	SubmitTokensFile string
}

// OpenAuth reads the tokens of c; an error names the flag of the file at fault.
func OpenAuth(c AuthFiles, log *slog.Logger) (*Auth, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Auth{}
	if c.AdminToken != "" {
		a.Static = []Token{NewStaticToken("admin-token", ScopeOperate, c.AdminToken)}
	}
	var err error
	if c.AdminTokenFile != "" {
		a.File = &TokenFile{path: c.AdminTokenFile, flag: "-admin-token-file", single: true, log: log}
		if err := a.File.reload(); err != nil {
			return nil, err
		}
	}
	if c.AdminTokensFile != "" {
		if a.Admin, err = OpenTokenFile("-admin-tokens", c.AdminTokensFile, true, log); err != nil {
			return nil, err
		}
	}
	if c.SubmitTokensFile != "" {
		if a.Submit, err = OpenTokenFile("-submit-tokens", c.SubmitTokensFile, false, log); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// submitCaller is the request's token as the submission service needs it
// (submit.Config.CallerOf): a submit token's domain bounds what it submits and reads, and
// its name scopes its idempotency keys.
func submitCaller(ctx context.Context) (submit.Caller, bool) {
	t, ok := TokenOf(ctx)
	return submit.Caller{Name: t.Name, Submit: t.Scope == ScopeSubmit, Domain: t.Domain}, ok
}
