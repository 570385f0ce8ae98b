package ingress

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/httpx"
)

// storeFullFor is how long after the queue store last refused a message for lack of room
// the ingress reports the condition (GET /readyz's body, sluice_queue_store_full).
const storeFullFor = 10 * time.Second

// storeFull remembers when the queue store last answered "out of space", so the condition
// is visible without sending a message: it clears by itself storeFullFor after the last
// refusal (the store has room again once messages are delivered and deleted, or it is
// given a larger max_store). Readiness does not fail on it: taking every ingress out of
// its load balancer at once would turn honest 503s with Retry-After into connection errors.
type storeFull struct{ at atomic.Int64 } // unix nanoseconds of the last refusal, 0 = never

func (f *storeFull) seen(now time.Time) { f.at.Store(now.UnixNano()) }

func (f *storeFull) active(now time.Time) bool {
	at := f.at.Load()
	return at != 0 && now.Sub(time.Unix(0, at)) < storeFullFor
}

func (s *Server) registerStoreFull(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_queue_store_full",
		Help: "1 while the queue store (NATS JetStream) refuses messages for lack of room (its max_store), until 10 s after the last refusal; submits get 503 #store-full meanwhile.",
	}, func() float64 {
		if s.storeFull.active(s.cfg.Now()) {
			return 1
		}
		return 0
	}))
}

// storeFullOutcome is the answer to a submit the queue store had no room for: at once,
// with the cause, and a Retry-After (room comes back as messages are delivered).
func (s *Server) storeFullOutcome(rule string) outcome {
	s.storeFull.seen(s.cfg.Now())
	s.metrics.admissions.WithLabelValues(rule, decisionError).Inc()
	return problemOutcome(httpx.StoreFull("the queue store (NATS JetStream) has no room left (its max_store); nothing was stored. "+
		"Room comes back as messages are delivered; an operator can give the store more room", s.cfg.Unavailable))
}
