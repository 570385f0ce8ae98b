package queue

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Async deletes: the own drain engine deletes a delivered message without waiting for the
// answer (its next pop of the key starts after the message's sequence, so it never reads it
// again), which takes one round trip per message off each worker. Requests go to the
// JetStream API as DeleteMsg's do ({"seq":N,"no_erase":true}); the answers come back on one
// shared inbox subscription.

// asyncDeleteTimeout: a delete not answered by then is reported failed (the caller
// delivers the message again rather than lose track of it).
const asyncDeleteTimeout = 10 * time.Second

type asyncDeletes struct {
	once    sync.Once
	err     error
	sub     *nats.Subscription
	prefix  string // the inbox, ending in '.'
	mu      sync.Mutex
	next    uint64
	pending map[uint64]pendingDelete
	swept   time.Time
}

type pendingDelete struct {
	done func(error)
	at   time.Time
	seq  uint64
	rule string
}

// DeleteAsync asks for seq of rule's stream to be deleted and returns at once; done is
// called with the outcome (nil, ErrGone, or another error) from NATS's handler goroutine, so
// it must not block. An error returned here means the request was not sent (done is not
// called).
func (q *Queues) DeleteAsync(rule string, seq uint64, done func(error)) error {
	a := &q.adel
	nc := q.js.Conn()
	a.once.Do(func() {
		a.prefix = nc.NewRespInbox() + "."
		a.pending = map[uint64]pendingDelete{}
		a.sub, a.err = nc.Subscribe(a.prefix+"*", a.answer)
		if a.err == nil {
			_ = a.sub.SetPendingLimits(-1, -1)
		}
	})
	if a.err != nil {
		return fmt.Errorf("queue: async deletes: %w", a.err)
	}
	now := time.Now()
	a.mu.Lock()
	a.next++
	id := a.next
	a.pending[id] = pendingDelete{done: done, at: now, seq: seq, rule: rule}
	var late []pendingDelete
	if now.Sub(a.swept) > time.Second {
		a.swept = now
		for k, p := range a.pending {
			if now.Sub(p.at) > asyncDeleteTimeout {
				late = append(late, p)
				delete(a.pending, k)
			}
		}
	}
	a.mu.Unlock()
	for _, p := range late {
		p.done(fmt.Errorf("queue: delete from rule %q seq %d: no answer within %s", p.rule, p.seq, asyncDeleteTimeout))
	}
	body := []byte(`{"seq":` + strconv.FormatUint(seq, 10) + `,"no_erase":true}`)
	subj := q.cfg.APIPrefix + "STREAM.MSG.DELETE." + q.StreamName(rule)
	if err := nc.PublishRequest(subj, a.prefix+strconv.FormatUint(id, 10), body); err != nil {
		a.mu.Lock()
		delete(a.pending, id)
		a.mu.Unlock()
		return fmt.Errorf("queue: delete from rule %q seq %d: %w", rule, seq, err)
	}
	return nil
}

func (a *asyncDeletes) answer(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[len(a.prefix):], 10, 64)
	if err != nil {
		return
	}
	a.mu.Lock()
	p, ok := a.pending[id]
	delete(a.pending, id)
	a.mu.Unlock()
	if !ok {
		return
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	switch {
	case len(m.Data) == 0 && m.Header.Get("Status") == "503":
		p.done(fmt.Errorf("queue: delete from rule %q seq %d: %w", p.rule, p.seq, nats.ErrNoResponders))
	case json.Unmarshal(m.Data, &resp) != nil:
		p.done(fmt.Errorf("queue: delete from rule %q seq %d: unreadable answer", p.rule, p.seq))
	case resp.Success:
		p.done(nil)
	case resp.Error != nil && (resp.Error.ErrCode == 10057 || resp.Error.ErrCode == 10037 || resp.Error.Code == 404):
		// 10057: message not found; 10037: no message found (deleted already).
		p.done(fmt.Errorf("%w: rule %q seq %d", ErrGone, p.rule, p.seq))
	case resp.Error != nil:
		p.done(fmt.Errorf("queue: delete from rule %q seq %d: %s (%d)", p.rule, p.seq, resp.Error.Description, resp.Error.ErrCode))
	default:
		p.done(fmt.Errorf("queue: delete from rule %q seq %d: not deleted", p.rule, p.seq))
	}
}
