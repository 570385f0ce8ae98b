package ingress

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the ingress (docs/metrics.md); sluice_admissions_total is internal/submit's.
// Labels never carry a key.
type metrics struct {
	httpDuration *prometheus.HistogramVec // sluice_http_request_duration_seconds{route,code}
	degraded     prometheus.Gauge         // sluice_limiter_degraded
	rulesReload  *prometheus.CounterVec   // sluice_rules_reload_total{result}
	rulesLoaded  prometheus.Gauge         // sluice_rules_loaded
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_http_request_duration_seconds",
			Help:    "HTTP request durations by route pattern and status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "code"}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_limiter_degraded",
			Help: "1 while Redis is unreachable and admission limits are decided by a local limiter (limit ÷ live ingress count).",
		}),
		rulesReload: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rules_reload_total",
			Help: "Rules file reloads by result (ok, error). On error the last good rules stay in force.",
		}, []string{"result"}),
		rulesLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rules_loaded",
			Help: "Number of rules in force.",
		}),
	}
	reg.MustRegister(m.httpDuration, m.degraded, m.rulesReload, m.rulesLoaded)
	return m
}
