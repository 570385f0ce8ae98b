package clienttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/request"
)

const (
	// AdminToken is the bearer token the admin endpoints accept.
	AdminToken = "example-token"
	// QueueName is the one queue rule of the fake.
	QueueName = "orders-per-merchant"
	// Domain is the domain of the fake's queue rule: a submission to any other domain is
	// refused 404 #no-matching-rule, as a real ingress refuses a domain its rules lack.
	Domain = "orders"
	// DescriptorKey is the descriptor key of the fake's queue rule (one entry, any value).
	DescriptorKey = "merchant_id"
	// FullKey is the descriptor value whose queue is full: its submissions answer 429.
	FullKey = "m-full"
	// DeliveredID is a message the fake answers delivered (as an ingress run with
	// -status-keep does for a message the sink accepted) until a submission is given that
	// id: it is also the id of the fake's first submission. It exists for the examples of
	// package client; a test should Status the ids its own submissions were given.
	DeliveredID = "0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b"
	// CheckLimit is the hits every descriptor of a check may count in the fake's life.
	CheckLimit = 5
)

// The fake's clock: every time it answers is on 2026-11-22 (scheduled etas aside).
const (
	createdAt = "2026-11-22T05:00:00Z"
	submitETA = "2026-11-22T05:00:00.4Z"
)

// Submission is one submission the Ingress received (POST /v1/messages, alone or an item
// of a batch), refusals included.
type Submission struct {
	Domain         string
	Descriptor     []Entry
	Payload        json.RawMessage
	IdempotencyKey string
	// Headers are the message's own headers (the request's headers field), as sent.
	Headers map[string]string
	// DeliverAt is deliver_at, or the time of the request plus delay; zero when neither.
	DeliverAt time.Time
	// ExpiresAt is expires_at, or the time of the request plus ttl; zero when neither.
	ExpiresAt time.Time
	// Batch is set for an item of a batch.
	Batch bool
	// ID is the message id it was answered with ("" for a refusal).
	ID string
	// Status is the HTTP status it was answered with (an item's own, in a batch).
	Status int
}

// Entry is a descriptor entry as received.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// message is a message the fake holds: one it issued, or one of its dead letters.
type message struct {
	id, key, state, lastError, reason string
	attempts                          int
	gone                              bool // cancelled or purged: left sluice
}

// Ingress is a fake sluice ingress. It is safe for concurrent use.
type Ingress struct {
	*httptest.Server

	mu        sync.Mutex
	subs      []Submission
	cancelled []string
	issued    int
	byKey     map[string]string // idempotency key → message id
	reqOf     map[string]string // idempotency key → the request it was first used for
	msgs      map[string]*message
	order     []string // ids in the order issued: the queued messages' positions
	dead      []string // dead letter ids, oldest first
	hits      map[string]int64
	notReady  bool
	seq       uint64   // the revisions' sequence, shared (as the real one's) by every change
	over      override // the queue's live changes
}

type rate struct {
	Unit            string `json:"unit,omitempty"`
	Interval        string `json:"interval,omitempty"`
	RequestsPerUnit int64  `json:"requests_per_unit"`
}

// override is the queue's live changes; a nil field is the rules file's value.
type override struct {
	rev          uint64
	Outflow      *rate
	TotalOutflow *rate
	Capacity     *int64
	Paused       *bool
}

// The fake's rules file: the queue as it says.
var rulesFile = struct {
	Capacity int64
	Outflow  rate
}{100, rate{Unit: "second", RequestsPerUnit: 10}}

// NewIngress starts an Ingress; Close it when done.
func NewIngress() *Ingress {
	i := &Ingress{byKey: map[string]string{}, reqOf: map[string]string{}, msgs: map[string]*message{}, hits: map[string]int64{}}
	i.msgs[DeliveredID] = &message{id: DeliveredID, key: "m-42", state: "delivered", attempts: 1}
	for n := 1; n <= 3; n++ {
		id := fmt.Sprintf("0193a1b2-0000-7000-8000-%012d", n)
		i.msgs[id] = &message{id: id, key: "m-42", state: "dead", attempts: 1, reason: "sink answered 422", lastError: "422 Unprocessable Entity"}
		i.dead = append(i.dead, id)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", i.submit)
	mux.HandleFunc("GET /v1/messages/{id}", i.status)
	mux.HandleFunc("DELETE /v1/messages/{id}", i.cancel)
	mux.HandleFunc("POST /v1/check", i.check)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", i.ready)
	mux.HandleFunc("GET /v1/admin/rules", i.admin(i.rules))
	mux.HandleFunc("GET /v1/admin/queues", i.admin(i.listQueues))
	mux.HandleFunc("GET /v1/admin/queues/{name}", i.admin(i.getQueue))
	mux.HandleFunc("PATCH /v1/admin/queues/{name}", i.admin(i.patchQueue))
	mux.HandleFunc("POST /v1/admin/queues/{name}/purge", i.admin(i.purgeQueue))
	mux.HandleFunc("GET /v1/admin/queues/{name}/keys", i.admin(i.hotKeys))
	mux.HandleFunc("GET /v1/admin/queues/{name}/keys/{key}", i.admin(i.key))
	mux.HandleFunc("DELETE /v1/admin/queues/{name}/keys/{key}", i.admin(i.purgeKey))
	mux.HandleFunc("GET /v1/admin/dead", i.admin(i.deadList))
	mux.HandleFunc("POST /v1/admin/dead/replay", i.admin(i.replayAll))
	mux.HandleFunc("POST /v1/admin/dead/{id}/replay", i.admin(i.replay))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "not-found", "Not Found", "no route "+r.Method+" "+r.URL.Path)
	})
	i.Server = httptest.NewServer(mux)
	return i
}

// Start starts an Ingress that is closed when the test ends.
func Start(tb testing.TB) *Ingress {
	tb.Helper()
	i := NewIngress()
	tb.Cleanup(i.Close)
	return i
}

// Submissions returns every submission received so far, in order, refusals included.
func (i *Ingress) Submissions() []Submission {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]Submission(nil), i.subs...)
}

// Cancelled returns the ids of the messages cancelled so far (DELETE /v1/messages/{id}
// answered 200), in order.
func (i *Ingress) Cancelled() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]string(nil), i.cancelled...)
}

// SetReady sets what GET /readyz answers: 200 ready (the default) or, with false, 503
// #unavailable "Not ready", as an ingress whose NATS or Redis does not answer.
func (i *Ingress) SetReady(ready bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.notReady = !ready
}

// ResetChecks forgets the hits POST /v1/check has counted, as if every window had ended.
func (i *Ingress) ResetChecks() {
	i.mu.Lock()
	defer i.mu.Unlock()
	clear(i.hits)
}

// prob is a problem answer (RFC 9457) with the members sluice sends: the ingress's own.
type prob = httpx.Problem

func newProb(status int, typ, title, detail string) *prob {
	return &prob{Type: httpx.ProblemBase + "#" + typ, Title: title, Status: status, Detail: detail}
}

func badRequest(field, detail string) *prob {
	p := httpx.BadRequest(field, detail)
	return &p
}

// writeProb writes p as the ingress writes its problems.
func writeProb(w http.ResponseWriter, p *prob) { httpx.WriteProblem(w, *p) }

func problem(w http.ResponseWriter, status int, typ, title, detail string) {
	writeProb(w, newProb(status, typ, title, detail))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// mediaType is the request's Content-Type without parameters, "" when unreadable.
func mediaType(r *http.Request) string {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt
}

// submitRequest is a submission's body.
type submitRequest struct {
	Domain         string            `json:"domain"`
	Descriptor     []Entry           `json:"descriptor"`
	Payload        json.RawMessage   `json:"payload"`
	IdempotencyKey string            `json:"idempotency_key"`
	DeliverAt      string            `json:"deliver_at"`
	Delay          string            `json:"delay"`
	ExpiresAt      string            `json:"expires_at"`
	TTL            string            `json:"ttl"`
	Headers        map[string]string `json:"headers"`
}

// outcome is one submission's answer.
type outcome struct {
	status int
	body   map[string]any // a 2xx's fields
	prob   *prob
	id     string
	rl     bool // send the rate-limit headers
}

func decodeStrict(raw []byte, v any) *prob {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		if _, f, ok := strings.Cut(err.Error(), "unknown field "); ok {
			f, _ = strconv.Unquote(f)
			return badRequest(f, "unknown field")
		}
		return badRequest("", "malformed JSON: "+err.Error())
	}
	return nil
}

func (i *Ingress) submit(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		writeProb(w, badRequest("", "could not read the body"))
		return
	}
	if len(raw) > 1<<20 {
		writeProb(w, newProb(http.StatusRequestEntityTooLarge, "payload-too-large", "Payload too large", "the body is larger than 1 MiB"))
		return
	}
	mt := mediaType(r)
	ndjson := mt == "application/x-ndjson" || mt == "application/jsonl"
	if mt != "application/json" && !ndjson {
		writeProb(w, newProb(http.StatusUnsupportedMediaType, "invalid-request", "Unsupported Media Type", "Content-Type must be application/json (application/x-ndjson for a batch)"))
		return
	}
	if trimmed := bytes.TrimSpace(raw); ndjson || len(trimmed) > 0 && trimmed[0] == '[' {
		i.batch(w, r, raw, ndjson)
		return
	}
	var req submitRequest
	if p := decodeStrict(raw, &req); p != nil {
		writeProb(w, p)
		return
	}
	if hk := r.Header.Get("Idempotency-Key"); hk != "" {
		if req.IdempotencyKey != "" && req.IdempotencyKey != hk {
			writeProb(w, badRequest("idempotency_key", "differs from the Idempotency-Key header"))
			return
		}
		req.IdempotencyKey = hk
	}
	o := i.admit(req, false)
	h := w.Header()
	if o.rl {
		h.Set("RateLimit-Policy", `"`+QueueName+`";q=100;w=10`)
		h.Set("X-RateLimit-Limit", "100")
		h.Set("X-RateLimit-Reset", "1")
		if o.status == http.StatusTooManyRequests {
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Retry-After", strconv.FormatInt(o.prob.RetryAfter, 10))
			h.Set("RateLimit", `"`+QueueName+`";r=0;t=1`)
		} else {
			h.Set("X-RateLimit-Remaining", "96")
			h.Set("RateLimit", `"`+QueueName+`";r=96;t=1`)
		}
	}
	if o.prob != nil {
		writeProb(w, o.prob)
		return
	}
	h.Set("Location", "/v1/messages/"+o.id)
	writeJSON(w, o.status, o.body)
}

// fullRetryAfter is the Retry-After of a full queue, in seconds.
const fullRetryAfter = 3

// admit decides one submission, records it and answers it.
func (i *Ingress) admit(req submitRequest, batch bool) outcome {
	now := time.Now().UTC()
	sub := Submission{Domain: req.Domain, Descriptor: req.Descriptor, Payload: req.Payload, IdempotencyKey: req.IdempotencyKey, Headers: req.Headers, Batch: batch}
	o, scheduled := validate(req, now, &sub)
	if o.prob == nil {
		o = i.enqueue(req, &sub, scheduled)
	}
	sub.Status = o.status
	sub.ID = o.id
	i.mu.Lock()
	i.subs = append(i.subs, sub)
	i.mu.Unlock()
	return o
}

// validate checks a submission as the real ingress does (the checks a test is likely to
// meet); scheduled is its eta when it is to wait for its delivery time.
func validate(req submitRequest, now time.Time, sub *Submission) (o outcome, scheduled time.Time) {
	bad := func(field, detail string) (outcome, time.Time) {
		return outcome{status: http.StatusBadRequest, prob: badRequest(field, detail)}, time.Time{}
	}
	switch {
	case req.Domain == "":
		return bad("domain", "is required")
	case len(req.Domain) > 256:
		return bad("domain", "is longer than 256 bytes")
	case len(req.Descriptor) == 0:
		return bad("descriptor", "is required: at least one entry")
	case len(req.Descriptor) > 16:
		return bad("descriptor", "has more than 16 entries")
	case len(req.Payload) == 0 || string(req.Payload) == "null":
		return bad("payload", "is required")
	case len(req.IdempotencyKey) > 256:
		return bad("idempotency_key", "is longer than 256 bytes")
	}
	for n, e := range req.Descriptor {
		if len(e.Key) > 256 || len(e.Value) > 256 {
			return bad(fmt.Sprintf("descriptor[%d]", n), "a key and a value are at most 256 bytes")
		}
	}
	if _, p := request.CheckHeaders(req.Headers); p != nil { // the ingress's own check
		return outcome{status: http.StatusBadRequest, prob: p}, time.Time{}
	}
	at := func(field, ts, dur string) (time.Time, *outcome) {
		if ts != "" && dur != "" {
			o, _ := bad(field, "not with "+map[string]string{"deliver_at": "delay", "expires_at": "ttl"}[field])
			return time.Time{}, &o
		}
		if ts != "" {
			t, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				o, _ := bad(field, "must be an RFC 3339 time")
				return time.Time{}, &o
			}
			return t.UTC(), nil
		}
		if dur != "" {
			d, err := time.ParseDuration(dur)
			if err != nil || d < 0 {
				o, _ := bad(map[string]string{"deliver_at": "delay", "expires_at": "ttl"}[field], "must be a non-negative Go duration")
				return time.Time{}, &o
			}
			return now.Add(d), nil
		}
		return time.Time{}, nil
	}
	deliverAt, p := at("deliver_at", req.DeliverAt, req.Delay)
	if p != nil {
		return *p, time.Time{}
	}
	expiresAt, p := at("expires_at", req.ExpiresAt, req.TTL)
	if p != nil {
		return *p, time.Time{}
	}
	if !deliverAt.IsZero() && deliverAt.After(now.Add(720*time.Hour)) {
		return bad("deliver_at", "is more than 720h ahead")
	}
	if !expiresAt.IsZero() && (!expiresAt.After(now) || !deliverAt.IsZero() && !expiresAt.After(deliverAt)) {
		return bad("expires_at", "the message would expire before its delivery time")
	}
	sub.DeliverAt, sub.ExpiresAt = deliverAt, expiresAt
	if req.Domain != Domain {
		return outcome{status: http.StatusNotFound, prob: newProb(http.StatusNotFound, "no-matching-rule", "No matching rule",
			fmt.Sprintf("no rule of domain %q; the domains there are: %q", req.Domain, Domain))}, time.Time{}
	}
	if req.Descriptor[0].Key != DescriptorKey {
		return outcome{status: http.StatusNotFound, prob: newProb(http.StatusNotFound, "no-matching-rule", "No matching rule",
			fmt.Sprintf("no rule of domain %q matches the descriptor; its descriptors are: [%s]", Domain, DescriptorKey))}, time.Time{}
	}
	if deliverAt.After(now) {
		scheduled = deliverAt.Truncate(time.Second)
		if scheduled.Before(deliverAt) {
			scheduled = scheduled.Add(time.Second)
		}
	}
	return outcome{}, scheduled
}

// enqueue admits a valid submission: 202 queued or scheduled, 200 for a repeated key, 422
// for a key reused, 429 for FullKey.
func (i *Ingress) enqueue(req submitRequest, sub *Submission, scheduled time.Time) outcome {
	key := req.Descriptor[0].Value
	var compact bytes.Buffer
	json.Compact(&compact, req.Payload)
	d, _ := json.Marshal(req.Descriptor)
	fingerprint := req.Domain + "\x00" + string(d) + "\x00" + compact.String()
	i.mu.Lock()
	defer i.mu.Unlock()
	if id, dup := i.byKey[req.IdempotencyKey]; dup && req.IdempotencyKey != "" {
		if i.reqOf[req.IdempotencyKey] != fingerprint {
			p := newProb(http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency key reused",
				"idempotency key "+strconv.Quote(req.IdempotencyKey)+" was used for another request, message "+id)
			p.Field = "idempotency_key"
			return outcome{status: http.StatusUnprocessableEntity, prob: p}
		}
		// The original, where it is now: no state once it has left sluice.
		body := map[string]any{"id": id}
		if m := i.msgs[id]; !m.gone {
			body["state"] = m.state
		}
		return outcome{status: http.StatusOK, body: body, id: id}
	}
	if key == FullKey && scheduled.IsZero() {
		p := newProb(http.StatusTooManyRequests, "quota-exceeded", "Quota exceeded", "the queue of key "+FullKey+" is full")
		p.ViolatedPolicies, p.RetryAfter = []string{QueueName}, fullRetryAfter
		return outcome{status: http.StatusTooManyRequests, prob: p, rl: true}
	}
	id := fmt.Sprintf("0193a1b2-7c4d-7e5f-8a9b-%012x", 0x0c1d2e3f4a5b+i.issued)
	i.issued++
	if req.IdempotencyKey != "" {
		i.byKey[req.IdempotencyKey] = id
		i.reqOf[req.IdempotencyKey] = fingerprint
	}
	m := &message{id: id, key: key, state: "queued"}
	i.msgs[id] = m
	i.order = append(i.order, id)
	if !scheduled.IsZero() {
		m.state = "scheduled"
		return outcome{status: http.StatusAccepted, id: id, body: map[string]any{"id": id, "state": "scheduled", "eta": scheduled.Format(time.RFC3339)}}
	}
	return outcome{status: http.StatusAccepted, id: id, rl: true,
		body: map[string]any{"id": id, "state": "queued", "depth": 4, "capacity": 100, "eta": submitETA}}
}

// batch answers a JSON array or NDJSON of submissions: 200 with one item per submission.
func (i *Ingress) batch(w http.ResponseWriter, r *http.Request, raw []byte, ndjson bool) {
	if r.Header.Get("Idempotency-Key") != "" {
		writeProb(w, badRequest("Idempotency-Key", "is refused on a batch: give each item its idempotency_key"))
		return
	}
	var items []json.RawMessage
	if ndjson {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 1<<20+1)
		for sc.Scan() {
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				items = append(items, append(json.RawMessage(nil), line...))
			}
		}
	} else if err := json.Unmarshal(raw, &items); err != nil {
		writeProb(w, badRequest("", "malformed JSON: "+err.Error()))
		return
	}
	if len(items) == 0 {
		writeProb(w, badRequest("", "an empty batch"))
		return
	}
	if len(items) > 500 {
		writeProb(w, newProb(http.StatusRequestEntityTooLarge, "payload-too-large", "Payload too large", fmt.Sprintf("a batch of %d items; at most 500", len(items))))
		return
	}
	accepted := 0
	out := make([]any, len(items))
	for n, item := range items {
		var req submitRequest
		var o outcome
		if p := decodeStrict(item, &req); p != nil {
			o = outcome{status: p.Status, prob: p}
			i.mu.Lock()
			i.subs = append(i.subs, Submission{Batch: true, Status: p.Status})
			i.mu.Unlock()
		} else {
			o = i.admit(req, true)
		}
		if o.prob != nil {
			p := *o.prob
			if p.Field != "" {
				p.Field = fmt.Sprintf("[%d].%s", n, p.Field)
			}
			out[n] = p
			continue
		}
		accepted++
		body := map[string]any{"status": o.status}
		for k, v := range o.body {
			body[k] = v
		}
		out[n] = body
	}
	writeJSON(w, http.StatusOK, map[string]any{"accepted": accepted, "refused": len(items) - accepted, "items": out})
}

// statusBody is GET /v1/messages/{id}'s answer for m; call with mu held.
func (i *Ingress) statusBody(m *message) map[string]any {
	b := map[string]any{"id": m.id, "domain": Domain, "rule": QueueName, "key": m.key, "state": m.state, "attempts": m.attempts,
		"created_at": createdAt, "updated_at": createdAt, "last_error": m.lastError}
	switch m.state {
	case "queued":
		pos := 0
		for _, id := range i.order {
			if id == m.id {
				break
			}
			if o := i.msgs[id]; o.key == m.key && o.state == "queued" && !o.gone {
				pos++
			}
		}
		b["position"] = pos
	case "delivered":
		b["updated_at"] = "2026-11-22T05:00:00.4Z"
	case "dead":
		b["updated_at"] = "2026-11-22T05:00:01Z"
	}
	return b
}

// locate finds message id, or writes the 404 a real ingress answers; call with mu held.
func (i *Ingress) locate(w http.ResponseWriter, id string) *message {
	m := i.msgs[id]
	switch {
	case m == nil:
		p := newProb(http.StatusNotFound, "never-seen", "Unknown message", strconv.Quote(id)+" is not the id of a message of any queue rule in force")
		writeProb(w, p)
		return nil
	case m.gone:
		p := newProb(http.StatusNotFound, "no-longer-tracked", "Message no longer tracked",
			"the message is in none of its key's queue, the retry stream or the dead letters: it was delivered, or removed by a purge. sluice keeps no record of a message once it has left")
		p.Rule, p.Key, p.IssuedAt = QueueName, &m.key, createdAt
		writeProb(w, p)
		return nil
	}
	return m
}

func (i *Ingress) status(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if m := i.locate(w, r.PathValue("id")); m != nil {
		writeJSON(w, http.StatusOK, i.statusBody(m))
	}
}

func (i *Ingress) cancel(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	defer i.mu.Unlock()
	m := i.locate(w, r.PathValue("id"))
	if m == nil {
		return
	}
	if m.state != "queued" && m.state != "scheduled" {
		p := newProb(http.StatusConflict, "not-cancellable", "Message cannot be cancelled",
			"the message is "+m.state+": only a message that is queued, parked or waiting for a delivery retry can be cancelled")
		p.State = m.state
		writeProb(w, p)
		return
	}
	b := i.statusBody(m)
	b["cancelled"] = true
	m.gone = true
	i.cancelled = append(i.cancelled, m.id)
	writeJSON(w, http.StatusOK, b)
}

func (i *Ingress) ready(w http.ResponseWriter, _ *http.Request) {
	i.mu.Lock()
	notReady := i.notReady
	i.mu.Unlock()
	if notReady {
		problem(w, http.StatusServiceUnavailable, "unavailable", "Not ready", "NATS does not answer (clienttest: SetReady(false))")
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "ready\n")
}

// checkWindow is the fake's check window: every limit is per minute and "resets in 42s".
const checkReset = 42

func (i *Ingress) check(w http.ResponseWriter, r *http.Request) {
	type limit struct {
		RequestsPerUnit int64  `json:"requests_per_unit"`
		Unit            string `json:"unit"`
		UnitMultiplier  int64  `json:"unit_multiplier,omitempty"`
		Name            string `json:"name,omitempty"`
	}
	var req struct {
		Domain      string `json:"domain"`
		HitsAddend  *int64 `json:"hits_addend"`
		Descriptors []struct {
			Entries        []Entry `json:"entries"`
			HitsAddend     *int64  `json:"hits_addend"`
			Limit          *limit  `json:"limit"`
			IsNegativeHits bool    `json:"is_negative_hits"`
		} `json:"descriptors"`
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if p := decodeStrict(raw, &req); p != nil {
		writeProb(w, p)
		return
	}
	if req.Domain == "" {
		writeProb(w, badRequest("domain", "is required"))
		return
	}
	if len(req.Descriptors) == 0 || len(req.Descriptors) > 64 {
		writeProb(w, badRequest("descriptors", "1 to 64 descriptors"))
		return
	}
	hits := int64(1)
	if req.HitsAddend != nil && *req.HitsAddend > 0 {
		hits = *req.HitsAddend
	}
	type status struct {
		Code               string `json:"code"`
		CurrentLimit       limit  `json:"current_limit"`
		LimitRemaining     int64  `json:"limit_remaining"`
		DurationUntilReset string `json:"duration_until_reset"`
	}
	statuses := make([]status, len(req.Descriptors))
	overall := "OK"
	tightest := int64(-1)
	var tight limit
	i.mu.Lock()
	for n, d := range req.Descriptors {
		if d.IsNegativeHits {
			i.mu.Unlock()
			writeProb(w, badRequest(fmt.Sprintf("descriptors[%d].is_negative_hits", n), "hits cannot be given back"))
			return
		}
		lim := limit{RequestsPerUnit: CheckLimit, Unit: "MINUTE", Name: "login"}
		if d.Limit != nil {
			lim = *d.Limit
		}
		h := hits
		if d.HitsAddend != nil {
			h = *d.HitsAddend
		}
		e, _ := json.Marshal(d.Entries)
		bucket := req.Domain + "\x00" + string(e)
		if d.Limit != nil {
			bucket += fmt.Sprintf("\x00%d/%d%s", lim.RequestsPerUnit, lim.UnitMultiplier, lim.Unit)
		}
		i.hits[bucket] += h
		count := i.hits[bucket]
		st := status{Code: "OK", CurrentLimit: lim, LimitRemaining: max(0, lim.RequestsPerUnit-count), DurationUntilReset: strconv.Itoa(checkReset) + "s"}
		if count > lim.RequestsPerUnit || h == 0 && count >= lim.RequestsPerUnit {
			st.Code, overall = "OVER_LIMIT", "OVER_LIMIT"
		}
		if tightest < 0 || st.LimitRemaining < tightest {
			tightest, tight = st.LimitRemaining, lim
		}
		statuses[n] = st
	}
	i.mu.Unlock()
	name := tight.Name
	if name == "" {
		name = req.Domain
	}
	window := int64(60)
	switch tight.Unit {
	case "SECOND":
		window = 1
	case "HOUR":
		window = 3600
	case "DAY":
		window = 86400
	}
	window *= max(tight.UnitMultiplier, 1)
	hd := w.Header()
	hd.Set("X-RateLimit-Limit", strconv.FormatInt(tight.RequestsPerUnit, 10))
	hd.Set("X-RateLimit-Remaining", strconv.FormatInt(tightest, 10))
	hd.Set("X-RateLimit-Reset", strconv.Itoa(checkReset))
	hd.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=%d", name, tight.RequestsPerUnit, window))
	hd.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", name, tightest, checkReset))
	code := http.StatusOK
	if overall != "OK" {
		code = http.StatusTooManyRequests
		hd.Set("Retry-After", strconv.Itoa(checkReset))
		hd.Set("X-RateLimit-Retry-After", strconv.Itoa(checkReset))
	}
	writeJSON(w, code, map[string]any{"overall_code": overall, "statuses": statuses})
}

// admin wraps an admin handler in bearer-token authentication.
func (i *Ingress) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+AdminToken {
			w.Header().Set("WWW-Authenticate", "Bearer")
			problem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "the admin API needs Authorization: Bearer <an admin token>")
			return
		}
		if name := r.PathValue("name"); name != "" && name != QueueName {
			problem(w, http.StatusNotFound, "not-found", "Unknown queue", "no queue rule named "+strconv.Quote(name))
			return
		}
		h(w, r)
	}
}

// queueJSON is the queue as GET /v1/admin/queues/{name} answers it; call with mu held.
func (i *Ingress) queueJSON() map[string]any {
	o := i.over
	capacity, outflow, paused := rulesFile.Capacity, rulesFile.Outflow, false
	overridden := []string{}
	if o.Outflow != nil {
		outflow = *o.Outflow
		overridden = append(overridden, "outflow")
	}
	if o.TotalOutflow != nil {
		overridden = append(overridden, "total_outflow")
	}
	if o.Capacity != nil {
		capacity = *o.Capacity
		overridden = append(overridden, "capacity")
	}
	if o.Paused != nil {
		paused = *o.Paused
		overridden = append(overridden, "paused")
	}
	q := map[string]any{"name": QueueName, "domain": Domain, "capacity": capacity, "outflow": outflow, "total_outflow": o.TotalOutflow,
		"paused": paused, "depth": 1234, "active_keys": 56, "parked": 0, "scheduled": 0, "in_flight": 0, "dead": 3,
		"drained_per_second": 560.0, "refused_per_second": 0.0, "oldest_age_seconds": nil, "overridden": overridden,
		"rules_file": map[string]any{"capacity": rulesFile.Capacity, "outflow": rulesFile.Outflow}}
	if len(overridden) > 0 {
		q["override_updated_at"] = createdAt
	}
	return q
}

func (i *Ingress) etag() string { return httpx.RevisionETag(i.over.rev) }

func (i *Ingress) rules(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"rules":[{"name":"`+QueueName+`","domain":"`+Domain+`","descriptor":[{"key":"`+DescriptorKey+`","value":""}],"kind":"queue","rate_limits":[],"queue":{"capacity":100,"outflow":{"unit":"second","requests_per_unit":10}},"overflow":"reject","source":"rules.yaml:4"}]}`+"\n")
}

func (i *Ingress) listQueues(w http.ResponseWriter, _ *http.Request) {
	i.mu.Lock()
	defer i.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"queues": []any{i.queueJSON()}})
}

func (i *Ingress) getQueue(w http.ResponseWriter, _ *http.Request) {
	i.mu.Lock()
	defer i.mu.Unlock()
	w.Header().Set("ETag", i.etag()) // quoted, as the ingress sends it
	writeJSON(w, http.StatusOK, i.queueJSON())
}

func (i *Ingress) patchQueue(w http.ResponseWriter, r *http.Request) {
	if mt := mediaType(r); mt != "application/json" && mt != "application/merge-patch+json" {
		problem(w, http.StatusUnsupportedMediaType, "invalid-request", "Unsupported Media Type", "Content-Type must be application/json or application/merge-patch+json")
		return
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		writeProb(w, badRequest("", "malformed JSON: "+err.Error()))
		return
	}
	var next override
	i.mu.Lock()
	defer i.mu.Unlock()
	next = i.over
	for f, v := range fields {
		isNull := string(bytes.TrimSpace(v)) == "null"
		var err error
		switch f {
		case "reset":
			var reset bool
			if err = json.Unmarshal(v, &reset); err == nil && (!reset || len(fields) > 1) {
				err = errors.New(`{"reset": true} goes alone`)
			}
			next = override{}
		case "outflow", "total_outflow":
			p := &next.Outflow
			if f == "total_outflow" {
				p = &next.TotalOutflow
			}
			*p = nil
			if !isNull {
				var rt rate
				d := json.NewDecoder(bytes.NewReader(v))
				d.DisallowUnknownFields()
				if err = d.Decode(&rt); err == nil && (rt.RequestsPerUnit < 1 || (rt.Unit == "") == (rt.Interval == "")) {
					err = errors.New("must be {unit or interval, requests_per_unit ≥ 1}")
				}
				*p = &rt
			}
		case "capacity":
			next.Capacity = nil
			if !isNull {
				var c int64
				if err = json.Unmarshal(v, &c); err == nil && c < 1 {
					err = errors.New("must be at least 1")
				}
				next.Capacity = &c
			}
		case "paused":
			next.Paused = nil
			if !isNull {
				var b bool
				err = json.Unmarshal(v, &b)
				next.Paused = &b
			}
		default:
			err = errors.New("unknown field")
		}
		if err != nil {
			writeProb(w, badRequest(f, err.Error()))
			return
		}
	}
	if v := r.Header.Get("If-Match"); v != "" {
		rev, anyRev, ok := httpx.ParseIfMatch(v)
		if !ok {
			writeProb(w, badRequest("If-Match", `must be the ETag of a GET or PATCH of the queue, e.g. "3" ("0": nothing overridden), or *`))
			return
		}
		if !anyRev && rev != i.over.rev {
			problem(w, http.StatusPreconditionFailed, "invalid-request", "Precondition Failed",
				fmt.Sprintf("the queue's overrides are at revision %d, not %d", i.over.rev, rev))
			return
		}
	}
	if next.Outflow == nil && next.TotalOutflow == nil && next.Capacity == nil && next.Paused == nil {
		next.rev = 0 // nothing overridden: "0" again
	} else {
		i.seq++
		next.rev = i.seq
	}
	i.over = next
	w.Header().Set("ETag", i.etag())
	writeJSON(w, http.StatusOK, i.queueJSON())
}

func (i *Ingress) purgeQueue(w http.ResponseWriter, _ *http.Request) {
	i.purge(func(*message) bool { return true })
	w.WriteHeader(http.StatusNoContent)
}

func (i *Ingress) purgeKey(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	i.purge(func(m *message) bool { return m.key == key })
	w.WriteHeader(http.StatusNoContent)
}

// purge removes the waiting (queued) messages that match; parked, scheduled and dead are kept.
func (i *Ingress) purge(match func(*message) bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, id := range i.order {
		if m := i.msgs[id]; m.state == "queued" && !m.gone && match(m) {
			m.gone = true
		}
	}
}

func (i *Ingress) hotKeys(w http.ResponseWriter, r *http.Request) {
	top := 20
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeProb(w, badRequest("top", "must be 1 to 100"))
			return
		}
		top = n
	}
	i.mu.Lock()
	depth := map[string]int{}
	for _, id := range i.order {
		if m := i.msgs[id]; m.state == "queued" && !m.gone {
			depth[m.key]++
		}
	}
	i.mu.Unlock()
	keys := make([]string, 0, len(depth))
	for k := range depth {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if depth[keys[a]] != depth[keys[b]] {
			return depth[keys[a]] > depth[keys[b]]
		}
		return keys[a] < keys[b]
	})
	out := []map[string]any{}
	for _, k := range keys[:min(top, len(keys))] {
		out = append(out, map[string]any{"key": k, "depth": depth[k], "next_dispatch_at": "2026-11-22T05:00:00.1Z"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue": QueueName, "complete": true, "keys": out})
}

func (i *Ingress) key(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"queue": r.PathValue("name"), "key": r.PathValue("key"), "depth": 4, "next_dispatch_at": "2026-11-22T05:00:00.1Z"})
}

// stillDead is the dead letters not replayed, oldest first; call with mu held.
func (i *Ingress) stillDead() []*message {
	var out []*message
	for _, id := range i.dead {
		if m := i.msgs[id]; m.state == "dead" {
			out = append(out, m)
		}
	}
	return out
}

func (i *Ingress) deadList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	queue := q.Get("queue")
	if queue != "" && queue != QueueName {
		writeProb(w, badRequest("queue", "no queue rule named "+strconv.Quote(queue)))
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeProb(w, badRequest("limit", "must be 1 to 1000"))
			return
		}
		limit = n
	}
	after := q.Get("after") // the cursor: the last id of the previous page
	i.mu.Lock()
	var page []map[string]any
	var next string
	for _, m := range i.stillDead() {
		if m.id <= after {
			continue
		}
		if len(page) == limit {
			v := url(map[string]string{"after": page[len(page)-1]["id"].(string), "limit": strconv.Itoa(limit), "queue": queue})
			next = "/v1/admin/dead?" + v
			break
		}
		page = append(page, map[string]any{"id": m.id, "rule": QueueName, "key": m.key, "state": "dead", "reason": m.reason,
			"attempts": m.attempts, "last_error": m.lastError, "created_at": createdAt, "updated_at": "2026-11-22T05:00:01Z"})
	}
	i.mu.Unlock()
	body := map[string]any{"messages": append([]map[string]any{}, page...)}
	if next != "" {
		body["next"] = next
	}
	writeJSON(w, http.StatusOK, body)
}

// url encodes a query of the non-empty values, keys sorted.
func url(v map[string]string) string {
	keys := make([]string, 0, len(v))
	for k, val := range v {
		if val != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for n, k := range keys {
		if n > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k + "=" + strings.ReplaceAll(v[k], "&", "%26"))
	}
	return b.String()
}

func (i *Ingress) replay(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	i.mu.Lock()
	m := i.msgs[id]
	ok := m != nil && m.state == "dead"
	if ok {
		m.state, m.lastError = "queued", ""
		i.order = append(i.order, id)
	}
	i.mu.Unlock()
	if !ok {
		problem(w, http.StatusNotFound, "not-found", "Not Found", "no dead letter "+strconv.Quote(id))
		return
	}
	w.Header().Set("Location", "/v1/messages/"+id)
	writeJSON(w, http.StatusAccepted, map[string]any{"id": id, "state": "queued"})
}

func (i *Ingress) replayAll(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if queue := q.Get("queue"); queue == "" {
		writeProb(w, badRequest("queue", "is required"))
		return
	} else if queue != QueueName {
		writeProb(w, badRequest("queue", "no queue rule named "+strconv.Quote(queue)))
		return
	}
	limit := 1000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			writeProb(w, badRequest("limit", "must be 1 to 10000"))
			return
		}
		limit = n
	}
	// The cursor is a dead letter's place (1-based) in the fake's list, as a sequence is in
	// the real stream's: the letters after it are replayed.
	var after int
	if v := q.Get("after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeProb(w, badRequest("after", "must be the cursor of a previous answer's next"))
			return
		}
		after = n
	}
	i.mu.Lock()
	replayed, cursor, more := 0, after, false
	for n, id := range i.dead {
		if n+1 <= after || i.msgs[id].state != "dead" {
			continue
		}
		if replayed == limit {
			more = true
			break
		}
		m := i.msgs[id]
		m.state, m.lastError = "queued", ""
		i.order = append(i.order, m.id)
		replayed, cursor = replayed+1, n+1
	}
	i.mu.Unlock()
	resp := map[string]any{"queue": QueueName, "replayed": replayed, "kept": 0, "failed": 0}
	if more {
		resp["next"] = "/v1/admin/dead/replay?" + url(map[string]string{"queue": QueueName, "after": strconv.Itoa(cursor), "limit": strconv.Itoa(limit)})
	}
	writeJSON(w, http.StatusOK, resp)
}
