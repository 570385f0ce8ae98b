package retry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/queue"
)

// Sentinel errors. Returned errors wrap them; test with errors.Is.
var (
	// ErrFull: the retry stream is at Config.FullAt of its MaxMsgs or MaxBytes. Nothing was
	// parked; the ingress should reject (429) rather than risk the stream discarding the
	// oldest parked messages.
	ErrFull = errors.New("retry: retry stream is full")
	// ErrInvalidConfig is wrapped by every Validate error.
	ErrInvalidConfig = errors.New("retry: invalid config")
	// ErrNotFound: no dead letter with that id.
	ErrNotFound = errors.New("retry: dead letter not found")
	// ErrRuleNotFound: the dead letter's rule no longer exists, so it cannot be replayed.
	ErrRuleNotFound = errors.New("retry: rule not found")
	// ErrRuleFull: the rule already holds its share (Config.RuleShare) of the retry stream.
	// Nothing was parked or scheduled; other rules still have room. An error that is
	// ErrRuleFull is also ErrFull, so a caller that handles a full stream handles it too.
	ErrRuleFull = errors.New("retry: the rule holds its share of the retry stream")
)

// ruleFullError is ErrRuleFull with the figures, and ErrFull for callers that only know that.
type ruleFullError struct {
	rule  string
	n     uint64
	limit float64
	bytes bool
}

func (e *ruleFullError) Error() string {
	what := "messages"
	if e.bytes {
		what = "messages, about its byte share at the stream's mean message size"
	}
	return fmt.Sprintf("%s: rule %q holds %d %s (its share: %.0f messages)", ErrRuleFull, e.rule, e.n, what, e.limit)
}

func (e *ruleFullError) Is(target error) bool { return target == ErrRuleFull || target == ErrFull }

// Config configures the retry stream (Store). The zero value is valid.
type Config struct {
	// Stream is the retry stream's name. Default "SLUICE_RETRY".
	Stream string
	// SubjectPrefix, when set, is prepended (with a '.') to every subject of the stream:
	// park.…, retry.…, ready.…. Default "" (no prefix). Tests use it, with Stream, to run
	// side by side on one server.
	SubjectPrefix string
	// Replicas: 1 on a single server, 3 on a production cluster. Default 1.
	Replicas int
	// MaxMsgs bounds the stream: pending schedules plus fired messages not yet handled.
	// Default 10,000,000 (~160 B of server memory and the message size on disk each).
	MaxMsgs int64
	// MaxBytes bounds the stream's storage. Default 8 GiB.
	MaxBytes int64
	// FullAt is the fraction of MaxMsgs or MaxBytes at which Park refuses with ErrFull.
	// The stream must discard old messages when full (schedules cannot use DiscardNew), so
	// the headroom keeps it from ever getting there. Default 0.95.
	FullAt float64
	// RuleShare is the part of FullAt × MaxMsgs, and of FullAt × MaxBytes, that the messages
	// of one rule may take (parked, scheduled, fired and not yet handled): Park and Schedule
	// of a rule that holds it refuse with ErrRuleFull, so one rule (one tenant) flooding the
	// shared stream leaves room for every other rule. Counted per rule on the server (the
	// rule's subjects); its bytes are estimated as its messages × the stream's mean message
	// size, since the server keeps no bytes per subject. Delivery retries and re-parks of
	// messages already in the stream are not refused (they replace a message, or were
	// accepted already). Default 0.25; 1 turns the per-rule bound off.
	RuleShare float64
	// StateInterval is how old the stream fullness (and a rule's count) that Park and
	// Schedule rely on may be. Default 1s.
	StateInterval time.Duration
	// APIPrefix of the JetStream API (a JetStream domain changes it). Default "$JS.API.".
	APIPrefix string
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.Stream == "" {
		c.Stream = "SLUICE_RETRY"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxMsgs == 0 {
		c.MaxMsgs = 10_000_000
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 8 << 30
	}
	if c.FullAt == 0 {
		c.FullAt = 0.95
	}
	if c.RuleShare == 0 {
		c.RuleShare = DefaultRuleShare
	}
	if c.StateInterval == 0 {
		c.StateInterval = time.Second
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
func (c Config) Validate() error {
	switch {
	case token(c.Stream) != c.Stream:
		return fmt.Errorf("%w: Stream %q must be of [A-Za-z0-9_-]", ErrInvalidConfig, c.Stream)
	case c.SubjectPrefix != "" && !validPrefix(c.SubjectPrefix):
		return fmt.Errorf("%w: SubjectPrefix %q must be dot-separated tokens of [A-Za-z0-9_-]", ErrInvalidConfig, c.SubjectPrefix)
	case c.Replicas != 1 && c.Replicas != 3:
		return fmt.Errorf("%w: Replicas must be 1 or 3, got %d", ErrInvalidConfig, c.Replicas)
	case c.MaxMsgs < 1 || c.MaxBytes < 1:
		return fmt.Errorf("%w: MaxMsgs and MaxBytes must be positive", ErrInvalidConfig)
	case c.FullAt <= 0 || c.FullAt > 1:
		return fmt.Errorf("%w: FullAt must be in (0, 1], got %g", ErrInvalidConfig, c.FullAt)
	case c.RuleShare <= 0 || c.RuleShare > 1:
		return fmt.Errorf("%w: RuleShare must be in (0, 1], got %g", ErrInvalidConfig, c.RuleShare)
	}
	return nil
}

func validPrefix(p string) bool {
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '.' {
			if tok := p[start:i]; tok == "" || token(tok) != tok {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// Store is the retry stream: Park and ScheduleRetry write schedules into it, the
// Readmitter consumes what fires. Safe for concurrent use.
type Store struct {
	js  jetstream.JetStream
	cfg Config

	stream streamHandle

	roomMu      sync.Mutex // one fullness check at a time; guards the fields below
	checkedAt   time.Time
	full        bool
	streamMsgs  uint64 // the stream's state at checkedAt, for the rules' byte estimate
	streamBytes uint64

	ruleMu sync.Mutex            // guards rules
	rules  map[string]*ruleCount // by rule name: its messages in the stream, as last counted
}

// ruleCount is a rule's messages in the retry stream: counted on the server at most once per
// StateInterval, plus what this process added since.
type ruleCount struct {
	counting sync.Mutex // held by the one caller counting on the server
	mu       sync.Mutex // guards the fields below; never held across a request
	counted  bool       // n has been read from the server once
	next     time.Time  // when n is due for a recount
	n        uint64
}

// recountCost bounds what counting a rule costs the server: the next count of a rule comes
// no sooner than this many times as long as the last one took (at 50,000 messages of one
// rule a count took ~0.33 s on a busy 2-core machine, so it is then read every ~7 s
// instead of every second: ≤ 5% of the server's time per ingress and rule).
const recountCost = 20

// DefaultRuleShare is Config.RuleShare's default: a quarter of the stream per rule.
const DefaultRuleShare = 0.25

// NewStore returns the retry stream on js. Call Ensure once (any process may) before use.
func NewStore(js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{js: js, cfg: cfg, rules: map[string]*ruleCount{}}, nil
}

// Config returns the store's completed configuration.
func (s *Store) Config() Config { return s.cfg }

// StreamConfig is the retry stream's configuration (see the package doc).
func (s *Store) StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              s.cfg.Stream,
		Description:       "sluice parked messages and delivery retries (scheduled re-admission)",
		Subjects:          []string{s.subject(KindPark, ">"), s.subject(KindRetry, ">"), s.subject(KindSchedule, ">"), s.subject("ready", ">")},
		Retention:         jetstream.WorkQueuePolicy,
		Discard:           jetstream.DiscardOld, // DiscardNew is refused with schedules; see FullAt
		Storage:           jetstream.FileStorage,
		Replicas:          s.cfg.Replicas,
		MaxMsgs:           s.cfg.MaxMsgs,
		MaxBytes:          s.cfg.MaxBytes,
		AllowMsgSchedules: true,
		AllowRollup:       true, // schedules are stored with a per-subject rollup
		AllowDirect:       true, // Find reads the ready subject with batched direct gets
	}
}

// Ensure creates the retry stream, or updates it to StreamConfig. Idempotent; safe to call
// from every process at start-up.
func (s *Store) Ensure(ctx context.Context) error {
	return s.stream.ensure(ctx, s.js, s.StreamConfig())
}

// handle returns the stream handle, looked up once.
func (s *Store) handle(ctx context.Context) (jetstream.Stream, error) {
	return s.stream.get(ctx, s.js, s.cfg.Stream)
}

func (s *Store) subject(parts ...string) string { return joinSubject(s.cfg.SubjectPrefix, parts...) }

// ScheduleSubject is the subject holding the schedule of message id of rule (kind is
// KindPark, KindRetry or KindSchedule). A scheduled delivery's subject also names its key
// (from the id), so the schedules of one key can be counted (ScheduledCount).
func (s *Store) ScheduleSubject(kind, rule, id string) string {
	if kind == KindSchedule {
		ref, _ := queue.ParseID(id)
		return s.subject(kind, token(rule), queue.KeyToken(ref.Key), queue.IDToken(id))
	}
	return s.subject(kind, token(rule), queue.IDToken(id))
}

// Schedule keeps m in the retry stream until at (rounded up to the second, never earlier),
// then the re-admitter puts it into its key's queue — or parks it, if the queue has no room
// then. It returns the fire time. ErrFull when the retry stream is nearly full, ErrRuleFull
// (also ErrFull) when the rule holds its share of it (Config.RuleShare).
//
// The schedule carries a Nats-Msg-Id of its own (scheduleMsgID), so the same message
// scheduled again within the stream's duplicate window — an idempotent submission repeated
// after its first attempt may or may not have stored it, re-admitted under the original's
// id — is stored once: ErrScheduledAlready then, even if the first schedule has fired or
// been cancelled since.
func (s *Store) Schedule(ctx context.Context, rule string, m queue.Message, at time.Time) (time.Time, error) {
	if _, ok := queue.ParseID(m.ID); !ok {
		return time.Time{}, fmt.Errorf("retry: schedule %s: not an id that names its key", m.ID)
	}
	if err := s.checkRule(ctx, rule, m); err != nil {
		return time.Time{}, err
	}
	return s.schedule(ctx, KindSchedule, rule, m, at, 0)
}

// ErrScheduledAlready is Schedule's answer for a message whose schedule the stream stored
// within its duplicate window: nothing was stored again.
var ErrScheduledAlready = errors.New("retry: the message was scheduled already")

// scheduleMsgID is the Nats-Msg-Id of message id's schedule. Nothing else published to the
// retry stream carries one.
func scheduleMsgID(id string) string { return "schedule:" + id }

// ScheduledTotal is how many messages of rule, all keys, wait for their delivery time
// (O(scheduled messages of the rule) on the server; for the admin API and metrics).
func (s *Store) ScheduledTotal(ctx context.Context, rule string) (uint64, error) {
	return subjectCount(ctx, s.js, s.cfg.APIPrefix, s.cfg.Stream, s.subject(KindSchedule, token(rule), ">"))
}

// ScheduledCount is how many messages of (rule, key) wait for their delivery time: one
// count on the server, which walks only that key's schedule subjects (at most the rule's
// max_scheduled), so a scheduled submission can afford it.
func (s *Store) ScheduledCount(ctx context.Context, rule, key string) (uint64, error) {
	return subjectCount(ctx, s.js, s.cfg.APIPrefix, s.cfg.Stream, s.subject(KindSchedule, token(rule), queue.KeyToken(key), "*"))
}

// ReadySubject is where the schedules of rule fire.
func (s *Store) ReadySubject(rule string) string { return s.subject("ready", token(rule)) }

// Park keeps m in the retry stream until at (rounded up to the second) and returns that
// fire time — the honest retry_at for the client. Then the re-admitter tries to put m back
// into its key's queue. m.ParkedFrom is set to now when zero (the start of park.max_age).
//
// Parking the same message id again replaces its pending schedule (at most one per id).
// ErrFull when the retry stream is nearly full; nothing was stored then.
//
// A rule that holds its share of the stream (Config.RuleShare) is refused with ErrRuleFull.
func (s *Store) Park(ctx context.Context, rule string, m queue.Message, at time.Time) (time.Time, error) {
	if err := s.checkRule(ctx, rule, m); err != nil {
		return time.Time{}, err
	}
	return s.schedule(ctx, KindPark, rule, m, at, 1)
}

// ScheduleRetry keeps a delivery retry of a relaxed rule: the message is re-admitted
// into its key's queue at at (rounded up to the second). m.Attempt and m.LastError
// describe the failed attempt.
func (s *Store) ScheduleRetry(ctx context.Context, rule string, m queue.Message, at time.Time) error {
	_, err := s.schedule(ctx, KindRetry, rule, m, at, 0)
	return err
}

// schedule publishes m as a one-time schedule firing at FireTime(at) on rule's ready subject.
func (s *Store) schedule(ctx context.Context, kind string, rule string, m queue.Message, at time.Time, parks int) (time.Time, error) {
	if rule == "" {
		return time.Time{}, fmt.Errorf("retry: %s %s: no rule", kind, m.ID)
	}
	if m.ID == "" {
		return time.Time{}, fmt.Errorf("retry: %s: message without id", kind)
	}
	m.Rule = rule
	now := s.cfg.Now()
	if kind == KindPark && m.ParkedFrom.IsZero() {
		m.ParkedFrom = now
	}
	if err := s.checkRoom(ctx); err != nil {
		return time.Time{}, err
	}
	fire := FireTime(at, now)
	msg := encode(s.ScheduleSubject(kind, rule, m.ID), m)
	msg.Header.Set(HeaderKind, kind)
	msg.Header.Set(HeaderRetryAt, fire.Format(time.RFC3339))
	if parks > 0 {
		msg.Header.Set(HeaderParks, strconv.Itoa(parks))
	}
	opts := []jetstream.PublishOpt{
		jetstream.WithScheduleAt(fire),
		jetstream.WithScheduleTarget(s.ReadySubject(rule)),
		jetstream.WithExpectStream(s.cfg.Stream),
	}
	if kind == KindSchedule {
		opts = append(opts, jetstream.WithMsgID(scheduleMsgID(m.ID)))
	}
	ack, err := s.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return time.Time{}, fmt.Errorf("retry: %s %s of rule %q: %w", kind, m.ID, rule, err)
	}
	if ack.Duplicate {
		return time.Time{}, fmt.Errorf("%w: %s", ErrScheduledAlready, m.ID)
	}
	return fire, nil
}

// checkRoom refuses with ErrFull while the stream is nearly full. The fullness is read at
// most once per StateInterval (one STREAM.INFO, ~0.3 ms) and shared by all callers.
func (s *Store) checkRoom(ctx context.Context) error {
	s.roomMu.Lock()
	defer s.roomMu.Unlock()
	now := s.cfg.Now()
	if now.Sub(s.checkedAt) >= s.cfg.StateInterval {
		st, err := s.handle(ctx)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("retry: stream %s info: %w", s.cfg.Stream, err)
		}
		lim := s.cfg.FullAt
		s.full = float64(info.State.Msgs) >= lim*float64(s.cfg.MaxMsgs) ||
			float64(info.State.Bytes) >= lim*float64(s.cfg.MaxBytes)
		s.streamMsgs, s.streamBytes = info.State.Msgs, info.State.Bytes
		s.checkedAt = now
	}
	if s.full {
		return ErrFull
	}
	return nil
}

// Parked counts the messages of rule in the retry stream: parked ones waiting for their
// time, plus fired ones (parks and delivery retries) the re-admitter has not handled yet.
// O(parked messages of the rule) on the server; meant for metrics on an interval.
func (s *Store) Parked(ctx context.Context, rule string) (uint64, error) {
	return s.countWithReady(ctx, rule, s.subject(KindPark, token(rule), "*"))
}

// countWithReady counts the messages on subjects matching filter plus those fired for rule
// that the re-admitter has not handled yet (its ready subject).
func (s *Store) countWithReady(ctx context.Context, rule, filter string) (uint64, error) {
	n, err := subjectCount(ctx, s.js, s.cfg.APIPrefix, s.cfg.Stream, filter)
	if err != nil {
		return 0, err
	}
	ready := s.ReadySubject(rule)
	st, err := s.handle(ctx)
	if err != nil {
		return 0, err
	}
	// A literal subject filter is a single lookup on the server, whatever the stream holds.
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(ready))
	if err != nil {
		return 0, fmt.Errorf("retry: stream %s info: %w", s.cfg.Stream, err)
	}
	return n + info.State.Subjects[ready], nil
}

// checkRule refuses with ErrRuleFull while rule holds its share of the stream: RuleShare of
// FullAt × MaxMsgs messages, or of FullAt × MaxBytes bytes by estimate (its messages × the
// stream's mean message size: the server counts messages per subject but keeps no bytes).
// It also checks the whole stream (ErrFull). The rule's count is read from the server at
// most once per StateInterval (less often when counting takes long: recountCost); each
// message let in meanwhile adds one, so a burst between
// two counts does not all pass on a stale figure. Other processes' additions show at the
// next count: across N processes a rule may overshoot by what they admit in one interval.
// m's size counts into the stream's mean at once, so a flood of big messages right after
// a count (or into an empty stream) meets the byte share without waiting for the next one.
func (s *Store) checkRule(ctx context.Context, rule string, m queue.Message) error {
	if err := s.checkRoom(ctx); err != nil {
		return err
	}
	if s.cfg.RuleShare >= 1 || rule == "" {
		return nil
	}
	size := uint64(len(m.Payload) + len(m.ID) + len(m.Key) + 200) // + headers and subject, roughly
	for k, v := range m.Headers {
		size += uint64(len(k) + len(v))
	}
	s.roomMu.Lock()
	msgs, bytes := s.streamMsgs+1, s.streamBytes+size // as if m were in
	s.roomMu.Unlock()

	s.ruleMu.Lock()
	rc := s.rules[rule]
	if rc == nil {
		rc = &ruleCount{}
		s.rules[rule] = rc
	}
	s.ruleMu.Unlock()

	if err := s.recount(ctx, rule, rc); err != nil {
		return err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	share := s.cfg.RuleShare * s.cfg.FullAt
	maxMsgs := share * float64(s.cfg.MaxMsgs)
	if float64(rc.n) >= maxMsgs {
		return &ruleFullError{rule: rule, n: rc.n, limit: maxMsgs}
	}
	mean := float64(bytes) / float64(msgs)
	if maxByMean := share * float64(s.cfg.MaxBytes) / mean; float64(rc.n+1) > maxByMean {
		return &ruleFullError{rule: rule, n: rc.n, limit: maxByMean, bytes: true}
	}
	// Counted now, until the next reads of the server replace both figures.
	rc.n++
	s.roomMu.Lock()
	s.streamMsgs, s.streamBytes = msgs, bytes
	s.roomMu.Unlock()
	return nil
}

// recount reads rc's figure from the server when it is due. One caller counts while the
// others go on with the figure they have (and their own additions): a Park never waits on
// another's count, except for the rule's very first figure, which every caller needs.
func (s *Store) recount(ctx context.Context, rule string, rc *ruleCount) error {
	now := s.cfg.Now()
	rc.mu.Lock()
	counted, due := rc.counted, !rc.counted || !now.Before(rc.next)
	rc.mu.Unlock()
	if !due {
		return nil
	}
	if counted {
		if !rc.counting.TryLock() {
			return nil // another caller is counting; the current figure serves meanwhile
		}
	} else {
		rc.counting.Lock()
		rc.mu.Lock()
		done := rc.counted // another caller counted while this one waited
		rc.mu.Unlock()
		if done {
			rc.counting.Unlock()
			return nil
		}
	}
	defer rc.counting.Unlock()
	start := time.Now()
	n, err := s.RuleMessages(ctx, rule)
	took := time.Since(start)
	if err != nil {
		if counted {
			return nil // the figure it had stands; the publish that follows meets the same server
		}
		return err
	}
	rc.mu.Lock()
	rc.n, rc.counted, rc.next = n, true, now.Add(max(s.cfg.StateInterval, recountCost*took))
	rc.mu.Unlock()
	return nil
}

// RuleMessages counts the messages of rule in the retry stream: parked, scheduled and
// delivery retries waiting for their time, and fired ones the re-admitter has not handled
// yet. Two requests to the server, which walks the rule's subjects (O(its messages), no
// I/O): Park and Schedule read it at most once per StateInterval per rule.
func (s *Store) RuleMessages(ctx context.Context, rule string) (uint64, error) {
	// *.<rule>.> is park.<rule>.<id>, retry.<rule>.<id> and schedule.<rule>.<key>.<id>, each
	// message its own subject; ready.<rule> has one token too few to match.
	return s.countWithReady(ctx, rule, s.subject("*", token(rule), ">"))
}
