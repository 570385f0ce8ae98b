package submit

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/request"
	"github.com/sluice-io/sluice/internal/telemetry"
)

// DefaultMaxBatch is the most messages one batch submission may carry.
const DefaultMaxBatch = 500

// The slices of a batch's items, kept for the next batches (admit.SlicePool).
var (
	requestPool    admit.SlicePool[request.Submit]
	answerPool     admit.SlicePool[byte]
	outcomePool    admit.SlicePool[outcome]
	submissionPool admit.SlicePool[submission]
	admissionPool  admit.SlicePool[admit.BatchAdmission]
)

// batchConcurrency bounds the keys of one batch whose items make round trips of their own
// (scheduled items, repeats of an idempotency key) at once.
const batchConcurrency = 64

// handleBatch admits the items of a batch submission. Every item is answered on its own,
// in order (one bad item never fails the others), with the answer a submission of it alone
// would get. The items to admit now are admitted together (admit.AdmitBatch: one group of
// Redis counts, every message published asynchronously, every PubAck waited for); the items
// of one key enter its queue in the order given. The answer is 200 once every item has its
// answer: an item answered 202 is stored, and a client that lost the answer retries the
// batch with the same idempotency keys to learn which (repeats answer 200). Authorization
// is the exception: with -submit-tokens, an item the token may not submit (another domain)
// refuses the whole batch, 403 naming the item, before anything is admitted.
func (s *Service) handleBatch(w http.ResponseWriter, r *http.Request, body []byte) {
	if len(r.Header.Values("Idempotency-Key")) > 0 { // even empty
		httpx.WriteProblem(w, httpx.BadRequest("Idempotency-Key", "a batch takes an idempotency_key per item, not the header"))
		return
	}
	reqs, problems, p := request.DecodeBatch(body, s.cfg.MaxBatch, &requestPool)
	if p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	defer requestPool.Put(reqs)
	ctx := r.Context()
	// Every item passes the authorization of a single submission, before any is admitted:
	// one item a token may not submit refuses the whole batch (403 naming the item), so
	// nothing of a batch that was not authorized whole is stored. An item that does not
	// decode is not looked at: it is answered 400 and stored neither way.
	for i := range reqs {
		if problems[i] != nil {
			continue
		}
		if p := s.submitRefused(ctx, reqs[i].Domain, i); p != nil {
			httpx.WriteProblem(w, *p)
			return
		}
	}
	items := outcomePool.Get(len(reqs))
	defer outcomePool.Put(items)
	subs := submissionPool.Get(len(reqs))
	defer submissionPool.Put(subs)
	adms := admissionPool.Get(len(reqs))[:0]
	defer func() { admissionPool.Put(adms) }()
	admOf := make([]int, len(reqs)) // items[i]'s index in adms
	var scheduled []int
	traceParent, traceState := telemetry.FromHTTP(r.Header)
	depth := request.PrefersDepth(r.Header)
	for i := range reqs {
		req := &reqs[i]
		req.Depth = depth
		if p := problems[i]; p != nil {
			items[i] = problemItem(*p, i)
			continue
		}
		if p := req.Validate(); p != nil {
			items[i] = problemItem(*p, i)
			continue
		}
		req.TraceParent, req.TraceState = traceParent, traceState
		sub, o, ok := s.prepare(ctx, req)
		switch {
		case !ok:
			items[i] = batchOutcome(o, i)
		case !sub.at.IsZero():
			subs[i] = sub
			scheduled = append(scheduled, i)
		default:
			subs[i] = sub
			admOf[i] = len(adms)
			adms = append(adms, admit.BatchAdmission{Rule: sub.rule, Msg: sub.msg, Options: sub.options()})
		}
	}
	s.eachKey(reqs, scheduled, func(i int) {
		items[i] = batchOutcome(s.schedule(ctx, &subs[i]), i)
	})
	if len(adms) > 0 { // none when every item was answered already (refused, scheduled)
		s.cfg.Admitter.AdmitBatch(ctx, adms)
	}
	var repeats []int // repeats of an idempotency key: their owner is looked up
	for i := range subs {
		if subs[i].req == nil || !subs[i].at.IsZero() {
			continue
		}
		if a := &adms[admOf[i]]; a.Err == nil && a.Result.Decision == admit.KeyTaken {
			repeats = append(repeats, i)
			continue
		}
		items[i] = s.concludeItem(ctx, &subs[i], &adms[admOf[i]], i)
	}
	s.eachKey(reqs, repeats, func(i int) { items[i] = s.concludeItem(ctx, &subs[i], &adms[admOf[i]], i) })
	writeBatch(w, items)
}

// concludeItem is item i's answer from its admission.
func (s *Service) concludeItem(ctx context.Context, sub *submission, a *admit.BatchAdmission, i int) outcome {
	return batchOutcome(s.conclude(ctx, sub, a.Result, a.Err), i)
}

// eachKey runs f on the items at idx: those of one domain and descriptor (one queue key)
// one after the other in their order, different keys concurrently (at most
// batchConcurrency at once). It returns when every f has returned.
func (s *Service) eachKey(reqs []request.Submit, idx []int, f func(i int)) {
	if len(idx) == 0 {
		return
	}
	groups := map[string][]int{}
	var order []string
	for _, i := range idx {
		k := groupKey(&reqs[i])
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	sem := make(chan struct{}, batchConcurrency)
	var wg sync.WaitGroup
	for _, k := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, i := range groups[k] {
				f(i)
			}
		})
	}
	wg.Wait()
}

// batchOutcome is a submission's answer as item i of a batch.
func batchOutcome(o outcome, i int) outcome {
	if o.problem != nil {
		return problemItem(*o.problem, i)
	}
	return o
}

// problemItem is an item's problem, its field prefixed with the item's index.
func problemItem(p httpx.Problem, i int) outcome {
	prefix := "[" + strconv.Itoa(i) + "]"
	if p.Field != "" {
		p.Field = prefix + "." + p.Field
	} else if p.Status == http.StatusBadRequest {
		p.Field = prefix
	}
	return problemOutcome(p)
}

// groupKey identifies an item's queue key before matching: its domain and descriptor.
func groupKey(req *request.Submit) string {
	var b []byte
	b = strconv.AppendQuote(b, req.Domain)
	for _, e := range req.Descriptor {
		b = strconv.AppendQuote(b, e.Key)
		b = strconv.AppendQuote(b, e.Value)
	}
	return string(b)
}

// writeBatch answers a batch: 200 with
//
//	{"accepted": 202s and 200s (repeats), "refused": the others, "items": [...]}
//
// one item per submission in order, each its status with the fields of its answer (a
// submission's 202 or 200 body, or its problem). It is written directly, as WriteQueued
// writes a single answer: encoding/json's reflection over every item was a tenth of a
// batch item's CPU.
func writeBatch(w http.ResponseWriter, items []outcome) {
	accepted, depths := 0, false
	for i := range items {
		if items[i].status/100 == 2 {
			accepted++
		}
		depths = depths || (items[i].queued && items[i].depth > 0)
	}
	if depths {
		w.Header()["Preference-Applied"] = []string{request.PreferDepth}
	}
	b := answerPool.Get(64 + 200*len(items))[:0]
	defer func() { answerPool.Put(b) }()
	b = append(b, `{"accepted":`...)
	b = strconv.AppendInt(b, int64(accepted), 10)
	b = append(b, `,"refused":`...)
	b = strconv.AppendInt(b, int64(len(items)-accepted), 10)
	b = append(b, `,"items":[`...)
	for i := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendItem(b, &items[i])
	}
	b = append(b, "]}\n"...)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// appendItem appends one item of a batch's answer: a problem as itself (it carries its
// status), any other answer as {"status":…} followed by submitResponse's fields.
func appendItem(b []byte, o *outcome) []byte {
	if o.problem != nil {
		raw, err := json.Marshal(o.problem)
		if err != nil { // a Problem is strings and numbers: never
			raw = []byte(`{"status":500}`)
		}
		return append(b, raw...)
	}
	r := &o.resp
	b = append(b, `{"status":`...)
	b = strconv.AppendInt(b, int64(o.status), 10)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, r.ID)
	if r.State != "" {
		b = append(b, `,"state":`...)
		b = appendJSONString(b, r.State)
	}
	if o.queued {
		if o.depth > 0 { // known: the claim engine's count, or asked for (Prefer: return=representation)
			b = append(b, `,"depth":`...)
			b = strconv.AppendInt(b, o.depth, 10)
		}
		b = append(b, `,"capacity":`...)
		b = strconv.AppendInt(b, o.cap, 10)
		if !o.eta.IsZero() {
			b = append(b, `,"eta":"`...)
			b = o.eta.UTC().AppendFormat(b, time.RFC3339Nano)
			b = append(b, '"')
		}
	} else if r.ETA != "" {
		b = append(b, `,"eta":`...)
		b = appendJSONString(b, r.ETA)
	}
	if r.RetryAt != "" {
		b = append(b, `,"retry_at":`...)
		b = appendJSONString(b, r.RetryAt)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it: quoted as it is when it holds only
// printable ASCII that needs no escape (ids, states, times), through json.Marshal otherwise.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			raw, _ := json.Marshal(s)
			return append(b, raw...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
