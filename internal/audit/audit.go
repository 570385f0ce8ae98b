// Package audit keeps the trail of operator changes — who (the admin token's name), what,
// on what, the state before and after, when — as a structured log line and a durable
// record in a JetStream stream bounded by age and count (SLUICE_AUDIT, 90 days and 100,000
// records by default). GET /v1/admin/audit lists it, newest first.
package audit

import (
	"context"
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
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := l.js.Publish(ctx, l.cfg.Subject, data); err != nil {
		l.cfg.Logger.Error("audit: record not stored (the log line above is the only trace)", "action", r.Action, "actor", r.Actor, "err", err)
		return fmt.Errorf("audit: %w", err)
	}
	return nil
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
