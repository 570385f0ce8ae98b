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
// has passed — the items of a round that came back together wait for the earliest of
// them, and each goes again no sooner than its own — until every item has a final answer,
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
	notBefore := make([]time.Time, len(items))
	// One budget for every request of the call, its rounds' and their retries': at most
	// MaxAttempts requests and MaxRetryWait of sleep in all.
	b := &budget{}
	for round := 1; len(pending) > 0; round++ {
		sent := c.now()
		var body bytes.Buffer
		body.WriteByte('[')
		for n, i := range pending {
			if n > 0 {
				body.WriteByte(',')
			}
			body.Write(bytes.TrimRight(bodies[i], "\n"))
		}
		body.WriteByte(']')
		resp, err := c.do(ctx, call{
			method: http.MethodPost,
			path:   "/v1/messages",
			body:   body.Bytes(),
			header: http.Header{"Content-Type": {"application/json"}},
			conn:   anyTransient,
			retry:  retryUnavailable,
			ok:     is2xx,
			resend: true,
			budget: b,
		})
		if err != nil {
			return results, batchFailed(results, pending, keys, err)
		}
		var answer struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(resp.body, &answer); err != nil || len(answer.Items) != len(pending) {
			return results, batchFailed(results, pending, keys,
				fmt.Errorf("sluice: POST /v1/messages (batch of %d): unexpected answer: %v", len(pending), err))
		}
		var again []int
		wait := time.Duration(-1)
		for n, i := range pending {
			r, retryIn := c.batchItemResult(answer.Items[n], keys[i], round)
			results[i] = r
			if errors.Is(r.Err, ErrUnavailable) && b.landedAt.IsZero() {
				b.landedAt = sent // a 503 item may have been stored: the duplicate window runs
			}
			if retryIn < 0 || b.attempts >= c.maxAttempts {
				continue
			}
			notBefore[i] = c.now().Add(retryIn)
			again = append(again, i)
			if wait < 0 || retryIn < wait {
				wait = retryIn
			}
		}
		if len(again) == 0 {
			break
		}
		if dl, ok := ctx.Deadline(); ok && c.now().Add(wait).After(dl) || b.waited+wait > c.maxRetryWait ||
			!b.landedAt.IsZero() && c.now().Add(wait).Sub(b.landedAt) > resendWindow {
			break // the last answers say more than a deadline error would
		}
		if err := c.sleep(ctx, wait); err != nil {
			return results, &BatchError{IdempotencyKeys: append([]string(nil), keys...),
				Err: fmt.Errorf("sluice: POST /v1/messages (batch): stopped waiting to send %d items again: %w", len(again), err)}
		}
		b.waited += wait
		// Only the items whose own Retry-After has passed go now; the others wait a round.
		pending = pending[:0]
		var later []int
		for _, i := range again {
			if !c.now().Before(notBefore[i]) {
				pending = append(pending, i)
			} else {
				later = append(later, i)
			}
		}
		if len(pending) == 0 {
			pending = later
			continue
		}
		pending = append(pending, later...)
	}
	return results, nil
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
func (c *Client) batchItemResult(raw json.RawMessage, key string, round int) (BatchResult, time.Duration) {
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
		s.Attempts = round
		if s.ID != "" {
			s.Location = "/v1/messages/" + s.ID
		}
		return BatchResult{Submission: s}, -1
	}
	// The item's problem reads as a whole answer's would (errorFor: sentinels, Retry-After).
	err := c.errorFor(&response{status: head.Status, body: raw, attempts: round,
		header: http.Header{"Content-Type": {"application/problem+json"}}})
	retry := head.Status == http.StatusServiceUnavailable || head.Status == http.StatusTooManyRequests && c.retryOverLim
	var pe *ProblemError
	if !retry || !errors.As(err, &pe) || pe.RetryAfter > c.maxRetryAfter {
		return BatchResult{Err: &SubmitError{IdempotencyKey: key, Err: err}}, -1 // final, or "much later": the caller's decision
	}
	ra := pe.RetryAfter
	return BatchResult{Err: &SubmitError{IdempotencyKey: key, Err: err}}, max(ra, c.backoff(round))
}
