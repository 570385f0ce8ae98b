package queue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var ruleSeq atomic.Int64

// newQueues starts a private JetStream server and a queue for a rule named after the test.
func newQueues(t *testing.T, capacity int64) (*queue.Queues, string, jetstream.JetStream) {
	t.Helper()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	q, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rule := fmt.Sprintf("rule-%d.%s", ruleSeq.Add(1), t.Name())
	if err := q.Ensure(context.Background(), rule, capacity); err != nil {
		t.Fatal(err)
	}
	return q, rule, js
}

func msg(key string, payload string) queue.Message {
	return queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Key: key, Payload: []byte(payload), CreatedAt: time.Now()}
}

// weirdKeys are keys whose raw form would be NATS subject syntax.
var weirdKeys = []string{"", "a", "a.b", "a.*", "*", ">", "a.>", " ", "a b", "🦀", "ключ", "k", "ka", "$JS.API", "a\nb", "%2E", strings.Repeat("é", 128)}

func TestKeyTokenIsOneSafeToken(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, k := range weirdKeys {
		tok := queue.KeyToken(k)
		if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n$") {
			t.Errorf("key %q: token %q is not one safe subject token", k, tok)
		}
		if other, dup := seen[tok]; dup {
			t.Errorf("keys %q and %q share token %q", k, other, tok)
		}
		seen[tok] = k
		back, err := queue.KeyFromToken(tok)
		if err != nil || back != k {
			t.Errorf("KeyFromToken(%q) = %q, %v; want %q", tok, back, err, k)
		}
	}
	if n := len(queue.KeyToken(strings.Repeat("x", queue.MaxKeyBytes))); n != 343 {
		t.Errorf("token of a 256-byte key has %d characters, want 343", n)
	}
}

func FuzzKeyToken(f *testing.F) {
	for _, k := range weirdKeys {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		tok := queue.KeyToken(k)
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				t.Fatalf("token %q of %q has byte %q", tok, k, c)
			}
		}
		if back, err := queue.KeyFromToken(tok); err != nil || back != k {
			t.Fatalf("round trip of %q: %q, %v", k, back, err)
		}
	})
}

func TestRuleToken(t *testing.T) {
	t.Parallel()
	if got := queue.RuleToken("orders-per-merchant"); got != "orders-per-merchant" {
		t.Errorf("safe name changed to %q", got)
	}
	a, b := queue.RuleToken("orders.m"), queue.RuleToken("orders_m")
	if a == b || strings.ContainsAny(a, ".{}* ") {
		t.Errorf("RuleToken(orders.m)=%q RuleToken(orders_m)=%q", a, b)
	}
}

func TestMessageWireFormRoundTrip(t *testing.T) {
	t.Parallel()
	in := queue.Message{
		ID: "0190-id", Rule: "r", Key: "a.b\n🦀 %", Payload: []byte(` {"x": 1.50} `),
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Attempt: 3, LastError: "boom\r\nline 2",
		ParkedFrom:  time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC),
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "vendor=a,other=b",
	}
	nm := queue.EncodeMessage("q.r.x", in)
	if got := nm.Header.Get("Sluice-Traceparent"); got != in.TraceParent {
		t.Errorf("Sluice-Traceparent header = %q, want %q", got, in.TraceParent)
	}
	for k, vs := range nm.Header {
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] > 0x7e {
					t.Errorf("header %s=%q is not printable ASCII", k, v)
				}
			}
		}
	}
	out, err := queue.DecodeMessage(nm.Header, nm.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Payload, in.Payload) || out.ID != in.ID || out.Key != in.Key || out.Rule != in.Rule ||
		!out.CreatedAt.Equal(in.CreatedAt) || out.Attempt != in.Attempt || out.LastError != in.LastError ||
		!out.ParkedFrom.Equal(in.ParkedFrom) || out.TraceParent != in.TraceParent || out.TraceState != in.TraceState {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestCapacityUnderConcurrentProducers(t *testing.T) {
	t.Parallel()
	const capacity, producers, each = 5, 32, 4
	q, rule, _ := newQueues(t, capacity)
	ctx := context.Background()
	var queued, full atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				for _, key := range []string{"hot", "hot.2"} {
					_, err := q.Enqueue(ctx, rule, msg(key, "{}"))
					switch {
					case err == nil:
						queued.Add(1)
					case errors.Is(err, queue.ErrFull):
						full.Add(1)
					default:
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if queued.Load() != 2*capacity || full.Load() != 2*producers*each-2*capacity {
		t.Errorf("queued %d, full %d; want %d and %d", queued.Load(), full.Load(), 2*capacity, 2*producers*each-2*capacity)
	}
	for _, key := range []string{"hot", "hot.2"} {
		if d, err := q.Depth(ctx, rule, key); err != nil || d != capacity {
			t.Errorf("depth of %q = %d, %v; want %d", key, d, err, capacity)
		}
	}
	if st, err := q.Stats(ctx, rule); err != nil || st.Msgs != 2*capacity || st.Keys != 2 {
		t.Errorf("stats = %+v, %v", st, err)
	}
}

func TestFIFOPerKeyAndDeleteIsAClaim(t *testing.T) {
	t.Parallel()
	q, rule, _ := newQueues(t, 100)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		for _, key := range []string{"a", "b"} {
			if _, err := q.Enqueue(ctx, rule, msg(key, fmt.Sprintf(`"%s%d"`, key, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < 20; i++ {
		p, err := q.Pop(ctx, rule, "a")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`"a%d"`, i); string(p.Payload) != want || p.Key != "a" || p.Rule != rule {
			t.Fatalf("pop %d: %q key %q rule %q; want %s", i, p.Payload, p.Key, p.Rule, want)
		}
		if err := q.Delete(ctx, rule, p.Seq); err != nil {
			t.Fatal(err)
		}
		if err := q.Delete(ctx, rule, p.Seq); !errors.Is(err, queue.ErrGone) {
			t.Fatalf("second delete: %v, want ErrGone", err)
		}
	}
	if _, err := q.Pop(ctx, rule, "a"); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("pop of drained key: %v, want ErrEmpty", err)
	}
	if d, _ := q.Depth(ctx, rule, "b"); d != 20 {
		t.Fatalf("depth of b = %d, want 20", d)
	}
}

func TestDuplicateIDs(t *testing.T) {
	t.Parallel()
	q, rule, _ := newQueues(t, 1)
	ctx := context.Background()
	m := msg("k", "1")
	first, err := q.Enqueue(ctx, rule, m)
	if err != nil || first.Duplicate {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := q.Enqueue(ctx, rule, m)
	if err != nil || !again.Duplicate || again.Seq != first.Seq {
		t.Fatalf("again: %+v, %v; want duplicate of seq %d", again, err, first.Seq)
	}
	// A message rejected as full is not remembered: the same id is accepted once there is room.
	later := msg("k", "2")
	if _, err := q.Enqueue(ctx, rule, later); !errors.Is(err, queue.ErrFull) {
		t.Fatalf("over capacity: %v, want ErrFull", err)
	}
	if err := q.Delete(ctx, rule, first.Seq); err != nil {
		t.Fatal(err)
	}
	if r, err := q.Enqueue(ctx, rule, later); err != nil || r.Duplicate {
		t.Fatalf("retry of rejected id: %+v, %v", r, err)
	}
}

func TestKeysWithSubjectSyntaxNeverCross(t *testing.T) {
	t.Parallel()
	q, rule, _ := newQueues(t, 10)
	ctx := context.Background()
	for _, k := range weirdKeys {
		if _, err := q.Enqueue(ctx, rule, msg(k, k)); err != nil {
			t.Fatalf("enqueue %q: %v", k, err)
		}
	}
	for _, k := range weirdKeys {
		if d, err := q.Depth(ctx, rule, k); err != nil || d != 1 {
			t.Errorf("depth of %q = %d, %v; want 1", k, d, err)
		}
		p, err := q.Pop(ctx, rule, k)
		if err != nil || string(p.Payload) != k || p.Key != k {
			t.Errorf("pop %q: payload %q key %q, %v", k, p.Payload, p.Key, err)
		}
	}
	keys, err := q.Keys(ctx, rule)
	if err != nil || len(keys) != len(weirdKeys) {
		t.Fatalf("Keys: %d keys, %v; want %d", len(keys), err, len(weirdKeys))
	}
	if err := q.PurgeKey(ctx, rule, "*"); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Stats(ctx, rule); st.Msgs != uint64(len(weirdKeys)-1) {
		t.Fatalf("after purging key \"*\": %d messages, want %d (purge must not touch other keys)", st.Msgs, len(weirdKeys)-1)
	}
	if _, err := q.Enqueue(ctx, rule, msg(strings.Repeat("x", 257), "")); !errors.Is(err, queue.ErrBadKey) {
		t.Fatalf("257-byte key: %v, want ErrBadKey", err)
	}
	if err := q.Purge(ctx, rule); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Stats(ctx, rule); st.Msgs != 0 || st.Keys != 0 {
		t.Fatalf("after purge: %+v", st)
	}
}

func TestCapacityChangeIsAStreamUpdate(t *testing.T) {
	t.Parallel()
	q, rule, _ := newQueues(t, 2)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := q.Enqueue(ctx, rule, msg("k", "{}")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Enqueue(ctx, rule, msg("k", "{}")); !errors.Is(err, queue.ErrFull) {
		t.Fatalf("3rd at capacity 2: %v", err)
	}
	if err := q.Ensure(ctx, rule, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, rule, msg("k", "{}")); err != nil {
		t.Fatalf("3rd at capacity 3: %v", err)
	}
	if _, err := q.Enqueue(ctx, rule, msg("k", "{}")); !errors.Is(err, queue.ErrFull) {
		t.Fatalf("4th at capacity 3: %v", err)
	}
	if _, err := q.Enqueue(ctx, "no-such-rule", msg("k", "{}")); err == nil || errors.Is(err, queue.ErrFull) {
		t.Fatalf("enqueue to missing stream: %v, want an error other than ErrFull", err)
	}
	if _, err := q.Depth(ctx, "no-such-rule", "k"); !errors.Is(err, queue.ErrNoQueue) {
		t.Fatalf("depth in missing stream: %v, want ErrNoQueue", err)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add("id", "a.b", "err\nline", []byte(`{}`), "2026-01-02T03:04:05Z", "3")
	f.Add("", "%zz", "%", []byte{0, 1}, "not a time", "x")
	f.Fuzz(func(t *testing.T, id, key, lastErr string, payload []byte, created, attempt string) {
		// Arbitrary header values never panic.
		h := nats.Header{}
		h.Set(queue.HeaderMsgID, id)
		h.Set(queue.HeaderKey, key)
		h.Set(queue.HeaderLastError, lastErr)
		h.Set(queue.HeaderCreatedAt, created)
		h.Set(queue.HeaderAttempt, attempt)
		queue.DecodeMessage(h, payload)
		// Whatever a Message holds survives its wire form.
		if id == "" {
			return
		}
		in := queue.Message{ID: id, Rule: "r", Key: key, Payload: payload, LastError: lastErr}
		nm := queue.EncodeMessage("q.r.x", in)
		out, err := queue.DecodeMessage(nm.Header, nm.Data)
		if err != nil || out.Key != key || out.LastError != lastErr || !bytes.Equal(out.Payload, payload) {
			if strings.ContainsAny(id, "\r\n") {
				return // not a valid header value to begin with; ids are uuids
			}
			t.Fatalf("round trip of %+v: %+v, %v", in, out, err)
		}
	})
}

func TestReplicatedQueueOnACluster(t *testing.T) {
	t.Parallel()
	nodes := natstest.StartCluster(t, 3)
	_, js := natstest.Connect(t, natstest.ClusterURL(nodes))
	q, err := queue.NewQueues(js, queue.Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := q.Ensure(ctx, "r3", 2); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := q.Enqueue(ctx, "r3", msg("k.>", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Enqueue(ctx, "r3", msg("k.>", "2")); !errors.Is(err, queue.ErrFull) {
		t.Fatalf("3rd at capacity 2 on R3: %v", err)
	}
	p, err := q.Pop(ctx, "r3", "k.>")
	if err != nil || string(p.Payload) != "0" {
		t.Fatalf("pop: %q, %v", p.Payload, err)
	}
	if err := q.Delete(ctx, "r3", p.Seq); err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, "r3", p.Seq); !errors.Is(err, queue.ErrGone) {
		t.Fatalf("second delete on R3: %v", err)
	}
}

// A publish rides through its stream's leader election: two of an R3 stream's three
// nodes, its leader among them, go down while messages are enqueued one after another, so
// the stream has no quorum until one of them is back 3 s later. No enqueue fails (each
// waits, up to PublishWait, for a leader), none is stored twice, and the longest wait is
// the outage's. Before the ride-through, enqueues failed after nats.go's 0.5 s of retries.
func TestEnqueueRidesThroughLeaderElection(t *testing.T) {
	t.Parallel()
	nodes := natstest.StartCluster(t, 3)
	_, js := natstest.Connect(t, natstest.ClusterURL(nodes))
	// A wait longer than the default 10 s: on a loaded machine an election after 3 s of no
	// quorum can take longer; what is tested is that enqueues wait for it instead of failing.
	q, err := queue.NewQueues(js, queue.Config{Replicas: 3, PublishWait: 40 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Ensure(ctx, "r3", 10_000); err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, q.StreamName("r3"))
	if err != nil {
		t.Fatal(err)
	}
	leader := info.CachedInfo().Cluster.Leader
	var down []*natstest.Node
	for _, node := range nodes {
		if node.Name() == leader {
			down = append(down, node)
		}
	}
	for _, node := range nodes {
		if node.Name() != leader && len(down) < 2 {
			down = append(down, node)
		}
	}
	if len(down) != 2 || down[0].Name() != leader {
		t.Fatalf("stream leader %q is none of the nodes", leader)
	}
	var longest time.Duration
	const n = 120
	back := make(chan error, 1)
	for i := range n {
		if i == 40 {
			down[0].Shutdown()
			down[1].Shutdown()
			go func() {
				time.Sleep(3 * time.Second) // the scenario: a quorum stays lost for 3 s
				back <- down[1].Restart()
			}()
		}
		start := time.Now()
		if _, err := q.Enqueue(ctx, "r3", msg(fmt.Sprint("k", i%7), fmt.Sprint(i))); err != nil {
			t.Fatalf("message %d failed after %v, with two of three nodes down: %v", i, time.Since(start), err)
		}
		longest = max(longest, time.Since(start))
	}
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	t.Logf("longest enqueue across the outage: %v", longest.Round(time.Millisecond))
	if longest < 2*time.Second {
		t.Errorf("the longest enqueue took %v: the stream was never without a leader", longest)
	}
	if st, err := q.Stats(ctx, "r3"); err != nil || st.Msgs != n {
		t.Fatalf("stream holds %+v (%v), want %d messages", st, err, n)
	}
}
