package ingress_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
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
//  0. "floor: id alone": the bare handler, but to the key's subject in a stream queue.Queues
//     creates for a queue rule, with the one header any implementation must store with a
//     message: its id as Nats-Msg-Id (the sink's Idempotency-Key, what a status lookup finds
//     the message by, and what makes a publish retried through a leader election store
//     once). The PubAck is read by hand (an "error" in it fails the request).
//  1. "floor: message": the bare handler, but the message is sluice's — the request's JSON
//     decoded by the ingress's own scanner of plain bodies, with a fresh message id, encoded
//     and published by queue.Queues.EnqueueNew as sluice publishes a submission under the own
//     engine (the lean form: Sluice-Format and the id as Nats-Msg-Id; its PubAck read by
//     hand) to its key's subject in a stream queue.Queues
//     creates for a queue rule (the same configuration: per-key capacity that JetStream
//     enforces, the duplicate window).
//  2. "floor: + answer": rung 1 answering the 202 of a plain admission as the contract now
//     has it (Location and the JSON body with the id, the state and the capacity; the depth,
//     the eta and the rate-limit headers only when asked for, which the load does not).
//  3. "floor: + per-key Redis": rung 2 with the key's Redis state as the claim engine keeps
//     it, answered as the claim engine answers (the depth and the eta it gives, the queue's
//     rate-limit headers),
//     batched across concurrent requests into one pipeline at a time as sluice batches it,
//     and timed as sluice times it: the key's depth counted (HINCRBY) and its due score read
//     (ZSCORE, for the eta) while the message is published, waited for once the PubAck is
//     in; the key made due (ZADD NX) after the PubAck, not waited for.
//  4. "floor: + idempotency key" (driven with an Idempotency-Key on every request): rung 3
//     with the key claimed for the message's id (SET NX GET with a 24 h TTL) in the same
//     pipeline as the count, and both waited for before the publish, because a key another
//     message owns must store nothing (it answers 200 and publishes nothing).
//  5. "floor: id alone + Redis": rung 3 with rung 0's message: the cheapest admission this
//     ladder knows that still keeps the contract's per-key state and answer. It bounds from
//     above what a leaner message format (the rule, key and creation time read from the
//     subject and the id instead of headers) could buy.
//
// Sluice's admission of a plain queue rule under the own engine does all of rung 2 and
// more: rules, auth, metrics, validation, admission limits, refusals; under -engine claim
// it does all of rung 3 and more (scripts where these are plain commands). The ladder shows
// how much of the gap to the bare handler is the contract's and how much is sluice's. The
// rungs publish as sluice does (queue.Queues), which reads the PubAck by hand where the
// bare handler's jetstream.PublishMsg uses encoding/json.
func admissionFloors(t *testing.T, js jetstream.JetStream, rdb *redis.Client) []contender {
	t.Helper()
	ctx := context.Background()
	q, err := queue.NewQueues(js, queue.Config{StreamPrefix: "FLOOR_", SubjectPrefix: "floor"})
	if err != nil {
		t.Fatal(err)
	}
	// The rungs with sluice's message share one rule, those with the id alone another: a
	// stream takes 1 GiB, which four rungs' nine rounds nearly fill.
	for _, rule := range []string{"orders", "lean"} {
		if err := q.Ensure(ctx, rule, benchCapacity); err != nil {
			t.Fatal(err)
		}
	}
	// publish is rung 1: the message sluice stores, stored as sluice stores it; before is
	// called with the id and the key once the body is decoded, before the publish, which
	// happens only if it returns true.
	// stored is how publish stores the message: its id alone (rungs 0 and 5), sluice's
	// message in the lean form a submission has under the own engine (EnqueueNew; rungs 1
	// and 2), or in the full form the claim engine writes (EnqueueAs; rungs 3 and 4).
	type stored int
	const (
		idAlone stored = iota
		leanForm
		fullForm
	)
	publish := func(r *http.Request, form stored, before func(id, key string) bool) (id, key string, ok bool) {
		lean := form == idAlone
		b, _ := io.ReadAll(r.Body)
		key, payload, ok := ingress.ScanSubmission(b) // the ingress's own decoder of plain bodies
		if !ok {
			return "", "", false
		}
		rule := "orders"
		if lean {
			rule = "lean"
		}
		id, err := queue.NewID(rule, key)
		if err != nil {
			return "", "", false
		}
		if before != nil && !before(id, key) {
			return "", "", false
		}
		if lean { // the payload and its id alone, the PubAck read by hand
			ack, err := js.Conn().RequestMsg(&nats.Msg{Subject: q.Subject(rule, key), Header: nats.Header{queue.HeaderMsgID: {id}}, Data: payload}, 5*time.Second)
			return id, key, err == nil && !bytes.Contains(ack.Data, []byte(`"error"`))
		}
		// Encoded and published as sluice does it (its headers, the id as Nats-Msg-Id; the
		// PubAck read by hand), without a deadline of its own.
		m := queue.Message{ID: id, Rule: "orders", Key: key, Payload: payload, CreatedAt: time.Now()}
		if form == leanForm {
			_, err = q.EnqueueNew(r.Context(), "orders", m)
		} else {
			_, err = q.EnqueueAs(r.Context(), "orders", m, "")
		}
		if err != nil {
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
	// plainAnswer is rung 2's 202: what sluice answers a plain admission that did not ask
	// for its depth.
	plainAnswer := func(w http.ResponseWriter, id string) {
		w.Header()["Location"] = []string{"/v1/messages/" + id}
		ingress.WriteQueued(w, id, 0, benchCapacity, time.Time{})
	}
	redisState := newFloorBatcher(rdb)
	t.Cleanup(redisState.stop)
	one := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := publish(r, leanForm, nil); !ok {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(202)
	}))
	two := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, ok := publish(r, leanForm, nil)
		if !ok {
			w.WriteHeader(503)
			return
		}
		plainAnswer(w, id)
	}))
	// counted is rungs 3 and 4: claim, when not "", is the request's idempotency key.
	counted := func(w http.ResponseWriter, r *http.Request, claim string, lean bool) {
		var count *floorOp
		var id string // the message's id, known before its publish
		form := fullForm
		if lean {
			form = idAlone
		}
		_, key, ok := publish(r, form, func(mid, key string) bool {
			id = mid
			count = redisState.count(key, claim, id)
			if claim == "" {
				return true
			}
			<-count.reply // the claim decides whether anything is stored
			return count.err == nil && count.owner == id
		})
		if count == nil {
			w.WriteHeader(503)
			return
		}
		if claim == "" {
			<-count.reply
		}
		depth, due, owner, err := count.depth, count.due, count.owner, count.err
		floorOps.Put(count)
		switch {
		case err != nil:
			w.WriteHeader(503)
			return
		case claim != "" && owner != id:
			w.WriteHeader(200) // a repeat: the owner's message is stored already
			return
		case !ok:
			w.WriteHeader(503) // the publish failed
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
	}
	three := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { counted(w, r, "", false) }))
	four := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counted(w, r, r.Header.Get("Idempotency-Key"), false)
	}))
	zero := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := publish(r, idAlone, nil); !ok {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(202)
	}))
	leanThree := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { counted(w, r, "", true) }))
	return []contender{
		{name: "floor: id alone", url: zero},
		{name: "floor: message", url: one},
		{name: "floor: + answer", url: two},
		{name: "floor: + per-key Redis", url: three},
		{name: "floor: + idempotency key", url: four, idem: asking{key: true}},
		{name: "floor: id alone + Redis", url: leanThree},
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

// floorOp is one count (waited for on reply), with the claim of an idempotency key when
// claim is set, or one mark (recycled by the batcher).
type floorOp struct {
	mark      bool
	key       string
	claim, id string // the idempotency key to claim for id
	now       time.Time
	depth     int64
	due       time.Time
	owner     string // the id that owns claim (id when this claim took it)
	err       error
	reply     chan struct{}
}

var floorOps = sync.Pool{New: func() any { return &floorOp{reply: make(chan struct{}, 1)} }}

func newFloorBatcher(rdb *redis.Client) *floorBatcher {
	b := &floorBatcher{rdb: rdb, ch: make(chan *floorOp, 4096), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *floorBatcher) stop() { close(b.done) }

// count sends a count of key, and the claim of idempotency key claim for id when claim is
// not ""; receive from the op's reply, then put it back in floorOps.
func (b *floorBatcher) count(key, claim, id string) *floorOp {
	o := floorOps.Get().(*floorOp)
	o.mark, o.key, o.claim, o.id, o.owner, o.err = false, key, claim, id, "", nil
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
	var claims []*redis.StatusCmd
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
		incrs, dues, claims = incrs[:0], dues[:0], claims[:0]
		for _, o := range batch {
			if !o.mark {
				incrs = append(incrs, pipe.HIncrBy(ctx, "floor:depth", o.key, 1))
				dues = append(dues, pipe.ZScore(ctx, "floor:due", o.key))
				var c *redis.StatusCmd
				if o.claim != "" {
					c = pipe.SetArgs(ctx, "floor:idem:"+o.claim, o.id, redis.SetArgs{Mode: "NX", Get: true, TTL: 24 * time.Hour})
				}
				claims = append(claims, c)
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
			if c := claims[j]; c != nil {
				if owner, cerr := c.Result(); errors.Is(cerr, redis.Nil) {
					o.owner = o.id // the key was free: this claim took it
				} else {
					o.owner = owner
				}
			}
			j++
			o.reply <- struct{}{}
		}
	}
}
