package overrides

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/rules"
)

// ErrConflict is returned by Store.Apply when Patch.IfRevision is set and the stored
// override has changed since (HTTP 412 Precondition Failed), or when concurrent writers
// kept winning for every attempt (HTTP 409; retry).
var ErrConflict = errors.New("overrides: override changed concurrently")

// ErrInvalidName is returned for a rule name that cannot be a key (rule names are
// [A-Za-z0-9_-], see package rules).
var ErrInvalidName = errors.New("overrides: invalid rule name")

// ErrOutcomeUnknown is wrapped by Apply's error when the write was sent and its answer
// timed out: the override may be stored (read it to see). Never answer it as "nothing
// happened": a caller retrying under If-Match would be refused for its own change.
var ErrOutcomeUnknown = errors.New("overrides: write sent, outcome unknown")

// DefaultBucket is the KV bucket Config.Bucket defaults to.
const DefaultBucket = "sluice_overrides"

// maxAttempts bounds Apply's read-merge-write loop under contention. Admins patch a rule
// a few times a day; losing this many races in a row (with jittered waits in between)
// means something is looping.
const maxAttempts = 100

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// Config configures a Store. Every field is optional; WithDefaults fills them in.
type Config struct {
	// Bucket is the KV bucket's name. Default DefaultBucket. Tests set a unique one.
	Bucket string
	// Replicas of the bucket: 1 on a single server, 3 on a production cluster, the same
	// as the queue streams (SLUICE_REPLICAS). Default 1.
	Replicas int
	// History is how many revisions per rule the bucket keeps: the last changes as an
	// audit trail (the watcher only needs the latest). Default 5; 1 to 64.
	History int
	// Clock stamps Override.UpdatedAt. Default time.Now.
	Clock func() time.Time
	// Logger receives a line per change written. Default: discard.
	Logger *slog.Logger
}

// WithDefaults returns c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.History == 0 {
		c.History = 5
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case !validName.MatchString(c.Bucket):
		return fmt.Errorf("overrides: Bucket %q must be 1–128 characters of [A-Za-z0-9_-]", c.Bucket)
	case c.Replicas != 1 && c.Replicas != 3:
		return fmt.Errorf("overrides: Replicas must be 1 or 3, got %d", c.Replicas)
	case c.History < 1 || c.History > 64:
		return fmt.Errorf("overrides: History must be 1 to 64, got %d", c.History)
	}
	return nil
}

// Store reads and writes overrides in the KV bucket. It is safe for concurrent use.
type Store struct {
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	cfg Config
}

// Open creates the bucket, or updates its configuration, and returns a Store on it.
// Every ingress and drainer calls it at start; creating an existing bucket with the same
// configuration is a no-op, so the order they start in does not matter.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "sluice live overrides of queue rules (key: rule name)",
		History:     uint8(cfg.History),
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		// An override is a few hundred bytes; a cap stops a bug from filling the disk.
		MaxValueSize: 64 << 10,
	})
	if err != nil {
		return nil, fmt.Errorf("overrides: open bucket %s: %w", cfg.Bucket, err)
	}
	return &Store{js: js, kv: kv, cfg: cfg}, nil
}

// Bucket is the KV bucket's name.
func (s *Store) Bucket() string { return s.cfg.Bucket }

// Get returns the override of rule name, and false when there is none.
func (s *Store) Get(ctx context.Context, name string) (Override, bool, error) {
	if !validName.MatchString(name) {
		return Override{}, false, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Override{}, false, nil
	}
	if err != nil {
		return Override{}, false, fmt.Errorf("overrides: get %s: %w", name, err)
	}
	o, err := decodeEntry(e)
	if err != nil {
		return Override{}, false, err
	}
	return o, true, nil
}

func decodeEntry(e jetstream.KeyValueEntry) (Override, error) {
	var o Override
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		return Override{}, fmt.Errorf("overrides: %s at revision %d: %w", e.Key(), e.Revision(), err)
	}
	o.Revision = e.Revision()
	return o, nil
}

// Apply merges p into the stored override of rule r and writes the result, returning it.
//
// The write is a compare-and-set on the key's revision: when another admin wrote in
// between, Apply reads again and merges p onto their version, so neither loses fields.
// With p.IfRevision set it fails with ErrConflict instead (the caller's view is stale).
//
// The merged override must fit r (the rule as the rules file has it now): a check-only
// rule cannot be tuned (ErrNoQueue), and the effective total_outflow must stay ≥ the
// effective outflow. Such errors match ErrInvalidPatch and name the field. A patch that
// leaves nothing overridden deletes the key, as a reset does; a reset patch is Reset.
func (s *Store) Apply(ctx context.Context, r *rules.Rule, p Patch) (Override, error) {
	if r == nil {
		return Override{}, fmt.Errorf("overrides: apply: nil rule")
	}
	name := r.Name
	if !validName.MatchString(name) {
		return Override{}, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		cur, rev, exists, err := s.current(ctx, name)
		if err != nil {
			return Override{}, err
		}
		if p.IfRevision != nil && *p.IfRevision != rev {
			return Override{}, fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, name, rev, *p.IfRevision)
		}
		next := cur.Merge(p)
		if !p.Reset {
			if err := fits(r, next, p); err != nil {
				return Override{}, err
			}
		}
		switch {
		case next.IsZero() && !exists:
			return Override{}, nil
		case next.IsZero():
			err = s.kv.Delete(ctx, name, jetstream.LastRevision(rev))
		case exists && next.Equal(cur):
			return cur, nil // nothing changes: no write, no event for every drainer
		default:
			next.UpdatedAt = s.cfg.Clock().UTC()
			var data []byte
			data, err = json.Marshal(next)
			if err != nil {
				return Override{}, fmt.Errorf("overrides: encode %s: %w", name, err)
			}
			if exists {
				next.Revision, err = s.kv.Update(ctx, name, data, rev)
			} else {
				next.Revision, err = s.kv.Create(ctx, name, data)
			}
		}
		if isConflict(err) {
			if p.IfRevision != nil {
				return Override{}, fmt.Errorf("%w: %s changed while writing", ErrConflict, name)
			}
			// Jitter so that writers that collided do not collide again in lock step.
			wait := time.Duration(rand.Int64N(int64(min(time.Millisecond<<min(attempt, 6), 50*time.Millisecond))))
			select {
			case <-ctx.Done():
				return Override{}, fmt.Errorf("overrides: write %s: %w", name, ctx.Err())
			case <-time.After(wait):
			}
			continue
		}
		if err != nil {
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return Override{}, fmt.Errorf("%w: write %s: %w", ErrOutcomeUnknown, name, err)
			}
			return Override{}, fmt.Errorf("overrides: write %s: %w", name, err)
		}
		if next.IsZero() {
			s.cfg.Logger.Info("override removed", "rule", name, "previous", cur)
			return Override{}, nil
		}
		s.cfg.Logger.Info("override written", "rule", name, "revision", next.Revision, "override", next, "previous", cur)
		return next, nil
	}
	return Override{}, fmt.Errorf("%w: %s: gave up after %d attempts", ErrConflict, name, maxAttempts)
}

// current reads the stored override and the revision to compare-and-set against.
// A deleted key reads as not existing; Create handles its delete marker itself.
func (s *Store) current(ctx context.Context, name string) (Override, uint64, bool, error) {
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Override{}, 0, false, nil
	}
	if err != nil {
		return Override{}, 0, false, fmt.Errorf("overrides: get %s: %w", name, err)
	}
	o, err := decodeEntry(e)
	if err != nil {
		// A value this version cannot read is replaced rather than merged into: the
		// admin's patch is the best statement of intent there is.
		s.cfg.Logger.Warn("unreadable override replaced", "rule", name, "err", err)
		return Override{}, e.Revision(), true, nil
	}
	return o, e.Revision(), true, nil
}

// fits checks that o can apply to r, naming the patched field when it cannot.
func fits(r *rules.Rule, o Override, p Patch) error {
	if r.Queue == nil {
		if o.touchesQueue() || o.Paused != nil {
			return fmt.Errorf("%w: %w", ErrNoQueue, PatchErrors{{
				Field:   firstField(p),
				Message: fmt.Sprintf("rule %q is check-only (no queue): nothing to tune", r.Name),
			}})
		}
		return nil
	}
	outflow, total := r.Queue.Outflow, r.Queue.TotalOutflow
	if o.Outflow != nil {
		outflow = *o.Outflow
	}
	if o.TotalOutflow != nil {
		total = *o.TotalOutflow
	}
	if !total.Zero() && total.PerSecond() < outflow.PerSecond() {
		// The message is about Field and does not name it again: PatchError.Error and
		// the ingress's problem (field, then detail) put the field in front.
		pe := &PatchError{Field: "outflow",
			Message: fmt.Sprintf("must be ≤ total_outflow (%.6g/s > %.6g/s); change total_outflow too, or null it to use the rules file's",
				outflow.PerSecond(), total.PerSecond())}
		if p.TotalOutflow != nil {
			pe = &PatchError{Field: "total_outflow",
				Message: fmt.Sprintf("must be ≥ outflow (%.6g/s < %.6g/s); change outflow too, or null it to use the rules file's",
					total.PerSecond(), outflow.PerSecond())}
		}
		return fmt.Errorf("overrides: %w", PatchErrors{pe})
	}
	if _, err := Effective(r, o); err != nil {
		return fmt.Errorf("overrides: %w", PatchErrors{{Message: err.Error()}})
	}
	return nil
}

func firstField(p Patch) string {
	switch {
	case p.Outflow != nil || p.Unset&FieldOutflow != 0:
		return "outflow"
	case p.TotalOutflow != nil || p.Unset&FieldTotalOutflow != 0:
		return "total_outflow"
	case p.Capacity != nil || p.Unset&FieldCapacity != 0:
		return "capacity"
	case p.Paused != nil || p.Unset&FieldPaused != 0:
		return "paused"
	}
	return ""
}

func isConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Reset deletes the override of rule name: the rules file applies again. Resetting a
// rule without an override is a no-op. The delete marker stays in the bucket's history.
func (s *Store) Reset(ctx context.Context, name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	_, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("overrides: reset %s: %w", name, err)
	}
	if err := s.kv.Delete(ctx, name); err != nil {
		return fmt.Errorf("overrides: reset %s: %w", name, err)
	}
	s.cfg.Logger.Info("override reset", "rule", name)
	return nil
}

// All returns every stored override by rule name (for GET /v1/admin/queues). A value
// this version cannot read is left out and logged.
func (s *Store) All(ctx context.Context) (map[string]Override, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("overrides: list: %w", err)
	}
	defer w.Stop()
	out := map[string]Override{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("overrides: list: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("overrides: list: watch closed")
			}
			if e == nil { // all current values delivered
				return out, nil
			}
			o, err := decodeEntry(e)
			if err != nil {
				s.cfg.Logger.Warn("unreadable override skipped", "rule", e.Key(), "err", err)
				continue
			}
			out[e.Key()] = o
		}
	}
}
