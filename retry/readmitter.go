package retry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/backoff"
	"github.com/sluice-io/sluice/queue"
)

// AdmitOutcome says whether a re-admission found room.
type AdmitOutcome int

const (
	// Admitted: m is in its key's queue (or already was: a duplicate of the same msgID).
	Admitted AdmitOutcome = iota
	// Full: the key's queue is still full.
	Full
	// WindowClosed: the rule's admission limit still denies (e.g. 5 per day, used up).
	WindowClosed
)

func (o AdmitOutcome) String() string {
	switch o {
	case Admitted:
		return "admitted"
	case Full:
		return "full"
	case WindowClosed:
		return "window_closed"
	}
	return "unknown"
}

// AdmitResult is the answer of an AdmitFunc. A "no room" answer is a value, not an error.
type AdmitResult struct {
	Outcome AdmitOutcome
	// RetryAt is the earliest time room is expected: for Full, now + depth ÷ outflow; for
	// WindowClosed, the window's reset. Zero means "no idea": the backoff alone decides.
	RetryAt time.Time
}

// AdmitFunc puts m back into its key's queue — the same admission the ingress does,
// without parking on failure. The wiring is, in essence:
//
//	if the rule's admission limit denies     → {WindowClosed, the window's reset}
//	queues.EnqueueAs(ctx, rule.Name, m, msgID)
//	  ok (also Duplicate)  → scheduler.MarkDue(rule, key) → {Admitted}
//	  queue.ErrFull        → {Full, now + depth ÷ outflow}
//	  any other error      → return it (the fired message is retried later; nothing is lost)
//
// msgID is the Nats-Msg-Id to publish with (see AdmitMsgID): it equals m.ID for a message
// that never entered its queue and differs for one that did, so a repeated re-admission of
// the same fired message (two re-admitters, a redelivery after a crash) is deduplicated by
// the queue stream while a legitimate later one is not. m.ID stays the message's id (the
// sink's Idempotency-Key). Admit must be safe for concurrent use.
type AdmitFunc func(ctx context.Context, rule Rule, m queue.Message, msgID string) (AdmitResult, error)

// ReadmitterConfig configures a Readmitter. Store, Dead, Admit and Rules are required.
type ReadmitterConfig struct {
	Store *Store
	Dead  *DeadLetters
	Admit AdmitFunc
	// Rules looks a rule up by name; false means the rule was removed and the message goes
	// to the dead letters with reason "rule removed".
	Rules RuleLookup

	// Consumer is the durable consumer's name, shared by every re-admitter on the same
	// retry stream. Default "sluice-readmitter".
	Consumer string
	// Workers handle fired messages concurrently (each Admit is a JetStream publish).
	// Default 128: 10,000 messages scheduled for one instant are re-admitted within ~0.5 s
	// (16 workers took ~1.5 s; TestScheduleLatenessReport).
	Workers int
	// AckWait: a fired message not acked this long after delivery (its re-admitter died)
	// is delivered again, to any re-admitter. Default 30s.
	AckWait time.Duration
	// MinBackoff and MaxBackoff bound the re-park backoff (exponential with full jitter,
	// indexed by how many times the message was parked): a message with no room is parked
	// again at max(AdmitResult.RetryAt, now + backoff), but never past its park.max_age.
	// Defaults 1s and 5m.
	MinBackoff, MaxBackoff time.Duration
	// ErrorBackoff caps the delay before a fired message whose handling failed (NATS
	// unavailable, Admit error) is tried again. Default 30s.
	ErrorBackoff time.Duration
	// DefaultMaxAge applies to rules without park.max_age. Default 24h.
	DefaultMaxAge time.Duration

	// Registerer registers sluice_readmissions_total. Default: none (counted, not exported).
	Registerer prometheus.Registerer
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with every unset field set to its default.
func (c ReadmitterConfig) WithDefaults() ReadmitterConfig {
	if c.Consumer == "" {
		c.Consumer = "sluice-readmitter"
	}
	if c.Workers <= 0 {
		c.Workers = 128
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	if c.ErrorBackoff <= 0 {
		c.ErrorBackoff = 30 * time.Second
	}
	if c.DefaultMaxAge <= 0 {
		c.DefaultMaxAge = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports a configuration that cannot work (after WithDefaults).
func (c ReadmitterConfig) Validate() error {
	switch {
	case c.Store == nil || c.Dead == nil || c.Admit == nil || c.Rules == nil:
		return fmt.Errorf("%w: readmitter needs Store, Dead, Admit and Rules", ErrInvalidConfig)
	case token(c.Consumer) != c.Consumer:
		return fmt.Errorf("%w: Consumer %q must be of [A-Za-z0-9_-]", ErrInvalidConfig, c.Consumer)
	case c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("%w: MaxBackoff %s < MinBackoff %s", ErrInvalidConfig, c.MaxBackoff, c.MinBackoff)
	}
	return nil
}

// keyHolds remembers, per key, what one worker re-parked under strict ordering: the last
// re-park of a round of firings (the schedules that fired for one second), which the key's
// later messages of that round park after; and every message of the key still parked, with
// when it fires again, so a younger message never overtakes an older one of its key. (Each
// message's own backoff doubles with its own park count: without this, a message parked once
// came back before one parked twice.)
type keyHolds map[string]*keyHold

type keyHold struct {
	fired   time.Time // the round: the second its schedules fired
	at      time.Time // when the key's messages of that round go again
	outcome AdmitOutcome
	// parked: message id → when it fires again, for the key's messages this worker re-parked
	// and has not seen fire since.
	parked map[string]time.Time
}

// get returns key's hold, creating it; it forgets holds over a minute old so the map stays
// small.
func (k keyHolds) get(key string, now time.Time) *keyHold {
	if h, ok := k[key]; ok {
		return h
	}
	if len(k) > 1024 {
		for key, old := range k {
			if now.Sub(old.fired) > time.Minute && old.latest().Before(now.Add(-time.Minute)) {
				delete(k, key)
			}
		}
	}
	h := &keyHold{parked: map[string]time.Time{}}
	k[key] = h
	return h
}

// latest is the last time one of the key's parked messages fires again (zero: none).
func (h *keyHold) latest() time.Time {
	var t time.Time
	for _, at := range h.parked {
		t = maxTime(t, at)
	}
	return t
}

// olderParked reports the latest time an older message of the key (its id sorts before
// id: ids begin with a time-ordered uuid v7) fires again, if one is still parked. Entries a
// minute past their time are forgotten: that message was handled elsewhere.
func (h *keyHold) olderParked(id string, now time.Time) (time.Time, bool) {
	var at time.Time
	found := false
	for other, t := range h.parked {
		if now.Sub(t) > time.Minute {
			delete(h.parked, other)
			continue
		}
		if other < id {
			at, found = maxTime(at, t), true
		}
	}
	return at, found
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// keyShard picks the worker of (rule, key): FNV-1a of both, modulo n.
func keyShard(rule, key string, n int) int {
	h := uint32(2166136261)
	for _, s := range [2]string{rule, key} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint32(s[i])) * 16777619
		}
		h = (h ^ 0xff) * 16777619
	}
	return int(h % uint32(n))
}

// Results of a handled fired message (sluice_readmissions_total{result}).
const (
	ResultAdmitted = "admitted"
	ResultReparked = "reparked"
	ResultDead     = "dead"
	ResultError    = "error"
)

// Readmitter consumes fired schedules and puts each message back into its key's queue,
// parks it again, or declares it dead. Run any number, in any number of processes: they
// share one durable consumer, and every step is idempotent (see the package doc).
//
// Start and Stop are safe to call twice (and Start again after Stop). Stop is a soft
// stop: it stops fetching, lets in-flight messages finish and hands buffered ones back to
// the server. Cancelling Start's ctx is the hard stop: in-flight Admit calls are
// cancelled, workers exit, and their messages are delivered again later; call Stop
// afterwards to release the consumer.
type Readmitter struct {
	cfg  ReadmitterConfig
	log  *slog.Logger
	runs *prometheus.CounterVec

	mu      sync.Mutex // guards started, cc, quit
	started bool
	cc      jetstream.ConsumeContext
	quit    chan struct{}
	wg      sync.WaitGroup
	pinID   atomic.Value // string: the pin id its last message came under (Nats-Pin-Id)

	errMu   sync.Mutex
	lastLog time.Time
	muted   int

	// handled, when set (by this package's tests, before Start), is told each fired
	// message's result once it is stored and acked (or nak'd, for ResultError): tests wait
	// on it instead of polling for the outcome.
	handled func(rule, result string)
}

// NewReadmitter returns a Readmitter; it does nothing until Start.
func NewReadmitter(cfg ReadmitterConfig) (*Readmitter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_readmissions_total",
		Help: "Fired parked messages and delivery retries handled by the re-admitter, by rule and result (admitted, reparked, dead, error).",
	}, []string{"rule", "result"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(runs); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("retry: register metrics: %w", err)
			}
			runs = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return &Readmitter{cfg: cfg, log: cfg.Logger.With("component", "re-admitter"), runs: runs}, nil
}

// The re-admitters of a retry stream share one durable consumer, pinned to one of them at a
// time (JetStream's priority group with the pinned-client policy): the messages of a key
// that fire together (parked 3 then 4) reach one process, whose workers take each key's
// messages in stream order — two processes could otherwise re-admit 4 before 3. The others
// wait; when the pinned one stops it gives the pin up, and when it dies the server moves it
// after pinnedTTL without a pull from it. A live re-admitter pulls again every pullExpiry,
// busy or not. A re-admitter stopped while idle cannot tell whether the server pinned one of
// its last, expiring pulls (it got no message): then the next one takes over after
// pinnedTTL, which is why it is short.
const (
	readmitGroup = "readmit"
	pinnedTTL    = 10 * time.Second
	pullExpiry   = 5 * time.Second // a pinned re-admitter pulls again well within pinnedTTL
)

// ConsumerConfig is the durable consumer all re-admitters of the retry stream share.
func (r *Readmitter) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       r.cfg.Consumer,
		Description:   "sluice re-admitter",
		FilterSubject: r.cfg.Store.subject("ready", ">"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.cfg.AckWait,
		MaxDeliver:    -1, // a parked message is never given up on here; max_age decides
		MaxAckPending: max(1024, 4*r.cfg.Workers),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// One re-admitter at a time (above).
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{readmitGroup},
		PinnedTTL:      pinnedTTL,
	}
}

// Start creates (or updates) the durable consumer and starts handling fired messages. It
// returns once consuming has started; a second call does nothing.
func (r *Readmitter) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return nil
	}
	// One channel per worker, and every message of a key to the same worker: the consumer
	// hands messages over in stream order, so the messages of one key (parked 3 then 4,
	// firing in the same second) are re-admitted in that order, never 4 before 3.
	works := make([]chan jetstream.Msg, r.cfg.Workers)
	for i := range works {
		works[i] = make(chan jetstream.Msg)
	}
	quit := make(chan struct{})
	consume := func() (jetstream.ConsumeContext, error) {
		cons, err := r.cfg.Store.js.CreateOrUpdateConsumer(ctx, r.cfg.Store.cfg.Stream, r.ConsumerConfig())
		if err != nil {
			return nil, fmt.Errorf("retry: re-admitter consumer: %w", err)
		}
		cc, err := cons.Consume(func(msg jetstream.Msg) {
			h := msg.Headers()
			if id := h.Get(pinIDHeader); id != "" {
				r.pinID.Store(id)
			}
			work := works[keyShard(h.Get(queue.HeaderRule), h.Get(queue.HeaderKey), len(works))]
			select {
			case work <- msg:
			case <-quit:
				_ = msg.Nak() // stopping: hand it to another re-admitter now
			case <-ctx.Done():
				_ = msg.Nak()
			}
		},
			jetstream.PullMaxMessages(4*r.cfg.Workers),
			jetstream.PullPriorityGroup(readmitGroup),
			jetstream.PullExpiry(pullExpiry),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				r.logError("consume", err)
			}))
		if err != nil {
			return nil, fmt.Errorf("retry: re-admitter consume: %w", err)
		}
		return cc, nil
	}
	cc, err := consume()
	if err != nil {
		return err
	}
	go r.reconsume(ctx, quit, cc, consume)
	r.started, r.cc, r.quit = true, cc, quit
	for _, work := range works {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.work(ctx, work, quit)
		}()
	}
	return nil
}

// A worker collects fired messages before it handles them, oldest first (sortFired), until
// none has come for gatherIdle, for gatherFor at most. Schedules that fire in the same
// second reach it in no set order, in a burst (the server fires them in one pass); under
// strict ordering a key's younger message handled first would take a place in the queue
// before an older one this worker has not seen yet.
const (
	gatherIdle = 5 * time.Millisecond
	gatherFor  = 50 * time.Millisecond
)

// work handles the fired messages of one worker's shard, gathered (gather) and oldest
// first, until quit or ctx ends.
func (r *Readmitter) work(ctx context.Context, work <-chan jetstream.Msg, quit <-chan struct{}) {
	held := keyHolds{}
	timer := time.NewTimer(gatherIdle)
	timer.Stop()
	defer timer.Stop()
	var batch []jetstream.Msg
	for {
		select {
		case msg := <-work:
			var ok bool
			if batch, ok = gather(ctx, append(batch[:0], msg), work, quit, timer); !ok {
				return
			}
			sortFired(batch)
			for _, msg := range batch {
				r.handle(ctx, msg, held)
			}
		case <-quit:
			return
		case <-ctx.Done():
			return
		}
	}
}

// gather adds to batch what reaches work until nothing has for gatherIdle, for gatherFor at
// most, or until quit (the worker then finishes what it holds). timer is the worker's,
// stopped. false: ctx ended.
func gather(ctx context.Context, batch []jetstream.Msg, work <-chan jetstream.Msg, quit <-chan struct{}, timer *time.Timer) ([]jetstream.Msg, bool) {
	until := time.Now().Add(gatherFor)
	timer.Reset(gatherIdle)
	for {
		select {
		case msg := <-work:
			batch = append(batch, msg)
			if time.Now().Before(until) {
				timer.Reset(min(gatherIdle, time.Until(until)))
			}
		case <-timer.C:
			return batch, true
		case <-quit:
			timer.Stop()
			return batch, true
		case <-ctx.Done():
			return batch, false
		}
	}
}

// sortFired orders fired messages by their message id: ids begin with a time-ordered uuid
// (v7), so a key's messages come in the order they were submitted.
func sortFired(msgs []jetstream.Msg) {
	slices.SortStableFunc(msgs, func(a, b jetstream.Msg) int {
		return strings.Compare(a.Headers().Get(queue.HeaderID), b.Headers().Get(queue.HeaderID))
	})
}

// reconsume starts consuming again when consuming ended without Stop: nats.go ends it on
// an error it treats as terminal — the consumer deleted, or a pull refused because another
// process rewrote the consumer without its priority group (a v0.3 drainer starting during a
// rolling upgrade). Re-creating the consumer puts the group back; until then the
// re-admitter would look healthy and consume nothing.
func (r *Readmitter) reconsume(ctx context.Context, quit chan struct{}, cc jetstream.ConsumeContext, consume func() (jetstream.ConsumeContext, error)) {
	wait := time.Second
	for {
		select {
		case <-cc.Closed():
		case <-quit:
			return
		case <-ctx.Done():
			return
		}
		for {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-quit:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			}
			next, err := consume()
			if err == nil {
				r.mu.Lock()
				if !r.started || r.quit != quit { // stopped meanwhile
					r.mu.Unlock()
					next.Stop()
					return
				}
				r.cc, cc, wait = next, next, time.Second
				r.mu.Unlock()
				r.log.Warn("re-admitter consuming again after its consumer ended")
				break
			}
			r.logError("consume again", err)
			wait = min(2*wait, 30*time.Second)
		}
	}
}

// Stop stops fetching, waits for in-flight messages and returns buffered ones to the
// server. Safe to call twice, and before Start; Start may be called again afterwards.
func (r *Readmitter) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return
	}
	r.started = false
	// Workers finish what they hold; the consumer hands every buffered message to the
	// callback, which gives it back to the server (Nak) so another re-admitter can take
	// it at once instead of after AckWait.
	close(r.quit)
	r.cc.Drain()
	select {
	case <-r.cc.Closed():
	case <-time.After(5 * time.Second):
	}
	r.wg.Wait()
	// Give the pin up, so another re-admitter takes over now rather than after pinnedTTL.
	// Only when this one still has it (its last message came under the pin the consumer
	// names now): unpinning another's pin would let two re-admitters hold messages of one
	// key at once.
	if id, _ := r.pinID.Swap("").(string); id != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := r.unpin(ctx, id); err != nil {
			r.log.Warn("giving up the pin failed: another re-admitter takes over when it times out", "err", err, "after", pinnedTTL)
		}
	}
}

// pinIDHeader carries the id of the pin a message was delivered under.
const pinIDHeader = "Nats-Pin-Id"

// unpin removes the consumer's pin if it is still id.
func (r *Readmitter) unpin(ctx context.Context, id string) error {
	s, err := r.cfg.Store.js.Stream(ctx, r.cfg.Store.cfg.Stream)
	if err != nil {
		return err
	}
	c, err := s.Consumer(ctx, r.cfg.Consumer)
	if err != nil {
		return err
	}
	for _, g := range c.CachedInfo().PriorityGroups {
		if g.Group == readmitGroup && g.PinnedClientID == id {
			return s.UnpinConsumer(ctx, r.cfg.Consumer, readmitGroup)
		}
	}
	return nil // the pin moved on (this one stalled past its TTL): not this one's to give up
}

// handle decides the fate of one fired message and acks it only once that is stored.
func (r *Readmitter) handle(ctx context.Context, msg jetstream.Msg, held keyHolds) {
	m, err := decode(msg.Headers(), msg.Data())
	if err != nil {
		// Not something Park wrote: nothing to re-admit, and redelivering cannot help.
		r.logError("malformed fired message (terminated)", err, "subject", msg.Subject())
		_ = msg.Term()
		return
	}
	meta := decodeMeta(msg.Headers())
	result, err := r.decide(ctx, m, meta, held)
	if err != nil {
		r.runs.WithLabelValues(m.Rule, ResultError).Inc()
		r.logError("fired message", err, "rule", m.Rule, "id", m.ID)
		md, _ := msg.Metadata()
		n := 1
		if md != nil {
			n = int(md.NumDelivered)
		}
		_ = msg.NakWithDelay(backoff.Exponential(r.cfg.MinBackoff, r.cfg.ErrorBackoff, n, nil))
		if r.handled != nil {
			r.handled(m.Rule, ResultError)
		}
		return
	}
	r.runs.WithLabelValues(m.Rule, result).Inc()
	if err := msg.Ack(); err != nil {
		// The outcome is stored; a lost ack only means the message is handled again,
		// which every outcome tolerates.
		r.logError("ack", err, "rule", m.Rule, "id", m.ID)
	}
	if r.handled != nil {
		r.handled(m.Rule, result)
	}
}

// decide re-admits m, parks it again, or declares it dead, and returns the result label.
// An error means nothing durable happened (or an idempotent step may be repeated).
func (r *Readmitter) decide(ctx context.Context, m queue.Message, meta scheduleMeta, held keyHolds) (string, error) {
	rule, ok := r.cfg.Rules(m.Rule)
	if !ok {
		if err := r.cfg.Dead.Dead(ctx, "", m, ReasonRuleRemoved); err != nil {
			return "", err
		}
		r.log.Info("dead: rule removed", "rule", m.Rule, "id", m.ID)
		return ResultDead, nil
	}
	now := r.cfg.Now()
	strict := !rule.Relaxed
	hk := m.Rule + "\x00" + m.Key
	var kh *keyHold
	if strict {
		kh = held.get(hk, now)
		delete(kh.parked, m.ID) // it fired: whatever becomes of it, it no longer holds the key's later ones
	}
	if m.Expired(now) {
		// Past its ttl, expires_at or queue.max_age while parked or scheduled: dead, not
		// admitted (and not dropped silently).
		if err := r.cfg.Dead.Dead(ctx, rule.Name, m, ReasonExpired); err != nil {
			return "", err
		}
		return ResultDead, nil
	}
	maxAge := rule.ParkMaxAge
	if maxAge <= 0 {
		maxAge = r.cfg.DefaultMaxAge
	}
	if !m.ParkedFrom.IsZero() && now.Sub(m.ParkedFrom) >= maxAge {
		reason := fmt.Sprintf("parked longer than park.max_age (%s)", maxAge)
		if m.LastError != "" {
			reason += ": " + m.LastError
		}
		if err := r.cfg.Dead.Dead(ctx, rule.Name, m, reason); err != nil {
			return "", err
		}
		return ResultDead, nil
	}

	// Strict ordering: a younger message waits for an older one of its key still parked,
	// and once a message went back to park in this round of firings, the key's later ones
	// follow it rather than overtake it through a place that freed up meanwhile.
	if strict {
		if olderAt, older := kh.olderParked(m.ID, now); older {
			// It goes after the older one: at its time, or MinBackoff from now once that
			// has passed. It did not find the queue full, so its park count and backoff stay
			// as they were: schedules firing in the same second come in no set order, and
			// counting each time a younger one fired first as a failed attempt doubled its
			// backoff every round while its queue had room.
			outcome := kh.outcome
			if outcome == Admitted {
				outcome = Full
			}
			return r.repark(ctx, rule, m, now, meta.Parks, maxTime(olderAt, now.Add(r.cfg.MinBackoff)), outcome, maxAge, kh)
		}
		if kh.fired.Equal(meta.RetryAt) && kh.at.After(now) {
			// Its round's first message found no room moments ago: it parks with it, until
			// the time that one was given, without trying. (A round whose time has passed —
			// this one was handled late — is over.)
			return r.repark(ctx, rule, m, now, meta.Parks+1, kh.at, kh.outcome, maxAge, kh)
		}
	}
	res, err := r.cfg.Admit(ctx, rule, m, AdmitMsgID(m))
	if err != nil {
		return "", fmt.Errorf("retry: admit: %w", err)
	}
	if res.Outcome == Admitted {
		return ResultAdmitted, nil
	}

	// Still no room: park again at max(suggested, backoff), but not past max_age so the
	// message is declared dead on time rather than one long backoff later. Under strict
	// ordering the backoff has no jitter, and this message opens a round: the key's
	// messages that fired with it park until the same time.
	parks := meta.Parks + 1
	at := r.cfg.reparkAt(now, parks, strict, res.RetryAt)
	if strict {
		kh.fired, kh.at, kh.outcome = meta.RetryAt, at, res.Outcome
	}
	return r.repark(ctx, rule, m, now, parks, at, res.Outcome, maxAge, kh)
}

// repark schedules m to fire again at at (not past its park.max_age), its parks-th park,
// after an outcome that left it out at now; kh, under strict ordering, records it as
// parked.
func (r *Readmitter) repark(ctx context.Context, rule Rule, m queue.Message, now time.Time, parks int, at time.Time, outcome AdmitOutcome, maxAge time.Duration, kh *keyHold) (string, error) {
	if m.ParkedFrom.IsZero() {
		m.ParkedFrom = now // a delivery retry whose queue is full starts its park here
	}
	if deadline := m.ParkedFrom.Add(maxAge); at.After(deadline) {
		at = deadline
	}
	m.LastError = "re-admission: " + outcome.String()
	if _, err := r.cfg.Store.schedule(ctx, KindPark, rule.Name, m, at, parks); err != nil {
		return "", err
	}
	if kh != nil {
		kh.parked[m.ID] = at
	}
	return ResultReparked, nil
}

// reparkAt is when a message with no room, parked for the parks-th time, fires again:
// after the backoff (exponential from MinBackoff to MaxBackoff; without jitter under strict
// ordering), or at suggested (AdmitResult.RetryAt) when that is later.
func (c ReadmitterConfig) reparkAt(now time.Time, parks int, strict bool, suggested time.Time) time.Time {
	var at time.Time
	if strict {
		at = now.Add(min(c.MaxBackoff, c.MinBackoff<<min(parks-1, 30)))
	} else {
		at = now.Add(backoff.Exponential(c.MinBackoff, c.MaxBackoff, parks, nil))
	}
	if suggested.After(at) {
		at = suggested
	}
	return at
}

// logError logs at most one error per second and counts the rest, so a NATS outage
// does not flood the log with one line per fired message.
func (r *Readmitter) logError(what string, err error, attrs ...any) {
	r.errMu.Lock()
	now := time.Now()
	if now.Sub(r.lastLog) < time.Second {
		r.muted++
		r.errMu.Unlock()
		return
	}
	muted := r.muted
	r.lastLog, r.muted = now, 0
	r.errMu.Unlock()
	r.log.Warn("re-admitter: "+what, append(attrs, "err", err, "suppressed", muted)...)
}
