// Package sinktest is a recording HTTP sink for tests: it records every delivery (time,
// message id, attempt, rule, key, payload) and answers what the test tells it to, so a
// test can assert loss, duplicates, per-key order and outflow spacing.
//
// This package is for tests only; production code never imports it.
package sinktest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Delivery is one request the sink received.
type Delivery struct {
	At       time.Time
	ID       string // Idempotency-Key
	Attempt  int
	Rule     string
	Key      string // decoded Sluice-Key
	Payload  []byte
	Answered int // the status code the sink answered
	Header   http.Header
}

// Sink records deliveries. Answer decides the status code of each; the default answers 200.
type Sink struct {
	URL string

	mu         sync.Mutex
	deliveries []Delivery
	answer     func(Delivery) (code int, retryAfter string)
	notify     chan struct{}
}

// Start starts a sink on a free loopback port; it is closed when the test ends.
func Start(tb testing.TB) *Sink {
	s := &Sink{notify: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Answer sets how the sink answers from now on; nil answers 200.
func (s *Sink) Answer(f func(Delivery) (code int, retryAfter string)) {
	s.mu.Lock()
	s.answer = f
	s.mu.Unlock()
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key, _ := url.PathUnescape(r.Header.Get("Sluice-Key"))
	attempt, _ := strconv.Atoi(r.Header.Get("Sluice-Attempt"))
	d := Delivery{At: time.Now(), ID: r.Header.Get("Idempotency-Key"), Attempt: attempt,
		Rule: r.Header.Get("Sluice-Rule"), Key: key, Payload: body, Answered: http.StatusOK, Header: r.Header.Clone()}
	s.mu.Lock()
	answer := s.answer
	s.mu.Unlock()
	var retryAfter string
	if answer != nil {
		d.Answered, retryAfter = answer(d)
	}
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(d.Answered)
}

// All returns every delivery so far, in arrival order.
func (s *Sink) All() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// Accepted returns the deliveries the sink answered with 2xx, in arrival order.
func (s *Sink) Accepted() []Delivery {
	var out []Delivery
	for _, d := range s.All() {
		if d.Answered/100 == 2 {
			out = append(out, d)
		}
	}
	return out
}

// WaitAccepted waits until at least n deliveries were accepted or the timeout passes, and
// returns the accepted deliveries.
func (s *Sink) WaitAccepted(n int, timeout time.Duration) []Delivery {
	deadline := time.Now().Add(timeout)
	for {
		acc := s.Accepted()
		if len(acc) >= n || time.Now().After(deadline) {
			return acc
		}
		select {
		case <-s.notify:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Report is what a set of accepted deliveries says about the promises.
type Report struct {
	Unique     int // distinct message ids accepted
	Duplicates int // accepted deliveries beyond the first of an id (same Idempotency-Key)
	Reordered  int // per key, deliveries whose message was admitted before the previous one delivered
	Missing    []string
}

// Check compares accepted deliveries with the ids the test was told were admitted, in
// admission order per key (order[key] = ids in the order they were acknowledged).
func Check(acc []Delivery, order map[string][]string) Report {
	var r Report
	seen := map[string]bool{}
	pos := map[string]int{}
	for _, ids := range order {
		for i, id := range ids {
			pos[id] = i
		}
	}
	last := map[string]int{}
	for _, d := range acc {
		if seen[d.ID] {
			r.Duplicates++
			continue
		}
		seen[d.ID] = true
		if p, ok := pos[d.ID]; ok {
			if l, ok := last[d.Key]; ok && p < l {
				r.Reordered++
			}
			last[d.Key] = p
		}
	}
	r.Unique = len(seen)
	for _, ids := range order {
		for _, id := range ids {
			if !seen[id] {
				r.Missing = append(r.Missing, id)
			}
		}
	}
	return r
}
