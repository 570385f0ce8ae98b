package sinktest

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// KeyLimit is a sink that paces itself, as a downstream with its own rate limit does: at
// most N deliveries per key are accepted within any Per (a sliding window log of the
// accepted ones); the others are answered 429 with a Retry-After in whole seconds (HTTP's
// form, rounded up) — the time until the oldest accepted one leaves the window. It is the
// sink of adaptive outflow's end-to-end test (a rule at 10/s, a sink admitting 7/s).
type KeyLimit struct {
	N   int
	Per time.Duration

	mu       sync.Mutex
	accepted map[string][]time.Time
}

// NewKeyLimit accepts n deliveries per key within any per.
func NewKeyLimit(n int, per time.Duration) *KeyLimit {
	return &KeyLimit{N: n, Per: per, accepted: map[string][]time.Time{}}
}

// StartLimited starts a recording sink (Start) that answers with a KeyLimit of n per per.
func StartLimited(tb testing.TB, n int, per time.Duration) (*Sink, *KeyLimit) {
	s := Start(tb)
	l := NewKeyLimit(n, per)
	s.Answer(l.Answer)
	return s, l
}

// Answer is a Sink answer function: 200, or 429 with its Retry-After.
func (l *KeyLimit) Answer(d Delivery) (int, string) {
	ok, wait := l.Admit(d.Key, d.At)
	if ok {
		return http.StatusOK, ""
	}
	return http.StatusTooManyRequests, strconv.Itoa(int(math.Ceil(wait.Seconds())))
}

// Admit records a delivery of key at now when the window has room (ok), else says how
// long until it has (the oldest accepted delivery's age out).
func (l *KeyLimit) Admit(key string, now time.Time) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	log := l.accepted[key]
	i := 0
	for i < len(log) && now.Sub(log[i]) >= l.Per {
		i++
	}
	log = log[i:]
	if len(log) < l.N {
		l.accepted[key] = append(log, now)
		return true, 0
	}
	l.accepted[key] = log
	return false, log[0].Add(l.Per).Sub(now)
}

// Counts are a key's deliveries by answer since a time, for throughput and the share of
// 429s.
type Counts struct {
	Accepted, Throttled, Other int
}

// CountsSince counts the recorded deliveries of key (every key when key is "") at or after
// since.
func (s *Sink) CountsSince(key string, since time.Time) Counts {
	var c Counts
	for _, d := range s.All() {
		if d.At.Before(since) || (key != "" && d.Key != key) {
			continue
		}
		switch {
		case d.Answered/100 == 2:
			c.Accepted++
		case d.Answered == http.StatusTooManyRequests:
			c.Throttled++
		default:
			c.Other++
		}
	}
	return c
}
