package bucket

import (
	"context"
	"hash/maphash"
	"testing"
	"time"
)

// TestMemoryHashCollisions: keys whose 64-bit hashes collide share a map slot and are
// told apart by the full key; sweeping unlinks only the idle ones.
func TestMemoryHashCollisions(t *testing.T) {
	m := NewMemory(MemoryConfig{Shards: 1})
	now := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	limits := []Limit{{Rate: 1, Interval: time.Second}}
	// Plant three entries under the hash of "a", as if "b" and "c" collided with it.
	h := maphash.String(m.seed, "a")
	sh := &m.shards[0]
	for k, idle := range map[string]time.Duration{"a": 0, "b": time.Hour, "c": time.Second} {
		sh.keys[h] = &entry{key: k, next: sh.keys[h], slots: make([]slot, 1), expireAt: now.Add(idle).UnixMilli()}
		sh.n++
	}
	find := func(k string) *entry {
		for e := sh.keys[h]; e != nil; e = e.next {
			if e.key == k {
				return e
			}
		}
		return nil
	}
	if r, _ := m.Allow(context.Background(), "a", limits, 1, now); !r.Allowed {
		t.Fatal("first hit on a denied")
	}
	if r, _ := m.Allow(context.Background(), "a", limits, 1, now); r.Allowed {
		t.Fatal("a's state not found in the chain")
	}
	if n := m.Sweep(now.Add(2 * time.Second)); n != 2 || m.Len() != 1 || find("b") == nil || find("a") != nil {
		t.Fatalf("swept %d, Len %d; want a and c gone, b kept", n, m.Len())
	}
}

// TestWaitIsExact checks the pure cores' wait against room: after
// waiting exactly wait(k) ms there is room for k, and one ms earlier there is not.
func TestWaitIsExact(t *testing.T) {
	now := int64(1_767_571_200_000) // 2026-01-05
	for alg := byte(algToken); alg <= algCounter; alg++ {
		if alg == algLog {
			continue // the ring has its own wait; covered by the conformance suite
		}
		for _, p := range []params{{alg: alg, rate: 7, ivl: 60_000, burst: 7}, {alg: alg, rate: 10, ivl: 1000, burst: 3}, {alg: alg, rate: 3, ivl: 10, burst: 5}} {
			if alg != algToken && alg != algLeaky {
				p.burst = p.rate
			}
			st := advance(&p, state{}, now)
			for step := 0; step < 30; step++ {
				t0 := now + int64(step)*p.ivl/7
				st = advance(&p, st, t0)
				if k := int64(step%3) + 1; k <= room(&p, &st, t0) {
					st = consume(&p, st, k)
				}
				for k := int64(1); k <= p.burst; k++ {
					w := wait(&p, &st, k, t0)
					if w < 0 {
						t.Fatalf("alg %d: wait(%d) never", alg, k)
					}
					at := advance(&p, st, t0+w)
					if room(&p, &at, t0+w) < k {
						t.Fatalf("alg %d %+v step %d: no room for %d after wait %d", alg, p, step, k, w)
					}
					if w > 0 {
						before := advance(&p, st, t0+w-1)
						if room(&p, &before, t0+w-1) >= k {
							t.Fatalf("alg %d %+v step %d: room for %d already at wait %d − 1", alg, p, step, k, w)
						}
					}
				}
			}
		}
	}
}
