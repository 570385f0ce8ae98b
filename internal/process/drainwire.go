package process

// The drain side of a process: the drain loop (internal/drain) with its sinks, the
// re-admitter of parked messages and the parked/dead gauges, on a Stack the caller owns.
// The drainer process runs it alone; an ingress with -drain runs it beside the API.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/retryrules"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/sink"
	"github.com/sluice-io/sluice/internal/tlsx"
	"github.com/sluice-io/sluice/retry"
)

// DrainDeps are the parts a drainer is built from; Registerer is optional.
type DrainDeps struct {
	Stack  *Stack // connections, streams, scheduler, statuses, overrides, admission
	Rules  func() *rules.Set
	Logger *slog.Logger
	// Registerer receives the drainer's metrics; nil = not exported.
	Registerer prometheus.Registerer
	// Drain tunes the drain loop (workers, lease, …); the parts above are filled in.
	Drain drain.Config
	// Readmit tunes the re-admitter (workers, backoff, …); the parts above are filled in.
	Readmit retry.ReadmitterConfig
	// SinkTLS verifies https:// sinks against -sink-ca; nil = system roots.
	SinkTLS *tlsx.Client
	// Signer signs HTTP deliveries (-sign-keys); nil = unsigned.
	Signer *sign.Signer
	// SignScheme lays out the signature headers (-sign-scheme); "" = sign.SchemeSluice.
	SignScheme sign.Scheme
	// SinkDial dials HTTP sinks' connections; nil = the network.
	SinkDial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Draining is a running drainer.
type Draining struct {
	Drainer    *drain.Drainer
	Readmitter *retry.Readmitter

	stopCounting context.CancelFunc
}

// StartDraining builds and starts a drainer's parts on d.Stack.
func StartDraining(ctx context.Context, d DrainDeps) (*Draining, error) {
	st := d.Stack
	hc := sink.HTTPConfig{Signer: d.Signer, SignScheme: d.SignScheme}
	if d.SinkTLS != nil || d.SinkDial != nil {
		t := sink.NewTransport(256)
		if d.SinkTLS != nil {
			d.SinkTLS.Apply(t)
		}
		if d.SinkDial != nil {
			t.DialContext = d.SinkDial
		}
		hc.Client = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	httpSink, err := sink.NewHTTP(hc)
	if err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	natsSink, err := sink.NewNATS(st.NATS, sink.NATSConfig{})
	if err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	cfg := d.Drain
	cfg.Queues, cfg.Scheduler = st.Queues, st.Scheduler
	if st.Keys != nil {
		cfg.KeyOverrides = st.Keys // per-key overrides, applied by the own engine
	}
	cfg.Rules = func() []*rules.Rule { return d.Rules().QueueRules() }
	counting := &countingSink{Sink: sink.Multi{HTTP: httpSink, NATS: natsSink}}
	cfg.Sink = counting
	cfg.Retrier, cfg.DeadLetters = retryrules.Retrier(st.Parking), retryrules.DeadLetters(st.Dead)
	if st.Delivered != nil {
		cfg.States = st.Delivered // opt-in records of delivered messages (-status-keep)
	}
	var logMu sync.Mutex
	logged := map[string]time.Time{}
	cfg.Policy = func(r *rules.Rule) drain.Policy {
		eff, o, err := st.Current.Effective(r)
		if err != nil { // throttled: the policy is read before every claim
			logMu.Lock()
			if time.Since(logged[r.Name]) > time.Minute {
				logged[r.Name] = time.Now()
				d.Logger.Error("drainer: override does not apply; draining at the rules file's values", "rule", r.Name, "err", err)
			}
			logMu.Unlock()
		}
		p := drain.RulePolicy(eff)
		p.Paused = p.Paused || o.IsPaused()
		return p
	}
	cfg.Logger, cfg.Registerer = d.Logger, d.Registerer
	dr, err := drain.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	rcfg := d.Readmit
	byName := func(name string) *rules.Rule { return d.Rules().Rule(name) }
	rcfg.Store, rcfg.Dead, rcfg.Admit = st.Parking, st.Dead, retryrules.Admit(byName, st.Admitter.Readmit)
	rcfg.Rules = retryrules.Lookup(byName)
	rcfg.Registerer, rcfg.Logger = d.Registerer, d.Logger
	ra, err := retry.NewReadmitter(rcfg)
	if err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	if d.Registerer != nil {
		if err := d.Registerer.Register(retry.NewCollector(retry.CollectorConfig{
			Store: st.Parking, Dead: st.Dead,
			RuleNames: func() []string {
				var names []string
				for _, r := range d.Rules().QueueRules() {
					names = append(names, r.Name)
				}
				return names
			},
		})); err != nil {
			return nil, fmt.Errorf("drainer: metrics: %w", err)
		}
	}
	cctx, stopCounting := context.WithCancel(context.WithoutCancel(ctx))
	go counting.flush(cctx, st.Scheduler, d.Logger)
	if err := dr.Start(ctx); err != nil {
		stopCounting()
		return nil, fmt.Errorf("drainer: %w", err)
	}
	if err := ra.Start(ctx); err != nil {
		stopCounting()
		dr.Stop()
		return nil, fmt.Errorf("drainer: re-admitter: %w", err)
	}
	return &Draining{Drainer: dr, Readmitter: ra, stopCounting: stopCounting}, nil
}

// Stop stops claiming and re-admitting, and waits for in-flight deliveries (bounded by
// the drain config's StopTimeout). Safe to call twice.
func (p *Draining) Stop() {
	p.Readmitter.Stop()
	p.Drainer.Stop()
	p.stopCounting() // writes the last counts
}
