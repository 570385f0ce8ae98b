// Package status keeps what GET /v1/messages/{id} answers and what makes an
// idempotency key work: one small Redis hash per message, and one string per
// idempotency key.
//
// Layout (prefix is "" in production, a per-test prefix in tests):
//
//	<prefix>sl:m:{<id>}            hash: domain rule key state attempts created_at updated_at last_error retry_at
//	<prefix>sl:idem:{<rule>}:<k>   string: the message id that first used idempotency key k under rule
//
// The id is the hash tag of a status key, so status records spread over a Redis Cluster;
// every key has a TTL. A record is kept for Config.TTL after its last change (default 24 h,
// refreshed on every state change, so a final state is kept at least that long), which is
// API.md's "kept at least 24 h after the final state". Memory: a record is a listpack hash
// of roughly 200–300 bytes, so the TTL times the admission rate bounds Redis memory; lower
// TTL for very high sustained rates.
//
// State changes from drainers (Record) are best effort and asynchronous: they are queued
// and written in pipelined batches by one goroutine, so a delivery never waits for Redis.
// A Store is safe for concurrent use.
package status

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// States a message can be in (API.md).
const (
	Queued     = "queued"
	Parked     = "parked"
	Delivering = "delivering"
	Delivered  = "delivered"
	Retrying   = "retrying"
	Dead       = "dead"
)

// ErrNotFound is returned by Get for an unknown (or expired) id.
var ErrNotFound = errors.New("status: message not found")

// Status is one message's record.
type Status struct {
	ID        string    `json:"id"`
	Domain    string    `json:"domain"`
	Rule      string    `json:"rule"`
	Key       string    `json:"key"`
	State     string    `json:"state"`
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	LastError string    `json:"last_error"`
	RetryAt   time.Time `json:"-"` // for parked messages; reported by the ingress as retry_at
}

// Config of a Store. The zero value is usable after WithDefaults.
type Config struct {
	// Prefix is put before every key (tests use a per-test prefix). Default "".
	Prefix string
	// TTL is how long a record is kept after its last change. Default 24h + 1h of slack.
	TTL time.Duration
	// IdempotencyTTL is how long an idempotency key maps to its first message. Default 24h.
	IdempotencyTTL time.Duration
	// BatchSize is the most state changes written in one pipeline. Default 256.
	BatchSize int
	// QueueSize bounds state changes waiting to be written; beyond it changes are dropped
	// (and counted) rather than slowing deliveries. Default 65536.
	QueueSize int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = 25 * time.Hour
	}
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = 24 * time.Hour
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 256
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 65536
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Store reads and writes status records and idempotency keys in Redis.
type Store struct {
	cfg     Config
	rdb     redis.UniversalClient
	changes chan change

	startOnce, stopOnce sync.Once
	stop                chan struct{}
	done                chan struct{}

	mu      sync.Mutex
	dropped int64
}

type change struct {
	id, state, lastErr string
	attempt            int
	at                 time.Time
}

//go:embed record.lua
var recordLua string

var recordScript = redis.NewScript(recordLua)

// New returns a Store; call Start to run the background writer used by Record.
func New(rdb redis.UniversalClient, cfg Config) *Store {
	cfg = cfg.WithDefaults()
	return &Store{
		cfg:     cfg,
		rdb:     rdb,
		changes: make(chan change, cfg.QueueSize),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

func (s *Store) key(id string) string { return s.cfg.Prefix + "sl:m:{" + id + "}" }

func (s *Store) idemKey(rule, k string) string {
	return s.cfg.Prefix + "sl:idem:{" + rule + "}:" + k
}

// Scripts returns the Lua scripts the store runs, so a caller that pipelines them can
// load them into a fresh Redis after a NOSCRIPT error.
func Scripts() []*redis.Script { return []*redis.Script{recordScript} }

// Put writes a new message's record (see PutPipe).
func (s *Store) Put(ctx context.Context, st Status) error {
	pipe := s.rdb.Pipeline()
	s.PutPipe(ctx, pipe, st)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("status: put %s: %w", st.ID, err)
	}
	return nil
}

// PutPipe queues the record of a newly admitted message on a pipeline the caller
// executes, so admission writes it in the same round trip as its other Redis work. Plain
// commands, no script, and the state is never overwritten: a drainer may already have
// reported a later state — it can pop the message before the admission's write lands.
// A queued record (every admission) is two commands: its state is left out and read as
// queued, with updated_at = created_at, until the first state change writes one (see Get).
func (s *Store) PutPipe(ctx context.Context, pipe redis.Pipeliner, st Status) {
	k := s.key(st.ID)
	fields := make([]any, 0, 12)
	fields = append(fields, "domain", st.Domain, "rule", st.Rule, "key", st.Key, "created_at", st.CreatedAt.UnixMicro())
	if !st.RetryAt.IsZero() {
		fields = append(fields, "retry_at", st.RetryAt.UnixMicro())
	}
	if st.LastError != "" {
		fields = append(fields, "last_error", st.LastError)
	}
	pipe.HSet(ctx, k, fields...)
	if st.State != Queued {
		pipe.HSetNX(ctx, k, "state", st.State)
		pipe.HSetNX(ctx, k, "updated_at", st.CreatedAt.UnixMicro())
	}
	pipe.PExpire(ctx, k, s.cfg.TTL)
}

// DeletePipe queues the removal of a record (an admission whose publish failed).
func (s *Store) DeletePipe(ctx context.Context, pipe redis.Pipeliner, id string) {
	pipe.Del(ctx, s.key(id))
}

// Get returns the record of id, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (Status, error) {
	m, err := s.rdb.HGetAll(ctx, s.key(id)).Result()
	if err != nil {
		return Status{}, fmt.Errorf("status: get %s: %w", id, err)
	}
	if m["state"] == "" && m["created_at"] != "" {
		// Written by PutPipe for an admission, no state change since.
		m["state"], m["updated_at"] = Queued, m["created_at"]
	}
	if m["state"] == "" {
		return Status{}, ErrNotFound
	}
	st := Status{
		ID: id, Domain: m["domain"], Rule: m["rule"], Key: m["key"], State: m["state"],
		LastError: m["last_error"],
	}
	st.Attempts, _ = strconv.Atoi(m["attempts"])
	st.CreatedAt = micros(m["created_at"])
	st.UpdatedAt = micros(m["updated_at"])
	st.RetryAt = micros(m["retry_at"])
	return st, nil
}

func micros(v string) time.Time {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

// SetState changes the state of a record synchronously (used by the ingress and the
// re-admitter, e.g. parked → queued), creating it if missing.
func (s *Store) SetState(ctx context.Context, id, state string, attempt int, lastErr string, retryAt time.Time) error {
	var ra int64
	if !retryAt.IsZero() {
		ra = retryAt.UnixMicro()
	}
	err := recordScript.Run(ctx, s.rdb, []string{s.key(id)},
		state, attempt, s.cfg.Now().UnixMicro(), lastErr, s.cfg.TTL.Milliseconds(), ra).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("status: set state %s: %w", id, err)
	}
	return nil
}

// Record implements drain.StateRecorder: it queues the change for the background writer
// and returns at once. Changes are dropped (and counted) if the queue is full.
func (s *Store) Record(_ context.Context, id, state string, attempt int, lastErr string) {
	select {
	case s.changes <- change{id: id, state: state, attempt: attempt, lastErr: lastErr, at: s.cfg.Now()}:
	default:
		s.mu.Lock()
		s.dropped++
		s.mu.Unlock()
	}
}

// Dropped is the number of state changes dropped because the write queue was full.
func (s *Store) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Start runs the background writer until Stop. Safe to call twice.
func (s *Store) Start(ctx context.Context) {
	s.startOnce.Do(func() { go s.run(ctx) })
}

// Stop flushes queued changes (bounded by a few seconds) and stops the writer. Safe to call twice.
func (s *Store) Stop() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.startOnce.Do(func() { close(s.done) }) // never started: nothing to wait for
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
}

func (s *Store) run(ctx context.Context) {
	defer close(s.done)
	batch := make([]change, 0, s.cfg.BatchSize)
	var lastLog time.Time
	flush := func() {
		if len(batch) == 0 {
			return
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		pipe := s.rdb.Pipeline()
		ttl := s.cfg.TTL.Milliseconds()
		for _, c := range batch {
			recordScript.Run(wctx, pipe, []string{s.key(c.id)}, c.state, c.attempt, c.at.UnixMicro(), c.lastErr, ttl, 0)
		}
		_, err := pipe.Exec(wctx)
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// A fresh Redis (restart, failover) has no script cache: load it and retry once.
			recordScript.Load(wctx, s.rdb)
			pipe = s.rdb.Pipeline()
			for _, c := range batch {
				recordScript.EvalSha(wctx, pipe, []string{s.key(c.id)}, c.state, c.attempt, c.at.UnixMicro(), c.lastErr, ttl, 0)
			}
			_, err = pipe.Exec(wctx)
		}
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) && time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			s.cfg.Logger.Warn("status: state changes not written", "count", len(batch), "err", err)
		}
		batch = batch[:0]
	}
	for {
		select {
		case c := <-s.changes:
			batch = append(batch, c)
			// Take whatever else is waiting, up to a batch, then write.
			for len(batch) < s.cfg.BatchSize {
				select {
				case c := <-s.changes:
					batch = append(batch, c)
					continue
				default:
				}
				break
			}
			flush()
		case <-s.stop:
			for {
				select {
				case c := <-s.changes:
					batch = append(batch, c)
					if len(batch) == s.cfg.BatchSize {
						flush()
					}
					continue
				default:
				}
				break
			}
			flush()
			return
		case <-ctx.Done():
			flush()
			return
		}
	}
}

// ClaimIdempotency maps (rule, k) to id unless it is already mapped; it returns the id
// that owns the key (id itself when the claim succeeded) and whether this call claimed it.
func (s *Store) ClaimIdempotency(ctx context.Context, rule, k, id string) (owner string, claimed bool, err error) {
	ik := s.idemKey(rule, k)
	res, err := s.rdb.SetArgs(ctx, ik, id, redis.SetArgs{Mode: "NX", Get: true, TTL: s.cfg.IdempotencyTTL}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return id, true, nil
	case err != nil:
		return "", false, fmt.Errorf("status: idempotency key: %w", err)
	case res == id:
		return id, true, nil
	default:
		return res, false, nil
	}
}

// ReleaseIdempotency removes the mapping of (rule, k) if it still points at id, so a
// request that was not accepted (429, 503) can be retried with the same key.
func (s *Store) ReleaseIdempotency(ctx context.Context, rule, k, id string) error {
	err := releaseScript.Run(ctx, s.rdb, []string{s.idemKey(rule, k)}, id).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("status: release idempotency key: %w", err)
	}
	return nil
}

var releaseScript = redis.NewScript(`
-- KEYS[1] idempotency key; ARGV[1] id. Deletes the key only if it still maps to id.
-- Returns 1 if deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)
