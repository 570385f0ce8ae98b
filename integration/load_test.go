package integration_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/internal/sinktest"
)

// loadGen submits a steady stream of messages, one goroutine per key, each key's
// messages one after the other, so the order in which they were acknowledged is their
// admission order. Every message carries an Idempotency-Key; a request that got no answer
// (connection refused or reset) or a 503 is retried under the same key, alternating
// ingresses, as a client of the API should. The ledger records what was acknowledged.
// Each request is sent to c.ingress[i].URL() as it is then, so a restarted ingress is
// reached at its address after the restart.
type loadGen struct {
	c        *cluster
	domain   string
	field    string // descriptor key, e.g. "account_id"
	prefix   string // key prefix
	keys     int
	interval time.Duration // between two messages of one key
	// home: every new message of key k goes first to ingress k mod n, as behind a load
	// balancer that sends clients back to an ingress once it is up again; a retry still
	// moves on to the next ingress. Without it a key stays on the ingress its last retry
	// moved it to, so after one ingress's restart the other takes every key it took over.
	home bool
	// spread: key k's first message waits k/keys of an interval, so requests come evenly
	// over each interval instead of all keys at once (a restart shorter than the interval
	// would otherwise fall between two rounds and meet no request).
	spread bool

	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	order   map[string][]string // key → acknowledged ids in acknowledgement order
	acked   map[string]bool     // id → acknowledged
	idOf    map[string]string   // payload ("key/seq") → id answered for it
	ackAt   []time.Time         // time of every first acknowledgement (202, or 200 for a message whose 202 was lost)
	last202 []time.Time         // per ingress, time of the latest 202/200
	lat     []sample            // every answered request

	sent, retried, rejected, unavailable, noAnswer atomic.Int64
	retryAfterMissing                              atomic.Int64
	other                                          atomic.Int64 // unexpected answers
	lastOther                                      atomic.Value
}

type sample struct {
	at time.Time // sent
	d  time.Duration
}

func newLoad(c *cluster, domain, field, prefix string, keys int, interval time.Duration) *loadGen {
	return &loadGen{c: c, domain: domain, field: field, prefix: prefix, keys: keys, interval: interval,
		stop: make(chan struct{}), order: map[string][]string{}, acked: map[string]bool{}, idOf: map[string]string{},
		last202: make([]time.Time, len(c.ingress))}
}

func (l *loadGen) start() {
	for k := 0; k < l.keys; k++ {
		key := fmt.Sprintf("%s%03d", l.prefix, k)
		l.wg.Add(1)
		go l.run(k, key)
	}
}

// halt stops submitting and waits for the requests in flight.
func (l *loadGen) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *loadGen) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *loadGen) run(k int, key string) {
	defer l.wg.Done()
	if l.spread {
		select {
		case <-l.stop:
			return
		case <-time.After(l.interval * time.Duration(k) / time.Duration(l.keys)):
		}
	}
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	ing := k % len(l.c.ingress)
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		if l.home {
			ing = k % len(l.c.ingress)
		}
		payload := fmt.Sprintf(`{"k":%q,"seq":%d}`, key, seq)
		idem := key + "/" + strconv.Itoa(seq)
		for attempt := 0; ; attempt++ {
			if attempt > 0 {
				l.retried.Add(1)
				ing = (ing + 1) % len(l.c.ingress)
				select {
				case <-l.stop:
					return // unanswered: not acknowledged, may or may not be delivered
				case <-time.After(100 * time.Millisecond):
				}
			}
			l.sent.Add(1)
			sent := time.Now()
			r := l.c.submit(ing, l.domain, []kv{{l.field, key}}, payload, idem)
			now := time.Now()
			if r.Err == nil {
				l.mu.Lock()
				l.lat = append(l.lat, sample{sent, now.Sub(sent)})
				l.mu.Unlock()
			}
			switch {
			case r.Err != nil:
				l.noAnswer.Add(1)
				continue
			case r.Code == 503:
				l.unavailable.Add(1)
				if r.Header.Get("Retry-After") == "" {
					l.retryAfterMissing.Add(1)
				}
				continue
			case r.Code == 202 || r.Code == 200:
				l.ack(key, idem, r.str("id"), ing, now)
			case r.Code == 429:
				l.rejected.Add(1)
			default:
				l.other.Add(1)
				l.lastOther.Store(fmt.Sprintf("%d %v", r.Code, r.Body))
			}
			break
		}
	}
}

func (l *loadGen) ack(key, idem, id string, ing int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.After(l.last202[ing]) {
		l.last202[ing] = at
	}
	if prev, ok := l.idOf[idem]; ok && prev != id {
		// One Idempotency-Key answered with two ids: counted by verify as a violation.
		l.idOf[idem+"#conflict"] = id
	}
	l.idOf[idem] = id
	if id == "" || l.acked[id] {
		return
	}
	l.acked[id] = true
	l.order[key] = append(l.order[key], id)
	l.ackAt = append(l.ackAt, at)
}

// ackedIDs returns every acknowledged id.
func (l *loadGen) ackedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, o := range l.order {
		ids = append(ids, o...)
	}
	return ids
}

// latency returns the median and the largest answer time of requests sent in [from, to).
func (l *loadGen) latency(from, to time.Time) (p50, worst time.Duration) {
	l.mu.Lock()
	var ds []time.Duration
	for _, s := range l.lat {
		if !s.at.Before(from) && s.at.Before(to) {
			ds = append(ds, s.d)
		}
	}
	l.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], ds[len(ds)-1]
}

// lastAckBy is the time of the latest acknowledgement answered by ingress i.
func (l *loadGen) lastAckBy(i int) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last202[i]
}

// lastAck is the time of the latest acknowledgement.
func (l *loadGen) lastAck() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t time.Time
	for _, a := range l.ackAt {
		if a.After(t) {
			t = a
		}
	}
	return t
}

// firstAckAfter is the first acknowledgement at or after t (zero if none).
func (l *loadGen) firstAckAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, a := range l.ackAt {
		if !a.Before(t) && (first.IsZero() || a.Before(first)) {
			first = a
		}
	}
	return first
}

// longestAckGap is the longest time without any acknowledgement within [from, to].
func (l *loadGen) longestAckGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	ts := []time.Time{from}
	for _, a := range l.ackAt {
		if a.After(from) && a.Before(to) {
			ts = append(ts, a)
		}
	}
	l.mu.Unlock()
	ts = append(ts, to)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	var best time.Duration
	for i := 1; i < len(ts); i++ {
		if g := ts[i].Sub(ts[i-1]); g > best {
			best = g
		}
	}
	return best
}

// verdict is what the sink says about the acknowledged messages.
type verdict struct {
	Acked, Delivered, Lost, Reordered, Duplicated int
	ForeignDuplicates                             int // one message delivered under two ids (different Idempotency-Key)
	Unacked                                       int // delivered although never acknowledged (in flight at a crash)
	Missing                                       []string
	// MaxPerSecond is the most deliveries of one key the sink saw within any 1 s window,
	// every attempt and redelivery included ("never more", measured as such).
	MaxPerSecond int
}

// verify waits (up to timeout) until every acknowledged message was accepted by the sink,
// then compares.
func (l *loadGen) verify(timeout time.Duration) verdict {
	ids := l.ackedIDs()
	l.c.waitIDs(ids, timeout)
	// Everything the sink accepted for this load's keys, not only acknowledged ids, so
	// that copies under other ids are seen.
	var mine []sinktest.Delivery
	l.mu.Lock()
	order := map[string][]string{}
	for k, v := range l.order {
		order[k] = append([]string(nil), v...)
	}
	conflicts := 0
	for k := range l.idOf {
		if len(k) > 9 && k[len(k)-9:] == "#conflict" {
			conflicts++
		}
	}
	l.mu.Unlock()
	for _, d := range l.c.sink.Accepted() {
		if _, ok := order[d.Key]; ok {
			mine = append(mine, d)
		}
	}
	rep := sinktest.Check(mine, order)
	v := verdict{Acked: len(ids), Lost: len(rep.Missing), Reordered: rep.Reordered, Duplicated: rep.Duplicates, Missing: rep.Missing}
	v.Delivered = v.Acked - v.Lost
	// One logical message (key/seq in the payload) must only ever travel under one id.
	idsOfPayload := map[string]map[string]bool{}
	acked := map[string]bool{}
	for _, id := range ids {
		acked[id] = true
	}
	for _, d := range mine {
		var p struct {
			K   string `json:"k"`
			Seq int    `json:"seq"`
		}
		if json.Unmarshal(d.Payload, &p) != nil {
			continue
		}
		pk := p.K + "/" + strconv.Itoa(p.Seq)
		if idsOfPayload[pk] == nil {
			idsOfPayload[pk] = map[string]bool{}
		}
		if !idsOfPayload[pk][d.ID] && !acked[d.ID] {
			v.Unacked++
		}
		idsOfPayload[pk][d.ID] = true
	}
	for _, s := range idsOfPayload {
		v.ForeignDuplicates += len(s) - 1
	}
	v.ForeignDuplicates += conflicts
	return v
}

func (l *loadGen) stats() string {
	s := fmt.Sprintf("sent %d (retries %d): no answer %d, 503 %d, 429 %d, other %d",
		l.sent.Load(), l.retried.Load(), l.noAnswer.Load(), l.unavailable.Load(), l.rejected.Load(), l.other.Load())
	if o, ok := l.lastOther.Load().(string); ok {
		s += " (last: " + o + ")"
	}
	return s
}
