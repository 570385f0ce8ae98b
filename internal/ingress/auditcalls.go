package ingress

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/queue"
)

// auditCalls puts in the audit trail what the admin API's own records do not: calls
// refused (401, 403), calls that change something and failed, and every cancel of a
// message, whoever made it and however it ended.
//
// Refusals need no token, so anyone can cause them: they are recorded at most
// refusedPerSecond a second per process, the rest counted in
// sluice_audit_refusals_suppressed_total — a flood of bad tokens cannot push the
// operators' changes out of the trail (bounded by -audit-max), nor fill the log.
type auditCalls struct {
	log        *audit.Log // nil: log lines only
	suppressed prometheus.Counter

	mu     sync.Mutex
	second int64 // unix second of the current window
	used   int   // refusals recorded in it
}

const refusedPerSecond = 10

func newAuditCalls(l *audit.Log, reg prometheus.Registerer) *auditCalls {
	a := &auditCalls{log: l, suppressed: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_audit_refusals_suppressed_total",
		Help: "Refused calls (401, 403) not written to the audit trail: more than 10 a second in this process.",
	})}
	reg.MustRegister(a.suppressed)
	return a
}

// allowRefusal reports whether one more refusal may be recorded this second.
func (a *auditCalls) allowRefusal(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sec := now.Unix(); sec != a.second {
		a.second, a.used = sec, 0
	}
	if a.used >= refusedPerSecond {
		a.suppressed.Inc()
		return false
	}
	a.used++
	return true
}

func result(code int) string {
	if code == http.StatusOK {
		return "ok"
	}
	return fmt.Sprintf("%d %s", code, http.StatusText(code))
}

// record writes rec to the trail (Append also logs it), or only logs it without a trail.
func (s *Server) auditRecord(ctx context.Context, rec audit.Record) {
	if s.audits.log == nil {
		s.cfg.Logger.Info("audit: "+rec.Action, "actor", rec.Actor, "scope", rec.Scope, "queue", rec.Queue, "target", rec.Target,
			"result", rec.Result, "remote", rec.Remote)
		return
	}
	// The call is answered: the record must not depend on the caller staying.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = s.audits.log.Append(actx, rec) // a failure is logged by Append
}

// auditAdmin wraps the admin API: a refusal, or a failed call that changes something, is
// recorded (a change that succeeded is recorded by the admin handler itself).
func (s *Server) auditAdmin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		rec := audit.Record{Target: r.Method + " " + r.URL.Path, Result: result(code), Remote: r.RemoteAddr}
		switch {
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
			if !s.audits.allowRefusal(time.Now()) {
				return
			}
			rec.Action = audit.ActionRefused
		case code >= 400 && r.Method != http.MethodGet && r.Method != http.MethodHead:
			rec.Action = audit.ActionFailed
		default:
			return
		}
		if t, ok := s.cfg.Auth.admin(r); ok {
			rec.Actor, rec.Scope = t.Name, t.Scope
		} else if _, sent := bearer(r); sent {
			rec.Actor = "(unknown token)" // never the token itself
		}
		s.auditRecord(r.Context(), rec)
	})
}

// auditCancel wraps DELETE /v1/messages/{id}: every cancel is recorded, with the submit
// token that made it ("" when -submit-tokens is off) and how it ended.
func (s *Server) auditCancel(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		if (code == http.StatusUnauthorized || code == http.StatusForbidden) && !s.audits.allowRefusal(time.Now()) {
			return
		}
		id := r.PathValue("id")
		rec := audit.Record{Action: audit.ActionCancel, Target: id, Result: result(code), Remote: r.RemoteAddr}
		if ref, ok := queue.ParseID(id); ok {
			for _, rule := range s.cfg.Rules().QueueRules() {
				if queue.RuleToken(rule.Name) == ref.RuleToken {
					rec.Queue = rule.Name
					break
				}
			}
		}
		if s.cfg.Auth != nil && s.cfg.Auth.Submit != nil {
			if secret, sent := bearer(r); sent {
				if t, ok := match(secret, s.cfg.Auth.Submit.Tokens()); ok {
					rec.Actor, rec.Scope = t.Name, t.Scope
				} else {
					rec.Actor = "(unknown token)"
				}
			}
		}
		s.auditRecord(r.Context(), rec)
	}
}
