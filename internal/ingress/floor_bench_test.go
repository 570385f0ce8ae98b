package ingress_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
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
//     decoded by the ingress's own scanner of plain bodies, published with sluice's headers
//     (format, rule, key, creation time) and a fresh message id as Nats-Msg-Id, to a stream
//     of a queue rule's shape (a per-key capacity that JetStream enforces, the duplicate
//     window).
//  2. "floor: + answer": rung 1 answering the 202 of the contract (the rate-limit headers,
//     Location, the JSON body), with fixed numbers.
//  3. "floor: + per-key Redis": rung 2 with the key's Redis state as the contract keeps it —
//     the depth counter incremented (HINCRBY, its answer is the 202's depth) and the key made
//     due (ZADD NX) — batched across concurrent requests into one pipeline, as sluice batches
//     them, and waited for before the answer.
//
// Sluice's admission does all of rung 3 and more (scripts instead of two plain commands,
// whose answers give the eta; rules, auth, metrics, admission limits, refusals). The ladder
// shows how much of the gap to the bare handler is the contract's and how much is sluice's.
func admissionFloors(t *testing.T, js jetstream.JetStream, rdb *redis.Client, keys int) []contender {
	t.Helper()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"},
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
		MaxMsgsPerSubject: int64(keys), MaxMsgs: -1, MaxBytes: 1 << 30, Storage: jetstream.FileStorage,
		Duplicates: queue.DefaultDuplicates, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	// publish is rung 1: the message sluice stores, stored as sluice stores it.
	publish := func(r *http.Request) (id, key string, ok bool) {
		b, _ := io.ReadAll(r.Body)
		key, payload, ok := ingress.ScanSubmission(b) // the ingress's own decoder of plain bodies
		if !ok {
			return "", "", false
		}
		id, err := queue.NewID("orders", key)
		if err != nil {
			return "", "", false
		}
		m := nats.NewMsg("floor.orders." + key)
		m.Data = payload
		m.Header.Set(queue.HeaderFormat, strconv.Itoa(queue.FormatVersion))
		m.Header.Set(queue.HeaderMsgID, id)
		m.Header.Set(queue.HeaderRule, "orders")
		m.Header.Set(queue.HeaderKey, key)
		m.Header.Set(queue.HeaderCreatedAt, time.Now().UTC().Format(time.RFC3339Nano))
		if _, err := js.PublishMsg(r.Context(), m, jetstream.WithExpectStream("FLOOR")); err != nil {
			return "", "", false
		}
		return id, key, true
	}
	// answer is rung 2's 202.
	answer := func(w http.ResponseWriter, id string, depth int64) {
		const capacity = 10000
		httpx.SetRateLimitHeaders(w.Header(), httpx.RateLimit{Policy: "orders", Limit: capacity, Remaining: capacity - depth,
			Reset: 100 * time.Millisecond, Window: capacity * 100 * time.Millisecond})
		w.Header().Set("Location", "/v1/messages/"+id)
		b := make([]byte, 0, 160)
		b = append(b, `{"id":`...)
		b = strconv.AppendQuote(b, id)
		b = append(b, `,"state":"queued","depth":`...)
		b = strconv.AppendInt(b, depth, 10)
		b = append(b, `,"capacity":10000,"eta":"`...)
		b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, "\"}\n"...)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusAccepted)
		w.Write(b)
	}
	counts := newFloorBatcher(rdb)
	t.Cleanup(counts.stop)
	one := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := publish(r); !ok {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(202)
	}))
	two := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, ok := publish(r)
		if !ok {
			w.WriteHeader(503)
			return
		}
		answer(w, id, 1)
	}))
	three := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, key, ok := publish(r)
		if !ok {
			w.WriteHeader(503)
			return
		}
		depth, err := counts.count(key)
		if err != nil {
			w.WriteHeader(503)
			return
		}
		answer(w, id, depth)
	}))
	return []contender{
		{name: "floor: message", url: one},
		{name: "floor: + answer", url: two},
		{name: "floor: + per-key Redis", url: three},
	}
}

// floorBatcher sends the per-key Redis writes of concurrent requests in one pipeline: one
// goroutine takes whatever is waiting, sends it and answers each request.
type floorBatcher struct {
	rdb  *redis.Client
	ch   chan *floorOp
	done chan struct{}
}

type floorOp struct {
	key   string
	depth int64
	err   error
	reply chan struct{}
}

func newFloorBatcher(rdb *redis.Client) *floorBatcher {
	b := &floorBatcher{rdb: rdb, ch: make(chan *floorOp, 4096), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *floorBatcher) stop() { close(b.done) }

func (b *floorBatcher) count(key string) (int64, error) {
	o := &floorOp{key: key, reply: make(chan struct{}, 1)}
	b.ch <- o
	<-o.reply
	return o.depth, o.err
}

func (b *floorBatcher) run() {
	ctx := context.Background()
	var batch []*floorOp
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
		incrs := make([]*redis.IntCmd, len(batch))
		now := float64(time.Now().UnixMicro())
		for i, o := range batch {
			incrs[i] = pipe.HIncrBy(ctx, "floor:depth", o.key, 1)
			pipe.ZAddNX(ctx, "floor:due", redis.Z{Score: now, Member: o.key})
		}
		_, err := pipe.Exec(ctx)
		for i, o := range batch {
			o.depth, o.err = incrs[i].Val(), err
			o.reply <- struct{}{}
		}
	}
}
