package clienttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const (
	// AdminToken is the bearer token the admin endpoints accept.
	AdminToken = "example-token"
	// QueueName is the one queue rule of the fake.
	QueueName = "orders-per-merchant"
	// FullKey is the descriptor value whose queue is full: its submissions answer 429.
	FullKey = "m-full"
)

// Submission is one POST /v1/messages the Ingress received.
type Submission struct {
	Domain         string
	Descriptor     []Entry
	Payload        json.RawMessage
	IdempotencyKey string
	// ID is the message id it was answered with ("" for a refusal).
	ID string
}

// Entry is a descriptor entry as received.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Ingress is a fake sluice ingress. It is safe for concurrent use.
type Ingress struct {
	*httptest.Server

	mu       sync.Mutex
	subs     []Submission
	byKey    map[string]string // idempotency key → message id
	reqOf    map[string]string // idempotency key → the request it was first used for
	revision uint64            // of the queue's live changes: its ETag
	queue    queueState
}

type queueState struct {
	Capacity int64 `json:"capacity"`
	Outflow  rate  `json:"outflow"`
	Paused   bool  `json:"paused"`
}

type rate struct {
	Unit            string `json:"unit,omitempty"`
	Interval        string `json:"interval,omitempty"`
	RequestsPerUnit int64  `json:"requests_per_unit"`
}

// NewIngress starts an Ingress; Close it when done.
func NewIngress() *Ingress {
	i := &Ingress{byKey: map[string]string{}, reqOf: map[string]string{}, queue: queueState{Capacity: 100, Outflow: rate{Unit: "second", RequestsPerUnit: 10}}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", i.submit)
	mux.HandleFunc("GET /v1/messages/{id}", i.status)
	mux.HandleFunc("POST /v1/check", i.check)
	mux.HandleFunc("GET /v1/admin/rules", i.admin(i.rules))
	mux.HandleFunc("GET /v1/admin/queues", i.admin(i.listQueues))
	mux.HandleFunc("GET /v1/admin/queues/{name}", i.admin(i.getQueue))
	mux.HandleFunc("PATCH /v1/admin/queues/{name}", i.admin(i.patchQueue))
	mux.HandleFunc("GET /v1/admin/queues/{name}/keys/{key}", i.admin(i.key))
	mux.HandleFunc("GET /v1/admin/dead", i.admin(i.dead))
	mux.HandleFunc("POST /v1/admin/dead/{id}/replay", i.admin(i.replay))
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

func problem(w http.ResponseWriter, status int, typ, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"type": "https://sluice.dev/problems#" + typ, "title": title, "status": status, "detail": detail})
	w.Write(b)
}

func (i *Ingress) submit(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Domain         string          `json:"domain"`
		Descriptor     []Entry         `json:"descriptor"`
		Payload        json.RawMessage `json:"payload"`
		IdempotencyKey string          `json:"idempotency_key"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Descriptor) == 0 || len(req.Payload) == 0 {
		problem(w, http.StatusBadRequest, "invalid-request", "Invalid request", "want domain, descriptor and payload")
		return
	}
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	}
	sub := Submission{Domain: req.Domain, Descriptor: req.Descriptor, Payload: req.Payload, IdempotencyKey: req.IdempotencyKey}
	h := w.Header()
	h.Set("RateLimit-Policy", `"`+QueueName+`";q=100;w=10`)
	h.Set("X-RateLimit-Limit", "100")
	if req.Descriptor[0].Value == FullKey {
		i.record(sub)
		h.Set("Retry-After", "3")
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset", "1")
		h.Set("RateLimit", `"`+QueueName+`";r=0;t=1`)
		h.Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"type":"https://sluice.dev/problems#quota-exceeded","title":"Too Many Requests","status":429,"detail":"the queue of key `+FullKey+` is full","violated-policies":["`+QueueName+`"],"retry_after":3}`)
		return
	}
	var compact bytes.Buffer
	json.Compact(&compact, req.Payload)
	d, _ := json.Marshal(req.Descriptor)
	fingerprint := req.Domain + "\x00" + string(d) + "\x00" + compact.String()
	i.mu.Lock()
	id, dup := i.byKey[req.IdempotencyKey]
	if dup && i.reqOf[req.IdempotencyKey] != fingerprint {
		i.subs = append(i.subs, sub)
		i.mu.Unlock()
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		b, _ := json.Marshal(map[string]any{"type": "https://sluice.dev/problems#idempotency-key-reused", "title": "Idempotency key reused",
			"status": 422, "field": "idempotency_key", "detail": "idempotency key " + strconv.Quote(req.IdempotencyKey) + " was used for another request, message " + id})
		w.Write(b)
		return
	}
	if !dup {
		id = fmt.Sprintf("0193a1b2-7c4d-7e5f-8a9b-%012x", 0x0c1d2e3f4a5b+len(i.byKey))
		if req.IdempotencyKey != "" {
			i.byKey[req.IdempotencyKey] = id
			i.reqOf[req.IdempotencyKey] = fingerprint
		}
	}
	sub.ID = id
	i.subs = append(i.subs, sub)
	i.mu.Unlock()
	h.Set("Content-Type", "application/json")
	h.Set("Location", "/v1/messages/"+id)
	h.Set("X-RateLimit-Remaining", "96")
	h.Set("X-RateLimit-Reset", "1")
	h.Set("RateLimit", `"`+QueueName+`";r=96;t=1`)
	status := http.StatusAccepted
	if dup {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"id":%q,"state":"queued","depth":4,"capacity":100,"eta":"2026-11-22T05:00:00.4Z"}`, id)
}

func (i *Ingress) record(s Submission) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.subs = append(i.subs, s)
}

func (i *Ingress) status(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"domain":"orders","rule":%q,"key":"m-42","state":"delivered","attempts":1,"created_at":"2026-11-22T05:00:00Z","updated_at":"2026-11-22T05:00:00.4Z","last_error":""}`, r.PathValue("id"), QueueName)
}

func (i *Ingress) check(w http.ResponseWriter, r *http.Request) {
	var req struct {
		HitsAddend int `json:"hits_addend"`
	}
	json.NewDecoder(r.Body).Decode(&req)
	w.Header().Set("Content-Type", "application/json")
	if req.HitsAddend > 5 {
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"overall_code":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","current_limit":{"requests_per_unit":5,"unit":"MINUTE","name":"login"},"limit_remaining":0,"duration_until_reset":"42s"}]}`)
		return
	}
	io.WriteString(w, `{"overall_code":"OK","statuses":[{"code":"OK","current_limit":{"requests_per_unit":5,"unit":"MINUTE","name":"login"},"limit_remaining":4,"duration_until_reset":"42s"}]}`)
}

// admin wraps an admin handler in bearer-token authentication.
func (i *Ingress) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+AdminToken {
			problem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized", "the admin API needs Authorization: Bearer <an admin token>")
			return
		}
		if name := r.PathValue("name"); name != "" && name != QueueName {
			problem(w, http.StatusNotFound, "not-found", "Unknown queue", "no queue rule named "+strconv.Quote(name))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		h(w, r)
	}
}

// queueJSON is the queue as GET /v1/admin/queues/{name} answers it; call with mu held.
func (i *Ingress) queueJSON() map[string]any {
	q := map[string]any{"name": QueueName, "domain": "orders", "capacity": i.queue.Capacity, "outflow": i.queue.Outflow,
		"paused": i.queue.Paused, "depth": 1234, "active_keys": 56, "parked": 0, "dead": 3, "drained_per_second": 560.0,
		"refused_per_second": 0.0, "rules_file": map[string]any{"capacity": 100, "outflow": rate{Unit: "second", RequestsPerUnit: 10}}}
	if i.revision > 0 {
		q["overridden"] = []string{"outflow", "capacity", "paused"}
	}
	return q
}

func (i *Ingress) rules(w http.ResponseWriter, _ *http.Request) {
	io.WriteString(w, `{"rules":[{"name":"`+QueueName+`","domain":"orders","descriptor":[{"key":"merchant_id","value":""}],"kind":"queue","rate_limits":[],"queue":{"capacity":100,"outflow":{"unit":"second","requests_per_unit":10}},"overflow":"reject","source":"rules.yaml:4"}]}`)
}

func (i *Ingress) listQueues(w http.ResponseWriter, _ *http.Request) {
	i.mu.Lock()
	defer i.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"queues": []any{i.queueJSON()}})
}

func (i *Ingress) getQueue(w http.ResponseWriter, _ *http.Request) {
	i.mu.Lock()
	defer i.mu.Unlock()
	w.Header().Set("ETag", `"`+strconv.FormatUint(i.revision, 10)+`"`) // quoted, as the ingress sends it
	json.NewEncoder(w).Encode(i.queueJSON())
}

func (i *Ingress) patchQueue(w http.ResponseWriter, r *http.Request) {
	var p struct {
		Outflow  *rate  `json:"outflow"`
		Capacity *int64 `json:"capacity"`
		Paused   *bool  `json:"paused"`
	}
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		problem(w, http.StatusBadRequest, "invalid-request", "Invalid request", err.Error())
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if m := r.Header.Get("If-Match"); m != "" && m != "*" && strings.Trim(m, `"`) != strconv.FormatUint(i.revision, 10) {
		problem(w, http.StatusPreconditionFailed, "invalid-request", "Precondition Failed",
			fmt.Sprintf("the queue's overrides are at revision %d, not %s", i.revision, m))
		return
	}
	if p.Outflow != nil {
		i.queue.Outflow = *p.Outflow
	}
	if p.Capacity != nil {
		i.queue.Capacity = *p.Capacity
	}
	if p.Paused != nil {
		i.queue.Paused = *p.Paused
	}
	i.revision++
	w.Header().Set("ETag", `"`+strconv.FormatUint(i.revision, 10)+`"`)
	json.NewEncoder(w).Encode(i.queueJSON())
}

func (i *Ingress) key(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, `{"queue":%q,"key":%q,"depth":4,"next_dispatch_at":"2026-11-22T05:00:00.1Z"}`, r.PathValue("name"), r.PathValue("key"))
}

func (i *Ingress) dead(w http.ResponseWriter, r *http.Request) {
	// Three dead letters, two a page; the cursor is the index of the next one.
	all := []string{"0193a1b2-0000-7000-8000-000000000001", "0193a1b2-0000-7000-8000-000000000002", "0193a1b2-0000-7000-8000-000000000003"}
	from, _ := strconv.Atoi(r.URL.Query().Get("after"))
	from = min(max(from, 0), len(all))
	to := min(from+2, len(all))
	var msgs []string
	for _, id := range all[from:to] {
		msgs = append(msgs, fmt.Sprintf(`{"id":%q,"rule":%q,"key":"m-42","state":"dead","reason":"sink answered 422","attempts":1,"last_error":"422 Unprocessable Entity","created_at":"2026-11-22T05:00:00Z","updated_at":"2026-11-22T05:00:01Z"}`, id, QueueName))
	}
	next := ""
	if to < len(all) {
		next = fmt.Sprintf(`,"next":"/v1/admin/dead?after=%d&limit=2&queue=%s"`, to, QueueName)
	}
	fmt.Fprintf(w, `{"messages":[%s]%s}`, strings.Join(msgs, ","), next)
}

func (i *Ingress) replay(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Location", "/v1/messages/"+r.PathValue("id"))
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, r.PathValue("id"))
}
