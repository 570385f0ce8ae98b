// Package audit keeps the trail of operator changes — who (the admin token's name), what,
// on what, the state before and after, when — as a structured log line and a durable
// record in a JetStream stream bounded by age and count (SLUICE_AUDIT, 90 days and 100,000
// records by default). GET /v1/admin/audit lists it, newest first.
//
// Besides the changes, it keeps the calls that were refused (401, 403) or failed, and the
// cancels of messages (DELETE /v1/messages/{id}).
//
// The records form a chain: each carries the SHA-256 of the record before it (Prev), and is
// stored only if that record is still the stream's last (an expected-last-sequence
// publish), so every process appends to one chain. Verify walks it: a record deleted from
// the middle breaks a link (and leaves a gap in the sequence numbers). What retention
// removes — the oldest records, by age or count — shows as the chain starting later, not
// as a break.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Actions recorded.
const (
	ActionTune      = "tune"       // PATCH of outflow, total_outflow or capacity
	ActionReset     = "reset"      // PATCH {"reset":true}
	ActionPause     = "pause"      // PATCH {"paused":true}
	ActionResume    = "resume"     // PATCH {"paused":false}
	ActionPurge     = "purge"      // POST .../purge
	ActionKeyDelete = "key_delete" // DELETE .../keys/{key}
	ActionKeyTune   = "key_tune"   // PATCH .../keys/{key}: a per-key override set or changed
	ActionKeyReset  = "key_reset"  // PATCH .../keys/{key} {"reset":true} (or nothing left overridden)
	ActionKeyBulk   = "key_bulk"   // POST .../keys: many per-key overrides at once (counts, not each key)
	ActionReplay    = "replay"     // POST /v1/admin/dead/{id}/replay
	ActionReplayAll = "replay_all" // POST /v1/admin/dead/replay
	ActionCancel    = "cancel"     // DELETE /v1/messages/{id} (any result)
	ActionRefused   = "refused"    // an admin call answered 401 or 403 (Target: method and path)
	ActionFailed    = "failed"     // an admin call that changes something, answered another 4xx or a 5xx
)

// Record is one operator change.
type Record struct {
	Seq    uint64    `json:"seq"` // position in the stream; set by List
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"` // the token's name
	Scope  string    `json:"scope"` // the token's scope
	Action string    `json:"action"`
	Queue  string    `json:"queue,omitempty"`
	Target string    `json:"target,omitempty"` // a key or a dead letter's id
	Before any       `json:"before,omitempty"`
	After  any       `json:"after,omitempty"`
	Result string    `json:"result"` // "ok", or what went wrong
	Remote string    `json:"remote,omitempty"`
	// Prev is the hex SHA-256 of the stored record before this one ("" for the first).
	Prev string `json:"prev,omitempty"`
}

// Config of the trail.
type Config struct {
	Stream   string        // default "SLUICE_AUDIT"
	Subject  string        // default "sluice.audit"
	MaxAge   time.Duration // default 90 days
	MaxMsgs  int64         // default 100000
	Replicas int           // default 1
	Logger   *slog.Logger
}

// Log is the audit trail. Safe for concurrent use.
type Log struct {
	js  jetstream.JetStream
	cfg Config
}

// New returns the trail on js; call Ensure once before use.
func New(js jetstream.JetStream, cfg Config) *Log {
	if cfg.Stream == "" {
		cfg.Stream = "SLUICE_AUDIT"
	}
	if cfg.Subject == "" {
		cfg.Subject = "sluice.audit"
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 90 * 24 * time.Hour
	}
	if cfg.MaxMsgs <= 0 {
		cfg.MaxMsgs = 100_000
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Log{js: js, cfg: cfg}
}

// StreamConfig is the audit stream's configuration.
func (l *Log) StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        l.cfg.Stream,
		Description: "sluice operator changes (audit trail)",
		Subjects:    []string{l.cfg.Subject},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    l.cfg.Replicas,
		MaxAge:      l.cfg.MaxAge,
		MaxMsgs:     l.cfg.MaxMsgs,
	}
}

// Ensure creates or updates the stream.
func (l *Log) Ensure(ctx context.Context) error {
	_, err := l.js.CreateOrUpdateStream(ctx, l.StreamConfig())
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", l.cfg.Stream, err)
	}
	return nil
}

// Append logs r (level WARN for destructive actions, INFO otherwise) and stores it. The
// log line is written even when the store fails, so a change is never untraced.
func (l *Log) Append(ctx context.Context, r Record) error {
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	level := slog.LevelInfo
	if r.Action == ActionPurge || r.Action == ActionKeyDelete {
		level = slog.LevelWarn
	}
	l.cfg.Logger.Log(ctx, level, "audit: "+r.Action, "actor", r.Actor, "scope", r.Scope, "action", r.Action,
		"queue", r.Queue, "target", r.Target, "before", r.Before, "after", r.After, "result", r.Result, "remote", r.Remote)
	err := l.appendChained(ctx, r)
	if err != nil {
		l.cfg.Logger.Error("audit: record not stored (the log line above is the only trace)", "action", r.Action, "actor", r.Actor, "err", err)
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// appendChained stores r linked to the stream's last record, again on a new last record
// when another process appended first.
func (l *Log) appendChained(ctx context.Context, r Record) error {
	var err error
	for range 64 { // contention between ingresses is rare: admin calls are
		var last uint64
		if r.Prev, last, err = l.last(ctx); err != nil {
			return err
		}
		var data []byte
		if data, err = json.Marshal(r); err != nil {
			return err
		}
		_, err = l.js.Publish(ctx, l.cfg.Subject, data, jetstream.WithExpectLastSequence(last))
		if wrongLast(err) {
			continue // another record came first: link to it
		}
		return err
	}
	return err
}

func wrongLast(err error) bool {
	var js jetstream.JetStreamError
	if !errors.As(err, &js) || js.APIError() == nil {
		return false
	}
	code := js.APIError().ErrorCode
	return code == jetstream.JSErrCodeStreamWrongLastSequence || code == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// last is the chain's end: the hash of the last stored record ("" when there is none) and
// the stream's last sequence, which the next record expects.
func (l *Log) last(ctx context.Context) (string, uint64, error) {
	s, err := l.js.Stream(ctx, l.cfg.Stream)
	if err != nil {
		return "", 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return "", 0, err
	}
	if info.State.Msgs == 0 {
		return "", info.State.LastSeq, nil
	}
	m, err := s.GetLastMsgForSubject(ctx, l.cfg.Subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", info.State.LastSeq, nil
	}
	if err != nil {
		return "", 0, err
	}
	return Hash(m.Data), info.State.LastSeq, nil
}

// Hash is how a record is named by the next one's Prev: the hex SHA-256 of its stored
// JSON.
func Hash(stored []byte) string {
	sum := sha256.Sum256(stored)
	return hex.EncodeToString(sum[:])
}

// Verification is what Verify found.
type Verification struct {
	First, Last uint64  // the sequence numbers of the first and last records checked
	Records     int     // records checked
	Breaks      []Break // empty: the chain is whole from First to Last
}

// Break is a place where the chain does not hold.
type Break struct {
	Seq    uint64 `json:"seq"`
	Reason string `json:"reason"`
}

// Verify walks the trail from its oldest record to its newest and checks every link: a
// record whose Prev is not the hash of the record stored before it, or a gap in the
// sequence numbers, is a Break (a record deleted, replaced or inserted). The oldest
// record's own Prev is not checked: retention removes records from that end.
func (l *Log) Verify(ctx context.Context) (Verification, error) {
	s, err := l.js.Stream(ctx, l.cfg.Stream)
	if err != nil {
		return Verification{}, fmt.Errorf("audit: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return Verification{}, fmt.Errorf("audit: %w", err)
	}
	v := Verification{Breaks: []Break{}}
	if info.State.Msgs == 0 {
		return v, nil
	}
	var prevSeq uint64
	var prevHash string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // a gap: reported at the next record
		}
		if err != nil {
			return v, fmt.Errorf("audit: %w", err)
		}
		var r Record
		if err := json.Unmarshal(m.Data, &r); err != nil {
			v.Breaks = append(v.Breaks, Break{Seq: seq, Reason: "not a record: " + err.Error()})
		} else if prevSeq != 0 {
			if seq != prevSeq+1 {
				v.Breaks = append(v.Breaks, Break{Seq: seq, Reason: fmt.Sprintf("records %d to %d are missing", prevSeq+1, seq-1)})
			}
			if r.Prev != prevHash {
				v.Breaks = append(v.Breaks, Break{Seq: seq, Reason: fmt.Sprintf("prev does not match the hash of record %d", prevSeq)})
			}
		}
		if v.Records == 0 {
			v.First = seq
		}
		v.Records++
		v.Last, prevSeq, prevHash = seq, seq, Hash(m.Data)
	}
	return v, nil
}

// List returns up to limit records, newest first, older than sequence before (0: from
// the newest). next is the before of the following page, 0 at the end.
func (l *Log) List(ctx context.Context, limit int, before uint64) (out []Record, next uint64, err error) {
	s, err := l.js.Stream(ctx, l.cfg.Stream)
	if err != nil {
		return nil, 0, fmt.Errorf("audit: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("audit: %w", err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	if info.State.Msgs == 0 {
		return []Record{}, 0, nil
	}
	seq := last
	if before > 0 && before-1 < last {
		seq = before - 1
	}
	out = []Record{}
	for ; seq >= first && seq > 0 && len(out) < limit; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted or aged out meanwhile
		}
		if err != nil {
			return nil, 0, fmt.Errorf("audit: %w", err)
		}
		var r Record
		if err := json.Unmarshal(m.Data, &r); err != nil {
			continue
		}
		r.Seq = seq
		out = append(out, r)
	}
	if seq >= first && seq > 0 && len(out) == limit {
		next = seq + 1
	}
	return out, next, nil
}
