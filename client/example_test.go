package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluice-io/sluice/client"
)

// exampleIngress stands in for a sluice ingress in the examples: it sends the answers
// API.md documents, so the examples run without NATS or Redis. Point client.New at a real
// ingress ("http://localhost:8080" after `make run`) and the code is the same.
func exampleIngress() *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Descriptor []client.Entry `json:"descriptor"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		h := w.Header()
		h.Set("RateLimit-Policy", `"orders-per-merchant";q=100;w=10`)
		h.Set("X-RateLimit-Limit", "100")
		if req.Descriptor[0].Value == "m-full" {
			h.Set("Content-Type", "application/problem+json")
			h.Set("Retry-After", "3")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", "1")
			h.Set("RateLimit", `"orders-per-merchant";r=0;t=1`)
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"type":"https://sluice.dev/problems#quota-exceeded","title":"Too Many Requests","status":429,"detail":"the queue of key m-full is full","violated-policies":["orders-per-merchant"],"retry_after":3}`)
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("Location", "/v1/messages/0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b")
		h.Set("X-RateLimit-Remaining", "96")
		h.Set("X-RateLimit-Reset", "1")
		h.Set("RateLimit", `"orders-per-merchant";r=96;t=1`)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b","state":"queued","depth":4,"capacity":100,"eta":"2026-11-22T05:00:00.4Z"}`)
	})
	mux.HandleFunc("GET /v1/messages/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"domain":"orders","rule":"orders-per-merchant","key":"m-42","state":"delivered","attempts":1,"created_at":"2026-11-22T05:00:00Z","updated_at":"2026-11-22T05:00:00.4Z","last_error":""}`, r.PathValue("id"))
	})
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
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
	})
	admin := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer example-token" {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"type":"https://sluice.dev/problems#unauthorized","title":"Unauthorized","status":401}`)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			h(w, r)
		}
	}
	mux.HandleFunc("PATCH /v1/admin/queues/{name}", admin(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Outflow client.Rate `json:"outflow"`
		}
		json.NewDecoder(r.Body).Decode(&p)
		fmt.Fprintf(w, `{"name":%q,"capacity":100,"outflow":{"unit":%q,"requests_per_unit":%d},"paused":false,"depth":1234,"active_keys":56,"parked":0,"dead":0,"drained_per_second":560}`,
			r.PathValue("name"), p.Outflow.Unit, p.Outflow.RequestsPerUnit)
	}))
	mux.HandleFunc("GET /v1/admin/queues/{name}/keys/{key}", admin(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"queue":%q,"key":%q,"depth":4,"next_dispatch_at":"2026-11-22T05:00:00.1Z"}`, r.PathValue("name"), r.PathValue("key"))
	}))
	mux.HandleFunc("GET /v1/admin/dead", admin(func(w http.ResponseWriter, r *http.Request) {
		// Three dead letters, two a page; the cursor is the last one's sequence.
		all := []string{"0193a1b2-0000-7000-8000-000000000001", "0193a1b2-0000-7000-8000-000000000002", "0193a1b2-0000-7000-8000-000000000003"}
		from := 0
		fmt.Sscan(r.URL.Query().Get("after"), &from)
		to := min(from+2, len(all))
		var msgs []string
		for _, id := range all[from:to] {
			msgs = append(msgs, fmt.Sprintf(`{"id":%q,"rule":"orders-per-merchant","key":"m-42","state":"dead","reason":"sink answered 422","attempts":1,"last_error":"422 Unprocessable Entity","created_at":"2026-11-22T05:00:00Z","updated_at":"2026-11-22T05:00:01Z"}`, id))
		}
		next := ""
		if to < len(all) {
			next = fmt.Sprintf(`,"next":"/v1/admin/dead?after=%d&limit=2&queue=orders-per-merchant"`, to)
		}
		fmt.Fprintf(w, `{"messages":[%s]%s}`, strings.Join(msgs, ","), next)
	}))
	mux.HandleFunc("POST /v1/admin/dead/{id}/replay", admin(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/v1/messages/"+r.PathValue("id"))
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, r.PathValue("id"))
	}))
	return httptest.NewServer(mux)
}

func ExampleClient_Submit() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	order := map[string]any{"order_id": 991, "total": "12.50"}
	sub, err := c.Submit(context.Background(), "orders", []client.Entry{{Key: "merchant_id", Value: "m-42"}}, order)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sub.State, sub.Depth, "of", sub.Capacity, "at", sub.Location)
	fmt.Println("places left:", sub.RateLimit.Remaining, "policy:", sub.RateLimit.PolicyName())
	// Output:
	// queued 4 of 100 at /v1/messages/0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b
	// places left: 96 policy: orders-per-merchant
}

// With over-limit retries off, a full queue comes back at once as an *OverLimitError, for
// a caller that passes the refusal on (and its Retry-After) to its own caller.
func ExampleClient_Submit_overLimit() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithOverLimitRetry(false))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Submit(context.Background(), "orders", []client.Entry{{Key: "merchant_id", Value: "m-full"}}, json.RawMessage(`{"order_id":992}`),
		client.WithIdempotencyKey("order-992"))
	var ol *client.OverLimitError
	if errors.As(err, &ol) {
		fmt.Println("over limit:", ol.ViolatedPolicies, "retry after", ol.RetryAfter, "limit", ol.Limit)
	}
	fmt.Println(client.IsOverLimit(err), errors.Is(err, client.ErrOverLimit))
	// Output:
	// over limit: [orders-per-merchant] retry after 3s limit 100
	// true true
}

func ExampleClient_Status() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(context.Background(), "0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.State, st.Final(), st.Rule, st.Key, st.UpdatedAt.Sub(st.CreatedAt))
	// Output:
	// delivered true orders-per-merchant m-42 400ms
}

// A check is a question: an over-limit answer is a result, not an error.
func ExampleClient_Check() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	login := [][]client.Entry{{{Key: "auth_type", Value: "login"}}}
	for _, hits := range []int{1, 6} {
		r, err := c.Check(context.Background(), "auth", login, hits)
		if err != nil {
			log.Fatal(err)
		}
		s := r.Statuses[0]
		fmt.Println(r.OverallCode, r.OK(), s.LimitRemaining, "of", s.CurrentLimit.RequestsPerUnit, "per", s.CurrentLimit.Unit, "reset in", s.DurationUntilReset)
	}
	// Output:
	// OK true 4 of 5 per MINUTE reset in 42s
	// OVER_LIMIT false 0 of 5 per MINUTE reset in 42s
}

func ExampleAdmin_Tune() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithAdminToken("example-token"))
	if err != nil {
		log.Fatal(err)
	}
	q, err := c.Admin().Tune(context.Background(), "orders-per-merchant", client.Patch{
		Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 20},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(q.Name, q.Outflow.RequestsPerUnit, "per", q.Outflow.Unit)
	// Output:
	// orders-per-merchant 20 per second
}

// Keys are data: any UTF-8 key, slashes and emoji included, addresses exactly its queue.
func ExampleAdmin_Key() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithAdminToken("example-token"))
	if err != nil {
		log.Fatal(err)
	}
	k, err := c.Admin().Key(context.Background(), "orders-per-merchant", "shop/🙂 7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(k.Key, k.Depth, k.NextDispatchAt.Format(time.RFC3339Nano))

	anonymous, err := client.New(srv.URL) // no admin token
	if err != nil {
		log.Fatal(err)
	}
	_, err = anonymous.Admin().Key(context.Background(), "orders-per-merchant", "m-42")
	fmt.Println(errors.Is(err, client.ErrUnauthorized))
	// Output:
	// shop/🙂 7 4 2026-11-22T05:00:00.1Z
	// true
}

// Page through a queue's dead letters and replay each (the sink had refused them; it has
// been fixed since). A replayed message keeps its id, so the sink sees the same
// Idempotency-Key.
func ExampleAdmin_DeadPage() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithAdminToken("example-token"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	q := client.DeadQuery{Queue: "orders-per-merchant", Limit: 2}
	for {
		page, err := c.Admin().DeadPage(ctx, q)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range page.Messages {
			sub, err := c.Admin().Replay(ctx, m.ID)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println(m.ID, m.Reason, "→", sub.State)
		}
		if q.After = page.Next; q.After == "" {
			break
		}
	}
	// Output:
	// 0193a1b2-0000-7000-8000-000000000001 sink answered 422 → queued
	// 0193a1b2-0000-7000-8000-000000000002 sink answered 422 → queued
	// 0193a1b2-0000-7000-8000-000000000003 sink answered 422 → queued
}
