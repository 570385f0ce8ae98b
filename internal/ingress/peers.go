package ingress

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

// peerCounter counts live ingress processes for the degraded limiter ("local quota,
// global counter": while Redis is down each process enforces limit ÷ live processes).
// Every process announces itself on a NATS subject every interval and counts the
// distinct ids heard within three intervals. It uses core NATS, not Redis, because it is
// needed exactly when Redis is unreachable.
type peerCounter struct {
	nc       *nats.Conn
	log      *slog.Logger
	onChange func(n int)
	interval time.Duration // default 2s

	mu   sync.Mutex
	seen map[string]time.Time
	last int
}

const peerSubject = "sluice.ingress.alive"

func (p *peerCounter) Start(ctx context.Context) error {
	if p.interval <= 0 {
		p.interval = 2 * time.Second
	}
	p.seen = map[string]time.Time{}
	id := uuid.NewString()
	sub, err := p.nc.Subscribe(peerSubject, func(m *nats.Msg) {
		p.mu.Lock()
		p.seen[string(m.Data)] = time.Now()
		p.mu.Unlock()
	})
	if err != nil {
		return err
	}
	go func() {
		defer sub.Unsubscribe()
		t := time.NewTicker(p.interval)
		defer t.Stop()
		p.nc.Publish(peerSubject, []byte(id))
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				p.nc.Publish(peerSubject, []byte(id))
				p.update()
			}
		}
	}()
	return nil
}

func (p *peerCounter) update() {
	p.mu.Lock()
	cutoff := time.Now().Add(-3 * p.interval)
	for id, t := range p.seen {
		if t.Before(cutoff) {
			delete(p.seen, id)
		}
	}
	n := len(p.seen)
	changed := n != p.last && n > 0
	if changed {
		p.last = n
	}
	p.mu.Unlock()
	if changed {
		p.log.Info("ingress: live ingress processes", "count", n)
		p.onChange(n)
	}
}

// CountPeers keeps onChange told of the number of live ingress processes (this one
// included) until ctx ends: the degraded limiter divides its limits by it while Redis is
// unreachable.
func CountPeers(ctx context.Context, nc *nats.Conn, log *slog.Logger, onChange func(n int)) error {
	p := &peerCounter{nc: nc, log: log, onChange: onChange}
	return p.Start(ctx)
}
