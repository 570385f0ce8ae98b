package admit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/queue"
)

// Batcher writes the Redis side of admissions — the due mark of the key and the message's
// status record — for many concurrent admissions in one pipelined round trip. Admission is
// latency-bound on two servers; without batching every request costs its own Redis round
// trip and syscalls on both ends, which is most of an admission's CPU. One goroutine
// collects whatever requests are waiting (up to MaxBatch), sends one pipeline, and wakes
// each waiter with its result.
type Batcher struct {
	RDB       redis.UniversalClient
	Scheduler *queue.Scheduler
	Status    *status.Store // nil: no status records
	// MaxBatch bounds one pipeline. Default 512.
	MaxBatch int
	// Timeout bounds one pipeline's round trip. Default 1s.
	Timeout time.Duration

	once sync.Once
	ch   chan *redisWrite
}

type redisWrite struct {
	rule, key string
	capacity  int64
	now       time.Time
	depth     int64
	next      time.Time
	st        *status.Status
	overwrite bool
	err       error
	done      chan struct{}
}

var writePool = sync.Pool{New: func() any { return &redisWrite{done: make(chan struct{}, 1)} }}

func (b *Batcher) start() {
	b.once.Do(func() {
		if b.MaxBatch <= 0 {
			b.MaxBatch = 512
		}
		if b.Timeout <= 0 {
			b.Timeout = time.Second
		}
		b.ch = make(chan *redisWrite, 4*b.MaxBatch)
		go b.run()
	})
}

// Write marks (rule, key) due, counts the message in the key's depth and, if st is not
// nil, writes st; it returns the key's depth and next slot once all is written, or the
// error. ctx bounds the wait, not the write: a write already sent completes.
func (b *Batcher) Write(ctx context.Context, rule, key string, capacity int64, now time.Time, st *status.Status, overwrite bool) (depth int64, next time.Time, err error) {
	b.start()
	w := writePool.Get().(*redisWrite)
	w.rule, w.key, w.capacity, w.now, w.st, w.overwrite, w.err = rule, key, capacity, now, st, overwrite, nil
	select {
	case b.ch <- w:
	case <-ctx.Done():
		writePool.Put(w)
		return 0, time.Time{}, ctx.Err()
	}
	<-w.done // the batch always answers within Timeout
	depth, next, err = w.depth, w.next, w.err
	w.st = nil
	writePool.Put(w)
	return depth, next, err
}

func (b *Batcher) run() {
	batch := make([]*redisWrite, 0, b.MaxBatch)
	for w := range b.ch {
		batch = append(batch[:0], w)
	collect:
		for len(batch) < b.MaxBatch {
			select {
			case w := <-b.ch:
				batch = append(batch, w)
			default:
				break collect
			}
		}
		err := b.flush(batch)
		for _, w := range batch {
			if w.err == nil {
				w.err = err
			}
			w.done <- struct{}{}
		}
	}
}

func (b *Batcher) flush(batch []*redisWrite) error {
	ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
	defer cancel()
	err := b.exec(ctx, batch)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A fresh or restarted Redis has no scripts cached: load them, send once more.
		for _, s := range append(queue.Scripts(), status.Scripts()...) {
			s.Load(ctx, b.RDB)
		}
		for _, w := range batch {
			w.err = nil
		}
		err = b.exec(ctx, batch)
	}
	return err
}

func (b *Batcher) exec(ctx context.Context, batch []*redisWrite) error {
	pipe := b.RDB.Pipeline()
	cmds := make([]*redis.Cmd, 0, 2*len(batch))
	for _, w := range batch {
		cmds = append(cmds, b.Scheduler.MarkAdmittedPipe(ctx, pipe, w.rule, w.key, w.capacity, w.now))
		if w.st != nil && b.Status != nil {
			cmds = append(cmds, b.Status.PutPipe(ctx, pipe, *w.st, w.overwrite))
		} else {
			cmds = append(cmds, nil)
		}
	}
	_, err := pipe.Exec(ctx)
	for i, w := range batch {
		for _, c := range cmds[2*i : 2*i+2] {
			if c != nil && c.Err() != nil && !errors.Is(c.Err(), redis.Nil) && w.err == nil {
				w.err = c.Err()
			}
		}
		if w.err == nil {
			w.depth, w.next, w.err = queue.AdmittedResult(cmds[2*i])
		}
	}
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return err
}
