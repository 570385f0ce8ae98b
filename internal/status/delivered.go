package status

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/queue"
)

// Delivered records are opt-in (-status-keep): once a message is delivered, the drainer
// files a small record of it — headers only, no payload — in a JetStream stream bounded by
// age (Keep) and count (Max), so GET /v1/messages/{id} can answer "delivered" for a while
// instead of "no longer tracked". The stream discards its oldest records when full: the
// bound holds whatever the traffic, and an old record is the one to lose. Nothing is kept
// in Redis.
//
// One record is one message with a ~60-byte subject and its headers: 195 bytes in the
// stream (TestLocatorAnswersEveryStateFromWhereTheMessageIs measures it), plus
// nats-server's per-subject index in memory.

// DeliveredConfig configures DeliveredRecords. Keep must be positive.
type DeliveredConfig struct {
	// Keep is how long a record is kept after the delivery.
	Keep time.Duration
	// Max bounds the records kept; the oldest go first. Default 1,000,000.
	Max int64
	// Replicas of the stream: 1 or 3. Default 1.
	Replicas int
	// Stream is the stream's name. Default "SLUICE_DELIVERED".
	Stream string
	// SubjectPrefix is the first token of the records' subjects. Default "delivered".
	SubjectPrefix string
}

func (c DeliveredConfig) withDefaults() DeliveredConfig {
	if c.Max <= 0 {
		c.Max = 1_000_000
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Stream == "" {
		c.Stream = "SLUICE_DELIVERED"
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = "delivered"
	}
	return c
}

// DeliveredRecords files and reads delivered records. Safe for concurrent use.
type DeliveredRecords struct {
	cfg     DeliveredConfig
	js      jetstream.JetStream
	dropped atomic.Int64
	queue   chan *nats.Msg // records waiting for the writer (Record never waits)
	once    sync.Once
	// stream is the records' stream once found (Get): a read is then one request, not a
	// stream lookup and a read.
	stream atomic.Pointer[jetstream.Stream]
}

// recordQueue bounds the records waiting to be written; beyond it they are dropped and
// counted (Dropped) rather than slowing a drainer's delivery.
const recordQueue = 65536

// NewDeliveredRecords returns the delivered records on nc; call Ensure before use.
func NewDeliveredRecords(nc *nats.Conn, cfg DeliveredConfig) (*DeliveredRecords, error) {
	cfg = cfg.withDefaults()
	if cfg.Keep <= 0 {
		return nil, errors.New("status: delivered records need a positive Keep")
	}
	d := &DeliveredRecords{cfg: cfg}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { d.dropped.Add(1) }))
	if err != nil {
		return nil, err
	}
	d.js = js
	return d, nil
}

// StreamConfig is the records' stream.
func (d *DeliveredRecords) StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              d.cfg.Stream,
		Description:       "sluice: records of delivered messages (GET /v1/messages/{id}), bounded by age and count",
		Subjects:          []string{d.cfg.SubjectPrefix + ".>"},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxAge:            d.cfg.Keep,
		MaxMsgs:           d.cfg.Max,
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		Storage:           jetstream.FileStorage,
		Replicas:          d.cfg.Replicas,
	}
}

// Ensure creates the stream, or updates it to StreamConfig.
func (d *DeliveredRecords) Ensure(ctx context.Context) error {
	if _, err := d.js.CreateOrUpdateStream(ctx, d.StreamConfig()); err != nil {
		return fmt.Errorf("status: delivered records stream: %w", err)
	}
	return nil
}

func (d *DeliveredRecords) subject(id string) (string, bool) {
	ref, ok := queue.ParseID(id)
	if !ok {
		return "", false
	}
	return d.cfg.SubjectPrefix + "." + ref.RuleToken + "." + queue.IDToken(id), true
}

// Record files a delivered message's record. It is the drainer's StateRecorder: other
// states are not recorded (they are read from where the message is), and the publish is
// not waited for — a record that cannot be written is counted (Dropped), never retried at
// the cost of a delivery.
func (d *DeliveredRecords) Record(_ context.Context, id, state string, attempt int, _ string) {
	if state != Delivered {
		return
	}
	subj, ok := d.subject(id)
	if !ok {
		return
	}
	msg := &nats.Msg{Subject: subj, Header: nats.Header{
		queue.HeaderID:      []string{id},
		queue.HeaderAttempt: []string{strconv.Itoa(attempt)},
	}}
	d.once.Do(func() {
		d.queue = make(chan *nats.Msg, recordQueue)
		go d.write()
	})
	select {
	case d.queue <- msg:
	default:
		d.dropped.Add(1)
	}
}

// write publishes queued records, asynchronously, on its own goroutine: a delivery's worker
// only hands its record over (measured: publishing from the worker itself made deliveries
// late enough that the next ones of their keys came closer than the outflow interval).
func (d *DeliveredRecords) write() {
	for msg := range d.queue {
		if _, err := d.js.PublishMsgAsync(msg); err != nil {
			d.dropped.Add(1)
		}
	}
}

// Info is the records stream's info (its state: how many records, how many bytes).
func (d *DeliveredRecords) Info(ctx context.Context) (*jetstream.StreamInfo, error) {
	s, err := d.js.Stream(ctx, d.cfg.Stream)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// Dropped counts the records that could not be written.
func (d *DeliveredRecords) Dropped() int64 { return d.dropped.Load() }

// headerState names the state of a record that is not a delivery (a cancel); a record
// without it — every record of an earlier version — is a delivery.
const headerState = "Sluice-State"

// RecordCancelled files the record of a message taken back by a cancel (DELETE
// /v1/messages/{id}), so that its status says "cancelled" rather than "no longer tracked"
// for as long as a delivered record would be kept. Unlike Record it waits for the publish:
// a cancel is rare, answered right after, and the status asked next must find it.
func (d *DeliveredRecords) RecordCancelled(ctx context.Context, id string, attempts int) error {
	subj, ok := d.subject(id)
	if !ok {
		return nil
	}
	msg := &nats.Msg{Subject: subj, Header: nats.Header{
		queue.HeaderID:      []string{id},
		queue.HeaderAttempt: []string{strconv.Itoa(attempts)},
		headerState:         []string{Cancelled},
	}}
	if _, err := d.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("status: cancelled record of %s: %w", id, err)
	}
	return nil
}

// Get returns the record of id: its attempts and when it was delivered. ok is false when
// there is none (never recorded, or aged out), or when the record is not a delivery's.
func (d *DeliveredRecords) Get(ctx context.Context, id string) (attempts int, at time.Time, ok bool, err error) {
	r, ok, err := d.record(ctx, id)
	if !ok || err != nil || r.state != Delivered {
		return 0, time.Time{}, false, err
	}
	return r.attempts, r.at, true, nil
}

// record is one record as read: its state (delivered or cancelled), attempts and time.
type record struct {
	state    string
	attempts int
	at       time.Time
}

func (d *DeliveredRecords) record(ctx context.Context, id string) (r record, ok bool, err error) {
	r, ok, err = d.read(ctx, id)
	if ok && r.state == "" {
		r.state = Delivered
	}
	return r, ok, err
}

func (d *DeliveredRecords) read(ctx context.Context, id string) (record, bool, error) {
	subj, ok := d.subject(id)
	if !ok {
		return record{}, false, nil
	}
	var err error
	var s jetstream.Stream
	if p := d.stream.Load(); p != nil {
		s = *p
	} else {
		s, err = d.js.Stream(ctx, d.cfg.Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return record{}, false, nil
		}
		if err != nil {
			return record{}, false, fmt.Errorf("status: delivered records: %w", err)
		}
		d.stream.Store(&s)
	}
	raw, err := s.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return record{}, false, nil
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		d.stream.Store(nil) // deleted since: found again (or not) next time
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("status: delivered record of %s: %w", id, err)
	}
	if raw.Header.Get(queue.HeaderID) != id {
		return record{}, false, nil
	}
	attempts, _ := strconv.Atoi(raw.Header.Get(queue.HeaderAttempt))
	return record{state: raw.Header.Get(headerState), attempts: attempts, at: raw.Time}, true, nil
}
