package drain

// The signals an on-call needs (docs/metrics.md "On-call signals"): how long messages wait,
// how old the oldest one is, what the sinks answer, how many attempts a message takes, how
// full JetStream's storage is, and whether drainers run at all. Alert rules on them are in
// deploy/prometheus/alerts.yml.

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/rules"
)

// Sink response classes of sluice_sink_responses_total{class}.
const (
	class2xx     = "2xx" // accepted; a NATS sink's acknowledged publish counts here too
	class3xx     = "3xx"
	class4xx     = "4xx"
	class5xx     = "5xx"
	classTimeout = "timeout" // the sink did not answer within sink.timeout
	classError   = "error"   // no answer: connection refused or reset, DNS, TLS, NATS error
)

// inQueueBuckets go from 10 ms to ~11.6 days (×4 per bucket): a queue drains at its
// outflow, so minutes and hours are normal for a deep key.
var inQueueBuckets = prometheus.ExponentialBuckets(0.01, 4, 14)

// attemptBuckets: most messages take one attempt; the default max_attempts is 10.
var attemptBuckets = []float64{1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50}

func (m *metrics) addSignals() {
	m.inQueue = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_time_in_queue_seconds",
		Help:    "Time from a message's admission to the start of its first delivery attempt (includes a requested delay).",
		Buckets: inQueueBuckets,
	}, []string{"rule"})
	m.oldest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_queue_oldest_age_seconds",
		Help: "Age of the oldest message stored in the rule's queue stream, all keys together (0 when empty; sampled periodically).",
	}, []string{"rule"})
	m.responses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_sink_responses_total",
		Help: "Sink answers to delivery attempts by class: 2xx, 3xx, 4xx, 5xx, timeout, error (no answer).",
	}, []string{"rule", "class"})
	m.attempts = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_delivery_attempts",
		Help:    "Delivery attempts a message took to its final outcome (delivered or dead).",
		Buckets: attemptBuckets,
	}, []string{"rule", "outcome"})
	m.store = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_jetstream_store_bytes",
		Help: "JetStream file storage of sluice's account: used, and limit (absent when the account is unlimited).",
	}, []string{"kind"})
	m.running = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_drainer_running",
		Help: "Drainers running in this process (1 for a drainer, 0 for an ingress without -drain).",
	})
	m.heartbeat = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_drainer_heartbeat_timestamp_seconds",
		Help: "Unix time of the drainer's last maintenance pass (every few seconds while it runs).",
	})
}

func (m *metrics) registerSignals(reg prometheus.Registerer) error {
	var err error
	if m.inQueue, err = register(reg, m.inQueue); err != nil {
		return err
	}
	if m.oldest, err = register(reg, m.oldest); err != nil {
		return err
	}
	if m.responses, err = register(reg, m.responses); err != nil {
		return err
	}
	if m.attempts, err = register(reg, m.attempts); err != nil {
		return err
	}
	if m.store, err = register(reg, m.store); err != nil {
		return err
	}
	if m.running, err = register(reg, m.running); err != nil {
		return err
	}
	if m.heartbeat, err = register(reg, m.heartbeat); err != nil {
		return err
	}
	return nil
}

// responseClass is the class of a sink's answer; "" for none to count (a hard stop
// cancelled the attempt: not the sink's doing).
func responseClass(o Outcome) string {
	switch {
	case o.Status >= 200 && o.Status < 300:
		return class2xx
	case o.Status >= 300 && o.Status < 400:
		return class3xx
	case o.Status >= 400 && o.Status < 500:
		return class4xx
	case o.Status >= 500:
		return class5xx
	case o.Timeout:
		return classTimeout
	case o.Verdict == Delivered:
		return class2xx // a sink without status codes (NATS) that accepted
	}
	return classError
}

// observeFinal records the attempts a message took to its final outcome.
func (d *Drainer) observeFinal(r *rules.Rule, outcome string, attempts int) {
	d.m.attempts.WithLabelValues(r.Name, outcome).Observe(float64(attempts))
}

// sampleStore reads JetStream's storage use of the account (one account info request).
func (d *Drainer) sampleStore(ctx context.Context) {
	u, err := d.cfg.Queues.Usage(ctx)
	if err != nil {
		return
	}
	d.m.store.WithLabelValues("used").Set(float64(u.Store))
	if u.MaxStore > 0 {
		d.m.store.WithLabelValues("limit").Set(float64(u.MaxStore))
	} else {
		d.m.store.DeleteLabelValues("limit")
	}
}

// oldestAge is the age at now of a queue's oldest message stored at first (zero: empty).
func oldestAge(now, first time.Time) float64 {
	if first.IsZero() {
		return 0
	}
	return max(0, now.Sub(first).Seconds())
}
