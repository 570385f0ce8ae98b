package ingress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/internal/httpx"
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
// at most once per second); a file that no longer parses keeps the last good tokens and is
// logged (never the secrets).
type TokenFile struct {
	path, flag string
	admin      bool // scopes read/operate (else submit)
	single     bool // the whole file is one operate token named "admin-token" (-admin-token-file)
	log        *slog.Logger

	// The request path reads current and checked without a lock; one caller at a time
	// (reloading, guarded by mu) looks at the file when checked is a second old.
	current atomic.Pointer[[]Token]
	checked atomic.Int64 // unix nanoseconds of the last look at the file

	mu      sync.Mutex // reload
	stamp   [2]int64
	tokens  []Token
	lastErr string
}

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

func (f *TokenFile) reload() error {
	fi, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("%s: %w", f.flag, err)
	}
	st := [2]int64{fi.ModTime().UnixNano(), fi.Size()}
	if f.tokens != nil && st == f.stamp {
		return nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("%s: %w", f.flag, err)
	}
	var toks []Token
	if f.single {
		secret := strings.TrimSpace(string(data))
		if secret == "" {
			return fmt.Errorf("%s: %s is empty", f.flag, f.path)
		}
		toks = []Token{NewStaticToken("admin-token", ScopeOperate, secret)}
	} else {
		toks, err = ParseTokens(data, f.admin)
	}
	if err != nil {
		return fmt.Errorf("%s: %s:%w", f.flag, f.path, err)
	}
	if f.tokens != nil {
		f.log.Info("auth: tokens reloaded", "flag", f.flag, "file", f.path, "tokens", len(toks))
	}
	f.tokens, f.stamp = toks, st
	f.current.Store(&toks)
	f.checked.Store(time.Now().UnixNano())
	return nil
}

// Tokens returns the tokens in force, re-reading the file when it changed. It takes no
// lock on the request path.
func (f *TokenFile) Tokens() []Token {
	if f == nil {
		return nil
	}
	if now := time.Now().UnixNano(); now-f.checked.Load() >= int64(time.Second) && f.mu.TryLock() {
		f.checked.Store(now)
		if err := f.reload(); err != nil {
			if err.Error() != f.lastErr {
				f.log.Error("auth: token file changed but does not load; the previous tokens stay in force", "err", err)
			}
			f.lastErr = err.Error()
		} else {
			f.lastErr = ""
		}
		f.mu.Unlock()
	}
	return *f.current.Load()
}

// ParseTokens reads "name scope secret" lines. Errors say "LINE: what" (the secret is
// never repeated).
func ParseTokens(data []byte, admin bool) ([]Token, error) {
	toks := []Token{}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("%d: want three fields \"name scope token\", found %d", n, len(fields))
		}
		t := Token{Name: fields[0], Scope: fields[1]}
		if admin {
			if t.Scope != ScopeRead && t.Scope != ScopeOperate {
				return nil, fmt.Errorf("%d: scope %q: want read or operate", n, t.Scope)
			}
		} else {
			scope, domain, hasDomain := strings.Cut(t.Scope, ":")
			if (scope != ScopeSubmit && scope != ScopeCheck) || (hasDomain && domain == "") {
				return nil, fmt.Errorf("%d: scope %q: want submit, submit:DOMAIN, check or check:DOMAIN", n, t.Scope)
			}
			t.Scope, t.Domain = scope, domain
		}
		if len(fields[2]) < 16 {
			return nil, fmt.Errorf("%d: token of %q: at least 16 characters (e.g. openssl rand -hex 32)", n, t.Name)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("%d: name %q used twice", n, t.Name)
		}
		names[t.Name] = true
		t.digest = sha256.Sum256([]byte(fields[2]))
		toks = append(toks, t)
	}
	return toks, sc.Err()
}

// Auth decides who a bearer token is. Comparisons are constant-time over SHA-256 digests
// and visit every token, so neither a token's content, length nor position leaks through
// timing.
type Auth struct {
	Static []Token    // -admin-token (scope operate)
	File   *TokenFile // -admin-token-file (scope operate)
	Admin  *TokenFile
	Submit *TokenFile
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
// checked by the handler once the body is decoded (submitRefused), for a single
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

// submitRefused is the 403 of a submission to domain when the request's submit token (ctx)
// may submit to another domain only; nil when it may (or no token is configured). item is
// the submission's index in a batch, or -1 for a single one: the problem then names the
// item ("[3].domain"), and says the whole batch was refused.
func submitRefused(ctx context.Context, domain string, item int) *httpx.Problem {
	t, ok := TokenOf(ctx)
	if !ok || t.Domain == "" || domain == t.Domain {
		return nil
	}
	p := httpx.Forbidden(fmt.Sprintf("token %q may submit to domain %q only", t.Name, t.Domain))
	p.Field = "domain"
	if item >= 0 {
		p.Field = "[" + strconv.Itoa(item) + "].domain"
		p.Detail = fmt.Sprintf("item %d is for domain %q: token %q may submit to domain %q only; "+
			"the batch is refused whole and none of its items was stored", item, domain, t.Name, t.Domain)
	}
	return &p
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
