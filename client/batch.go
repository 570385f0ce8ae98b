package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// BatchItem is one message of SubmitBatch.
type BatchItem struct {
	Domain     string
	Descriptor []Entry
	Payload    any // as Submit's payload
	// IdempotencyKey makes the item's resubmission safe; a UUIDv7 is generated when empty.
	IdempotencyKey string
}

// BatchResult is one item's outcome: exactly one of Submission (Duplicate set for a
// repeat of its idempotency key) and Err is set. Err is a *SubmitError carrying the item's
// idempotency key (IdempotencyKeyOf) and wrapping the cause — a *ProblemError (an
// *OverLimitError for a 429) that matches the package's sentinels as Submit's errors do,
// or, when the batch's request failed as a whole, that failure (see BatchError).
type BatchResult struct {
	Submission *Submission
	Err        error
}

// SubmitBatch submits many messages in one request per round (POST /v1/messages with a
// JSON array; the server takes at most 500 by default, -max-batch). Each item is answered
// on its own, in order. Items refused with 429 (when over-limit retries are on, the
// default) or 503 are sent again, with their idempotency keys, once their own Retry-After
// has passed: each goes again no sooner than its own, those due at the same time together,
// and an item never before an earlier item of its queue (same domain and descriptor)
// still waiting — it goes with it, after it, so a key's messages keep their order —
// until every item has a final answer,
// the call's attempts are used up, its waits would pass WithMaxRetryWait, or a
// Retry-After exceeds WithMaxRetryAfter; items refused with 503 are not sent again later
// than 100 s after (see Idempotency in the package doc). The bounds are the call's, as for
// Submit: every request of every round, retries of a failed request included, counts
// against MaxAttempts, and every sleep against MaxRetryWait. A
// request that fails as a whole (connection, 503 of the batch) is retried as Submit is:
// the idempotency keys make a repeat harmless, and items stored before the failure
// answer 200.
//
// The error is nil when the batch was answered; per-item failures are in the results. When
// the context ends while waiting to send items again, the error is a *BatchError wrapping
// the context's error, and those items keep their last refusal.
// When a request fails as a whole and its retries are used up (the connection cut after
// the request was sent, a 503 of the batch), the error is a *BatchError holding every
// item's idempotency key, and each item without a final answer has an Err carrying its
// key: some of them may have been stored, so resubmit them with those keys
// (BatchItem.IdempotencyKey), never new ones. The results are always returned, one per
// item, once anything was sent.
func (c *Client) SubmitBatch(ctx context.Context, items []BatchItem) ([]BatchResult, error) {
	if len(items) == 0 {
		return nil, invalidf("SubmitBatch: no items")
	}
	bodies := make([][]byte, len(items))
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.IdempotencyKey
		if keys[i] == "" {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("client: idempotency key: %w", err)
			}
			keys[i] = id.String()
		}
		b, err := submitBody(it.Domain, it.Descriptor, it.Payload, keys[i])
		if err != nil {
			return nil, fmt.Errorf("client: item %d: %w", i, err)
		}
		bodies[i] = b
	}
	results := make([]BatchResult, len(items))
	pending := make([]int, len(items))
	for i := range pending {
		pending[i] = i
	}
	// notBefore is when a refused item may go again (its own Retry-After), waiting says it
	// will; sends counts each item's requests (its back-off and Submission.Attempts).
	notBefore := make([]time.Time, len(items))
	waiting := make([]bool, len(items))
	sends := make([]int, len(items))
	queueOf := make([]string, len(items))
	for i, it := range items {
		queueOf[i] = batchQueue(it)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	// One budget for every request of the call, its rounds' and their retries': at most
	// MaxAttempts requests and MaxRetryWait of sleep in all.
	b := &budget{}
	for len(pending) > 0 {
		sent := c.now()
		var body bytes.Buffer
		body.WriteByte('[')
		for n, i := range pending {
			if n > 0 {
				body.WriteByte(',')
			}
			body.Write(bytes.TrimRight(bodies[i], "\n"))
			sends[i]++
		}
		body.WriteByte(']')
		resp, err := c.do(ctx, call{
			method:  http.MethodPost,
			path:    "/v1/messages",
			body:    body.Bytes(),
			header:  http.Header{"Content-Type": {"application/json"}},
			conn:    anyTransient,
			retry:   retryUnavailable,
			ok:      is2xx,
			resend:  true,
			budget:  b,
			mutates: true,
		})
		if err != nil {
			return results, batchFailed(results, pending, keys, err)
		}
		var answer struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(resp.body, &answer); err != nil || len(answer.Items) != len(pending) {
			// Accepted, refused? Nobody can say which items are stored: resubmitting them with
			// their keys tells.
			return results, batchFailed(results, pending, keys, &OutcomeUnknownError{Method: http.MethodPost, Path: "/v1/messages",
				Attempts: b.attempts, Err: fmt.Errorf("a %d answer to a batch of %d that could not be read: %v", resp.status, len(pending), err)})
		}
		for n, i := range pending {
			r, retryIn := c.batchItemResult(answer.Items[n], keys[i], sends[i])
			results[i] = r
			if errors.Is(r.Err, ErrUnavailable) && b.landedAt.IsZero() {
				b.landedAt = sent // a 503 item may have been stored: the duplicate window runs
			}
			if retryIn < 0 || b.attempts >= c.maxAttempts {
				continue
			}
			notBefore[i], waiting[i] = c.now().Add(retryIn), true
		}
		// The next round: the items whose own Retry-After has passed, none sooner. An item
		// waits, too, for every earlier item of its queue (same domain and descriptor) still
		// waiting, and goes with it, in the given order: a key's messages are resent in the
		// order they were given.
		wake, ok := batchWake(notBefore, waiting, queueOf)
		if !ok {
			break
		}
		wait := max(wake.Sub(c.now()), 0)
		if dl, ok := ctx.Deadline(); ok && c.now().Add(wait).After(dl) || b.waited+wait > c.maxRetryWait ||
			!b.landedAt.IsZero() && c.now().Add(wait).Sub(b.landedAt) > resendWindow {
			break // the last answers say more than a deadline error would
		}
		if err := c.sleep(ctx, wait); err != nil {
			var n int
			for _, w := range waiting {
				if w {
					n++
				}
			}
			return results, &BatchError{IdempotencyKeys: append([]string(nil), keys...),
				Err: fmt.Errorf("sluice: POST /v1/messages (batch): stopped waiting to send %d items again: %w", n, err)}
		}
		b.waited += wait
		// At wake at least: the sleep was that long, even by a clock that lags.
		now := c.now()
		if now.Before(wake) {
			now = wake
		}
		pending = batchDue(notBefore, waiting, queueOf, now)
	}
	return results, nil
}

// batchQueue names the queue an item lands in as far as the client can tell: its domain
// and descriptor (the rule decides which entries make the key, so items that differ only
// in an entry the rule ignores are taken for two queues).
func batchQueue(it BatchItem) string {
	b, _ := json.Marshal(struct {
		D string
		E []Entry
	}{it.Domain, it.Descriptor})
	return string(b)
}

// batchEffective is when each waiting item may go: its own notBefore, or that of an earlier
// item of its queue still waiting, whichever is later (zero for items not waiting).
func batchEffective(notBefore []time.Time, waiting []bool, queueOf []string) []time.Time {
	eff := make([]time.Time, len(notBefore))
	last := map[string]time.Time{}
	for i := range notBefore {
		if !waiting[i] {
			continue
		}
		t := notBefore[i]
		if l, ok := last[queueOf[i]]; ok && l.After(t) {
			t = l
		}
		eff[i], last[queueOf[i]] = t, t
	}
	return eff
}

// batchWake is the earliest time a waiting item may go; false when none waits.
func batchWake(notBefore []time.Time, waiting []bool, queueOf []string) (time.Time, bool) {
	var wake time.Time
	found := false
	for i, t := range batchEffective(notBefore, waiting, queueOf) {
		if waiting[i] && (!found || t.Before(wake)) {
			wake, found = t, true
		}
	}
	return wake, found
}

// batchDue takes the waiting items that may go at now off the wait, in their order.
func batchDue(notBefore []time.Time, waiting []bool, queueOf []string, now time.Time) []int {
	var due []int
	for i, t := range batchEffective(notBefore, waiting, queueOf) {
		if waiting[i] && !now.Before(t) {
			waiting[i] = false
			due = append(due, i)
		}
	}
	return due
}

// batchFailed records err, the failure of a whole request, on every item still pending
// (each with its key), and returns the *BatchError for it.
func batchFailed(results []BatchResult, pending []int, keys []string, err error) error {
	for _, i := range pending {
		results[i] = BatchResult{Err: &SubmitError{IdempotencyKey: keys[i], Err: err}}
	}
	return &BatchError{IdempotencyKeys: append([]string(nil), keys...), Err: err}
}

// batchItemResult reads one item's answer; retryIn ≥ 0 when the item is worth sending
// again after that long (a 429 with over-limit retries on, or a 503), -1 otherwise.
func (c *Client) batchItemResult(raw json.RawMessage, key string, sends int) (BatchResult, time.Duration) {
	var head struct {
		Status int `json:"status"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return BatchResult{Err: &SubmitError{IdempotencyKey: key, Err: fmt.Errorf("sluice: batch item: %w", err)}}, -1
	}
	if head.Status/100 == 2 {
		s := &Submission{}
		if err := json.Unmarshal(raw, s); err != nil {
			return BatchResult{Err: &SubmitError{IdempotencyKey: key, Err: fmt.Errorf("sluice: batch item: %w", err)}}, -1
		}
		s.Duplicate = head.Status == http.StatusOK
		s.IdempotencyKey = key
		s.Attempts = sends
		if s.ID != "" {
			s.Location = "/v1/messages/" + s.ID
		}
		return BatchResult{Submission: s}, -1
	}
	// The item's problem reads as a whole answer's would (errorFor: sentinels, Retry-After).
	err := c.errorFor(&response{status: head.Status, body: raw, attempts: sends,
		header: http.Header{"Content-Type": {"application/problem+json"}}})
	retry := head.Status == http.StatusServiceUnavailable || head.Status == http.StatusTooManyRequests && c.retryOverLim
	var pe *ProblemError
	if !retry || !errors.As(err, &pe) || pe.RetryAfter > c.maxRetryAfter {
		return BatchResult{Err: &SubmitError{IdempotencyKey: key, Err: err}}, -1 // final, or "much later": the caller's decision
	}
	ra := pe.RetryAfter
	return BatchResult{Err: &SubmitError{IdempotencyKey: key, Err: err}}, max(ra, c.backoff(sends))
}
