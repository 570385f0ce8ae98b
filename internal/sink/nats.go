package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// NATSConfig configures the NATS sink. The zero value is valid.
type NATSConfig struct {
	// DefaultTimeout bounds one delivery when the rule has no sink timeout. Default 10s.
	DefaultTimeout time.Duration

	// ModeTTL is how long the sink remembers whether a subject is bound to a stream
	// before asking the server again, so a stream created or deleted later is noticed.
	// Default 30s.
	ModeTTL time.Duration

	// Now is the clock; default time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c with every unset field set to its default.
func (c NATSConfig) WithDefaults() NATSConfig {
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = 10 * time.Second
	}
	if c.ModeTTL <= 0 {
		c.ModeTTL = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports a config that cannot work (after WithDefaults). Every value is valid today.
func (c NATSConfig) Validate() error { return nil }

// NATS delivers by publishing the payload to rule.Sink.NATSSubject with the sink headers.
//
// Which publish depends on the subject, decided per subject and remembered for ModeTTL:
//
//   - Bound to a JetStream stream (js.StreamNameBySubject finds one): a JetStream publish
//     with Nats-Msg-Id = message id. Delivered means the stream stored it; a redelivery
//     after a crash within the stream's duplicate window is dropped by the server, so the
//     sink's consumers see it once. A full stream or a missing ack is a Retry.
//   - Not bound: a core publish followed by a flush (a PING round trip). Delivered then
//     only means the server received it: core NATS has no acknowledgement from
//     subscribers, and with no subscriber the message is gone. That is the contract of
//     a core subject; bind the subject to a stream for durable delivery.
//
// Asking first (rather than trying a JetStream publish and falling back) matters: a
// JetStream publish to an unbound subject is still a core publish, so subscribers would
// receive the message and the missing ack would then look like a failure and cause a
// second delivery.
type NATS struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg NATSConfig

	mu    sync.Mutex
	modes map[string]natsMode
}

type natsMode struct {
	stream  bool // bound to a stream: JetStream publish
	checked time.Time
}

// NewNATS returns a NATS sink publishing on nc. It fails only on an invalid config.
func NewNATS(nc *nats.Conn, cfg NATSConfig) (*NATS, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("sink: jetstream: %w", err)
	}
	return &NATS{nc: nc, js: js, cfg: cfg, modes: make(map[string]natsMode)}, nil
}

var _ delivery.Sink = (*NATS)(nil)

// Deliver publishes m once and classifies the result (see NATS).
func (n *NATS) Deliver(ctx context.Context, rule *rules.Rule, m queue.Message) delivery.Outcome {
	if rule == nil || rule.Sink.NATSSubject == "" {
		return delivery.OutcomeDead("sink: rule has no sink nats_subject")
	}
	subject := rule.Sink.NATSSubject
	timeout := timeoutFor(rule, n.cfg.DefaultTimeout)
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	msg := nats.NewMsg(subject)
	msg.Data = m.Payload
	deliveryHeaders(rule, m, msg.Header.Set)
	telemetry.Inject(ctx, msg.Header.Set) // traceparent, tracestate (W3C names)

	stream, err := n.boundToStream(actx, subject)
	if err != nil {
		return n.failure(ctx, err, timeout)
	}
	if stream {
		// A Duplicate ack is a success too: the stream already has this message.
		if _, err := n.js.PublishMsg(actx, msg, jetstream.WithMsgID(m.ID)); err != nil {
			return n.failure(ctx, err, timeout)
		}
		return delivery.OutcomeDelivered()
	}
	if err := n.nc.PublishMsg(msg); err != nil {
		return n.failure(ctx, err, timeout)
	}
	if err := n.nc.FlushWithContext(actx); err != nil {
		return n.failure(ctx, err, timeout)
	}
	return delivery.OutcomeDelivered()
}

// boundToStream reports whether subject is captured by a JetStream stream, cached for ModeTTL.
func (n *NATS) boundToStream(ctx context.Context, subject string) (bool, error) {
	now := n.cfg.Now()
	n.mu.Lock()
	mode, ok := n.modes[subject]
	n.mu.Unlock()
	if ok && now.Sub(mode.checked) < n.cfg.ModeTTL {
		return mode.stream, nil
	}
	_, err := n.js.StreamNameBySubject(ctx, subject)
	switch {
	case err == nil:
		mode = natsMode{stream: true, checked: now}
	case errors.Is(err, jetstream.ErrStreamNotFound):
		mode = natsMode{stream: false, checked: now}
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		// No JetStream at all: every subject is a core subject.
		mode = natsMode{stream: false, checked: now}
	default:
		return false, err
	}
	n.mu.Lock()
	n.modes[subject] = mode
	n.mu.Unlock()
	return mode.stream, nil
}

// failure classifies a publish error. Everything is transient except a subject the server
// refuses outright.
func (n *NATS) failure(ctx context.Context, err error, timeout time.Duration) delivery.Outcome {
	var apiErr *jetstream.APIError
	switch {
	case ctx.Err() != nil:
		return delivery.OutcomeRetry(0, "sink: delivery cancelled: "+context.Cause(ctx).Error())
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		o := delivery.OutcomeRetry(0, fmt.Sprintf("sink: nats timeout after %s", timeout))
		o.Timeout = true
		return o
	case errors.Is(err, nats.ErrBadSubject):
		return delivery.OutcomeDead("sink: " + err.Error())
	case errors.As(err, &apiErr):
		// Stream full, no leader, storage errors: the stream's operator can fix these, so retry.
		return delivery.OutcomeRetry(0, fmt.Sprintf("sink: nats: %s (code %d)", apiErr.Description, apiErr.ErrorCode))
	default:
		return delivery.OutcomeRetry(0, "sink: nats: "+err.Error())
	}
}
