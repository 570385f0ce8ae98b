package breaker

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the breakers' Prometheus collectors, one set per process: the caller
// registers Collectors() (docs/metrics.md). A nil *Metrics records nothing.
type Metrics struct {
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
}

// NewMetrics returns unregistered collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_breaker_state",
			Help: "The rule's sink breaker in this drainer: 0 closed, 1 half-open (one probe delivery out), 2 open (deliveries wait).",
		}, []string{"rule"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_breaker_transitions_total",
			Help: "Changes of the rule's sink breaker state in this drainer, by the state entered (closed, half_open, open).",
		}, []string{"rule", "to"}),
	}
}

// Collectors are what the caller registers.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.state, m.transitions}
}

// Forget drops the rule's series (the rule was removed, or this drainer no longer drains it).
func (m *Metrics) Forget(rule string) {
	if m == nil {
		return
	}
	m.state.DeleteLabelValues(rule)
	for _, s := range []State{Closed, HalfOpen, Open} {
		m.transitions.DeleteLabelValues(rule, s.String())
	}
}

func (m *Metrics) set(rule string, s State) {
	if m != nil {
		m.state.WithLabelValues(rule).Set(float64(s))
	}
}

func (m *Metrics) transition(rule string, s State) {
	if m != nil {
		m.state.WithLabelValues(rule).Set(float64(s))
		m.transitions.WithLabelValues(rule, s.String()).Inc()
	}
}
