package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/redact"
	"github.com/sluice-io/sluice/internal/retryrules"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// Admin serves /v1/admin/ (docs/http-api.md "Admin"). The Server wraps it in bearer-token
// authentication. Overrides are written to the NATS KV bucket of internal/overrides, whose
// watchers push them to every drainer (and ingress) within milliseconds.
type Admin struct {
	Rules     func() *rules.Set
	Overrides *overrides.Store
	Current   *overrides.Watcher  // for reads; nil = read from Overrides
	Keys      *overrides.KeyIndex // per-key overrides (admin_keys.go); nil: their routes answer 503
	Queues    *queue.Queues
	Scheduler *queue.Scheduler
	JS        jetstream.JetStream
	Parking   *retry.Store
	Dead      *retry.DeadLetters
	Admitter  *admit.Admitter
	Logger    *slog.Logger
	// Audit records every operator change (who, what, before/after); nil = log lines only.
	Audit *audit.Log
	// Caller names who made a request and with which scope (the admin token that the
	// server's authentication put in its context): audit records and whoami. nil = nobody.
	Caller func(ctx context.Context) (name, scope string)

	mux     *http.ServeMux
	once    sync.Once
	drained drainedMeter
	hooks   adminHooks
}

func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.once.Do(func() {
		m := http.NewServeMux()
		m.HandleFunc("GET /v1/admin/rules", a.listRules)
		m.HandleFunc("GET /v1/admin/queues", a.listQueues)
		m.HandleFunc("GET /v1/admin/queues/{name}", a.getQueue)
		m.HandleFunc("PATCH /v1/admin/queues/{name}", a.patchQueue)
		m.HandleFunc("POST /v1/admin/queues/{name}/purge", a.purgeQueue)
		m.HandleFunc("GET /v1/admin/queues/{name}/keys", a.hotKeys)
		m.HandleFunc("GET /v1/admin/queues/{name}/keys/{key}", a.getKeyOverride)
		m.HandleFunc("PATCH /v1/admin/queues/{name}/keys/{key}", a.patchKey)
		m.HandleFunc("POST /v1/admin/queues/{name}/keys", a.bulkKeys)
		m.HandleFunc("DELETE /v1/admin/queues/{name}/keys/{key}", a.purgeKey)
		m.HandleFunc("GET /v1/admin/dead", a.listDead)
		m.HandleFunc("POST /v1/admin/dead/{id}/replay", a.replayDead)
		m.HandleFunc("POST /v1/admin/dead/replay", a.replayAllDead)
		m.HandleFunc("GET /v1/admin/whoami", a.whoami)
		m.HandleFunc("GET /v1/admin/audit", a.listAudit)
		m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			httpx.WriteProblem(w, httpx.NotFound("", "no such admin endpoint: "+r.Method+" "+r.URL.Path))
		})
		a.mux = m
	})
	a.mux.ServeHTTP(w, r)
}

type queueView struct {
	Name         string              `json:"name"`
	Domain       string              `json:"domain"`
	Capacity     int64               `json:"capacity"`
	Outflow      overrides.RateJSON  `json:"outflow"`
	TotalOutflow *overrides.RateJSON `json:"total_outflow"`
	Paused       bool                `json:"paused"`
	Depth        uint64              `json:"depth"`
	ActiveKeys   uint64              `json:"active_keys"`
	Parked       uint64              `json:"parked"`
	// Scheduled counts messages waiting for their delivery time (deliver_at / delay).
	Scheduled uint64 `json:"scheduled"`
	// InFlight counts the keys a drainer holds now: their heads are being delivered (the
	// claim engine's leased keys plus the own engine's drainers' reports, as of their last
	// renewal; a rule is drained by one engine, both count during a switch).
	InFlight         int64   `json:"in_flight"`
	Dead             uint64  `json:"dead"`
	DrainedPerSecond float64 `json:"drained_per_second"`
	// RefusedPerSecond is 429s of POST /v1/messages per second over the last minute, all
	// ingress processes together (counted in Redis, see queue.Scheduler.Rates.RefusedRate).
	RefusedPerSecond float64 `json:"refused_per_second"`
	// OldestAgeSeconds is how long the oldest message waiting (any key) has waited; null
	// when the queue is empty. It is the queue's lag: what was admitted then leaves now.
	OldestAgeSeconds *float64      `json:"oldest_age_seconds"`
	Overridden       []string      `json:"overridden"`
	RulesFile        ruleQueueView `json:"rules_file"`
	UpdatedAt        string        `json:"override_updated_at,omitempty"`
	// Breaker is the rule's sink breaker (sink.breaker), absent when the rule has none.
	Breaker *breakerView `json:"breaker,omitempty"`
}

// breakerView is a rule's sink breaker across its drainers: each drainer keeps its own
// (they publish it on its changes of state, queue.BreakerRecord); the rule's state is the
// worst of theirs — open if any drainer's is open, then half_open, else closed.
type breakerView struct {
	State    string               `json:"state"`
	Drainers []breakerDrainerView `json:"drainers"`
}

type breakerDrainerView struct {
	Drainer   string `json:"drainer"`
	State     string `json:"state"`
	Since     string `json:"since"`
	NextProbe string `json:"next_probe_at,omitempty"`
}

func (a *Admin) breaker(ctx context.Context, rule string) *breakerView {
	v := &breakerView{State: "closed", Drainers: []breakerDrainerView{}}
	if a.Scheduler == nil {
		return v
	}
	recs, err := a.Scheduler.Steering.Breakers(ctx, rule, time.Now())
	if err != nil {
		return v
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Drainer < recs[j].Drainer })
	rank := map[string]int{"closed": 0, "half_open": 1, "open": 2}
	for _, r := range recs {
		d := breakerDrainerView{Drainer: r.Drainer, State: r.State, Since: r.Since.UTC().Format(time.RFC3339Nano)}
		if !r.NextProbe.IsZero() {
			d.NextProbe = r.NextProbe.UTC().Format(time.RFC3339Nano)
		}
		v.Drainers = append(v.Drainers, d)
		if rank[r.State] > rank[v.State] {
			v.State = r.State
		}
	}
	return v
}

type ruleQueueView struct {
	Capacity     int64               `json:"capacity"`
	Outflow      overrides.RateJSON  `json:"outflow"`
	TotalOutflow *overrides.RateJSON `json:"total_outflow"`
}

func rateView(r rules.Rate) *overrides.RateJSON {
	if r.Zero() {
		return nil
	}
	v := overrides.EncodeRate(r)
	return &v
}

func (a *Admin) override(ctx context.Context, name string) overrides.Override {
	if a.Current != nil {
		o, _ := a.Current.Get(name)
		return o
	}
	if a.Overrides != nil {
		o, _, err := a.Overrides.Get(ctx, name)
		if err == nil {
			return o
		}
	}
	return overrides.Override{}
}

// view shows queue r with its live override o (what the caller read or just wrote).
func (a *Admin) view(ctx context.Context, r *rules.Rule, o overrides.Override) queueView {
	eff, _ := overrides.Effective(r, o)
	v := queueView{
		Name: r.Name, Domain: r.Domain, Capacity: eff.Queue.Capacity,
		Outflow: overrides.EncodeRate(eff.Queue.Outflow), TotalOutflow: rateView(eff.Queue.TotalOutflow),
		Paused:     o.IsPaused(),
		Overridden: []string{},
		RulesFile: ruleQueueView{Capacity: r.Queue.Capacity, Outflow: overrides.EncodeRate(r.Queue.Outflow),
			TotalOutflow: rateView(r.Queue.TotalOutflow)},
	}
	if o.Outflow != nil {
		v.Overridden = append(v.Overridden, "outflow")
	}
	if o.TotalOutflow != nil {
		v.Overridden = append(v.Overridden, "total_outflow")
	}
	if o.Capacity != nil {
		v.Overridden = append(v.Overridden, "capacity")
	}
	if o.Paused != nil {
		v.Overridden = append(v.Overridden, "paused")
	}
	if !o.UpdatedAt.IsZero() {
		v.UpdatedAt = o.UpdatedAt.UTC().Format(time.RFC3339)
	}
	if s, err := a.JS.Stream(ctx, a.Queues.StreamName(r.Name)); err == nil {
		if info, err := s.Info(ctx); err == nil {
			v.Depth, v.ActiveKeys = info.State.Msgs, info.State.NumSubjects
			drained := a.drained.rate(r.Name, info.State.LastSeq-info.State.Msgs, time.Now())
			v.DrainedPerSecond = drained
			if info.State.Msgs > 0 && !info.State.FirstTime.IsZero() {
				age := max(time.Since(info.State.FirstTime).Seconds(), 0)
				v.OldestAgeSeconds = &age
			}
		}
	}
	if a.Scheduler != nil {
		v.RefusedPerSecond, _ = a.Scheduler.Rates.RefusedRate(ctx, r.Name, time.Now())
		// The drainers' own count of accepted deliveries, the whole cluster's over the last
		// minute; this ingress's stream sampling is the fallback before their first counts.
		if d, err := a.Scheduler.Rates.DeliveredRate(ctx, r.Name, time.Now()); err == nil && d > 0 {
			v.DrainedPerSecond = d
		}
	}
	if a.Parking != nil {
		v.Parked, _ = a.Parking.Parked(ctx, r.Name)
		v.Scheduled, _ = a.Parking.ScheduledTotal(ctx, r.Name)
	}
	if a.Scheduler != nil {
		_, v.InFlight, _ = a.Scheduler.Claims.Counts(ctx, r.Name)
		if own, err := a.Scheduler.Ownership.InFlight(ctx, r.Name, time.Time{}); err == nil {
			v.InFlight += own
		}
	}
	if a.Dead != nil {
		v.Dead, _ = a.Dead.Count(ctx, r.Name)
	}
	if r.Sink.Breaker.Enabled {
		v.Breaker = a.breaker(ctx, r.Name)
	}
	return v
}

func (a *Admin) queueRule(w http.ResponseWriter, r *http.Request) *rules.Rule {
	name := r.PathValue("name")
	rule := a.Rules().Rule(name)
	if rule == nil || !rule.HasQueue() {
		httpx.WriteProblem(w, httpx.NotFound("Unknown queue", "no queue rule named "+strconv.Quote(name)))
		return nil
	}
	return rule
}

// ruleView is one rule as the rules file in force defines it (GET /v1/admin/rules).
type ruleView struct {
	Name       string          `json:"name"`
	Domain     string          `json:"domain"`
	Descriptor []rules.Entry   `json:"descriptor"` // the path; an empty value is one bucket per value
	Kind       string          `json:"kind"`       // "queue" (POST /v1/messages) or "check" (check only)
	RateLimits []rateLimitView `json:"rate_limits"`
	Unlimited  bool            `json:"unlimited,omitempty"`
	ShadowMode bool            `json:"shadow_mode,omitempty"`
	// envoy's quota_mode, detailed_metric and metadata, and sluice's all_or_nothing
	QuotaMode      bool           `json:"quota_mode,omitempty"`
	AllOrNothing   bool           `json:"all_or_nothing,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	Replaces       []string       `json:"replaces,omitempty"`
	Queue          *ruleQueueView `json:"queue,omitempty"` // as the rules file says; live values in GET /v1/admin/queues
	Overflow       string         `json:"overflow,omitempty"`
	// Checks is a queue rule's `checks`: "own" (checks count apart) or "share".
	Checks string `json:"checks,omitempty"`
	// LimitOverride is the rule's limit_override when it sets one.
	LimitOverride *limitOverrideView `json:"limit_override,omitempty"`
	Source        string             `json:"source"` // file:line
}

type limitOverrideView struct {
	MaxFactor *int64 `json:"max_factor,omitempty"` // 0: no override taken; absent: the ingress's -override-max-factor
	MaxWindow string `json:"max_window,omitempty"` // absent: the ingress's -override-max-window
}

type rateLimitView struct {
	Name      string `json:"name,omitempty"`
	Algorithm string `json:"algorithm"`
	Burst     int64  `json:"burst,omitempty"`
	TimeZone  string `json:"time_zone,omitempty"` // a fixed window's time_zone
	overrides.RateJSON
}

// listRules answers every rule in force, in definition order: what a check or an
// admission is decided by.
func (a *Admin) listRules(w http.ResponseWriter, r *http.Request) {
	out := []ruleView{}
	for _, rule := range a.Rules().Rules() {
		v := ruleView{Name: rule.Name, Domain: rule.Domain, Kind: "check", RateLimits: []rateLimitView{},
			Unlimited: rule.Unlimited, ShadowMode: rule.ShadowMode, Replaces: rule.Replaces,
			QuotaMode: rule.QuotaMode, AllOrNothing: rule.AllOrNothing, DetailedMetric: rule.DetailedMetric, Metadata: rule.Metadata,
			Source: rule.File + ":" + strconv.Itoa(rule.Line)}
		if rule.HasQueue() {
			v.Checks = string(rules.ChecksOwn)
			if rule.Checks == rules.ChecksShare {
				v.Checks = string(rules.ChecksShare)
			}
		}
		if lo := rule.LimitOverride; lo.Refused || lo.MaxFactor > 0 || lo.MaxWindow > 0 {
			v.LimitOverride = &limitOverrideView{}
			if lo.Refused || lo.MaxFactor > 0 {
				f := lo.MaxFactor
				v.LimitOverride.MaxFactor = &f
			}
			if lo.MaxWindow > 0 {
				v.LimitOverride.MaxWindow = lo.MaxWindow.String()
			}
		}
		for _, e := range rule.Path {
			v.Descriptor = append(v.Descriptor, rules.Entry{Key: e.Key, Value: e.Value})
		}
		for _, l := range rule.RateLimits {
			lv := rateLimitView{Name: l.Name, Algorithm: string(l.Algorithm), RateJSON: overrides.EncodeRate(l.Rate)}
			if l.Algorithm == rules.TokenBucket || l.Algorithm == rules.LeakyBucket {
				lv.Burst = l.Burst // the windows have none
			}
			if l.TimeZone != nil {
				lv.TimeZone = l.TimeZone.String()
			}
			v.RateLimits = append(v.RateLimits, lv)
		}
		if rule.HasQueue() {
			v.Kind, v.Overflow = "queue", string(rule.Overflow)
			v.Queue = &ruleQueueView{Capacity: rule.Queue.Capacity, Outflow: overrides.EncodeRate(rule.Queue.Outflow), TotalOutflow: rateView(rule.Queue.TotalOutflow)}
		}
		out = append(out, v)
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"rules": out})
}

func (a *Admin) listQueues(w http.ResponseWriter, r *http.Request) {
	out := []queueView{}
	for _, rule := range a.Rules().QueueRules() {
		out = append(out, a.view(r.Context(), rule, a.override(r.Context(), rule.Name)))
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"queues": out})
}

// getQueue answers one queue with its overrides' revision as the ETag, for a PATCH with
// If-Match ("0" when nothing is overridden). Values and ETag come from one read of the
// store, not the watcher, so a write of a moment ago is neither missed nor mismatched.
func (a *Admin) getQueue(w http.ResponseWriter, r *http.Request) {
	rule := a.queueRule(w, r)
	if rule == nil {
		return
	}
	o := a.override(r.Context(), rule.Name)
	if a.Overrides != nil {
		stored, _, err := a.Overrides.Get(r.Context(), rule.Name)
		if err == nil {
			o = stored
			w.Header().Set("ETag", httpx.RevisionETag(o.Revision))
		}
	}
	httpx.WriteJSON(w, http.StatusOK, a.view(r.Context(), rule, o))
}

func (a *Admin) patchQueue(w http.ResponseWriter, r *http.Request) {
	rule := a.queueRule(w, r)
	if rule == nil {
		return
	}
	body, ok := readPatch(w, r)
	if !ok {
		return
	}
	patch, err := overrides.ParsePatch(body)
	if err != nil {
		writePatchError(w, err)
		return
	}
	if v := r.Header.Get("If-Match"); v != "" {
		rev, anyRev, ok := httpx.ParseIfMatch(v)
		if !ok {
			httpx.WriteProblem(w, httpx.BadRequest("If-Match", `must be the ETag of a GET or PATCH of the queue, e.g. "3" ("0": nothing overridden), or *`))
			return
		}
		if !anyRev {
			patch.IfRevision = &rev
		}
	}
	ctx := r.Context()
	before := a.override(ctx, rule.Name)
	if a.Overrides != nil {
		if stored, _, err := a.Overrides.Get(ctx, rule.Name); err == nil {
			before = stored
		}
	}
	// A reset is a patch like any other: under If-Match it applies only to the revision the
	// caller saw (the console's Reset sends it), else it would undo a change made unseen.
	o, err := a.Overrides.Apply(ctx, rule, patch)
	if err != nil {
		writePatchError(w, err)
		return
	}
	a.hooks.run(&a.hooks.afterStore)
	// A capacity change is a stream update, effective at once for every ingress.
	eff, _ := overrides.Effective(rule, o)
	if err := a.Queues.EnsureLimits(ctx, rule.Name, queue.Limits{Capacity: eff.Queue.Capacity, MaxBytes: eff.Queue.MaxBytes}); err != nil {
		// The override is stored and the watchers put its outflow and pause in force: this
		// answer must not say "nothing happened" (a 503), or a client retrying under
		// If-Match is refused for its own change. It says what is stored, under which
		// revision, and what is unknown; the same PATCH with If-Match of that revision
		// tries the stream again.
		a.Logger.Error("admin: override stored, capacity not applied to the stream", "rule", rule.Name, "revision", o.Revision, "err", err)
		a.record(r, audit.Record{Action: patchAction(patch), Queue: rule.Name, Before: overrideView(before), After: overrideView(o),
			Result: "stored; the stream update failed: " + err.Error()})
		etag := httpx.RevisionETag(o.Revision)
		w.Header().Set("ETag", etag)
		httpx.WriteProblem(w, httpx.StoredNotApplied(fmt.Sprintf("the override is stored (revision %s, the ETag) and its outflow and pause reach the drainers, "+
			"but updating the queue's stream to capacity %d failed, so whether the stream enforces it is unknown (%v); "+
			"send the same PATCH with If-Match: %s to try the stream again", etag, eff.Queue.Capacity, err, etag),
			map[string]any{"override": overrideView(o), "etag": etag, "capacity_applied": "unknown"}))
		return
	}
	a.record(r, audit.Record{Action: patchAction(patch), Queue: rule.Name, Before: overrideView(before), After: overrideView(o), Result: "ok"})
	// Show what was written: the watcher may not have seen it yet.
	w.Header().Set("ETag", httpx.RevisionETag(o.Revision)) // "0" after a reset: nothing stored
	httpx.WriteJSON(w, http.StatusOK, a.view(ctx, rule, o))
}

// checkPatchType refuses a PATCH whose Content-Type is set and not JSON with 415, as the
// submit endpoint refuses one (docs/http-api.md, conventions): application/json or, the
// body being a JSON merge patch, application/merge-patch+json, with any parameters. It is
// the only admin endpoint with a body.
func checkPatchType(r *http.Request) *httpx.Problem {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && (mt == "application/json" || mt == "application/merge-patch+json") {
		return nil
	}
	p := httpx.UnsupportedMediaType("Content-Type must be application/json or application/merge-patch+json (got " + strconv.Quote(ct) + ")")
	return &p
}

// writePatchError answers a refused PATCH. A problem with the patch names its field in
// the problem's field member and not again in the detail (nor the Go package's "overrides:"
// prefix), as every other 400 does: `field: detail` reads "total_outflow: must be ≥ outflow
// (10/s < 20/s); …". Further problems of the same body follow in the detail, each with its
// field.
func writePatchError(w http.ResponseWriter, err error) {
	var pe *overrides.PatchError
	var pes overrides.PatchErrors
	switch {
	case errors.As(err, &pes) && len(pes) > 0:
		httpx.WriteProblem(w, httpx.BadRequest(pes[0].Field, pes.Detail()))
	case errors.As(err, &pe):
		httpx.WriteProblem(w, httpx.BadRequest(pe.Field, pe.Message))
	case errors.Is(err, overrides.ErrInvalidPatch), errors.Is(err, overrides.ErrNoQueue):
		httpx.WriteProblem(w, httpx.BadRequest("", err.Error()))
	case errors.Is(err, overrides.ErrConflict):
		httpx.WriteProblem(w, httpx.PreconditionFailed(err.Error()))
	case errors.Is(err, overrides.ErrOutcomeUnknown):
		httpx.WriteProblem(w, httpx.OutcomeUnknown("the override was sent to the store (NATS KV) and its answer was lost, so it may be stored ("+
			err.Error()+"): GET the queue, whose ETag and overridden fields say"))
	default:
		httpx.WriteProblem(w, httpx.Unavailable("", err.Error(), time.Second))
	}
}

func (a *Admin) getKey(w http.ResponseWriter, r *http.Request) {
	rule := a.queueRule(w, r)
	if rule == nil {
		return
	}
	key := r.PathValue("key") // already percent-decoded by the mux
	if err := queue.CheckKey(key); err != nil {
		httpx.WriteProblem(w, httpx.BadRequest("key", err.Error()))
		return
	}
	ctx := r.Context()
	depth, err := a.Queues.Depth(ctx, rule.Name, key)
	if err != nil {
		httpx.WriteProblem(w, httpx.Unavailable("", err.Error(), time.Second))
		return
	}
	resp := map[string]any{"queue": rule.Name, "key": key, "depth": depth, "next_dispatch_at": nil}
	if next, ok, err := a.nextSlot(ctx, rule.Name, key); err == nil && ok && depth > 0 {
		resp["next_dispatch_at"] = next.UTC().Format(time.RFC3339Nano)
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

func (a *Admin) purgeKey(w http.ResponseWriter, r *http.Request) {
	rule := a.queueRule(w, r)
	if rule == nil {
		return
	}
	key := r.PathValue("key")
	beforeDepth, _ := a.Queues.Depth(r.Context(), rule.Name, key)
	if err := a.Queues.PurgeKey(r.Context(), rule.Name, key); err != nil {
		writeChangeError(w, err)
		return
	}
	if a.dueMarks() { // the claim engine's depth count starts afresh with the key
		a.Scheduler.Depths.SetDepth(r.Context(), rule.Name, key, 0)
	}
	a.record(r, audit.Record{Action: audit.ActionKeyDelete, Queue: rule.Name, Target: key,
		Before: map[string]any{"depth": beforeDepth}, After: map[string]any{"depth": 0}, Result: "ok"})
	w.WriteHeader(http.StatusNoContent)
}

func (a *Admin) purgeQueue(w http.ResponseWriter, r *http.Request) {
	rule := a.queueRule(w, r)
	if rule == nil {
		return
	}
	var beforeDepth uint64
	if st, err := a.JS.Stream(r.Context(), a.Queues.StreamName(rule.Name)); err == nil {
		if info, err := st.Info(r.Context()); err == nil {
			beforeDepth = info.State.Msgs
		}
	}
	if err := a.Queues.Purge(r.Context(), rule.Name); err != nil {
		writeChangeError(w, err)
		return
	}
	a.Scheduler.Depths.ResetDepths(r.Context(), rule.Name)
	a.record(r, audit.Record{Action: audit.ActionPurge, Queue: rule.Name,
		Before: map[string]any{"depth": beforeDepth}, After: map[string]any{"depth": 0}, Result: "ok"})
	w.WriteHeader(http.StatusNoContent)
}

// deadView is a dead letter in the shape of a message status (state "dead"), plus why.
type deadView struct {
	ID        string `json:"id"`
	Rule      string `json:"rule"`
	Key       string `json:"key"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

func (a *Admin) listDead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("queue")
	if name != "" && a.Rules().Rule(name) == nil {
		httpx.WriteProblem(w, httpx.BadRequest("queue", "no rule named "+strconv.Quote(name)))
		return
	}
	limit, ok := queryInt(w, q, "limit", 100, 1000)
	if !ok {
		return
	}
	after, ok := queryCursor(w, q, "must be the cursor of a previous page")
	if !ok {
		return
	}
	list, next, err := a.Dead.List(r.Context(), name, limit, after)
	if err != nil {
		httpx.WriteProblem(w, httpx.Unavailable("", err.Error(), time.Second))
		return
	}
	out := make([]deadView, 0, len(list))
	for _, d := range list {
		out = append(out, deadView{ID: d.Message.ID, Rule: d.Message.Rule, Key: d.Message.Key, State: "dead", Reason: redact.Text(d.Reason),
			Attempts: d.Message.Attempt, LastError: redact.Text(d.Message.LastError),
			CreatedAt: d.Message.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: d.DeadAt.UTC().Format(time.RFC3339Nano)})
	}
	resp := map[string]any{"messages": out}
	if next > 0 && len(list) == limit {
		v := url.Values{"after": {strconv.FormatUint(next, 10)}, "limit": {strconv.Itoa(limit)}}
		if name != "" {
			v.Set("queue", name)
		}
		resp["next"] = "/v1/admin/dead?" + v.Encode()
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

// readmit is the admitter's Readmit as the retry package calls it: with the rule in force.
func (a *Admin) readmit() retry.AdmitFunc {
	return retryrules.Admit(func(name string) *rules.Rule { return a.Rules().Rule(name) }, a.Admitter.Readmit)
}

// readmitKeeping is readmit, as Admitter.Readmit answers, that also keeps the admission's
// own result in *kept: a refused replay is answered as a refused submission, with the
// numbers of the policy that refused (rejectedOutcome).
func (a *Admin) readmitKeeping(kept *admit.Result) retry.AdmitFunc {
	return retryrules.Admit(func(name string) *rules.Rule { return a.Rules().Rule(name) },
		func(ctx context.Context, r *rules.Rule, m queue.Message, msgID string) (retry.AdmitResult, error) {
			res, err := a.Admitter.Admit(ctx, r, m, admit.Options{MsgID: msgID})
			if err != nil {
				return retry.AdmitResult{}, err
			}
			*kept = res
			return a.Admitter.ReadmitResult(res), nil
		})
}

// noteAdmitted is admit that also sets *admitted when the letter went back into its queue,
// whatever error Replay then returns (its zero result reads as Admitted, so the result
// alone cannot tell), and then runs the afterAdmit test seam.
func (a *Admin) noteAdmitted(admit retry.AdmitFunc, admitted *bool) retry.AdmitFunc {
	return func(ctx context.Context, rule retry.Rule, m queue.Message, msgID string) (retry.AdmitResult, error) {
		res, err := admit(ctx, rule, m, msgID)
		*admitted = err == nil && res.Outcome == retry.Admitted
		if *admitted {
			a.hooks.run(&a.hooks.afterAdmit)
		}
		return res, err
	}
}

func (a *Admin) replayDead(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var adm admit.Result
	admitted := false
	res, err := a.Dead.Replay(r.Context(), id, a.noteAdmitted(a.readmitKeeping(&adm), &admitted))
	switch {
	case errors.Is(err, retry.ErrNotFound):
		httpx.WriteProblem(w, httpx.NotFound("", "no dead letter with id "+strconv.Quote(id)))
		return
	case err != nil && admitted:
		// Back in its queue, which is what was asked; only its dead letter could not be
		// removed. Not a 503: a retry would find the letter and replay it again (the
		// queue recognises that repeat within its 2-minute duplicate window, not after).
		a.Logger.Warn("admin: dead letter replayed but still listed", "id", id, "err", err)
		a.record(r, audit.Record{Action: audit.ActionReplay, Queue: a.ruleOfID(id), Target: id,
			Before: map[string]any{"state": "dead"}, After: map[string]any{"state": "queued"}, Result: "queued; the dead letter is still listed: " + err.Error()})
		w.Header().Set("Location", "/v1/messages/"+id)
		httpx.WriteJSON(w, http.StatusAccepted, map[string]any{"id": id, "state": "queued", "dead_letter_removed": false,
			"detail": "the message is back in its queue; its dead letter could not be removed (" + err.Error() + ") and is still listed: do not replay it again"})
		return
	case err != nil:
		httpx.WriteProblem(w, httpx.Unavailable("", err.Error(), time.Second))
		return
	}
	if res.Outcome != retry.Admitted {
		// The same 429 as a submission to the key gets: #quota-exceeded, its violated
		// policies, Retry-After and rate-limit headers.
		p, limit := admit.Refusal(adm, "the dead letter is kept")
		if limit.Policy != "" {
			httpx.SetRateLimitHeaders(w.Header(), limit)
		}
		httpx.WriteProblem(w, p)
		return
	}
	a.record(r, audit.Record{Action: audit.ActionReplay, Queue: a.ruleOfID(id), Target: id,
		Before: map[string]any{"state": "dead"}, After: map[string]any{"state": "queued"}, Result: "ok"})
	w.Header().Set("Location", "/v1/messages/"+id)
	httpx.WriteJSON(w, http.StatusAccepted, map[string]any{"id": id, "state": "queued"})
}

// hotKeys answers a queue's keys with the most messages waiting (?top=N, default 20, at
// most 100), each with its next dispatch time. See queue.Scheduler.Depths.HotKeys for the cost.
func (a *Admin) hotKeys(w http.ResponseWriter, r *http.Request) {
	rule := a.queueRule(w, r)
	if rule == nil {
		return
	}
	top, ok := queryInt(w, r.URL.Query(), "top", 20, 100)
	if !ok {
		return
	}
	ctx := r.Context()
	var keys []queue.KeyDepth
	var complete bool
	var err error
	if a.dueMarks() {
		keys, complete, err = a.Scheduler.Depths.HotKeys(ctx, rule.Name, top)
	} else {
		keys, err = a.Queues.HotKeys(ctx, rule.Name, top) // always complete
		complete = err == nil
	}
	if err != nil {
		httpx.WriteProblem(w, httpx.Unavailable("", err.Error(), time.Second))
		return
	}
	type keyView struct {
		Key            string  `json:"key"`
		Depth          int64   `json:"depth"`
		NextDispatchAt *string `json:"next_dispatch_at"`
	}
	out := make([]keyView, 0, len(keys))
	for _, k := range keys {
		kv := keyView{Key: k.Key, Depth: k.Depth}
		if next, ok, err := a.nextSlot(ctx, rule.Name, k.Key); err == nil && ok {
			s := next.UTC().Format(time.RFC3339Nano)
			kv.NextDispatchAt = &s
		}
		out = append(out, kv)
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"queue": rule.Name, "keys": out, "complete": complete})
}

// dueMarks reports whether the ingress writes depth counts and due marks to Redis on
// admission (the claim engine, admit.Admitter.DueMarks): only then do the scheduler's
// counters and due times say how deep a key is and when it next leaves. Under the own
// engine depth comes from the stream, and a key's next slot lives in the memory of the
// drainer that owns it.
func (a *Admin) dueMarks() bool { return a.Admitter == nil || a.Admitter.DueMarks }

// nextSlot is a key's next dispatch time when the scheduler knows it (claim engine); never
// under the own engine, whose due set holds only stale marks.
func (a *Admin) nextSlot(ctx context.Context, rule, key string) (time.Time, bool, error) {
	if !a.dueMarks() {
		return time.Time{}, false, nil
	}
	return a.Scheduler.Meter.NextSlot(ctx, rule, key)
}

// replayAllDead re-admits the dead letters of one queue (?queue=NAME, required), oldest
// first, up to ?limit (default 1000, at most 10000), from ?after (the cursor of an earlier
// answer's next; the oldest when absent). A letter whose key has no room is kept and
// counted as kept; the call stops early once that happens ten times in a row. An answer
// that stopped before the end carries next, the URL that continues after the last letter
// handled.
//
// A store failure before any letter was handled is a 503 (nothing was done: retrying is
// safe). After some were, it is a 500 #partially-applied with the counts so far and next:
// a 503 would invite a retry that replays more than the caller asked for.
func (a *Admin) replayAllDead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("queue")
	if rule := a.Rules().Rule(name); rule == nil || !rule.HasQueue() {
		httpx.WriteProblem(w, httpx.BadRequest("queue", "must name a queue rule (got "+strconv.Quote(name)+")"))
		return
	}
	limit, ok := queryInt(w, q, "limit", 1000, 10000)
	if !ok {
		return
	}
	cursor, ok := queryCursor(w, q, "must be the cursor of a previous answer's next")
	if !ok {
		return
	}
	ctx := r.Context()
	var replayed, kept, failed, keptInRow int
	handled := func() int { return replayed + kept + failed }
	var stopErr error
	exhausted := false
pages:
	for handled() < limit && keptInRow < 10 {
		page, next, err := a.Dead.List(ctx, name, min(100, limit-handled()), cursor)
		if err != nil {
			stopErr = err
			break
		}
		for _, d := range page {
			if keptInRow >= 10 {
				break pages
			}
			admitted := false
			res, err := a.Dead.Replay(ctx, d.Message.ID, a.noteAdmitted(a.readmit(), &admitted))
			switch {
			case errors.Is(err, retry.ErrNotFound):
				// Replayed (or gone) meanwhile, by someone else: nothing done here.
			case errors.Is(err, retry.ErrRuleNotFound):
				failed++ // this letter cannot be replayed; the next ones may
			case err != nil && admitted:
				// Back in its queue; only its dead letter is still listed (a replay of it
				// within JetStream's duplicate window is deduplicated).
				a.Logger.Warn("admin: dead letter replayed but still listed", "id", d.Message.ID, "err", err)
				replayed++
				keptInRow = 0
			case err != nil:
				// A store failing: stop here, before this letter, so that next retries it.
				stopErr = err
				break pages
			case res.Outcome != retry.Admitted:
				kept++
				keptInRow++
			default:
				replayed++
				keptInRow = 0
			}
			cursor = d.Seq
			a.hooks.runN(&a.hooks.afterReplay, handled())
		}
		if len(page) == 0 || next == 0 {
			exhausted = true
			break
		}
	}
	counts := map[string]any{"queue": name, "replayed": replayed, "kept": kept, "failed": failed}
	nextURL := func(limit int) string {
		return "/v1/admin/dead/replay?" + url.Values{"queue": {name}, "after": {strconv.FormatUint(cursor, 10)}, "limit": {strconv.Itoa(limit)}}.Encode()
	}
	if stopErr != nil {
		if handled() == 0 {
			httpx.WriteProblem(w, httpx.Unavailable("", "no dead letter was replayed: "+stopErr.Error(), time.Second))
			return
		}
		a.Logger.Error("admin: replay of dead letters stopped part way", "queue", name, "replayed", replayed, "kept", kept, "failed", failed, "err", stopErr)
		a.record(r, audit.Record{Action: audit.ActionReplayAll, Queue: name,
			After: map[string]any{"replayed": replayed, "kept": kept, "failed": failed}, Result: "partial: " + stopErr.Error()})
		httpx.WriteProblem(w, httpx.PartiallyApplied(fmt.Sprintf("%d dead letters replayed, %d kept, %d failed, then the store failed (%v): "+
			"the letters after the cursor of next are untouched; POST next to continue", replayed, kept, failed, stopErr),
			counts, nextURL(limit-handled())))
		return
	}
	a.record(r, audit.Record{Action: audit.ActionReplayAll, Queue: name,
		After: map[string]any{"replayed": replayed, "kept": kept, "failed": failed}, Result: "ok"})
	if !exhausted {
		counts["next"] = nextURL(limit)
	}
	httpx.WriteJSON(w, http.StatusOK, counts)
}

// writeChangeError answers a change (a purge) the queue store failed: a 503 ("nothing
// done, try again") when the store refused it or it was never sent; a request that timed
// out once sent may have been carried out, so that is a 500 #outcome-unknown.
func writeChangeError(w http.ResponseWriter, err error) {
	if !status.MayHaveActed(err) {
		httpx.WriteProblem(w, httpx.Unavailable("", err.Error(), time.Second))
		return
	}
	httpx.WriteProblem(w, httpx.OutcomeUnknown("the change was sent to the queue store (NATS JetStream) and its answer was lost ("+err.Error()+
		"): it may have been made. Read the queue or key to see"))
}

// adminHooks are test seams: each, when set, runs at its point of a handler, so that a
// test can make a store fail for real (stop NATS) right after a change was made — the
// moment the #stored-not-applied and #partially-applied answers exist for. Unset in
// production; atomic so that a test may set them while the server runs.
type adminHooks struct {
	afterStore  atomic.Pointer[func(int)] // patchQueue: the override is stored, the stream not yet updated
	afterReplay atomic.Pointer[func(int)] // replayAllDead: after the n-th letter handled (n ≥ 1)
	afterAdmit  atomic.Pointer[func(int)] // a replay: the letter is back in its queue, its dead letter not yet removed
}

// SetHooks sets the test seams (see adminHooks): afterStore runs once a PATCH's override
// is stored, afterReplay after each dead letter a replay-all handled (with their count),
// afterAdmit once a replayed dead letter is back in its queue, before its dead letter is
// removed. nil leaves a hook as it is. Tests only.
func (a *Admin) SetHooks(afterStore func(), afterReplay func(n int), afterAdmit func()) {
	if afterStore != nil {
		f := func(int) { afterStore() }
		a.hooks.afterStore.Store(&f)
	}
	if afterReplay != nil {
		a.hooks.afterReplay.Store(&afterReplay)
	}
	if afterAdmit != nil {
		g := func(int) { afterAdmit() }
		a.hooks.afterAdmit.Store(&g)
	}
}

func (h *adminHooks) run(p *atomic.Pointer[func(int)]) { h.runN(p, 0) }

func (h *adminHooks) runN(p *atomic.Pointer[func(int)], n int) {
	if f := p.Load(); f != nil {
		(*f)(n)
	}
}

// queryInt reads the query parameter name as a whole number from 1 to most (def when
// absent); otherwise it answers 400 naming the parameter and reports false.
// queryCursor reads the optional query parameter after, a page cursor (0 when absent),
// answering 400 with detail when it is not one.
func queryCursor(w http.ResponseWriter, q url.Values, detail string) (uint64, bool) {
	v := q.Get("after")
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		httpx.WriteProblem(w, httpx.BadRequest("after", detail))
		return 0, false
	}
	return n, true
}

func queryInt(w http.ResponseWriter, q url.Values, name string, def, most int) (int, bool) {
	v := q.Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		httpx.WriteProblem(w, httpx.BadRequest(name, "must be 1 to "+strconv.Itoa(most)))
		return 0, false
	}
	return n, true
}

// drainedMeter turns samples of a rule's "messages that ever left the queue" (stream
// LastSeq − Msgs) into a rate over about the last minute, without any cost on the drain
// path: each GET adds a sample, samples older than a minute are dropped.
type drainedMeter struct {
	mu      sync.Mutex
	samples map[string][]drainSample
}

type drainSample struct {
	at   time.Time
	left uint64
}

func (d *drainedMeter) rate(rule string, left uint64, now time.Time) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.samples == nil {
		d.samples = map[string][]drainSample{}
	}
	s := append(d.samples[rule], drainSample{now, left})
	for len(s) > 1 && now.Sub(s[0].at) > time.Minute {
		s = s[1:]
	}
	if len(s) > 120 {
		s = s[len(s)-120:]
	}
	d.samples[rule] = s
	first := s[0]
	el := now.Sub(first.at).Seconds()
	if el < 1 || left < first.left {
		return 0
	}
	return float64(left-first.left) / el
}

// record writes an operator change to the audit trail (and the log), naming the token
// that made it.
func (a *Admin) record(r *http.Request, rec audit.Record) {
	rec.Actor, rec.Scope = a.caller(r.Context())
	rec.Remote = r.RemoteAddr
	if a.Audit == nil {
		a.Logger.Info("audit: "+rec.Action, "actor", rec.Actor, "scope", rec.Scope, "queue", rec.Queue, "target", rec.Target,
			"before", rec.Before, "after", rec.After, "result", rec.Result)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	_ = a.Audit.Append(ctx, rec) // a failure is logged by Append; the change itself is done
}

// patchAction names what a PATCH did.
func patchAction(p overrides.Patch) string {
	switch {
	case p.Reset:
		return audit.ActionReset
	case p.Outflow == nil && p.TotalOutflow == nil && p.Capacity == nil && p.Unset&^overrides.FieldPaused == 0:
		if p.Paused != nil && *p.Paused {
			return audit.ActionPause
		}
		return audit.ActionResume
	default:
		return audit.ActionTune
	}
}

// overrideView is an override as the audit trail shows it: the overridden fields only.
func overrideView(o overrides.Override) map[string]any {
	v := map[string]any{}
	if o.Outflow != nil {
		v["outflow"] = overrides.EncodeRate(*o.Outflow)
	}
	if o.TotalOutflow != nil {
		v["total_outflow"] = overrides.EncodeRate(*o.TotalOutflow)
	}
	if o.Capacity != nil {
		v["capacity"] = *o.Capacity
	}
	if o.Paused != nil {
		v["paused"] = *o.Paused
	}
	return v
}

// whoami answers the calling token's name and scope, so the console can show read-only
// controls to a read token.
func (a *Admin) whoami(w http.ResponseWriter, r *http.Request) {
	name, scope := a.caller(r.Context())
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"name": name, "scope": scope})
}

// caller is Caller's answer for ctx; "", "" without Caller.
func (a *Admin) caller(ctx context.Context) (name, scope string) {
	if a.Caller == nil {
		return "", ""
	}
	return a.Caller(ctx)
}

// listAudit answers the audit trail, newest first, ?limit (default 100, at most 1000) per
// page and ?before (the cursor of the previous page's next).
func (a *Admin) listAudit(w http.ResponseWriter, r *http.Request) {
	if a.Audit == nil {
		httpx.WriteProblem(w, httpx.NotFound("", "the audit trail is not kept by this process"))
		return
	}
	q := r.URL.Query()
	limit, ok := queryInt(w, q, "limit", 100, 1000)
	if !ok {
		return
	}
	var before uint64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			httpx.WriteProblem(w, httpx.BadRequest("before", "must be the cursor of a previous page"))
			return
		}
		before = n
	}
	recs, next, err := a.Audit.List(r.Context(), limit, before)
	if err != nil {
		httpx.WriteProblem(w, httpx.Unavailable("", err.Error(), time.Second))
		return
	}
	resp := map[string]any{"records": recs}
	if next > 0 {
		resp["next"] = "/v1/admin/audit?" + url.Values{"before": {strconv.FormatUint(next, 10)}, "limit": {strconv.Itoa(limit)}}.Encode()
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

// ruleOfID names the rule a message id was issued for ("" when the id names none in force).
func (a *Admin) ruleOfID(id string) string {
	ref, ok := queue.ParseID(id)
	if !ok {
		return ""
	}
	for _, rule := range a.Rules().Rules() {
		if queue.RuleToken(rule.Name) == ref.RuleToken {
			return rule.Name
		}
	}
	return ""
}

// readPatch reads a PATCH body (a JSON merge patch, at most 64 KiB), answering the problem
// itself when the media type is wrong or the body cannot be read.
func readPatch(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if p := checkPatchType(r); p != nil {
		httpx.WriteProblem(w, *p)
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		httpx.WriteProblem(w, httpx.BadRequest("", "could not read the body"))
		return nil, false
	}
	return body, true
}
