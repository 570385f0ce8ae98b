package overrides

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/rules"
)

// DefaultKeyBucket is the KV bucket KeyConfig.Bucket defaults to.
const DefaultKeyBucket = "sluice_key_overrides"

// KeyConfig configures a KeyStore. Every field is optional.
type KeyConfig struct {
	// Bucket is the KV bucket's name. Default DefaultKeyBucket.
	Bucket string
	// Replicas of the bucket, as Config.Replicas. Default 1.
	Replicas int
	// Clock resolves `for` and stamps UpdatedAt; the index uses it for expiry. Default time.Now.
	Clock func() time.Time
	// Logger receives a line per single-key change written. Default: discard.
	Logger *slog.Logger
}

// WithDefaults returns c with every unset field set to its default.
func (c KeyConfig) WithDefaults() KeyConfig {
	if c.Bucket == "" {
		c.Bucket = DefaultKeyBucket
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// KeyStore reads and writes per-key overrides: one KV entry per (rule, key), KV key
// KeyKVKey(rule, key), value a ~40-byte JSON. History is 1: the audit trail keeps who
// changed what, and one revision per key keeps 100,000 overrides at their measured size
// (BenchmarkKeyOverrideStorage). Safe for concurrent use.
type KeyStore struct {
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	cfg KeyConfig
}

// OpenKeys creates (or updates) the key-override bucket and returns a store on it.
func OpenKeys(ctx context.Context, js jetstream.JetStream, cfg KeyConfig) (*KeyStore, error) {
	cfg = cfg.WithDefaults()
	if !validName.MatchString(cfg.Bucket) {
		return nil, fmt.Errorf("overrides: Bucket %q must be 1–128 characters of [A-Za-z0-9_-]", cfg.Bucket)
	}
	if cfg.Replicas != 1 && cfg.Replicas != 3 {
		return nil, fmt.Errorf("overrides: Replicas must be 1 or 3, got %d", cfg.Replicas)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       cfg.Bucket,
		Description:  "sluice per-key overrides (key: <rule>.k<base64url key>)",
		History:      1,
		Storage:      jetstream.FileStorage,
		Replicas:     cfg.Replicas,
		MaxValueSize: 4 << 10,
	})
	if err != nil {
		return nil, fmt.Errorf("overrides: open bucket %s: %w", cfg.Bucket, err)
	}
	return &KeyStore{js: js, kv: kv, cfg: cfg}, nil
}

// Bucket is the KV bucket's name.
func (s *KeyStore) Bucket() string { return s.cfg.Bucket }

// Now is the store's clock.
func (s *KeyStore) Now() time.Time { return s.cfg.Clock() }

// GetKey returns key's stored override in rule and whether there is one. An override
// that has ended reads as none.
func (s *KeyStore) GetKey(ctx context.Context, rule, key string) (KeyOverride, bool, error) {
	o, _, ok, err := s.currentKey(ctx, rule, key)
	if err != nil || !ok || !o.Active(s.cfg.Clock()) {
		return KeyOverride{}, false, err
	}
	return o, true, nil
}

func (s *KeyStore) currentKey(ctx context.Context, rule, key string) (KeyOverride, uint64, bool, error) {
	if !validName.MatchString(rule) {
		return KeyOverride{}, 0, false, fmt.Errorf("%w: %q", ErrInvalidName, rule)
	}
	e, err := s.kv.Get(ctx, KeyKVKey(rule, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return KeyOverride{}, 0, false, nil
	}
	if err != nil {
		return KeyOverride{}, 0, false, fmt.Errorf("overrides: get key override: %w", err)
	}
	o, err := decodeKeyOverride(e.Value())
	if err != nil {
		s.cfg.Logger.Warn("unreadable key override replaced", "rule", rule, "key", key, "err", err)
		return KeyOverride{}, e.Revision(), true, nil
	}
	o.Revision = e.Revision()
	return o, e.Revision(), true, nil
}

// ApplyKey merges p into key's override in rule r (whose rule-level override is ro) and
// writes the result with a compare-and-set, returning it and the override before.
// A result that overrides nothing deletes the entry. Errors match ErrInvalidPatch
// (naming the field), ErrNoQueue or ErrConflict.
func (s *KeyStore) ApplyKey(ctx context.Context, r *rules.Rule, ro Override, key string, p KeyPatch) (after, before KeyOverride, err error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		cur, rev, exists, err := s.currentKey(ctx, r.Name, key)
		if err != nil {
			return KeyOverride{}, KeyOverride{}, err
		}
		now := s.cfg.Clock()
		before = cur
		if !cur.Active(now) {
			before = KeyOverride{}
		}
		next := cur.MergeKey(p, now)
		if next.IsZero() && (p.Until != nil || p.For > 0) {
			field := "until"
			if p.For > 0 {
				field = "for"
			}
			return KeyOverride{}, before, fmt.Errorf("overrides: %w", PatchErrors{{Field: field,
				Message: "ends an override, but this key has none in force: give outflow, paused or window too"}})
		}
		if !next.IsZero() {
			if err := checkKeyOverride(r, ro, next, now); err != nil {
				return KeyOverride{}, before, err
			}
		}
		k := KeyKVKey(r.Name, key)
		switch {
		case next.IsZero() && !exists:
			return KeyOverride{}, before, nil
		case next.IsZero():
			err = s.kv.Purge(ctx, k, jetstream.LastRevision(rev))
		case exists && next.Equal(cur):
			return cur, before, nil
		default:
			next.UpdatedAt = now.UTC()
			data, eerr := encodeKeyOverride(next)
			if eerr != nil {
				return KeyOverride{}, before, eerr
			}
			if exists {
				next.Revision, err = s.kv.Update(ctx, k, data, rev)
			} else {
				next.Revision, err = s.kv.Create(ctx, k, data)
			}
		}
		if isConflict(err) {
			continue // re-read and re-merge: another admin wrote this key in between
		}
		if err != nil {
			return KeyOverride{}, before, fmt.Errorf("overrides: write key override: %w", err)
		}
		s.cfg.Logger.Info("key override written", "rule", r.Name, "key", key, "override", next.String(), "previous", before.String())
		if next.IsZero() {
			return KeyOverride{}, before, nil
		}
		return next, before, nil
	}
	return KeyOverride{}, KeyOverride{}, fmt.Errorf("%w: %s key %q: gave up after %d attempts", ErrConflict, r.Name, key, maxAttempts)
}

// KeyWrite is one line of a bulk write: key's whole override (Override zero: delete it).
type KeyWrite struct {
	Key      string
	Override KeyOverride
}

// bulkWindow is how many publishes a bulk write keeps unacknowledged at once: enough to
// hide the round trip, few enough that a slow server is not flooded.
const bulkWindow = 512

// PutKeys writes many key overrides of rule at once: each entry replaces the key's
// override (no merge: a bulk file states each key's override whole), a zero Override
// deletes it. Puts are pipelined (asynchronous publishes to the bucket's subjects,
// bulkWindow in flight), so 10,000 keys take well under a second on one server instead
// of 10,000 round trips. It returns how many were written; on an error some may be.
// The caller checks every entry against the rule first (CheckKeyWrite).
func (s *KeyStore) PutKeys(ctx context.Context, rule string, ws []KeyWrite) (int, error) {
	if !validName.MatchString(rule) {
		return 0, fmt.Errorf("%w: %q", ErrInvalidName, rule)
	}
	now := s.cfg.Clock().UTC()
	done := 0
	var pending []jetstream.PubAckFuture
	flush := func() error {
		for _, f := range pending {
			select {
			case <-f.Ok():
				done++
			case err := <-f.Err():
				return fmt.Errorf("overrides: bulk write: %w", err)
			case <-ctx.Done():
				return fmt.Errorf("overrides: bulk write: %w", ctx.Err())
			}
		}
		pending = pending[:0]
		return nil
	}
	for _, w := range ws {
		k := KeyKVKey(rule, w.Key)
		if w.Override.IsZero() {
			if err := flush(); err != nil {
				return done, err
			}
			if err := s.kv.Purge(ctx, k); err != nil {
				return done, fmt.Errorf("overrides: bulk delete: %w", err)
			}
			done++
			continue
		}
		o := w.Override
		o.UpdatedAt = now
		data, err := encodeKeyOverride(o)
		if err != nil {
			return done, err
		}
		f, err := s.js.PublishAsync("$KV."+s.cfg.Bucket+"."+k, data)
		if err != nil {
			return done, fmt.Errorf("overrides: bulk write: %w", err)
		}
		pending = append(pending, f)
		if len(pending) >= bulkWindow {
			if err := flush(); err != nil {
				return done, err
			}
		}
	}
	if err := flush(); err != nil {
		return done, err
	}
	s.cfg.Logger.Info("key overrides written in bulk", "rule", rule, "count", done)
	return done, nil
}

// CheckKeyWrite checks one bulk entry against rule r (with rule override ro) as ApplyKey
// does, naming the field.
func (s *KeyStore) CheckKeyWrite(r *rules.Rule, ro Override, o KeyOverride) error {
	if o.IsZero() {
		return nil
	}
	return checkKeyOverride(r, ro, o, s.cfg.Clock())
}

// deleteIf removes k's entry unless it changed since revision rev (so a sweeper never
// deletes an override an operator renewed a moment ago). A lost race is not an error.
func (s *KeyStore) deleteIf(ctx context.Context, k string, rev uint64) error {
	err := s.kv.Purge(ctx, k, jetstream.LastRevision(rev))
	if isConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}

// purgeMarkers drops the delete markers older than age, which the purges leave behind
// (one small message per deleted override) and which would otherwise add up.
func (s *KeyStore) purgeMarkers(ctx context.Context, age time.Duration) error {
	return s.kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(age))
}
