package ingress_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/queue"
)

// admissionFloors are the rungs of a ladder from the bare publish handler towards sluice's
// admission, for TestAdmissionReport with SLUICE_BENCH_FLOOR=1. Each rung adds one thing
// the admission contract requires, and nothing else: no rules, no auth, no limits, no
// metrics, no retries, no error handling beyond a 503.
//
//  1. "floor: message": the bare handler, but the message is sluice's — the request's JSON
//     decoded by the ingress's own scanner of plain bodies, with sluice's headers (format,
//     rule, key, creation time) and a fresh message id as Nats-Msg-Id, published to its
//     key's subject in a stream queue.Queues creates for a queue rule (the same
//     configuration: per-key capacity that JetStream enforces, the duplicate window).
//  2. "floor: + answer": rung 1 answering the 202 of the contract (the rate-limit headers,
//     Location, the JSON body), with fixed numbers.
//  3. "floor: + per-key Redis": rung 2 with the key's Redis state as the contract keeps it,
//     batched across concurrent requests into one pipeline at a time as sluice batches it,
//     and timed as sluice times it: the key's depth counted (HINCRBY) and its due score read
//     (ZSCORE, for the eta) while the message is published, waited for once the PubAck is
//     in; the key made due (ZADD NX) after the PubAck, not waited for.
//
// Sluice's admission does all of rung 3 and more: scripts where these are plain commands
// (a key that just emptied keeps its next slot, a key a drainer holds is flagged rather than
// made due, the count is clamped in Redis), rules, auth, metrics, admission limits,
// refusals. The ladder shows how much of the gap to the bare handler is the contract's and
// how much is sluice's.
func admissionFloors(t *testing.T, js jetstream.JetStream, rdb *redis.Client) []contender {
	t.Helper()
	ctx := context.Background()
	q, err := queue.NewQueues(js, queue.Config{StreamPrefix: "FLOOR_", SubjectPrefix: "floor"})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx, "orders", benchCapacity); err != nil {
		t.Fatal(err)
	}
	stream := q.StreamName("orders")
	format := strconv.Itoa(queue.FormatVersion)
	// publish is rung 1: the message sluice stores, stored as sluice stores it; before is
	// called with the key once the body is decoded, before the publish.
	publish := func(r *http.Request, before func(key string)) (id, key string, ok bool) {
		b, _ := io.ReadAll(r.Body)
		key, payload, ok := ingress.ScanSubmission(b) // the ingress's own decoder of plain bodies
		if !ok {
			return "", "", false
		}
		id, err := queue.NewID("orders", key)
		if err != nil {
			return "", "", false
		}
		if before != nil {
			before(key)
		}
		m := &nats.Msg{Subject: q.Subject("orders", key), Data: payload, Header: nats.Header{
			queue.HeaderFormat:    {format},
			queue.HeaderMsgID:     {id},
			queue.HeaderRule:      {"orders"},
			queue.HeaderKey:       {url.PathEscape(key)},
			queue.HeaderCreatedAt: {time.Now().UTC().Format(time.RFC3339Nano)},
		}}
		if _, err := js.PublishMsg(r.Context(), m, jetstream.WithExpectStream(stream)); err != nil {
			return "", "", false
		}
		return id, key, true
	}
	// answer is rung 2's 202.
	const every = 100 * time.Millisecond // the report's rule: 10 a second
	answer := func(w http.ResponseWriter, id string, depth int64, eta time.Time) {
		httpx.SetRateLimitHeaders(w.Header(), httpx.RateLimit{Policy: "orders", Limit: benchCapacity, Remaining: benchCapacity - depth,
			Reset: every, Window: benchCapacity * every})
		w.Header().Set("Location", "/v1/messages/"+id)
		ingress.WriteQueued(w, id, depth, benchCapacity, eta) // the ingress's own 202 body
	}
	redisState := newFloorBatcher(rdb)
	t.Cleanup(redisState.stop)
	one := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := publish(r, nil); !ok {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(202)
	}))
	two := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, ok := publish(r, nil)
		if !ok {
			w.WriteHeader(503)
			return
		}
		answer(w, id, 1, time.Now())
	}))
	three := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var count *floorOp
		id, key, ok := publish(r, func(key string) { count = redisState.count(key) })
		if count == nil {
			w.WriteHeader(503)
			return
		}
		<-count.reply
		depth, due, err := count.depth, count.due, count.err
		floorOps.Put(count)
		if !ok || err != nil {
			w.WriteHeader(503)
			return
		}
		now := time.Now()
		redisState.mark(key, now)
		depth = max(1, min(depth, benchCapacity))
		next := now
		if due.After(now) {
			next = due
		}
		answer(w, id, depth, next.Add(time.Duration(depth-1)*every))
	}))
	return []contender{
		{name: "floor: message", url: one},
		{name: "floor: + answer", url: two},
		{name: "floor: + per-key Redis", url: three},
	}
}

// floorBatcher sends the per-key Redis work of concurrent requests in one pipeline at a
// time: one goroutine takes whatever is waiting, marks before counts, sends it and answers
// each count.
type floorBatcher struct {
	rdb  *redis.Client
	ch   chan *floorOp
	done chan struct{}
}

// floorOp is one count (waited for on reply) or one mark (recycled by the batcher).
type floorOp struct {
	mark  bool
	key   string
	now   time.Time
	depth int64
	due   time.Time
	err   error
	reply chan struct{}
}

var floorOps = sync.Pool{New: func() any { return &floorOp{reply: make(chan struct{}, 1)} }}

func newFloorBatcher(rdb *redis.Client) *floorBatcher {
	b := &floorBatcher{rdb: rdb, ch: make(chan *floorOp, 4096), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *floorBatcher) stop() { close(b.done) }

// count sends a count of key; receive from the op's reply, then put it back in floorOps.
func (b *floorBatcher) count(key string) *floorOp {
	o := floorOps.Get().(*floorOp)
	o.mark, o.key, o.err = false, key, nil
	b.ch <- o
	return o
}

// mark makes key due at now, not waited for.
func (b *floorBatcher) mark(key string, now time.Time) {
	o := floorOps.Get().(*floorOp)
	o.mark, o.key, o.now = true, key, now
	b.ch <- o
}

func (b *floorBatcher) run() {
	ctx := context.Background()
	var batch []*floorOp
	var incrs []*redis.IntCmd
	var dues []*redis.FloatCmd
	for {
		select {
		case <-b.done:
			return
		case o := <-b.ch:
			batch = append(batch[:0], o)
		}
	more:
		for len(batch) < 512 {
			select {
			case o := <-b.ch:
				batch = append(batch, o)
			default:
				break more
			}
		}
		pipe := b.rdb.Pipeline()
		for _, o := range batch {
			if o.mark {
				pipe.ZAddNX(ctx, "floor:due", redis.Z{Score: float64(o.now.UnixMicro()), Member: o.key})
			}
		}
		incrs, dues = incrs[:0], dues[:0]
		for _, o := range batch {
			if !o.mark {
				incrs = append(incrs, pipe.HIncrBy(ctx, "floor:depth", o.key, 1))
				dues = append(dues, pipe.ZScore(ctx, "floor:due", o.key))
			}
		}
		_, err := pipe.Exec(ctx)
		if errors.Is(err, redis.Nil) {
			err = nil // a key not due yet
		}
		j := 0
		for _, o := range batch {
			if o.mark {
				floorOps.Put(o)
				continue
			}
			o.depth, o.due, o.err = incrs[j].Val(), time.UnixMicro(int64(dues[j].Val())), err
			j++
			o.reply <- struct{}{}
		}
	}
}
