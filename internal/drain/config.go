package drain

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// Policy is how a rule is drained right now: the rules file's values, or a live override
// (delivery.Policy).
type Policy = delivery.Policy

// RulePolicy is the default Config.Policy: the rule's own outflow and total_outflow.
func RulePolicy(r *rules.Rule) Policy { return delivery.RulePolicy(r) }

// Config configures a Drainer. Queues, Scheduler, Rules and Sink are required; every other
// field has the default documented on it (WithDefaults fills them in).
type Config struct {
	// Queues is the JetStream side (pop, delete). Required.
	Queues *queue.Queues
	// Scheduler is the Redis side (claim, release, mark due). Required.
	Scheduler *queue.Scheduler
	// Rules returns the current rules; only rules with a queue are drained. It is called
	// about once a second, so it should be cheap (e.g. a rules.Watcher's Current().QueueRules).
	// Required.
	Rules func() []*rules.Rule
	// Sink delivers messages. Required.
	Sink Sink
	// Retrier takes over failed messages of rules with `ordering: relaxed`. Default nil:
	// every rule retries in place (strict order).
	Retrier Retrier
	// DeadLetters receives messages that will not be delivered. Default nil: such messages
	// are logged at error level (with their id) and deleted.
	DeadLetters DeadLetters
	// States records message states for the status API. Default nil: not recorded.
	States StateRecorder
	// Policy returns a rule's current outflow and pause state; it is called before every
	// claim, so live overrides take effect on the next claim. Default RulePolicy.
	Policy func(*rules.Rule) Policy

	// Workers is the number of deliveries in flight at once per queue rule (one per key).
	// Every rule has its own workers and claims (MaxClaimed): a sink that hangs holds only
	// its own rule's, and every other rule keeps its outflow. Default 32.
	Workers int
	// MaxClaimed is the most keys of one rule this drainer holds claimed at once: waiting for
	// their slot (up to Lookahead), waiting for a worker, or being delivered. Waiting for a
	// slot does not occupy a worker, so a drainer keeps up with rate × Lookahead keys ahead
	// of time. Default 4 × Workers.
	MaxClaimed int
	// ClaimBatch is the most keys one claim takes. Default Workers.
	ClaimBatch int
	// Lease is how long a claimed key stays with this drainer without a renewal before another
	// drainer may take it (this one died): a killed drainer's keys are claimed again within
	// Lease. While it holds a key (waiting for the slot or a worker, delivering, bookkeeping)
	// the drainer renews the lease every LeaseRenew, so a slow sink may take its whole
	// sink.timeout; a sink that has not answered LeaseRenew after its timeout is given up on
	// (no more renewals; LeaseRenew later its worker is freed). A renewal that finds the claim gone marks the key lost: it is not
	// delivered, and a delivery in flight is cancelled (Sluice-Fence lets the sink refuse
	// the late one). Default 2.5s; at least 500ms.
	Lease time.Duration
	// LeaseRenew is the period of lease renewals (one Redis call per rule for all its held
	// keys). At most Lease/2. Default Lease/3 (833ms).
	LeaseRenew time.Duration
	// Lookahead claims keys this long before their slot and waits for the slot in-process,
	// so messages leave on time instead of one Redis round trip (or one late timer on a busy
	// machine) late — a late claim would also shift the key's later slots, lowering its
	// outflow. Default 20ms.
	Lookahead time.Duration
	// MaxPoll caps the wait between two claims when nothing is due (a newly marked key waits
	// at most this long, plus Lookahead). Default 20ms.
	MaxPoll time.Duration
	// RedisBackoff is the wait between two claims while Redis is unreachable. Default 500ms.
	RedisBackoff time.Duration
	// ReconcileEvery is the period of the cheap reconcile check per rule (two counters, see
	// queue.Reconcile); the stream's keys are listed only when two checks in a row see more
	// keys with messages than scheduled keys. Default 30s; negative disables reconciling.
	ReconcileEvery time.Duration
	// ReconcileForceEvery forces a full reconcile scan per rule this often. Default 10m.
	ReconcileForceEvery time.Duration
	// DepthEvery is the period of the sluice_queue_depth gauge update. Default 10s.
	DepthEvery time.Duration
	// RulesEvery is how often Rules is asked for changes. Default 1s.
	RulesEvery time.Duration
	// StopTimeout bounds a soft Stop: in-flight deliveries that have not finished by then are
	// cancelled (they stay queued and are delivered again later). Default 30s.
	StopTimeout time.Duration
	// Engine is how keys are shared among drainers: EngineOwn (default) owns whole partitions
	// and paces their keys in memory (own.go); EngineClaim (deprecated, kept for this release
	// so a deployment can cut over) claims due keys one by one from Redis. Every drainer of a
	// deployment must run the same engine (docs/operations.md "Cutting over to the own engine").
	Engine string
	// KeyOverrides, when set, gives each key's override (sluice tune --key, PATCH
	// /v1/admin/queues/{name}/keys/{key}): the own engine reads it for every dispatch of a key
	// (an in-memory lookup), so a key's outflow or pause follows its override within one
	// pacing tick. The claim engine does not read it. Default nil: no per-key overrides.
	KeyOverrides KeyOverrides
	// OwnPartitions is each rule's ownership partition count (engine own): the unit drainers
	// share. Default queue.DefaultOwnPartitions (16); at most queue.MaxPartitions.
	OwnPartitions int
	// OwnLease is how long an ownership lease lasts without renewal (engine own): a dead
	// drainer's partitions are owned again within OwnLease + OwnRenew. Default 1.5s; at
	// least 300ms.
	OwnLease time.Duration
	// OwnRenew is the period of ownership renewals (one Redis call for every rule). Default
	// OwnLease/3; at most OwnLease/2.
	OwnRenew time.Duration
	// RepairEvery is how often the own engine lists each rule's stream for keys it was not
	// told about (a lost notice): the most such a key is delayed. Default 30s; negative: only
	// when a partition is acquired.
	RepairEvery time.Duration
	// Owner identifies this drainer in claims. Default a random uuid.
	Owner string

	// Logger receives the drainer's logs. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Default nil: metrics are kept but not registered.
	Registerer prometheus.Registerer
	// Clock returns the current time; the drainer uses it only to measure durations (waiting
	// for a slot, backoffs): slots and leases are Redis's clock (queue.Scheduler), and a
	// slot is waited for as "slot − Redis's now" from the claim. Default time.Now.
	Clock func() time.Time
}

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.Policy == nil {
		c.Policy = RulePolicy
	}
	if c.Workers == 0 {
		c.Workers = 32
	}
	if c.MaxClaimed == 0 {
		c.MaxClaimed = 4 * c.Workers
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = min(c.Workers, c.MaxClaimed)
	}
	if c.Lease == 0 {
		c.Lease = 2500 * time.Millisecond
	}
	if c.LeaseRenew == 0 {
		c.LeaseRenew = (c.Lease / 3).Round(time.Millisecond)
	}
	if c.Lookahead == 0 {
		c.Lookahead = 20 * time.Millisecond
	}
	if c.MaxPoll == 0 {
		c.MaxPoll = 20 * time.Millisecond
	}
	if c.RedisBackoff == 0 {
		c.RedisBackoff = 500 * time.Millisecond
	}
	if c.ReconcileEvery == 0 {
		c.ReconcileEvery = 30 * time.Second
	}
	if c.ReconcileForceEvery == 0 {
		c.ReconcileForceEvery = 10 * time.Minute
	}
	if c.DepthEvery == 0 {
		c.DepthEvery = 10 * time.Second
	}
	if c.RulesEvery == 0 {
		c.RulesEvery = time.Second
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 30 * time.Second
	}
	if c.Engine == "" {
		c.Engine = EngineOwn
	}
	if c.OwnPartitions == 0 {
		c.OwnPartitions = queue.DefaultOwnPartitions
	}
	if c.OwnLease == 0 {
		c.OwnLease = 1500 * time.Millisecond
	}
	if c.OwnRenew == 0 {
		c.OwnRenew = (c.OwnLease / 3).Round(time.Millisecond)
	}
	if c.RepairEvery == 0 {
		c.RepairEvery = 30 * time.Second
	}
	if c.Owner == "" {
		c.Owner = uuid.NewString()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

// Validate reports a configuration that cannot work. Call it after WithDefaults.
func (c Config) Validate() error {
	var errs []error
	if c.Queues == nil {
		errs = append(errs, errors.New("Queues is required"))
	}
	if c.Scheduler == nil {
		errs = append(errs, errors.New("Scheduler is required"))
	}
	if c.Rules == nil {
		errs = append(errs, errors.New("Rules is required"))
	}
	if c.Sink == nil {
		errs = append(errs, errors.New("Sink is required"))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("Workers must be ≥ 1, got %d", c.Workers))
	}
	if c.MaxClaimed < 1 {
		errs = append(errs, fmt.Errorf("MaxClaimed must be ≥ 1, got %d", c.MaxClaimed))
	}
	if c.ClaimBatch < 1 || c.ClaimBatch > c.MaxClaimed {
		errs = append(errs, fmt.Errorf("ClaimBatch must be in [1, MaxClaimed=%d], got %d", c.MaxClaimed, c.ClaimBatch))
	}
	if c.Lease < 500*time.Millisecond {
		errs = append(errs, fmt.Errorf("Lease must be ≥ 500ms, got %s", c.Lease))
	}
	if c.LeaseRenew <= 0 || c.LeaseRenew > c.Lease/2 {
		errs = append(errs, fmt.Errorf("LeaseRenew must be in (0, Lease/2=%s], got %s", c.Lease/2, c.LeaseRenew))
	}
	if c.Lookahead < 0 || c.Lookahead >= c.Lease {
		errs = append(errs, fmt.Errorf("Lookahead must be in [0, Lease), got %s", c.Lookahead))
	}
	if c.MaxPoll <= 0 || c.RedisBackoff <= 0 || c.DepthEvery <= 0 || c.RulesEvery <= 0 || c.StopTimeout <= 0 {
		errs = append(errs, errors.New("MaxPoll, RedisBackoff, DepthEvery, RulesEvery and StopTimeout must be positive"))
	}
	if c.Engine != EngineClaim && c.Engine != EngineOwn {
		errs = append(errs, fmt.Errorf("Engine must be %q or %q, got %q", EngineClaim, EngineOwn, c.Engine))
	}
	if c.OwnPartitions < 1 || c.OwnPartitions > queue.MaxPartitions {
		errs = append(errs, fmt.Errorf("OwnPartitions must be in [1, %d], got %d", queue.MaxPartitions, c.OwnPartitions))
	}
	if c.OwnLease < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("OwnLease must be ≥ 300ms, got %s", c.OwnLease))
	}
	if c.OwnRenew <= 0 || c.OwnRenew > c.OwnLease/2 {
		errs = append(errs, fmt.Errorf("OwnRenew must be in (0, OwnLease/2=%s], got %s", c.OwnLease/2, c.OwnRenew))
	}
	if strings.ContainsAny(c.Owner, " \n#") {
		errs = append(errs, fmt.Errorf("Owner %q must not contain spaces or '#'", c.Owner))
	}
	if len(errs) > 0 {
		return fmt.Errorf("drain: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// KeyOverrides is where the own engine reads per-key overrides (overrides.KeyIndex).
// Subscribe (optional: checked with a type assertion) tells the engine of a change at once,
// so a key waiting on its old interval is re-timed without waiting for it.
type KeyOverrides interface {
	LookupAt(rule, key string, now time.Time) (overrides.KeyOverride, bool)
}

// keyOverrideSubscriber is the optional part of KeyOverrides (overrides.KeyIndex has it).
type keyOverrideSubscriber interface {
	Subscribe(fn func(rule, key string)) (stop func())
}
