package drain

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the drainer's Prometheus metrics (docs/metrics.md). Labels never carry a key:
// millions of keys per rule would explode the series.
type metrics struct {
	deliveries *prometheus.CounterVec   // rule, outcome: delivered | retried | dead
	depth      *prometheus.GaugeVec     // rule: messages queued, all keys
	outflow    *prometheus.GaugeVec     // rule: configured outflow per key, messages/s
	lag        *prometheus.HistogramVec // rule: dispatch time − due time, seconds
	lost       *prometheus.CounterVec   // rule: claims lost before the drainer was done with the key
	slotWaits  *prometheus.CounterVec   // rule: deliveries that waited for a sink.max_in_flight slot
	partsOwned *prometheus.GaugeVec     // rule: ownership partitions this drainer owns (own engine)
	renewFails *prometheus.CounterVec   // rule: ownership renewals that failed (own engine)
	partsDiff  *prometheus.GaugeVec     // rule: 1 while this drainer's -own-partitions differs from the other drainers'

	// The on-call's signals (signals.go).
	inQueue   *prometheus.HistogramVec // rule: admission → first delivery start, seconds
	oldest    *prometheus.GaugeVec     // rule: age of the oldest message in the rule's queue stream, seconds
	responses *prometheus.CounterVec   // rule, class: sink responses by status class
	attempts  *prometheus.HistogramVec // rule, outcome: attempts a message took to its final outcome
	store     *prometheus.GaugeVec     // kind (used|limit): JetStream file storage of the account, bytes
	running   prometheus.Gauge         // drainers running in this process
	heartbeat prometheus.Gauge         // unix time of the last maintenance pass
}

// lagBuckets go from 1 ms to 10 s (×~2.15 per bucket: 1, 2.15, 4.6, 10 ms, …).
var lagBuckets = prometheus.ExponentialBucketsRange(0.001, 10, 13)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_deliveries_total",
			Help: "Delivery attempts to the sink by outcome (delivered, retried, dead).",
		}, []string{"rule", "outcome"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_queue_depth",
			Help: "Messages queued in the rule's queues, all keys together (sampled periodically).",
		}, []string{"rule"}),
		outflow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_outflow_rate",
			Help: "Configured outflow per key, messages per second.",
		}, []string{"rule"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_dispatch_lag_seconds",
			Help:    "Dispatch time minus the time the key's message was due.",
			Buckets: lagBuckets,
		}, []string{"rule"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_claims_lost_total",
			Help: "Claims whose lease this drainer lost before it was done with the key (it stopped before delivering, or its delivery may overlap another drainer's).",
		}, []string{"rule"}),
		slotWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_slot_waits_total",
			Help: "Deliveries that waited because the rule's sink.max_in_flight deliveries were already at the sink (over all drainers).",
		}, []string{"rule"}),
		partsOwned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_partitions_owned",
			Help: "Ownership partitions of the rule this drainer owns (engine own).",
		}, []string{"rule"}),
		renewFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_ownership_renew_failures_total",
			Help: "Ownership lease renewals of the rule that failed (engine own); partitions stop delivering when their leases run out.",
		}, []string{"rule"}),
		partsDiff: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_ownership_partitions_mismatch",
			Help: "1 while this drainer's -own-partitions differs from the count the rule's leases are held under by other drainers (engine own): it owns none of the rule's partitions meanwhile.",
		}, []string{"rule"}),
	}
	m.addSignals()
	if reg == nil {
		return m, nil
	}
	// Several drainers in one process (tests, `sluice dev`) share the collectors.
	var err error
	if m.deliveries, err = register(reg, m.deliveries); err != nil {
		return nil, err
	}
	if m.depth, err = register(reg, m.depth); err != nil {
		return nil, err
	}
	if m.outflow, err = register(reg, m.outflow); err != nil {
		return nil, err
	}
	if m.lag, err = register(reg, m.lag); err != nil {
		return nil, err
	}
	if m.lost, err = register(reg, m.lost); err != nil {
		return nil, err
	}
	if m.slotWaits, err = register(reg, m.slotWaits); err != nil {
		return nil, err
	}
	if m.partsOwned, err = register(reg, m.partsOwned); err != nil {
		return nil, err
	}
	if m.renewFails, err = register(reg, m.renewFails); err != nil {
		return nil, err
	}
	if m.partsDiff, err = register(reg, m.partsDiff); err != nil {
		return nil, err
	}
	if err := m.registerSignals(reg); err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
