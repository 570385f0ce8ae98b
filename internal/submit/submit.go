package submit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/request"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// outcome is the answer to one submission, written alone (POST /v1/messages with one
// object) or as one item of a batch.
type outcome struct {
	status  int
	resp    submitResponse  // 2xx
	problem *httpx.Problem  // otherwise
	limit   httpx.RateLimit // rate-limit headers of a 202 or 429 (when Policy is set)
	queued  bool            // a 202 queued: written by WriteQueued
	depth   int64
	cap     int64
	eta     time.Time
}

func problemOutcome(p httpx.Problem) outcome { return outcome{status: p.Status, problem: &p} }

// write answers one submission.
func (s *Service) write(w http.ResponseWriter, o outcome) { writeOutcome(w, o) }

// writeOutcome writes o: its rate-limit headers (when it has a policy), then its problem or
// its body.
func writeOutcome(w http.ResponseWriter, o outcome) {
	if o.limit.Policy != "" {
		httpx.SetRateLimitHeaders(w.Header(), o.limit)
	}
	switch {
	case o.problem != nil:
		httpx.WriteProblem(w, *o.problem)
	case o.queued:
		w.Header()["Location"] = []string{"/v1/messages/" + o.resp.ID} // canonical already
		if o.depth > 0 {
			w.Header()["Preference-Applied"] = []string{request.PreferDepth}
		}
		WriteQueued(w, o.resp.ID, o.depth, o.cap, o.eta)
	default:
		w.Header().Set("Location", "/v1/messages/"+o.resp.ID)
		httpx.WriteJSON(w, o.status, o.resp)
	}
}

// submission is one decoded, validated submission between its checks and its answer.
type submission struct {
	req    *request.Submit
	rule   *rules.Rule
	msg    queue.Message
	at     time.Time // when it asks to be delivered, if later than now (scheduled); else zero
	digest string    // req.Digest()
	idem   string    // req.IdempotencyKey as claimed: idempotencyKey's
}

// options are the submission's admission options.
func (sub *submission) options() admit.Options {
	return admit.Options{Park: true, IdempotencyKey: sub.idem, RequestDigest: sub.digest, Depth: sub.req.Depth, First: true}
}

// idempotencyKey is the idempotency key k as it is claimed in Redis: with -submit-tokens,
// the caller's own (queue.ScopedIdempotencyKey under the submit token's name), so that two
// callers' keys never meet — one cannot be answered with, told the id of, or go on to
// cancel another's message by guessing its key; without tokens (open mode), k as given,
// shared by every caller of the rule as before.
func (s *Service) idempotencyKey(ctx context.Context, k string) string {
	if k == "" {
		return ""
	}
	if t, ok := s.cfg.CallerOf(ctx); ok && t.Submit {
		return queue.ScopedIdempotencyKey(t.Name, k)
	}
	return k
}

// submit admits one decoded, validated submission.
func (s *Service) submit(ctx context.Context, req *request.Submit) outcome {
	sub, o, ok := s.prepare(ctx, req)
	if !ok {
		return o
	}
	if !sub.at.IsZero() {
		return s.schedule(ctx, &sub)
	}
	res, err := s.cfg.Admitter.Admit(ctx, sub.rule, sub.msg, sub.options())
	return s.conclude(ctx, &sub, res, err)
}

// prepare matches a submission's rule and builds its message; when it cannot be admitted
// (no rule, no queue, a field at fault) ok is false and o is the answer.
func (s *Service) prepare(ctx context.Context, req *request.Submit) (sub submission, o outcome, ok bool) {
	set := s.cfg.Rules()
	match, ok := set.Match(req.Domain, ruleEntries(req.Descriptor))
	if !ok {
		return sub, problemOutcome(httpx.NoRule("", set.NoMatchDetail(req.Domain))), false
	}
	rule := match.Rule
	if !rule.HasQueue() {
		return sub, problemOutcome(httpx.NoRule("No queue for this descriptor", "rule "+strconv.Quote(rule.Name)+" has no queue; it answers POST /v1/check only")), false
	}
	if len(match.Key) > queue.MaxKeyBytes {
		return sub, problemOutcome(httpx.BadRequest("descriptor", "the key made of the descriptor's values is longer than 256 bytes")), false
	}
	now := s.cfg.Now()
	id, err := queue.NewID(rule.Name, match.Key)
	if err != nil {
		return sub, s.internalOutcome(rule.Name, err), false
	}
	msg := queue.Message{ID: id, Key: match.Key, Payload: req.Payload, CreatedAt: now, // decodeJSON copied the payload out of the pooled body
		ExpiresAt: req.Expiry(now, rule.Queue.MaxAge), Headers: req.MessageHeaders(),
		TraceParent: req.TraceParent, TraceState: req.TraceState}
	if telemetry.On() {
		traceAdmission(ctx, &msg, rule.Name)
	}
	at := req.DeliveryTime(now)
	if msg.Expired(now) || (!msg.ExpiresAt.IsZero() && at.After(msg.ExpiresAt)) {
		field := "ttl"
		if req.ExpiresAt != "" {
			field = "expires_at"
		}
		return sub, problemOutcome(httpx.BadRequest(field, "the message would expire (its ttl or expires_at, or its rule's queue.max_age) before it could be delivered")), false
	}
	sub = submission{req: req, rule: rule, msg: msg, idem: s.idempotencyKey(ctx, req.IdempotencyKey), digest: req.Digest()}
	if at.After(now) {
		sub.at = at
	}
	return sub, outcome{}, true
}

// conclude answers a submission from its admission's result.
func (s *Service) conclude(ctx context.Context, sub *submission, res admit.Result, err error) outcome {
	rule, msg, req, digest := sub.rule, sub.msg, sub.req, sub.digest
	// Idempotency: the first request with a key owns it for the TTL (claimed with the
	// admission's count, before the publish, with the request's digest); repeats get its
	// answer, and another request under the same key a 422.
	if err == nil && res.Decision == admit.KeyReused {
		return keyReusedOutcome(req.IdempotencyKey, res.Owner)
	}
	if err == nil && res.Decision == admit.KeyTaken {
		if o, done := s.replayOwner(ctx, &msg, res.Owner); done {
			s.admissions.WithLabelValues(rule.Name, decisionDuplicate).Inc() // or a 503: counted with the repeats
			return o
		}
		// The owner is not stored and may never be (its admission failed, or its ingress died
		// between claiming the key and storing): admit under the owner's id, which the
		// stream's duplicate window recognises if the owner's publish lands after all.
		res, err = s.cfg.Admitter.Admit(ctx, rule, msg, admit.Options{Park: true, First: true})
	}
	if err != nil {
		// The idempotency key stays claimed: a publish that timed out may still have been
		// stored, and a retry under the same key re-admits under the same message id, which
		// the stream's duplicate window then recognises.
		if errors.Is(err, admit.ErrStoreFull) {
			s.cfg.Logger.Warn("ingress: message not stored: the queue store is full", "rule", rule.Name, "err", err)
			return s.storeFullOutcome(rule.Name)
		}
		s.admissions.WithLabelValues(rule.Name, decisionError).Inc()
		if errors.Is(err, admit.ErrUnavailable) {
			s.cfg.Logger.Warn("ingress: message not stored", "rule", rule.Name, "key", msg.Key, "err", err)
			return problemOutcome(httpx.Unavailable("Cannot store the message now", "the queue store (NATS JetStream) is unreachable; nothing was stored", s.cfg.Unavailable))
		}
		return s.internalOutcome(rule.Name, err)
	}
	limit := rateLimitOf(res)
	switch {
	case res.Decision == admit.Rejected:
		if res.Claimed {
			s.cfg.Admitter.Scheduler.Idempotency.Release(context.WithoutCancel(ctx), rule.Name, sub.idem, queue.IdempotencyValue(msg.ID, digest))
		}
		s.admissions.WithLabelValues(rule.Name, decisionRejected).Inc()
		s.refused.add(rule.Name)
		return rejectedOutcome(res, "")
	case res.Decision == admit.Parked:
		s.admissions.WithLabelValues(rule.Name, decisionParked).Inc()
		return outcome{status: http.StatusAccepted, limit: limit,
			resp: submitResponse{ID: msg.ID, State: status.Parked, RetryAt: res.RetryAt.UTC().Format(time.RFC3339)}}
	case res.Duplicate:
		// The stream already had this id (a repeat whose owner was not found, re-admitted
		// under the owner's id): the owner was stored once, and nothing new was. Answer as a
		// repeat, with where the owner is now — it may have left since (delivered, cancelled,
		// purged) while its id is still in the stream's duplicate window.
		s.admissions.WithLabelValues(rule.Name, decisionDuplicate).Inc()
		return s.duplicateOutcome(ctx, msg.ID)
	default:
		s.admissions.WithLabelValues(rule.Name, decisionQueued).Inc()
		// The body is written by WriteQueued from these fields, a batch item by appendItem:
		// nothing is formatted twice on this hot path.
		return outcome{status: http.StatusAccepted, limit: limit, queued: true, depth: res.Depth, cap: res.Capacity, eta: res.ETA,
			resp: submitResponse{ID: msg.ID, State: status.Queued}}
	}
}

// rejectedOutcome is the 429 #quota-exceeded of an admission refused (res.Decision
// Rejected: the key's queue full, its admission limit exhausted, or the rule's max_bytes
// reached), with the violated policies, the Retry-After of the policy that refused and the
// rate-limit headers. A submission and a dead letter's replay (internal/admin) answer it alike;
// more, when set, is added to the detail ("the dead letter is kept").
func rejectedOutcome(res admit.Result, more string) outcome {
	p, limit := admit.Refusal(res, more)
	o := problemOutcome(p)
	o.limit = limit
	return o
}

// rateLimitOf is the rate-limit headers of an admission's answer.
func rateLimitOf(res admit.Result) httpx.RateLimit { return res.RateLimit() }

// schedule keeps a message with a later delivery time in the retry stream until then
// (JetStream's message schedules, resolved to whole seconds and never early); it enters its
// key's queue at that time, or waits parked if the queue has no room then. The key's
// scheduled messages are capped at submit (the rule's max_scheduled), so a burst for 09:00
// is refused now rather than dead-lettered later. Nothing is written to Redis but an
// idempotency key, when given.
func (s *Service) schedule(ctx context.Context, sub *submission) outcome {
	rule, msg, req, at, digest, idem := sub.rule, sub.msg, sub.req, sub.at, sub.digest, sub.idem
	now := msg.CreatedAt
	if max := s.cfg.MaxDelay; at.Sub(now) > max {
		field := "delay"
		if req.DeliverAt != "" {
			field = "deliver_at"
		}
		return problemOutcome(httpx.BadRequest(field, "is more than "+max.String()+" ahead (-max-delay)"))
	}
	park := s.cfg.Admitter.Parking
	if park == nil {
		return problemOutcome(httpx.Unavailable("", "no retry stream to keep scheduled messages in", time.Second))
	}
	claim := queue.IdempotencyValue(msg.ID, digest)
	if idem != "" {
		owner, err := s.cfg.Admitter.Redis.TakeNow(ctx, rule.Name, idem, claim)
		switch {
		case err != nil:
			s.cfg.Logger.Warn("ingress: idempotency key not checked (Redis unreachable)", "rule", rule.Name, "err", err)
		case owner != claim:
			ownerID, ownerDigest := queue.SplitIdempotencyValue(owner)
			if ownerDigest != "" && ownerDigest != digest {
				return keyReusedOutcome(req.IdempotencyKey, ownerID)
			}
			if o, done := s.replayOwner(ctx, &msg, ownerID); done {
				s.admissions.WithLabelValues(rule.Name, decisionDuplicate).Inc()
				return o
			}
		}
	}
	release := func() {
		if idem != "" {
			s.cfg.Admitter.Scheduler.Idempotency.Release(context.WithoutCancel(ctx), rule.Name, idem, claim)
		}
	}
	n, err := park.ScheduledCount(ctx, rule.Name, msg.Key)
	if err != nil {
		s.admissions.WithLabelValues(rule.Name, decisionError).Inc()
		return problemOutcome(httpx.Unavailable("Cannot store the message now", "the queue store (NATS JetStream) is unreachable; nothing was stored", s.cfg.Unavailable))
	}
	if max := rule.Queue.MaxScheduled; int64(n) >= max {
		release()
		s.admissions.WithLabelValues(rule.Name, decisionRejected).Inc()
		s.refused.add(rule.Name)
		return scheduledFullOutcome(rule, n, at.Sub(now))
	}
	fire, err := park.Schedule(ctx, rule.Name, msg, at)
	if errors.Is(err, retry.ErrScheduledAlready) { // a repeat, under the owner's id (replayOwner)
		s.admissions.WithLabelValues(rule.Name, decisionDuplicate).Inc()
		return s.duplicateOutcome(ctx, msg.ID)
	}
	if errors.Is(err, retry.ErrRuleFull) { // this rule's share of the retry stream (-retry-rule-share)
		release()
		s.admissions.WithLabelValues(rule.Name, decisionRejected).Inc()
		s.refused.add(rule.Name)
		return problemOutcome(httpx.QuotaExceeded("this rule holds its share of the retry stream (-retry-rule-share) with its "+
			"parked and scheduled messages; other rules are not held back. Retry-After is the time until this message's "+
			"own delivery time, when it is queued at once", max(at.Sub(now), time.Second), rule.Name))
	}
	if err != nil {
		s.admissions.WithLabelValues(rule.Name, decisionError).Inc()
		if errors.Is(err, retry.ErrFull) {
			release()
		}
		s.cfg.Logger.Warn("ingress: scheduled message not stored", "rule", rule.Name, "key", msg.Key, "err", err)
		return problemOutcome(httpx.Unavailable("Cannot store the message now", "the retry stream (NATS JetStream) did not store it; nothing was stored", s.cfg.Unavailable))
	}
	s.admissions.WithLabelValues(rule.Name, decisionScheduled).Inc()
	return outcome{status: http.StatusAccepted, resp: submitResponse{ID: msg.ID, State: status.Scheduled, ETA: fire.UTC().Format(time.RFC3339Nano)}}
}

// scheduledFullOutcome is the 429 of a scheduled submission to a key that has n messages
// scheduled, its rule's max_scheduled; wait is how far ahead the refused message asked to
// be delivered.
//
// Retry-After is wait, the time until the refused message's own delivery time: a retry
// then is accepted, for its deliver_at is then past and it is admitted into its key's
// queue at once (deliver_at in the past means now), never scheduled, so max_scheduled no
// longer applies; a place may free up sooner (one of the key's scheduled messages leaves,
// or is cancelled). The exact "when the earliest of the key's scheduled messages leaves"
// would need reading every one of them (each holds its time in its own headers in the
// retry stream: up to max_scheduled reads, payloads included) on every such refusal — the
// flood case of a burst scheduled for one time — so it is not looked up. For a delay the
// retry would ask for a new time again; wait is still the time after which submitting it
// without a delay gives what was asked.
//
// There are no rate-limit headers: they describe the key's queue or its admission limit
// (as a scheduled 202 carries none), and this limit has neither a window nor a known time
// at which one more place frees up.
func scheduledFullOutcome(rule *rules.Rule, n uint64, wait time.Duration) outcome {
	detail := "this key has " + strconv.FormatUint(n, 10) + " messages scheduled, its rule's max_scheduled; " +
		"they leave at their own times. Retry-After is the time until this message's own delivery time, " +
		"when it is no longer scheduled but queued at once"
	if rule.Queue.MaxScheduled == 0 {
		detail = "this key's rule refuses scheduled messages (its max_scheduled is 0). Retry-After is the time " +
			"until this message's own delivery time, when it is queued at once"
	}
	return problemOutcome(httpx.QuotaExceeded(detail, max(wait, time.Second), rule.Name))
}

// keyReusedOutcome is the 422 of an idempotency key already used, within its TTL, by
// another request (another domain, descriptor or payload): answering 200 with the first
// message would tell the caller its new work was accepted when it was not.
func keyReusedOutcome(key, owner string) outcome {
	return problemOutcome(httpx.IdempotencyKeyReused("idempotency key " + strconv.Quote(key) +
		" was used for another request (its domain, descriptor or payload differ), " +
		"message " + owner + "; send new work under a new key, or repeat the original request exactly"))
}

// replayOwner answers a repeated idempotency key with the message that owns it: 200 and
// where it is now, or without a state once it has left sluice (delivered or purged; it is
// no longer tracked). done is false when the owner was issued within the stream's
// duplicate window but is nowhere to be found: its admission may still be in flight, or
// failed (503), or its ingress died before storing it. The caller then admits m under the
// owner's id (m.ID is set to it when the owner is of m's key), and the stream's duplicate
// window stores it once. When the stores cannot be read the answer is 503: a 200 then
// could acknowledge a message that was never stored.
func (s *Service) replayOwner(ctx context.Context, m *queue.Message, owner string) (o outcome, done bool) {
	st, err := s.cfg.Status.GetNow(ctx, owner)
	var gone *status.Gone
	if errors.As(err, &gone) && !gone.Legacy && gone.Key == m.Key && s.cfg.Now().Sub(gone.IssuedAt) < queue.DefaultDuplicates {
		m.ID = owner
		return outcome{}, false
	}
	// Found, gone for longer (delivered or purged), or not locatable: its id is all there is.
	return s.ownerOutcome(owner, st, err, "whether its message was stored"), true
}

// duplicateOutcome answers a repeat whose re-admission under its owner's id the stream
// recognised as a duplicate: the owner was stored, so the answer is 200 with where it is
// now, or without a state when it has left sluice since. Only a message found queued is
// answered queued. When the stores cannot say, 503, as replayOwner answers.
func (s *Service) duplicateOutcome(ctx context.Context, id string) outcome {
	st, err := s.cfg.Status.GetNow(ctx, id)
	return s.ownerOutcome(id, st, err, "where its stored message is")
}

// ownerOutcome is the answer to a repeated idempotency key from the status lookup of the
// message id that owns it (st, err): 200 with where it is, 200 with the id alone once it
// has left or cannot be located, or 503 when the stores cannot say — unknown names what
// they cannot say — because a 200 then could acknowledge a message that was never stored.
func (s *Service) ownerOutcome(id string, st status.Status, err error, unknown string) outcome {
	var gone *status.Gone
	switch {
	case err == nil:
		return replayOutcome(st)
	case errors.As(err, &gone) || errors.Is(err, status.ErrNeverSeen):
		return replayOutcome(status.Status{ID: id})
	default:
		s.cfg.Logger.Warn("ingress: the message owning an idempotency key cannot be looked up", "id", id, "err", err)
		return problemOutcome(httpx.Unavailable("Cannot check the idempotency key now",
			"an earlier request used this idempotency key, and the queue store (NATS JetStream) cannot say now "+
				unknown+"; nothing was stored by this request",
			s.cfg.Unavailable))
	}
}

// replayOutcome is the 200 of a repeated idempotency key: the original message.
func replayOutcome(st status.Status) outcome {
	resp := submitResponse{ID: st.ID, State: st.State}
	if !st.RetryAt.IsZero() && (st.State == status.Parked || st.State == status.Retrying) {
		resp.RetryAt = st.RetryAt.UTC().Format(time.RFC3339)
	}
	return outcome{status: http.StatusOK, resp: resp}
}

func (s *Service) internalOutcome(rule string, err error) outcome {
	s.cfg.Logger.Error("ingress: internal error", "rule", rule, "err", err)
	return problemOutcome(httpx.Internal())
}

// DefaultMaxDelay is how far ahead a submission may ask to be delivered by default.
const DefaultMaxDelay = 30 * 24 * time.Hour

// ruleEntries are a descriptor's entries as the rules match them.
func ruleEntries(es []request.Entry) []rules.Entry {
	out := make([]rules.Entry, len(es))
	for i, e := range es {
		out[i] = rules.Entry{Key: e.Key, Value: e.Value}
	}
	return out
}

// storeFullOutcome is the answer to a submit the queue store had no room for: at once,
// with the cause, and a Retry-After (room comes back as messages are delivered).
func (s *Service) storeFullOutcome(rule string) outcome {
	s.admissions.WithLabelValues(rule, decisionError).Inc()
	return problemOutcome(httpx.StoreFull("the queue store (NATS JetStream) has no room left (its max_store); nothing was stored. "+
		"Room comes back as messages are delivered; an operator can give the store more room", s.cfg.Unavailable))
}

// submitResponse is the body of 202 and 200 answers to POST /v1/messages.
type submitResponse struct {
	ID       string `json:"id"`
	State    string `json:"state,omitempty"` // empty: a repeat whose original is no longer tracked
	Depth    *int64 `json:"depth,omitempty"`
	Capacity *int64 `json:"capacity,omitempty"`
	ETA      string `json:"eta,omitempty"`
	RetryAt  string `json:"retry_at,omitempty"`
}

func (s *Service) serveSubmit(w http.ResponseWriter, r *http.Request) {
	// The media type first: a body that is not declared JSON (a cross-site form, text/plain)
	// is not even read.
	media, prob := request.SubmitMediaType(r)
	if prob != nil {
		httpx.WriteProblem(w, *prob)
		return
	}
	body, bp, prob := s.readBody(w, r)
	defer s.releaseBody(bp)
	if prob != nil {
		s.admissions.WithLabelValues("", decisionError).Inc()
		httpx.WriteProblem(w, *prob)
		return
	}
	if request.IsBatch(media, body) {
		s.handleBatch(w, r, body)
		return
	}
	var req request.Submit
	if p := request.DecodeSubmit(r, body, &req); p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	if p := s.submitRefused(r.Context(), req.Domain, -1); p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	} else if h := r.Header.Get("Idempotency-Key"); h != "" && h != req.IdempotencyKey {
		httpx.WriteProblem(w, httpx.BadRequest("idempotency_key", "differs from the Idempotency-Key header"))
		return
	}
	if p := req.Validate(); p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	req.TraceParent, req.TraceState = telemetry.FromHTTP(r.Header)
	req.Depth = request.PrefersDepth(r.Header)
	s.write(w, s.submit(r.Context(), &req))
}

// WriteQueued answers 202 for a queued message: the body submitResponse would give, written
// directly (the id is a UUID and the eta RFC 3339, so nothing needs escaping) — this is the
// answer to almost every admission, and encoding/json's reflection was most of its cost.
func WriteQueued(w http.ResponseWriter, id string, depth, capacity int64, eta time.Time) {
	bp := queuedBodies.Get().(*[]byte)
	defer queuedBodies.Put(bp)
	b := (*bp)[:0]
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id) // ids are printable ASCII: its fast path, not AppendQuote's rune decoding
	b = append(b, `,"state":"`+status.Queued+`"`...)
	if depth > 0 { // known: the claim engine's count, or asked for (Prefer: return=representation)
		b = append(b, `,"depth":`...)
		b = strconv.AppendInt(b, depth, 10)
	}
	b = append(b, `,"capacity":`...)
	b = strconv.AppendInt(b, capacity, 10)
	if !eta.IsZero() {
		b = append(b, `,"eta":"`...)
		b = eta.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusAccepted)
	w.Write(b) // copied into the connection's buffer: b goes back to the pool
	*bp = b
}

// queuedBodies are WriteQueued's buffers, one per answer being written.
var queuedBodies = sync.Pool{New: func() any { b := make([]byte, 0, 192); return &b }}

// submitRefused is the 403 of a submission to domain when the request's submit token (ctx)
// may submit to another domain only; nil when it may (or no token is configured). item is
// the submission's index in a batch, or -1 for a single one: the problem then names the
// item ("[3].domain"), and says the whole batch was refused.
func (s *Service) submitRefused(ctx context.Context, domain string, item int) *httpx.Problem {
	t, ok := s.cfg.CallerOf(ctx)
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
