package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Admin calls the operations endpoints (/v1/admin/…) with the bearer token given to New
// with WithAdminToken. Get one with Client.Admin; it shares the Client's retry policy.
type Admin struct {
	c *Client
}

// Admin returns the operations API of c.
func (c *Client) Admin() *Admin { return &Admin{c: c} }

// Rate is an outflow: RequestsPerUnit per Unit (second, minute, hour, day, week), or per
// Interval (a Go duration such as "30s") instead of a unit, as in the rules file.
type Rate struct {
	Unit            string `json:"unit,omitempty"`
	Interval        string `json:"interval,omitempty"`
	RequestsPerUnit int64  `json:"requests_per_unit"`
}

// Queue is a queue rule's configuration (after live tuning) and its current state.
type Queue struct {
	// Name is the rule's name (the "name" of the rules file); Domain is its domain.
	Name   string `json:"name"`
	Domain string `json:"domain,omitempty"`
	// Capacity is the most messages waiting per key.
	Capacity int64 `json:"capacity"`
	// Outflow is the per-key rate; TotalOutflow the optional cap shared by all keys.
	Outflow      *Rate `json:"outflow,omitempty"`
	TotalOutflow *Rate `json:"total_outflow,omitempty"`
	// Paused stops dispatch of every key; admission continues up to capacity.
	Paused bool `json:"paused"`
	// Depth is the messages waiting in all keys; ActiveKeys the keys with any.
	Depth      int64 `json:"depth"`
	ActiveKeys int64 `json:"active_keys"`
	// InFlight is the keys whose heads are being delivered now, all drainers together (as of
	// their last ownership renewal, about a second).
	InFlight int64 `json:"in_flight"`
	// Parked and Dead count the rule's messages in the retry queue and dead.
	Parked int64 `json:"parked"`
	Dead   int64 `json:"dead"`
	// DrainedPerSecond is the deliveries per second over the last minute.
	DrainedPerSecond float64 `json:"drained_per_second"`
	// RefusedPerSecond is the 429s of every ingress per second over the last minute.
	RefusedPerSecond float64 `json:"refused_per_second"`
	// OldestAge is how long the oldest waiting message (any key) has waited; nil when the
	// queue is empty (or the server predates it).
	OldestAge *time.Duration `json:"-"`
	// Overridden names the fields changed live (Tune) and not yet restored: "outflow",
	// "total_outflow", "capacity", "paused". Empty when the queue is as the rules file says.
	Overridden []string `json:"overridden,omitempty"`
	// RulesFile is the queue as the rules file says, before live changes.
	RulesFile *QueueConfig `json:"rules_file,omitempty"`
	// OverrideUpdatedAt is when the live changes were last written; zero without any.
	OverrideUpdatedAt time.Time `json:"override_updated_at,omitzero"`
	// ETag is the revision of the queue's live changes ("0" with none), from the ETag
	// header of Queue and Tune. Give it back as Patch.IfMatch so that a Tune fails with
	// ErrPreconditionFailed instead of overwriting a change made since. Empty from Queues
	// (a listing has no ETag) and from servers that predate it.
	ETag string `json:"-"`
	// Breaker is the rule's sink breaker (sink.breaker); nil when the rule has none.
	Breaker *Breaker `json:"breaker,omitempty"`
}

// Breaker is a rule's sink breaker: State is "closed", "half_open" (a probe delivery is
// out) or "open" (the rule's deliveries wait, spending no attempts) — the worst of its
// drainers'. Drainers lists the drainers whose breaker changed state lately (within a
// minute) or is not closed; a drainer not listed has its breaker closed.
type Breaker struct {
	State    string           `json:"state"`
	Drainers []DrainerBreaker `json:"drainers"`
}

// DrainerBreaker is one drainer's breaker of a rule.
type DrainerBreaker struct {
	Drainer string    `json:"drainer"`
	State   string    `json:"state"`
	Since   time.Time `json:"since"`
	// NextProbeAt is when an open breaker lets its next probe delivery go.
	NextProbeAt time.Time `json:"next_probe_at,omitzero"`
}

// UnmarshalJSON reads a queue, turning oldest_age_seconds into OldestAge.
func (q *Queue) UnmarshalJSON(b []byte) error {
	type plain Queue
	var v struct {
		plain
		OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*q = Queue(v.plain)
	if v.OldestAgeSeconds != nil {
		d := time.Duration(*v.OldestAgeSeconds * float64(time.Second))
		q.OldestAge = &d
	}
	return nil
}

// QueueConfig is a queue's configuration in the rules file.
type QueueConfig struct {
	Capacity     int64 `json:"capacity"`
	Outflow      *Rate `json:"outflow,omitempty"`
	TotalOutflow *Rate `json:"total_outflow,omitempty"`
}

// QueueKey is the state of one key of a queue.
type QueueKey struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
	Depth int64  `json:"depth"`
	// NextDispatchAt is when the key's head message may leave next; zero when it is empty.
	NextDispatchAt time.Time `json:"next_dispatch_at"`
	// Outflow is the key's effective outflow (OutflowPerSecond the same as a number),
	// Paused whether its deliveries are held, Source where they come from: "rule", "rule
	// override", "key override" or "key override until <RFC 3339>". Override is the key's
	// own override (TuneKey), nil when none is in force.
	Outflow          *Rate   `json:"outflow,omitempty"`
	OutflowPerSecond float64 `json:"outflow_per_second,omitempty"`
	Paused           bool    `json:"paused,omitempty"`
	Source           string  `json:"source,omitempty"`
	// Window is when the key's deliveries may happen (nil: at any time), WindowSource
	// where it comes from: "rule" (its delivery.window) or "key override" (+ " until
	// <RFC 3339>").
	Window       *Window      `json:"window,omitempty"`
	WindowSource string       `json:"window_source,omitempty"`
	Override     *KeyOverride `json:"override,omitempty"`
}

// Patch changes a queue live (every drainer within 1 s, kept across restarts). It is a
// JSON merge patch of the queue's overrides: nil fields are left as they are, and the
// fields named in Restore go back to the rules file's value (sent as null).
type Patch struct {
	Outflow      *Rate  `json:"outflow,omitempty"`
	TotalOutflow *Rate  `json:"total_outflow,omitempty"`
	Capacity     *int64 `json:"capacity,omitempty"`
	Paused       *bool  `json:"paused,omitempty"`
	// Restore names fields whose override is dropped: "outflow", "total_outflow",
	// "capacity", "paused". Reset drops them all.
	Restore []string `json:"-"`
	// IfMatch is the Queue.ETag the change was decided on, sent as If-Match: when someone
	// else has changed the queue since, the server refuses the patch (412,
	// ErrPreconditionFailed) rather than silently undo their change. Empty sends none: the
	// last writer wins. "*" means any revision; a tag bare (3), quoted ("3") or weak (W/"3",
	// as a compressing proxy rewrites an ETag) is sent as the strong tag "3".
	IfMatch string `json:"-"`
}

// MarshalJSON writes the merge patch: the set fields, and null for each Restore field.
func (p Patch) MarshalJSON() ([]byte, error) {
	type plain Patch
	b, err := json.Marshal(plain(p))
	if err != nil || len(p.Restore) == 0 {
		return b, err
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, f := range p.Restore {
		if _, set := m[f]; set {
			return nil, fmt.Errorf("client: Patch: %q is both set and restored", f)
		}
		m[f] = json.RawMessage("null")
	}
	return json.Marshal(m)
}

// Queues lists every queue rule.
func (a *Admin) Queues(ctx context.Context) ([]Queue, error) {
	resp, err := a.c.do(ctx, a.call(http.MethodGet, "/v1/admin/queues", nil, anyTransient))
	if err != nil {
		return nil, err
	}
	var qs []Queue
	if err := decodeList(resp.body, "queues", &qs); err != nil {
		return nil, fmt.Errorf("sluice: GET /v1/admin/queues: %w", err)
	}
	return qs, nil
}

// Queue returns one queue rule by name, with its ETag; unknown names match ErrNotFound.
func (a *Admin) Queue(ctx context.Context, name string) (*Queue, error) {
	if name == "" {
		return nil, invalidf("Queue: empty queue name")
	}
	return a.queue(ctx, a.call(http.MethodGet, "/v1/admin/queues/"+escapeSegment(name), nil, anyTransient))
}

// Key returns the depth and next dispatch time of one key of a queue. The key is sent as
// one percent-encoded path segment, so any key ("a/b", "..", "🙂 x") addresses only itself.
func (a *Admin) Key(ctx context.Context, name, key string) (*QueueKey, error) {
	if name == "" {
		return nil, invalidf("Key: empty queue name")
	}
	path := "/v1/admin/queues/" + escapeSegment(name) + "/keys/" + escapeSegment(key)
	resp, err := a.c.do(ctx, a.call(http.MethodGet, path, nil, anyTransient))
	if err != nil {
		return nil, err
	}
	var k QueueKey
	if err := json.Unmarshal(resp.body, &k); err != nil {
		return nil, fmt.Errorf("sluice: GET %s: %w", path, err)
	}
	return &k, nil
}

// HotKeys returns up to top keys of a queue with the most messages waiting, deepest
// first (top 0 means the server's default, 20; at most 100). complete is false when the
// queue has more than 10,000 non-empty keys and the answer is the deepest of those read.
func (a *Admin) HotKeys(ctx context.Context, name string, top int) (keys []QueueKey, complete bool, err error) {
	if name == "" {
		return nil, false, invalidf("HotKeys: empty queue name")
	}
	path := "/v1/admin/queues/" + escapeSegment(name) + "/keys"
	if top > 0 {
		path += "?top=" + strconv.Itoa(top)
	}
	resp, err := a.c.do(ctx, a.call(http.MethodGet, path, nil, anyTransient))
	if err != nil {
		return nil, false, err
	}
	var v struct {
		Queue    string `json:"queue"`
		Complete bool   `json:"complete"`
		Keys     []struct {
			Key            string     `json:"key"`
			Depth          int64      `json:"depth"`
			NextDispatchAt *time.Time `json:"next_dispatch_at"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(resp.body, &v); err != nil {
		return nil, false, fmt.Errorf("sluice: GET %s: %w", path, err)
	}
	for _, k := range v.Keys {
		qk := QueueKey{Queue: v.Queue, Key: k.Key, Depth: k.Depth}
		if k.NextDispatchAt != nil {
			qk.NextDispatchAt = *k.NextDispatchAt
		}
		keys = append(keys, qk)
	}
	return keys, v.Complete, nil
}

// ReplayReport is what ReplayAll did.
type ReplayReport struct {
	Queue    string `json:"queue"`
	Replayed int    `json:"replayed"` // back in their key's queue
	Kept     int    `json:"kept"`     // still dead: their key had no room
	Failed   int    `json:"failed"`   // not replayed because of an error
	// Next, when set, is the query that continues after the last dead letter handled: the
	// call stopped before the end (its limit, ten letters kept in a row, or — with an error
	// matching ErrPartiallyApplied — a store that failed part way, Next then holding the
	// rest of the limit). Pass it to ReplayDead. Nil when every dead letter was handled.
	Next *DeadQuery `json:"-"`
}

// ReplayAll puts the dead messages of one queue back into their keys' queues, oldest
// first, up to limit (0: the server's default, 1,000): ReplayDead from the oldest.
func (a *Admin) ReplayAll(ctx context.Context, queue string, limit int) (*ReplayReport, error) {
	return a.ReplayDead(ctx, DeadQuery{Queue: queue, Limit: limit})
}

// ReplayDead puts the dead messages of q.Queue back into their keys' queues, oldest first,
// from q.After (a ReplayReport.Next's cursor; "" for the oldest), up to q.Limit. Each keeps
// its id. The report's Next continues where it stopped.
//
// It enqueues, so it is retried only when the connection could not be made, or on the
// ingress's own 503 (nothing replayed, or an admission that timed out, which the queue
// recognises when repeated within 2 minutes) — never on a proxy's 502, 503 or 504, nor on a
// cut connection (ErrOutcomeUnknown), after which some letters may have been replayed:
// read the dead letters (DeadPage) to see. When the ingress's store fails after some
// letters were replayed, the error matches ErrPartiallyApplied and the report is returned
// with it: the counts so far and the Next that replays the rest.
func (a *Admin) ReplayDead(ctx context.Context, q DeadQuery) (*ReplayReport, error) {
	if q.Queue == "" {
		return nil, invalidf("ReplayDead: empty queue name")
	}
	if q.Limit < 0 {
		return nil, invalidf("ReplayDead: negative limit %d", q.Limit)
	}
	v := url.Values{"queue": {q.Queue}}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	path := "/v1/admin/dead/replay?" + v.Encode()
	resp, err := a.c.do(ctx, a.call(http.MethodPost, path, nil, neverSent))
	var pe *ProblemError
	if errors.As(err, &pe) && pe.Type == ProblemPartiallyApplied {
		r := &ReplayReport{Queue: q.Queue, Next: replayNext(pe.Next)}
		if b, merr := json.Marshal(pe.Done); merr == nil {
			json.Unmarshal(b, r)
		}
		return r, err
	}
	if err != nil {
		return nil, err
	}
	var r ReplayReport
	var env struct {
		Next string `json:"next"`
	}
	if err := json.Unmarshal(resp.body, &r); err != nil {
		return nil, fmt.Errorf("sluice: POST %s: %w", path, err)
	}
	json.Unmarshal(resp.body, &env)
	r.Next = replayNext(env.Next)
	if r.Queue == "" {
		r.Queue = q.Queue
	}
	return &r, nil
}

// replayNext reads the next URL of a replay's answer as the query that continues; nil
// when there is none.
func replayNext(next string) *DeadQuery {
	if next == "" {
		return nil
	}
	u, err := url.Parse(next)
	if err != nil {
		return nil
	}
	v := u.Query()
	n, _ := strconv.Atoi(v.Get("limit"))
	return &DeadQuery{Queue: v.Get("queue"), Limit: n, After: v.Get("after")}
}

// Tune changes a queue live and returns it as it is now, with its new ETag.
//
// Read the queue first and pass its ETag as p.IfMatch, so that two operators cannot
// overwrite each other: a queue changed since it was read answers ErrPreconditionFailed.
//
//	q, err := admin.Queue(ctx, "orders")
//	…
//	q, err = admin.Tune(ctx, "orders", client.Patch{Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 5}, IfMatch: q.ETag})
//	if errors.Is(err, client.ErrPreconditionFailed) { … read again, decide again … }
//
// Without IfMatch, setting the same patch twice is harmless, so Tune is retried like a
// GET. With IfMatch, a repeat of a patch that was applied would be refused as someone
// else's change, so it is retried only when nothing was sent (or on the ingress's 503,
// which it answers only when it changed nothing); a request sent without an answer ends
// in ErrOutcomeUnknown: read the queue (Queue) to see whether the change is there.
//
// When the ingress stored the change but could not update the queue's stream (its
// capacity), the error matches ErrPartiallyApplied and is a *ProblemError whose ETag is
// the stored revision: the change is in force for outflow and pause, not known to be for
// capacity. Tune again with the same patch and IfMatch set to that ETag to apply it.
func (a *Admin) Tune(ctx context.Context, name string, p Patch) (*Queue, error) {
	if name == "" {
		return nil, invalidf("Tune: empty queue name")
	}
	if p.Outflow == nil && p.TotalOutflow == nil && p.Capacity == nil && p.Paused == nil && len(p.Restore) == 0 {
		return nil, invalidf("Tune: empty patch")
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("client: Tune: %w", err)
	}
	conn := anyTransient
	if p.IfMatch != "" {
		conn = neverSent
	}
	cl := a.call(http.MethodPatch, "/v1/admin/queues/"+escapeSegment(name), body, conn)
	if p.IfMatch != "" {
		cl.header = http.Header{"If-Match": {ifMatch(p.IfMatch)}}
	}
	return a.queue(ctx, cl)
}

// ifMatch is the If-Match header for tag: "*" as given, any other tag — bare (3, as
// Queue.ETag holds it), quoted ("3") or weak (W/"3", as a compressing proxy rewrites the
// ingress's ETag) — as the strong tag of its revision ("3"): the ingress compares
// revisions and refuses a weak tag (400).
func ifMatch(tag string) string {
	if tag == "*" {
		return tag
	}
	return strconv.Quote(etagValue(tag))
}

// Reset drops every live change of a queue: it is again as the rules file says.
func (a *Admin) Reset(ctx context.Context, name string) (*Queue, error) {
	if name == "" {
		return nil, invalidf("Reset: empty queue name")
	}
	return a.queue(ctx, a.call(http.MethodPatch, "/v1/admin/queues/"+escapeSegment(name), []byte(`{"reset":true}`), anyTransient))
}

// Dead lists the dead messages of a queue (all queues when queue is ""), oldest first: the
// first page of DeadPage, at most 100. Each has State StateDead and a Reason.
func (a *Admin) Dead(ctx context.Context, queue string) ([]MessageStatus, error) {
	p, err := a.DeadPage(ctx, DeadQuery{Queue: queue})
	if err != nil {
		return nil, err
	}
	return p.Messages, nil
}

// DeadQuery selects a page of dead messages (DeadPage), or the dead messages to replay
// (ReplayDead).
type DeadQuery struct {
	// Queue restricts the list to one queue rule; "" lists every rule's. An unknown rule
	// is refused (ErrInvalid).
	Queue string
	// Limit is the page size, 1 to 1000; 0 leaves it to the server (100).
	Limit int
	// After is the cursor of the page to read: "" for the oldest, else the Next of the
	// previous page.
	After string
}

// DeadPage is one page of dead messages.
type DeadPage struct {
	Messages []MessageStatus
	// Next is the cursor of the next page (DeadQuery.After); "" when this is the last.
	Next string
}

// DeadPage lists one page of dead messages, oldest first.
//
//	q := client.DeadQuery{Queue: "orders-per-merchant"}
//	for {
//		p, err := admin.DeadPage(ctx, q)
//		…
//		if q.After = p.Next; q.After == "" {
//			break
//		}
//	}
func (a *Admin) DeadPage(ctx context.Context, q DeadQuery) (*DeadPage, error) {
	if q.Limit < 0 {
		return nil, invalidf("DeadPage: negative limit %d", q.Limit)
	}
	cl := a.call(http.MethodGet, "/v1/admin/dead", nil, anyTransient)
	v := url.Values{}
	if q.Queue != "" {
		v.Set("queue", q.Queue)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if len(v) > 0 {
		cl.query = v
	}
	resp, err := a.c.do(ctx, cl)
	if err != nil {
		return nil, err
	}
	var p DeadPage
	if err := decodeList(resp.body, "messages", &p.Messages); err != nil {
		return nil, fmt.Errorf("sluice: GET /v1/admin/dead: %w", err)
	}
	var env struct {
		Next string `json:"next"`
	}
	if json.Unmarshal(resp.body, &env) == nil && env.Next != "" {
		// The server sends the next page's URL; the cursor is its "after".
		if u, err := url.Parse(env.Next); err == nil {
			p.Next = u.Query().Get("after")
		}
	}
	return &p, nil
}

// Replay puts a dead message back into its key's queue, with the same id (so the same
// Idempotency-Key at the sink). It enqueues, so it is retried only when the connection
// could not be made, or on the ingress's own 503 (never a proxy's 502, 503 or 504).
func (a *Admin) Replay(ctx context.Context, id string) (*Submission, error) {
	if id == "" {
		return nil, invalidf("Replay: empty message id")
	}
	path := "/v1/admin/dead/" + escapeSegment(id) + "/replay"
	resp, err := a.c.do(ctx, a.call(http.MethodPost, path, nil, neverSent))
	if err != nil {
		return nil, err
	}
	s := &Submission{ID: id}
	if len(bytes.TrimSpace(resp.body)) > 0 {
		if err := json.Unmarshal(resp.body, s); err != nil {
			return nil, fmt.Errorf("sluice: POST %s: %w", path, err)
		}
	}
	s.Location = resp.header.Get("Location")
	s.Attempts = resp.attempts
	return s, nil
}

// PurgeQueue deletes every message waiting in every key of a queue (parked and dead
// messages are kept). Messages admitted while it runs may or may not be deleted. It
// deletes, so it is retried only when the connection could not be made, or on the
// ingress's own 503 (never a proxy's 502, 503 or 504).
func (a *Admin) PurgeQueue(ctx context.Context, name string) error {
	if name == "" {
		return invalidf("PurgeQueue: empty queue name")
	}
	_, err := a.c.do(ctx, a.call(http.MethodPost, "/v1/admin/queues/"+escapeSegment(name)+"/purge", nil, neverSent))
	return err
}

// PurgeKey deletes every message waiting in one key of a queue; the key is sent as one
// percent-encoded path segment, so it can never address another key. Retried like PurgeQueue.
func (a *Admin) PurgeKey(ctx context.Context, name, key string) error {
	if name == "" {
		return invalidf("PurgeKey: empty queue name")
	}
	path := "/v1/admin/queues/" + escapeSegment(name) + "/keys/" + escapeSegment(key)
	_, err := a.c.do(ctx, a.call(http.MethodDelete, path, nil, neverSent))
	return err
}

func (a *Admin) call(method, path string, body []byte, conn retryTransport) call {
	retry := retryUnavailable
	if conn == neverSent {
		retry = retryNotDone
	}
	return call{method: method, path: path, body: body, admin: true, conn: conn, retry: retry, ok: is2xx, mutates: method != http.MethodGet}
}

func (a *Admin) queue(ctx context.Context, cl call) (*Queue, error) {
	resp, err := a.c.do(ctx, cl)
	if err != nil {
		return nil, err
	}
	var q Queue
	if err := json.Unmarshal(resp.body, &q); err != nil {
		return nil, fmt.Errorf("sluice: %s %s: %w", cl.method, cl.path, err)
	}
	q.ETag = etagValue(resp.header.Get("ETag"))
	return &q, nil
}

// Rule is one rule of the rules file in force (GET /v1/admin/rules): what a check or an
// admission is decided by.
type Rule struct {
	Name   string `json:"name"`
	Domain string `json:"domain"`
	// Descriptor is the rule's path; an entry with an empty Value is one bucket per value.
	Descriptor []Entry `json:"descriptor"`
	// Kind is "queue" (a queue rule: POST /v1/messages) or "check" (check only).
	Kind string `json:"kind"`
	// RateLimits are the rule's admission limits.
	RateLimits []RuleLimit `json:"rate_limits"`
	Unlimited  bool        `json:"unlimited,omitempty"`
	ShadowMode bool        `json:"shadow_mode,omitempty"`
	QuotaMode  bool        `json:"quota_mode,omitempty"`
	// AllOrNothing, DetailedMetric and Metadata are as in the rules file.
	AllOrNothing   bool           `json:"all_or_nothing,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	Replaces       []string       `json:"replaces,omitempty"`
	// Queue is the queue as the rules file says (nil for a check-only rule); the live
	// values, after Tune, are in Admin.Queue.
	Queue *QueueConfig `json:"queue,omitempty"`
	// Overflow is "reject" or "park" (queue rules only).
	Overflow string `json:"overflow,omitempty"`
	// Source is where the rule is defined, "file:line".
	Source string `json:"source"`
}

// RuleLimit is one rate limit of a rule.
type RuleLimit struct {
	Name      string `json:"name,omitempty"`
	Algorithm string `json:"algorithm"`
	Burst     int64  `json:"burst,omitempty"`
	TimeZone  string `json:"time_zone,omitempty"`
	Rate
}

// Rules lists every rule in force, in definition order.
func (a *Admin) Rules(ctx context.Context) ([]Rule, error) {
	resp, err := a.c.do(ctx, a.call(http.MethodGet, "/v1/admin/rules", nil, anyTransient))
	if err != nil {
		return nil, err
	}
	var rs []Rule
	if err := decodeList(resp.body, "rules", &rs); err != nil {
		return nil, fmt.Errorf("sluice: GET /v1/admin/rules: %w", err)
	}
	return rs, nil
}

// decodeList reads a listing: {"<field>": [...]} as documented, or a bare array.
func decodeList(body []byte, field string, out any) error {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		return json.Unmarshal(body, out)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		return err
	}
	raw, ok := env[field]
	if !ok {
		return fmt.Errorf("no %q in the answer", field)
	}
	return json.Unmarshal(raw, out)
}

// Healthy reports whether the ingress process is alive (GET /healthz). Not retried: a
// probe reports the present.
func (c *Client) Healthy(ctx context.Context) error { return c.probe(ctx, "/healthz") }

// Ready reports whether the ingress can admit (GET /readyz: NATS and Redis reachable); a
// 503 matches ErrUnavailable. Not retried.
func (c *Client) Ready(ctx context.Context) error { return c.probe(ctx, "/readyz") }

func (c *Client) probe(ctx context.Context, path string) error {
	resp, err := c.once(ctx, call{method: http.MethodGet, path: path})
	if err != nil {
		return fmt.Errorf("sluice: GET %s: %w", path, err)
	}
	resp.attempts = 1
	if !is2xx(resp.status) {
		return c.errorFor(resp)
	}
	return nil
}
