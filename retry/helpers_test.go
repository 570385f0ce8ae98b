package retry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/testsignal"
	"github.com/sluice-io/sluice/queue"
)

var testSeq atomic.Int64

// env is one test's retry stream and dead letters on its own embedded server, with
// stream names and subjects unique to the test (so tests could share a server too).
type env struct {
	node  *natstest.Node
	js    jetstream.JetStream
	store *Store
	dead  *DeadLetters
	rules *ruleSet
	// handled: what the env's re-admitters (startReadmitter) did with each fired message.
	handled *handledLog
}

func newEnv(t *testing.T) *env {
	t.Helper()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	n := testSeq.Add(1)
	e := &env{node: node, js: js, rules: &ruleSet{m: map[string]Rule{}}, handled: newHandledLog()}
	var err error
	e.store, err = NewStore(js, Config{Stream: fmt.Sprintf("T%d_RETRY", n), SubjectPrefix: fmt.Sprintf("t%d", n)})
	if err != nil {
		t.Fatal(err)
	}
	e.dead, err = NewDeadLetters(js, DeadConfig{Stream: fmt.Sprintf("T%d_DEAD", n), SubjectPrefix: fmt.Sprintf("t%d", n), Rules: e.rules.get})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.store.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.dead.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// ruleSet is a rules lookup whose rules can be removed mid-test.
type ruleSet struct {
	mu sync.Mutex
	m  map[string]Rule
}

func (r *ruleSet) add(rule Rule) Rule {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[rule.Name] = rule
	return rule
}

func (r *ruleSet) remove(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, name)
}

func (r *ruleSet) get(name string) (Rule, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rule, ok := r.m[name]
	return rule, ok
}

func parkRule(name string, maxAge time.Duration) Rule {
	return Rule{Name: name, ParkMaxAge: maxAge}
}

func newMessage(rule, key string) queue.Message {
	return queue.Message{
		ID:        uuid.Must(uuid.NewV7()).String(),
		Rule:      rule,
		Key:       key,
		Payload:   []byte(`{"order_id": 991, "note": "crème 🍮",  "ws": "\t" }`),
		CreatedAt: time.Now().UTC(),
	}
}

// admission is one call of the fake Admit.
type admission struct {
	m     queue.Message
	msgID string
	at    time.Time
}

// fakeQueue is an AdmitFunc that behaves like a queue stream: decide says whether there
// is room; admitted ids are deduplicated by msgID, as JetStream does.
type fakeQueue struct {
	mu       sync.Mutex
	calls    []admission
	admitted map[string]queue.Message // by msgID
	decide   func(call int, m queue.Message) (AdmitResult, error)
}

func newFakeQueue(decide func(call int, m queue.Message) (AdmitResult, error)) *fakeQueue {
	if decide == nil {
		decide = func(int, queue.Message) (AdmitResult, error) { return AdmitResult{Outcome: Admitted}, nil }
	}
	return &fakeQueue{admitted: map[string]queue.Message{}, decide: decide}
}

func (f *fakeQueue) Admit(ctx context.Context, rule Rule, m queue.Message, msgID string) (AdmitResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, admission{m: m, msgID: msgID, at: time.Now()})
	n := len(f.calls)
	f.mu.Unlock()
	res, err := f.decide(n, m)
	if err == nil && res.Outcome == Admitted {
		f.mu.Lock()
		if _, dup := f.admitted[msgID]; !dup {
			f.admitted[msgID] = m
		}
		f.mu.Unlock()
	}
	return res, err
}

func (f *fakeQueue) snapshot() ([]admission, map[string]queue.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	adm := make(map[string]queue.Message, len(f.admitted))
	for k, v := range f.admitted {
		adm[k] = v
	}
	return append([]admission(nil), f.calls...), adm
}

func startReadmitter(t *testing.T, e *env, admit AdmitFunc, mod func(*ReadmitterConfig)) *Readmitter {
	t.Helper()
	cfg := ReadmitterConfig{
		Store: e.store, Dead: e.dead, Admit: admit, Rules: e.rules.get,
		MinBackoff: time.Second, MaxBackoff: 2 * time.Second, ErrorBackoff: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewReadmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.handled = e.handled.record
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(); cancel() })
	return r
}

// streamMsgs is the number of messages in the retry stream.
func streamMsgs(t *testing.T, e *env) uint64 {
	t.Helper()
	st, err := e.js.Stream(context.Background(), e.store.cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// handledLog counts the results of the fired messages the env's re-admitters handled (their
// handled hook): a test waits on it for an outcome instead of polling for it.
type handledLog struct{ c *testsignal.Counter[string] }

func newHandledLog() *handledLog { return &handledLog{c: testsignal.New[string]()} }

func (h *handledLog) record(_, result string) { h.c.Raise(result) }

// count is how many fired messages were handled with result so far.
func (h *handledLog) count(result string) int { return h.c.Count(result) }

// wait returns once n fired messages were handled with result, and fails the test if
// they were not within the given time (a bound for a failing test only).
func (h *handledLog) wait(t testing.TB, within time.Duration, result string, n int) {
	t.Helper()
	h.c.Wait(t, within, result, n)
}
