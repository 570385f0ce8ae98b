package ingress

import (
	"github.com/prometheus/client_golang/prometheus"
)

// storeFull reports whether the queue store refused a message for lack of room in the last
// 10 s (queue.Queues.StoreFull), so the condition is visible without sending a message and
// clears by itself. Readiness does not fail on it: taking every ingress out of its load
// balancer at once would turn honest 503s with Retry-After into connection errors.
func (s *Server) storeFull() bool {
	a := s.cfg.Admitter
	return a != nil && a.Queues != nil && a.Queues.StoreFull()
}

func (s *Server) registerStoreFull(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_queue_store_full",
		Help: "1 while the queue store (NATS JetStream) refuses messages for lack of room (its max_store), until 10 s after the last refusal; submits get 503 #store-full meanwhile.",
	}, func() float64 {
		if s.storeFull() {
			return 1
		}
		return 0
	}))
}
