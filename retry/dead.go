package retry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/queue"
)

// Dead-letter reasons set by this package (the drainer and the sink give their own). Both
// are internal/delivery's, the reasons every part of a delivery shares.
const (
	// ReasonRuleRemoved: the message's rule is gone from the rules.
	ReasonRuleRemoved = delivery.ReasonRuleRemoved
	// ReasonExpired: the message was still parked or scheduled past its expiry (ttl,
	// expires_at, the rule's queue.max_age). Drainers use the same reason for one they
	// find expired at its key's head.
	ReasonExpired = delivery.ReasonExpired
)

// DeadConfig configures the dead letters. The zero value is valid.
type DeadConfig struct {
	// Stream is the dead-letter stream's name. Default "SLUICE_DEAD".
	Stream string
	// SubjectPrefix, when set, is prepended (with a '.') to the stream's subjects
	// dead.<rule>.<id>. Default "".
	SubjectPrefix string
	// Replicas: 1 on a single server, 3 on a production cluster. Default 1.
	Replicas int
	// MaxAge is how long a dead letter is kept before the server deletes it. Default 14
	// days: long enough to notice over a holiday and replay.
	MaxAge time.Duration
	// MaxBytes bounds the stream. When it is reached, a new dead letter is refused
	// (ErrDeadFull: the drainer keeps the message where it is, its key waits, and
	// sluice_dead_letters_refused_total counts it) unless DropOldest. Default 4 GiB.
	MaxBytes int64
	// DropOldest makes room for a new dead letter by deleting the oldest ones when the
	// stream is full, each counted in sluice_dead_letters_dropped_total. Default false:
	// no dead letter disappears unseen.
	DropOldest bool
	// Registerer registers sluice_dead_letters_refused_total{rule} and
	// sluice_dead_letters_dropped_total. Default: none (counted, not exported).
	Registerer prometheus.Registerer
	// Rules looks a rule up by name for Replay. Required for Replay only.
	Rules RuleLookup
	// APIPrefix of the JetStream API. Default "$JS.API.".
	APIPrefix string
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with every unset field set to its default.
func (c DeadConfig) WithDefaults() DeadConfig {
	if c.Stream == "" {
		c.Stream = "SLUICE_DEAD"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxAge == 0 {
		c.MaxAge = 14 * 24 * time.Hour
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 4 << 30
	}
	if c.APIPrefix == "" {
		c.APIPrefix = "$JS.API."
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports a configuration that cannot work (after WithDefaults).
func (c DeadConfig) Validate() error {
	switch {
	case token(c.Stream) != c.Stream:
		return fmt.Errorf("%w: dead Stream %q must be of [A-Za-z0-9_-]", ErrInvalidConfig, c.Stream)
	case c.SubjectPrefix != "" && !validPrefix(c.SubjectPrefix):
		return fmt.Errorf("%w: dead SubjectPrefix %q must be dot-separated tokens of [A-Za-z0-9_-]", ErrInvalidConfig, c.SubjectPrefix)
	case c.Replicas != 1 && c.Replicas != 3:
		return fmt.Errorf("%w: dead Replicas must be 1 or 3, got %d", ErrInvalidConfig, c.Replicas)
	case c.MaxAge < 0 || c.MaxBytes < 1:
		return fmt.Errorf("%w: dead MaxAge must be ≥ 0 and MaxBytes positive", ErrInvalidConfig)
	}
	return nil
}

// DeadLetter is one message that will not be delivered.
type DeadLetter struct {
	// Seq is the dead letter's stream sequence; List's cursor.
	Seq uint64
	// Message as it was when it died: Attempt is the number of delivery attempts made,
	// LastError the last delivery (or re-admission) error.
	Message queue.Message
	Reason  string
	DeadAt  time.Time
}

// ErrDeadFull: the dead-letter stream is at its MaxBytes and DropOldest is off; nothing
// was stored and nothing was dropped.
var ErrDeadFull = errors.New("retry: the dead letters are full")

// DeadLetters is the one place for messages that ran out of delivery attempts, were
// refused by the sink, or outlived park.max_age: where drainers hand them (Dead), and the
// admin API's list, get and replay. Safe for concurrent use.
type DeadLetters struct {
	js  jetstream.JetStream
	cfg DeadConfig

	stream  streamHandle
	refused *prometheus.CounterVec
	dropped prometheus.Counter
}

// NewDeadLetters returns the dead letters on js. Call Ensure once (any process may) before use.
func NewDeadLetters(js jetstream.JetStream, cfg DeadConfig) (*DeadLetters, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &DeadLetters{js: js, cfg: cfg,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_dead_letters_refused_total",
			Help: "Dead letters the full dead-letter stream refused, by rule: each message stayed in its key's queue (the key waits) and is offered again later.",
		}, []string{"rule"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dead_letters_dropped_total",
			Help: "Oldest dead letters deleted to make room for new ones (only with the drop-oldest policy).",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{d.refused, d.dropped} {
			if err := cfg.Registerer.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
	}
	return d, nil
}

// StreamConfig is the dead-letter stream's configuration.
func (d *DeadLetters) StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        d.cfg.Stream,
		Description: "sluice dead letters",
		Subjects:    []string{d.subject(">")},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew, // full: refused (or the oldest deleted and counted, DropOldest)
		Storage:     jetstream.FileStorage,
		Replicas:    d.cfg.Replicas,
		MaxAge:      d.cfg.MaxAge,
		MaxBytes:    d.cfg.MaxBytes,
		AllowRollup: true, // one dead letter per message id
	}
}

// Ensure creates the dead-letter stream or updates it to StreamConfig. Idempotent.
func (d *DeadLetters) Ensure(ctx context.Context) error {
	return d.stream.ensure(ctx, d.js, d.StreamConfig())
}

func (d *DeadLetters) handle(ctx context.Context) (jetstream.Stream, error) {
	return d.stream.get(ctx, d.js, d.cfg.Stream)
}

func (d *DeadLetters) subject(parts ...string) string {
	return joinSubject(d.cfg.SubjectPrefix, append([]string{"dead"}, parts...)...)
}

// Subject is the subject of the dead letter of message id of rule.
func (d *DeadLetters) Subject(rule, id string) string {
	return d.subject(token(rule), queue.IDToken(id))
}

// ruleFilter matches the dead letters of rule, or of every rule when rule is "".
func (d *DeadLetters) ruleFilter(rule string) string {
	if rule == "" {
		return d.subject(">")
	}
	return d.subject(token(rule), "*")
}

// Dead stores m as dead with reason under rule (the rule's name). rule may be "" — a rule
// that was removed — and m.Rule names it then. Storing the same message id again
// replaces its dead letter (rollup), so a repeated call after a crash keeps one.
func (d *DeadLetters) Dead(ctx context.Context, rule string, m queue.Message, reason string) error {
	if m.ID == "" {
		return fmt.Errorf("retry: dead letter without message id")
	}
	if rule != "" {
		m.Rule = rule
	}
	msg := encode(d.Subject(m.Rule, m.ID), m)
	msg.Header.Set(HeaderDeadReason, escapeHeader(reason))
	msg.Header.Set(HeaderDeadAt, d.cfg.Now().UTC().Format(time.RFC3339Nano))
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	for dropped := 0; ; dropped++ {
		_, err := d.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(d.cfg.Stream))
		if err == nil {
			return nil
		}
		if !streamFull(err) {
			return fmt.Errorf("retry: dead letter %s of rule %q: %w", m.ID, m.Rule, err)
		}
		if !d.cfg.DropOldest || dropped == 64 {
			d.refused.WithLabelValues(m.Rule).Inc()
			return fmt.Errorf("%w: dead letter %s of rule %q not stored (the stream holds its %d bytes): %v", ErrDeadFull, m.ID, m.Rule, d.cfg.MaxBytes, err)
		}
		if err := d.dropOldest(ctx); err != nil {
			return fmt.Errorf("retry: make room for dead letter %s of rule %q: %w", m.ID, m.Rule, err)
		}
	}
}

// dropOldest deletes the oldest dead letter (DropOldest) and counts it. Two drainers may
// drop at once: each counts only the deletion it made.
func (d *DeadLetters) dropOldest(ctx context.Context) error {
	st, err := d.handle(ctx)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return errors.New("the stream is empty and still refuses")
	}
	err = st.DeleteMsg(ctx, info.State.FirstSeq)
	switch {
	case err == nil:
		d.dropped.Inc()
		return nil
	case errors.Is(err, jetstream.ErrMsgNotFound), errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful):
		return nil // another process dropped it first
	}
	return err
}

// streamFull reports the server's refusal of a message by a DiscardNew stream at its
// MaxBytes or MaxMsgs (JetStream error 10077, whose description says which).
func streamFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10077 &&
		(strings.Contains(apiErr.Description, "maximum bytes") || strings.Contains(apiErr.Description, "maximum messages"))
}

// List returns up to limit dead letters of rule ("" = all rules) with a stream sequence
// after after (0 = from the start), oldest first, and the cursor to pass next time (0 when
// there are no more). It reads exactly the messages returned, one subject-filtered get
// each, never the whole stream. limit ≤ 0 means 100; it is capped at 1000.
func (d *DeadLetters) List(ctx context.Context, rule string, limit int, after uint64) ([]DeadLetter, uint64, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	st, err := d.handle(ctx)
	if err != nil {
		return nil, 0, err
	}
	filter := d.ruleFilter(rule)
	var out []DeadLetter
	seq := after + 1
	for len(out) < limit {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, 0, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("retry: list dead letters of %q: %w", rule, err)
		}
		dl, err := decodeDead(raw)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, dl)
		seq = raw.Sequence + 1
	}
	return out, out[len(out)-1].Seq, nil
}

// Get returns the dead letter of message id, or ErrNotFound.
func (d *DeadLetters) Get(ctx context.Context, id string) (DeadLetter, error) {
	st, err := d.handle(ctx)
	if err != nil {
		return DeadLetter{}, err
	}
	// Last message of dead.<rule>.<id token>: an id names its rule; an id of an earlier
	// version does not, and its token is unique whatever the rule.
	rule := "*"
	if ref, ok := queue.ParseID(id); ok {
		rule = ref.RuleToken
	}
	raw, err := st.GetLastMsgForSubject(ctx, d.subject(rule, queue.IDToken(id)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return DeadLetter{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("retry: get dead letter %s: %w", id, err)
	}
	dl, err := decodeDead(raw)
	if err != nil {
		return DeadLetter{}, err
	}
	if dl.Message.ID != id { // two ids with the same (hashed) token: not ours
		return DeadLetter{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return dl, nil
}

// Replay re-admits the dead letter of message id through admit (the same function the
// re-admitter uses) with its attempts and errors reset, then deletes the dead letter. An
// expiry (ExpiresAt) already past is dropped, so the message is not dead again at once as
// expired; one still in the future is kept.
//
// If admit reports no room, the dead letter stays and the result says when to try again.
// Two replays of the same dead letter, even concurrent, admit it once: both use the same
// msgID (unique to this dead letter), which the queue deduplicates; a replay after the
// dead letter is gone returns ErrNotFound and does nothing.
func (d *DeadLetters) Replay(ctx context.Context, id string, admit AdmitFunc) (AdmitResult, error) {
	if d.cfg.Rules == nil {
		return AdmitResult{}, fmt.Errorf("%w: DeadConfig.Rules is needed to replay", ErrInvalidConfig)
	}
	dl, err := d.Get(ctx, id)
	if err != nil {
		return AdmitResult{}, err
	}
	rule, ok := d.cfg.Rules(dl.Message.Rule)
	if !ok {
		return AdmitResult{}, fmt.Errorf("%w: %q (dead letter %s)", ErrRuleNotFound, dl.Message.Rule, id)
	}
	m := dl.Message
	m.Attempt, m.LastError, m.ParkedFrom = 0, "", time.Time{}
	if m.Expired(d.cfg.Now()) {
		// Replaying is the operator's decision that the message should still go: an expiry
		// (ttl, expires_at, queue.max_age) already past would only send it straight back
		// here with reason "expired". One still ahead is kept.
		m.ExpiresAt = time.Time{}
	}
	res, err := admit(ctx, rule, m, replayMsgID(m.ID, dl.Seq))
	if err != nil {
		return AdmitResult{}, fmt.Errorf("retry: replay %s: %w", id, err)
	}
	if res.Outcome != Admitted {
		return res, nil
	}
	st, err := d.handle(ctx)
	if err != nil {
		return res, err
	}
	// Already deleted means a concurrent replay got there first: the same outcome.
	if err := st.DeleteMsg(ctx, dl.Seq); err != nil &&
		!errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && !errors.Is(err, jetstream.ErrMsgNotFound) {
		// Admitted but still listed: a second replay would admit it again under the same
		// msgID, which the queue deduplicates within its window. Report it.
		return res, fmt.Errorf("retry: replay %s: admitted, but deleting the dead letter failed: %w", id, err)
	}
	return res, nil
}

// Count is the number of dead letters of rule (for sluice_dead{rule}). O(dead letters of
// the rule) on the server; meant for metrics on an interval.
func (d *DeadLetters) Count(ctx context.Context, rule string) (uint64, error) {
	return subjectCount(ctx, d.js, d.cfg.APIPrefix, d.cfg.Stream, d.ruleFilter(rule))
}

func decodeDead(raw *jetstream.RawStreamMsg) (DeadLetter, error) {
	m, err := decode(raw.Header, raw.Data)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("retry: dead letter seq %d: %w", raw.Sequence, err)
	}
	dl := DeadLetter{Seq: raw.Sequence, Message: m, Reason: unescapeHeader(raw.Header.Get(HeaderDeadReason))}
	dl.DeadAt, _ = time.Parse(time.RFC3339Nano, raw.Header.Get(HeaderDeadAt))
	return dl, nil
}
