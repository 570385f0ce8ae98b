package submit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/redact"
	"github.com/sluice-io/sluice/internal/status"
)

// statusResponse is GET /v1/messages/{id}.
type statusResponse struct {
	ID        string `json:"id"`
	Domain    string `json:"domain"`
	Rule      string `json:"rule"`
	Key       string `json:"key"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
	LastError string `json:"last_error"`
	RetryAt   string `json:"retry_at,omitempty"`
	DeliverAt string `json:"deliver_at,omitempty"` // scheduled: when it enters its queue
	Position  *int   `json:"position,omitempty"`
}

func (s *Service) handleStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := s.cfg.Status.Get(r.Context(), id)
	if err != nil {
		s.writeLocateError(w, id, err)
		return
	}
	if t, ok := s.authorizedFor(r, st.Domain); !ok {
		// An id the transport's authentication could not place (an earlier version's, found
		// as a dead letter).
		httpx.WriteProblem(w, httpx.Forbidden(fmt.Sprintf("token %q reads messages of domain %q only", t.Name, t.Domain)))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, newStatusResponse(st))
}

func newStatusResponse(st status.Status) statusResponse {
	resp := statusResponse{ID: st.ID, Domain: st.Domain, Rule: st.Rule, Key: st.Key, State: st.State, Attempts: st.Attempts,
		CreatedAt: st.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: st.UpdatedAt.UTC().Format(time.RFC3339Nano),
		LastError: redact.Text(st.LastError)} // also for an error stored before sinks' errors were redacted
	switch {
	case st.RetryAt.IsZero():
	case st.State == status.Scheduled:
		resp.DeliverAt = st.RetryAt.UTC().Format(time.RFC3339)
	default:
		resp.RetryAt = st.RetryAt.UTC().Format(time.RFC3339)
	}
	if st.State == status.Queued {
		resp.Position = &st.Position
	}
	return resp
}

// writeLocateError answers an error of the Locator: 404 never seen or no longer tracked,
// else 503.
func (s *Service) writeLocateError(w http.ResponseWriter, id string, err error) {
	var gone *status.Gone
	switch {
	case errors.Is(err, status.ErrNeverSeen):
		httpx.WriteProblem(w, httpx.NeverSeen(strconv.Quote(id)+" is not the id of a message of any queue rule in force"))
	case errors.As(err, &gone):
		detail := "the message is in none of its key's queue, the retry stream or the dead letters: it was delivered, " +
			"or removed by a purge. sluice keeps no record of a message once it has left"
		rule, key := gone.Rule, &gone.Key
		if gone.Unread {
			detail += fmt.Sprintf("; or it was stored again (re-admitted, replayed) behind more messages of its key than a lookup reads (%d)",
				status.DefaultMaxRead)
		}
		if gone.Legacy {
			detail = "an id of an earlier version of sluice names no queue; only its dead letter could be found, and there is none"
			rule, key = "", nil
		}
		var issuedAt string
		if !gone.IssuedAt.IsZero() {
			issuedAt = gone.IssuedAt.Format(time.RFC3339)
		}
		httpx.WriteProblem(w, httpx.NotTracked(detail, rule, key, issuedAt))
	default:
		s.cfg.Logger.Warn("ingress: message not readable", "id", id, "err", err)
		httpx.WriteProblem(w, httpx.Unavailable("", "the queue store (NATS JetStream) or Redis did not answer", time.Second))
	}
}

// cancelResponse is DELETE /v1/messages/{id}: what was removed.
type cancelResponse struct {
	statusResponse
	Cancelled bool `json:"cancelled"`
}

// handleCancel removes a message that has not been delivered yet (queued, parked, waiting
// for a delivery retry): 200 with its status as it was; 409 with its state when it is being
// delivered, delivered, dead or moving back into its queue; 404 as GET.
func (s *Service) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := s.cfg.Status.Cancel(r.Context(), id)
	var nc *status.NotCancellable
	switch {
	case errors.As(err, &nc):
		httpx.WriteProblem(w, httpx.NotCancellable("the message is "+nc.Status.State+
			": only a message that is queued, parked or waiting for a delivery retry can be cancelled", nc.Status.State))
		return
	case errors.Is(err, status.ErrOutcomeUnknown):
		s.cfg.Logger.Warn("ingress: cancel sent, outcome unknown", "id", id, "err", err)
		httpx.WriteProblem(w, httpx.OutcomeUnknown("the delete was sent to the queue store (NATS JetStream) and its answer was lost: "+
			"the message may be cancelled. GET it to see; a cancel again answers 404 #no-longer-tracked if this one went through"))
		return
	case err != nil:
		s.writeLocateError(w, id, err)
		return
	}
	s.cfg.Logger.Info("message cancelled", "id", id, "rule", st.Rule, "state", st.State)
	httpx.WriteJSON(w, http.StatusOK, cancelResponse{statusResponse: newStatusResponse(st), Cancelled: true})
}

// authorizedFor reports whether the request's token (if any) may see a message of domain:
// a submit token for one domain sees that domain's messages only.
func (s *Service) authorizedFor(r *http.Request, domain string) (Caller, bool) {
	t, ok := s.cfg.CallerOf(r.Context())
	if !ok || !t.Submit || t.Domain == "" {
		return t, true
	}
	return t, t.Domain == domain
}
