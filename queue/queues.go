package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of the JetStream side. They work with errors.Is; the returned errors wrap them
// with the rule (and key) for logs.
var (
	// ErrFull: the key's queue already holds capacity messages. Nothing was stored; a later
	// Enqueue with the same message id is accepted once there is room.
	ErrFull = errors.New("queue: key's queue is full")
	// ErrEmpty: the key has no message (Pop).
	ErrEmpty = errors.New("queue: key's queue is empty")
	// ErrGone: the message was already deleted (Delete), e.g. by another drainer that popped
	// the same message after this one's lease expired. DeleteMsg of a deleted sequence fails
	// on the server, which makes Delete an atomic claim on the message.
	ErrGone = errors.New("queue: message already deleted")
	// ErrNoQueue: the rule's stream does not exist (Ensure was never called for it).
	ErrNoQueue = errors.New("queue: no stream for rule")
	// ErrRuleFull: the rule's stream holds its max_bytes; nothing was stored. One rule's
	// flood fills its own stream, not the store every rule shares.
	ErrRuleFull = errors.New("queue: the rule's queue stream is at its max_bytes")
	// ErrStoreFull: the JetStream server has no room left under its max_store (the store
	// every stream shares); nothing was stored. It clears once messages are delivered and
	// deleted, or the store is given more room.
	ErrStoreFull = errors.New("queue: the queue store (NATS JetStream) is out of space")
)

// JetStream API error codes nats.go has no sentinels for.
const (
	// jsErrStoreFailed: storing a message failed; its description says why ("maximum
	// messages per subject exceeded" — the server's atomic "queue full" with
	// DiscardNewPerSubject —, "maximum bytes exceeded", …).
	jsErrStoreFailed = 10077
	// jsErrInsufficientResources: the server's JetStream store (max_store) is full.
	jsErrInsufficientResources = 10023
	// jsErrStorageReservation: a stream's max_bytes cannot be reserved in the store.
	jsErrStorageReservation = 10047
)

// DefaultMaxBytes is a queue stream's default byte limit (Config.MaxBytes).
const DefaultMaxBytes = 1 << 30

// DefaultDuplicates is the queue streams' default duplicate window.
const DefaultDuplicates = 2 * time.Minute

// Config configures Queues. The zero value is usable: WithDefaults fills every field.
type Config struct {
	// Replicas of each queue stream: 1 on a single server, 3 on a production cluster
	// (a killed leader is replaced in ~5–7 s without losing acknowledged messages). Default 1.
	Replicas int
	// StreamPrefix is prepended to RuleToken(rule) to name the rule's stream. Default "SLUICE_Q_".
	StreamPrefix string
	// SubjectPrefix is the first token of every queue subject: <prefix>.<rule>.<key token>.
	// Default "q".
	SubjectPrefix string
	// Duplicates is the stream's duplicate window for Nats-Msg-Id. Default and minimum 2m
	// (long enough for an ingress client's retry after a timeout; the 24 h idempotency of
	// the HTTP API is the ingress's own store).
	Duplicates time.Duration
	// APIPrefix of the JetStream API (a JetStream domain changes it). Default "$JS.API.".
	APIPrefix string
	// MaxBytes bounds each rule's stream, unless the rule sets its own (queue.max_bytes):
	// a flood of one rule is refused (ErrRuleFull) while the others keep admitting.
	// JetStream reserves it in the server's store when the stream is created, so the sum
	// over queue rules (with the retry and dead-letter streams) must fit the server's
	// max_store. Default DefaultMaxBytes (1 GiB); -1 = no limit of its own.
	MaxBytes int64
	// PublishWait is how long an Enqueue keeps trying while its stream has no leader (an
	// R3 stream elects one in ~5–7 s after its leader dies) before it fails; the caller's
	// context ends it sooner. Default DefaultPublishWait (10 s).
	PublishWait time.Duration
}

// DefaultPublishWait is Config.PublishWait's default: an R3 stream's election fits in it.
const DefaultPublishWait = 10 * time.Second

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.StreamPrefix == "" {
		c.StreamPrefix = "SLUICE_Q_"
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = "q"
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.APIPrefix == "" {
		c.APIPrefix = "$JS.API."
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.PublishWait == 0 {
		c.PublishWait = DefaultPublishWait
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Replicas != 1 && c.Replicas != 3:
		return fmt.Errorf("queue: Replicas must be 1 or 3, got %d", c.Replicas)
	case c.Duplicates < 2*time.Minute:
		return fmt.Errorf("queue: Duplicates must be at least 2m, got %s", c.Duplicates)
	case RuleToken(c.SubjectPrefix) != c.SubjectPrefix:
		return fmt.Errorf("queue: SubjectPrefix %q must be one token of [A-Za-z0-9_-]", c.SubjectPrefix)
	case RuleToken(c.StreamPrefix) != c.StreamPrefix:
		return fmt.Errorf("queue: StreamPrefix %q must be of [A-Za-z0-9_-]", c.StreamPrefix)
	case c.PublishWait < 0:
		return fmt.Errorf("queue: PublishWait must not be negative, got %s", c.PublishWait)
	case c.MaxBytes < -1:
		return fmt.Errorf("queue: MaxBytes must be positive or -1 (no limit), got %d", c.MaxBytes)
	}
	return nil
}

// Queues is the JetStream side of sluice's per-key queues: one stream per queue rule, one
// subject per key, bounded per key by the server itself (MaxMsgsPerSubject with
// DiscardNewPerSubject), so any number of ingress processes share one capacity without a
// Redis round trip. It is safe for concurrent use.
type Queues struct {
	js    jetstream.JetStream
	async jetstream.JetStream // EnqueueBatch's, on js's connection
	cfg   Config
	// storeFullAt is when the store last refused a message for lack of room (unix ns).
	storeFullAt atomic.Int64

	mu      sync.RWMutex
	streams map[string]jetstream.Stream // by rule name

	adel asyncDeletes // DeleteAsync's inbox and pending requests
}

// NewQueues returns Queues on js. cfg is completed with WithDefaults and validated.
func NewQueues(js jetstream.JetStream, cfg Config) (*Queues, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	async, err := newAsync(js)
	if err != nil {
		return nil, fmt.Errorf("queue: JetStream context for batch publishes: %w", err)
	}
	return &Queues{js: js, async: async, cfg: cfg, streams: map[string]jetstream.Stream{}}, nil
}

// StreamName is the name of rule's stream.
func (q *Queues) StreamName(rule string) string { return q.cfg.StreamPrefix + RuleToken(rule) }

// Subject is the subject of one key's queue: <prefix>.<RuleToken(rule)>.<KeyToken(key)>.
func (q *Queues) Subject(rule, key string) string {
	rt := RuleToken(rule)
	b := make([]byte, 0, len(q.cfg.SubjectPrefix)+len(rt)+2+keyTokenLen(key))
	b = append(append(append(append(b, q.cfg.SubjectPrefix...), '.'), rt...), '.')
	return string(appendKeyToken(b, key))
}

func (q *Queues) ruleSubjects(rule string) string {
	return q.cfg.SubjectPrefix + "." + RuleToken(rule) + ".*"
}

// StreamConfig is the stream configuration of rule with the given capacity per key and
// the default byte limit (Config.MaxBytes).
//
// WorkQueuePolicy: a message lives until the drainer deletes it. DiscardNew together with
// DiscardNewPerSubject rejects the (capacity+1)-th message of a key with error 10077;
// MaxMsgsPerSubject alone would silently drop the key's oldest message (the FIFO head).
// FileStorage: memory storage degrades to ~100 pops/s when many keys interleave.
// AllowDirect: GET /v1/messages/{id} finds a message in its key's subject (Find).
func (q *Queues) StreamConfig(rule string, capacity int64) jetstream.StreamConfig {
	return q.streamConfig(rule, Limits{Capacity: capacity})
}

// Limits are one rule's stream limits.
type Limits struct {
	Capacity int64 // messages per key (required)
	MaxBytes int64 // bytes of the whole stream; 0 = Config.MaxBytes, -1 = none
}

func (q *Queues) streamConfig(rule string, l Limits) jetstream.StreamConfig {
	maxBytes := l.MaxBytes
	if maxBytes == 0 {
		maxBytes = q.cfg.MaxBytes
	}
	return jetstream.StreamConfig{
		Name:                 q.StreamName(rule),
		Description:          "sluice queue of rule " + rule,
		Subjects:             []string{q.ruleSubjects(rule)},
		Retention:            jetstream.WorkQueuePolicy,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxMsgsPerSubject:    l.Capacity,
		MaxMsgs:              -1,
		MaxBytes:             maxBytes, // DiscardNew: a full stream refuses (ErrRuleFull), drops nothing
		Storage:              jetstream.FileStorage,
		Replicas:             q.cfg.Replicas,
		Duplicates:           q.cfg.Duplicates,
		AllowDirect:          true, // Find reads a key's messages with batched direct gets
	}
}

// Ensure creates rule's stream, or updates it (a capacity change is a stream update that
// takes effect at once for every ingress). Lowering the capacity does not remove messages
// already queued; a key above the new capacity just accepts nothing until it drains.
func (q *Queues) Ensure(ctx context.Context, rule string, capacity int64) error {
	return q.EnsureLimits(ctx, rule, Limits{Capacity: capacity})
}

// EnsureLimits is Ensure with the rule's own byte limit. A limit the server's store cannot
// reserve is refused with an error that says what to change.
func (q *Queues) EnsureLimits(ctx context.Context, rule string, l Limits) error {
	if l.Capacity <= 0 {
		return fmt.Errorf("queue: rule %q: capacity must be positive, got %d", rule, l.Capacity)
	}
	cfg := q.streamConfig(rule, l)
	s, err := q.js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsErrStorageReservation || apiErr.ErrorCode == jsErrInsufficientResources) {
			return fmt.Errorf("queue: the queue store cannot reserve %d bytes for rule %q's stream (%w): lower the rule's queue.max_bytes or the ingress's -queue-max-bytes, or give the NATS server's JetStream a larger max_store", cfg.MaxBytes, rule, err)
		}
		return fmt.Errorf("queue: ensure stream for rule %q: %w", rule, err)
	}
	q.mu.Lock()
	q.streams[rule] = s
	q.mu.Unlock()
	return nil
}

// DeleteQueue deletes rule's stream and every message in it.
func (q *Queues) DeleteQueue(ctx context.Context, rule string) error {
	q.mu.Lock()
	delete(q.streams, rule)
	q.mu.Unlock()
	if err := q.js.DeleteStream(ctx, q.StreamName(rule)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("queue: delete stream of rule %q: %w", rule, err)
	}
	return nil
}

// stream returns rule's stream handle, looking it up once (a process that did not create
// the stream, e.g. a drainer started after the ingress, finds it here).
// forget drops rule's cached stream handle, so the next stream call reads its config again.
func (q *Queues) forget(rule string) {
	q.mu.Lock()
	delete(q.streams, rule)
	q.mu.Unlock()
}

func (q *Queues) stream(ctx context.Context, rule string) (jetstream.Stream, error) {
	q.mu.RLock()
	s, ok := q.streams[rule]
	q.mu.RUnlock()
	if ok {
		return s, nil
	}
	s, err := q.js.Stream(ctx, q.StreamName(rule))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w %q", ErrNoQueue, rule)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: stream of rule %q: %w", rule, err)
	}
	q.mu.Lock()
	q.streams[rule] = s
	q.mu.Unlock()
	return s, nil
}

// Enqueued is the result of a successful Enqueue.
type Enqueued struct {
	Seq uint64 // stream sequence of the message (of the original one for a duplicate)
	// Duplicate: a message with the same id was stored within the duplicate window; nothing
	// new was stored.
	Duplicate bool
}

// Enqueue appends m to the queue of (rule, m.Key), with m.ID as Nats-Msg-Id. A full queue is
// ErrFull (test with errors.Is) and stores nothing; the server decides atomically, so the
// capacity holds across any number of concurrent ingress processes. m.Rule is set to rule
// when empty. Without a stream for rule the publish has no responder (nats: no response
// from stream) — indistinguishable from a stream that is electing a leader, so the caller
// should treat it as "NATS unavailable".
func (q *Queues) Enqueue(ctx context.Context, rule string, m Message) (Enqueued, error) {
	return q.EnqueueAs(ctx, rule, m, "")
}

// Depth is the number of messages queued for one key. It asks the server for exactly that
// subject (~0.25 ms, flat up to 1M keys); it never lists other keys.
func (q *Queues) Depth(ctx context.Context, rule, key string) (uint64, error) {
	s, err := q.stream(ctx, rule)
	if err != nil {
		return 0, err
	}
	subject := q.Subject(rule, key)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("queue: depth of a key of rule %q: %w", rule, err)
	}
	return info.State.Subjects[subject], nil
}

// Stats summarises one rule's queue.
type Stats struct {
	Msgs uint64 // messages queued, all keys together
	Keys uint64 // keys with at least one message
	// Oldest is when the oldest message still queued was stored (the stream's first
	// message); zero when the queue is empty.
	Oldest time.Time
}

// Stats returns the rule's total depth and number of active keys (one cheap stream info
// request, whatever the number of keys).
func (q *Queues) Stats(ctx context.Context, rule string) (Stats, error) {
	s, err := q.stream(ctx, rule)
	if err != nil {
		return Stats{}, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("queue: stats of rule %q: %w", rule, err)
	}
	st := Stats{Msgs: info.State.Msgs, Keys: uint64(info.State.NumSubjects)}
	if st.Msgs > 0 {
		st.Oldest = info.State.FirstTime
	}
	return st, nil
}

// Usage is JetStream's storage use of the account the queues live in.
type Usage struct {
	Store    uint64 // bytes of file storage used, every stream of the account
	MaxStore int64  // the account's file storage limit in bytes; ≤ 0 when unlimited
}

// Usage reads the account's storage use (one account info request).
func (q *Queues) Usage(ctx context.Context) (Usage, error) {
	ai, err := q.js.AccountInfo(ctx)
	if err != nil {
		return Usage{}, fmt.Errorf("queue: account info: %w", err)
	}
	return Usage{Store: ai.Store, MaxStore: ai.Limits.MaxStore}, nil
}

// Keys lists every key that has messages, with its depth. It uses a wildcard subject filter
// over the whole stream, which costs seconds at 100k keys: only the reconciler calls it, and
// only when the cheap counters say something is missing.
func (q *Queues) Keys(ctx context.Context, rule string) (map[string]uint64, error) {
	s, err := q.stream(ctx, rule)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(q.ruleSubjects(rule)))
	if err != nil {
		return nil, fmt.Errorf("queue: keys of rule %q: %w", rule, err)
	}
	prefix := q.cfg.SubjectPrefix + "." + RuleToken(rule) + "."
	keys := make(map[string]uint64, len(info.State.Subjects))
	for subject, n := range info.State.Subjects {
		if len(subject) <= len(prefix) {
			continue
		}
		key, err := KeyFromToken(subject[len(prefix):])
		if err != nil {
			continue // not ours; cannot be addressed by any key, so nothing to drain
		}
		keys[key] = n
	}
	return keys, nil
}

// Popped is the head message of a key as read by Pop.
type Popped struct {
	Message
	Seq      uint64    // stream sequence: pass to Delete
	StoredAt time.Time // when the server stored it
}

// Pop reads the head (oldest message) of one key's queue. The message stays queued until
// Delete, so a drainer that dies before delivering loses nothing; ErrEmpty when the key has
// no message. A head that is not a sluice message is ErrBadMessage, returned together with
// its sequence, payload and whatever could be read.
func (q *Queues) Pop(ctx context.Context, rule, key string) (Popped, error) {
	return q.PopAfter(ctx, rule, key, 0)
}

// PopAfter is Pop of the key's first message after sequence after: the next message of a
// key whose earlier messages are being delivered (delivery.max_in_flight > 1).
func (q *Queues) PopAfter(ctx context.Context, rule, key string, after uint64) (Popped, error) {
	s, err := q.stream(ctx, rule)
	if err != nil {
		return Popped{}, err
	}
	// A sequence with a subject: the server returns the first message with seq >= it on
	// that subject (after+1 = 1 is the key's head), found in its per-subject index.
	raw, err := s.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(q.Subject(rule, key)))
	if errors.Is(err, nats.ErrNoResponders) {
		// The handle's cached config allows direct gets, and the stream no longer does: a
		// v0.3.0 ingress rewrites the stream without AllowDirect when it starts or reloads
		// (a rolling upgrade; TestRollingUpgrade), and a direct get then has no responder.
		// Read the stream's config again and get the message the way it now allows.
		q.forget(rule)
		if s, err = q.stream(ctx, rule); err != nil {
			return Popped{}, err
		}
		raw, err = s.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(q.Subject(rule, key)))
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Popped{}, ErrEmpty
	}
	if err != nil {
		return Popped{}, fmt.Errorf("queue: pop from rule %q: %w", rule, err)
	}
	m, err := DecodeStored(raw.Header, raw.Data, Stored{Rule: rule, Key: key, At: raw.Time})
	if err != nil {
		// Not a sluice message (published by something else): give the caller what there is,
		// so it can dead-letter the bytes rather than block the key forever.
		m = Message{ID: raw.Header.Get(HeaderMsgID), Rule: rule, Key: key, Payload: raw.Data}
		return Popped{Message: m, Seq: raw.Sequence, StoredAt: raw.Time}, fmt.Errorf("queue: pop from rule %q seq %d: %w", rule, raw.Sequence, err)
	}
	return Popped{Message: m, Seq: raw.Sequence, StoredAt: raw.Time}, nil
}

// Delete removes one message by sequence, after the sink accepted it. ErrGone when it was
// already deleted: exactly one of several concurrent Deletes of one sequence succeeds.
func (q *Queues) Delete(ctx context.Context, rule string, seq uint64) error {
	s, err := q.stream(ctx, rule)
	if err != nil {
		return err
	}
	if err := s.DeleteMsg(ctx, seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) || errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("%w: rule %q seq %d", ErrGone, rule, seq)
		}
		return fmt.Errorf("queue: delete from rule %q seq %d: %w", rule, seq, err)
	}
	return nil
}

// PurgeKey removes every message of one key.
func (q *Queues) PurgeKey(ctx context.Context, rule, key string) error {
	s, err := q.stream(ctx, rule)
	if err != nil {
		return err
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(q.Subject(rule, key))); err != nil {
		return fmt.Errorf("queue: purge a key of rule %q: %w", rule, err)
	}
	return nil
}

// Purge removes every message of every key of rule.
func (q *Queues) Purge(ctx context.Context, rule string) error {
	s, err := q.stream(ctx, rule)
	if err != nil {
		return err
	}
	if err := s.Purge(ctx); err != nil {
		return fmt.Errorf("queue: purge rule %q: %w", rule, err)
	}
	return nil
}

// Conn is the NATS connection the queues use: the own drain engine subscribes to a rule's
// subjects on it (core NATS sees every JetStream publish) to learn of new work.
func (q *Queues) Conn() *nats.Conn { return q.js.Conn() }

// RuleSubjects is the wildcard subject of every key of rule: <prefix>.<rule token>.*.
func (q *Queues) RuleSubjects(rule string) string { return q.ruleSubjects(rule) }

// KeyOfSubject is the key of a subject of rule's stream; false for a subject that names no
// key of rule.
func (q *Queues) KeyOfSubject(rule, subject string) (string, bool) {
	prefix := q.cfg.SubjectPrefix + "." + RuleToken(rule) + "."
	if len(subject) <= len(prefix) || subject[:len(prefix)] != prefix {
		return "", false
	}
	key, err := KeyFromToken(subject[len(prefix):])
	return key, err == nil
}
