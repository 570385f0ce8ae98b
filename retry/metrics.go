package retry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CollectorConfig configures a Collector. Store, Dead and RuleNames are required.
type CollectorConfig struct {
	Store *Store
	Dead  *DeadLetters
	// RuleNames lists the rules to report (e.g. the queue rules of the current rules set).
	RuleNames func() []string
	// Refresh is how long counted values are reused: each refresh costs one server-side
	// walk over the rule's parked messages and dead letters (see Store.Parked), so it must
	// not run on every scrape of every replica. Default 15s.
	Refresh time.Duration
	// Timeout bounds one refresh. Default 5s.
	Timeout time.Duration
}

// Collector exports sluice_parked{rule} and sluice_dead{rule}, counted in the streams
// themselves so every process reports the same, correct numbers whichever process
// parked or killed the messages. Register it with a prometheus.Registerer.
type Collector struct {
	cfg    CollectorConfig
	parked *prometheus.Desc
	dead   *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	values map[string][2]uint64 // rule → parked, dead
}

// NewCollector returns a Collector.
func NewCollector(cfg CollectorConfig) *Collector {
	if cfg.Refresh <= 0 {
		cfg.Refresh = 15 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Collector{
		cfg:    cfg,
		parked: prometheus.NewDesc("sluice_parked", "Messages in the retry stream: parked, or fired and not yet re-admitted.", []string{"rule"}, nil),
		dead:   prometheus.NewDesc("sluice_dead", "Dead letters kept.", []string{"rule"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.parked
	ch <- c.dead
}

// Collect implements prometheus.Collector. On a count failure the rule's last good values
// are kept (a scrape should not fail because NATS is briefly away).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) >= c.cfg.Refresh {
		c.refresh()
	}
	for rule, v := range c.values {
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(v[0]), rule)
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(v[1]), rule)
	}
}

func (c *Collector) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	values := make(map[string][2]uint64)
	for _, rule := range c.cfg.RuleNames() {
		v := c.values[rule]
		if n, err := c.cfg.Store.Parked(ctx, rule); err == nil {
			v[0] = n
		}
		if n, err := c.cfg.Dead.Count(ctx, rule); err == nil {
			v[1] = n
		}
		values[rule] = v
	}
	c.values, c.at = values, time.Now()
}
