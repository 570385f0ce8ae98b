package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// TestLegacyIdempotencyKeys: with LegacyIdempotency a claim is made in v0.3's layout (the
// bare id under sl:idem:{<rule>}:<k>), so a key first used by a v0.3 ingress answers that id
// and a key first used here is seen by v0.3; the current layout is written too once the claim
// took the key, and keeps the request's digest. A release frees both. Concurrent claims of one
// key agree on one owner. Without the option the v0.3 layout is neither read nor written.
func TestLegacyIdempotencyKeys(t *testing.T) {
	t.Parallel()
	rdb := testRedis(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	legacy, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix, LegacyIdempotency: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	v03Key := func(k string) string { return prefix + "sl:idem:{orders}:" + k }
	v03Claim := func(k, id string) string { // what a v0.3 ingress does: SET NX GET, bare id
		owner, err := rdb.SetArgs(ctx, v03Key(k), id, redis.SetArgs{Mode: "NX", Get: true, TTL: time.Hour}).Result()
		if errors.Is(err, redis.Nil) {
			return id
		}
		if err != nil {
			t.Fatal(err)
		}
		return owner
	}
	newID := "019a0000-0000-7000-8000-000000000001.orders.kbS0x"

	// A v0.3 ingress took "a": the new ingress answers its id, and does not keep a claim of
	// its own in the current layout.
	if got := v03Claim("a", "old-id-a"); got != "old-id-a" {
		t.Fatalf("v0.3's claim of a: %q", got)
	}
	owner, err := legacy.Idempotency.Take(ctx, "orders", "a", queue.IdempotencyValue(newID, "digest"), time.Hour)
	if err != nil || owner != "old-id-a" {
		t.Fatalf("claim of a key v0.3 holds: %q %v, want old-id-a", owner, err)
	}
	waittest.Eventually(t, 5*time.Second, "the current layout's claim of a given back", func() bool {
		v, _ := plain.Idempotency.Take(ctx, "orders", "a", "probe", time.Hour)
		if v == "probe" {
			plain.Idempotency.Release(ctx, "orders", "a", "probe")
			return true
		}
		return false
	})

	// The new ingress took "b": v0.3 finds the message's bare id.
	value := queue.IdempotencyValue(newID, "digest")
	if owner, err := legacy.Idempotency.Take(ctx, "orders", "b", value, time.Hour); err != nil || owner != value {
		t.Fatalf("first claim of b: %q %v", owner, err)
	}
	if got := v03Claim("b", "old-id-b"); got != newID {
		t.Fatalf("v0.3's claim of b answered %q, want %q", got, newID)
	}
	if ttl := rdb.PTTL(ctx, v03Key("b")).Val(); ttl <= 59*time.Minute {
		t.Fatalf("the v0.3 layout's key has TTL %v, want the hour given", ttl)
	}
	// A repeat here answers the first claim whatever the layout.
	if owner, err := legacy.Idempotency.Take(ctx, "orders", "b", "another", time.Hour); err != nil || owner != value {
		t.Fatalf("repeat of b: %q %v, want %q", owner, err, value)
	}
	// Released (the admission was refused): both layouts are free again.
	if err := legacy.Idempotency.Release(ctx, "orders", "b", value); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, v03Key("b")).Val(); n != 0 {
		t.Fatal("the v0.3 layout's key outlived the release")
	}
	if owner, err := plain.Idempotency.Take(ctx, "orders", "b", "again", time.Hour); err != nil || owner != "again" {
		t.Fatalf("claim after release: %q %v", owner, err)
	}

	// Concurrent first claims of one key: one takes it, every other is told that one.
	const n = 32
	owners := make(chan string, n)
	for i := range n {
		go func() {
			v := queue.IdempotencyValue(fmt.Sprintf("id-%d", i), "d")
			owner, err := legacy.Idempotency.Take(ctx, "orders", "race", v, time.Hour)
			if err != nil {
				t.Error(err)
			}
			owners <- owner
		}()
	}
	// A claim that reads the owner before the taker has written the current layout gets
	// the bare id, without the digest (then not compared): the same owner.
	first, _ := queue.SplitIdempotencyValue(<-owners)
	for range n - 1 {
		if o, _ := queue.SplitIdempotencyValue(<-owners); o != first {
			t.Errorf("concurrent claims disagree on the owner: %q and %q", first, o)
		}
	}

	// Without the option the v0.3 layout is ignored and left alone.
	v03Claim("c", "old-id-c")
	if owner, err := plain.Idempotency.Take(ctx, "orders", "c", "new-c", time.Hour); err != nil || owner != "new-c" {
		t.Fatalf("plain claim of c: %q %v", owner, err)
	}
	plain.Idempotency.Take(ctx, "orders", "d", "new-d", time.Hour)
	if n := rdb.Exists(ctx, v03Key("d")).Val(); n != 0 {
		t.Fatal("a plain claim wrote the v0.3 layout")
	}
}

// TestScopedIdempotencyKeys: a key scoped by its caller (ScopedIdempotencyKey) is the
// caller's own — another caller's claim of the same key takes a key of its own, and no
// caller's key is an unscoped one. A claim of a scoped key finds the unscoped key's owner
// (an entry made before keys were scoped) only when that owner's request digest is the
// claim's: the original request repeated is answered with the message already accepted,
// and from then on found under the scoped key; another request's owner is never answered.
// In the v0.3 layout too.
func TestScopedIdempotencyKeys(t *testing.T) {
	t.Parallel()
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			rdb := testRedis(t)
			ctx := context.Background()
			s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: redistest.Prefix(t), LegacyIdempotency: legacy})
			if err != nil {
				t.Fatal(err)
			}
			claim := func(k, value string) string {
				t.Helper()
				owner, err := s.Idempotency.Take(ctx, "orders", k, value, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				return owner
			}
			alice := func(k string) string { return queue.ScopedIdempotencyKey("alice", k) }
			bob := func(k string) string { return queue.ScopedIdempotencyKey("bob", k) }
			for _, pair := range [][2]string{
				{alice("k"), bob("k")}, {alice("k"), "k"}, {queue.ScopedIdempotencyKey("a:1", "k"), queue.ScopedIdempotencyKey("a", "1:k")},
				{queue.ScopedIdempotencyKey("", "k"), "k"},
			} {
				if pair[0] == pair[1] {
					t.Fatalf("two scopes meet: %q", pair[0])
				}
			}

			// Two callers' claims of one key are their own.
			if got := claim(alice("order-1"), "id-a dA"); got != "id-a dA" {
				t.Fatalf("alice's claim: %q", got)
			}
			if got := claim(bob("order-1"), "id-b dA"); got != "id-b dA" {
				t.Fatalf("bob's claim of alice's key answered %q, want a claim of his own", got)
			}
			if got := claim(alice("order-1"), "id-a2 dB"); got != "id-a dA" {
				t.Fatalf("alice's repeat: %q, want her first claim", got)
			}

			// An entry from before scoping (unscoped "order-2"): its own request repeated finds
			// it, now and later; another request under the key does not see it.
			if got := claim("order-2", "old-id dC"); got != "old-id dC" {
				t.Fatal(got)
			}
			if got := claim(bob("order-2"), "id-b2 dD"); got != "id-b2 dD" {
				t.Fatalf("another request under an unscoped key answered %q, want its own claim", got)
			}
			if got := claim(alice("order-2"), "id-a3 dC"); got != "old-id dC" {
				t.Fatalf("the original request repeated answered %q, want the message accepted before scoping", got)
			}
			if got := claim(alice("order-2"), "id-a4 dC"); got != "old-id dC" {
				t.Fatalf("a second repeat answered %q, want the message accepted before scoping", got)
			}
			// A release names the scoped key: the unscoped entry stays for its TTL.
			if err := s.Idempotency.Release(ctx, "orders", bob("order-2"), "id-b2 dD"); err != nil {
				t.Fatal(err)
			}
			if got := claim("order-2", "probe dX"); got != "old-id dC" {
				t.Fatalf("the unscoped entry after a scoped release: %q", got)
			}
		})
	}
}
