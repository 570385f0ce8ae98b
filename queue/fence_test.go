package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// TestFencingTokensGrowAndGuardRenewAndRelease: every claim of a key gets a larger token;
// a renewal or release under an old token is refused even by the same owner (the key was
// lost and claimed again), and a renewal keeps another drainer from taking the key.
func TestFencingTokensGrowAndGuardRenewAndRelease(t *testing.T) {
	t.Parallel()
	ss := newSchedulers(t, 2)
	ctx := context.Background()
	a, b := ss[0], ss[1]
	req := func(owner string) queue.ClaimRequest {
		return queue.ClaimRequest{Outflow: queue.Outflow{Every: 100 * time.Millisecond}, Owner: owner, Max: 10, Lease: time.Second}
	}
	a.Claims.MarkDueAt(ctx, "r", t0, "k")
	c1, err := a.Claims.Claim(ctx, "r", t0, req("A"))
	if err != nil || len(c1.Claims) != 1 || c1.Claims[0].Fence <= 0 || !c1.Now.Equal(t0) {
		t.Fatalf("A's claim: %+v, %v", c1, err)
	}
	f1 := c1.Claims[0].Fence
	// A renews at t0+0.8 s: the lease now ends at t0+1.8 s instead of t0+1 s.
	rn, err := a.Claims.Renew(ctx, "r", "A", t0.Add(800*time.Millisecond), time.Second, []queue.Held{{Key: "k", Fence: f1}})
	if err != nil || len(rn.Held) != 1 || !rn.Held[0] {
		t.Fatalf("A's renewal: %+v, %v", rn, err)
	}
	if c, _ := b.Claims.Claim(ctx, "r", t0.Add(1500*time.Millisecond), req("B")); len(c.Claims) != 0 {
		t.Fatalf("B took a renewed lease: %+v", c)
	}
	// A misses its next renewal: at t0+1.8 s the key goes to whoever claims; here A itself.
	c2, err := a.Claims.Claim(ctx, "r", t0.Add(1800*time.Millisecond), req("A"))
	if err != nil || len(c2.Claims) != 1 || c2.Claims[0].Fence <= f1 {
		t.Fatalf("A's second claim: %+v, %v (fence must exceed %d)", c2, err, f1)
	}
	f2 := c2.Claims[0].Fence
	// The first claim's delivery learns it is gone, although the owner is the same.
	if rn, err := a.Claims.Renew(ctx, "r", "A", t0.Add(1900*time.Millisecond), time.Second, []queue.Held{{Key: "k", Fence: f1}, {Key: "k", Fence: f2}}); err != nil || rn.Held[0] || !rn.Held[1] {
		t.Fatalf("renewal of the old and new claims: %+v, %v; want [false true]", rn, err)
	}
	if _, err := a.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "k", Mode: queue.Retrying, At: t0.Add(time.Hour), Fence: f1}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("release under the old fence: %v, want ErrLeaseLost", err)
	}
	if _, err := b.Claims.Release(ctx, "r", "B", 0, queue.Release{Key: "k", Mode: queue.Released, Fence: f2}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("release by another owner: %v, want ErrLeaseLost", err)
	}
	if held, err := a.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "k", Mode: queue.Released, Fence: f2}); err != nil || !held[0] {
		t.Fatalf("release under the current fence: %v %v", held, err)
	}
	// The refused retry release changed nothing: the key is due at its paced slot.
	c3, err := b.Claims.Claim(ctx, "r", t0.Add(2*time.Second), req("B"))
	if err != nil || len(c3.Claims) != 1 || c3.Claims[0].Fence <= f2 || !c3.Claims[0].Due.Equal(t0.Add(1900*time.Millisecond)) {
		t.Fatalf("B's claim: %+v, %v", c3, err)
	}
	// Rules are independent counters, but each only grows: a new rule starts near now (µs).
	a.Claims.MarkDueAt(ctx, "r2", t0, "k")
	c4, _ := a.Claims.Claim(ctx, "r2", t0, req("A"))
	if len(c4.Claims) != 1 || c4.Claims[0].Fence <= t0.UnixMicro() {
		t.Fatalf("first fence of a rule %+v, want above %d", c4, t0.UnixMicro())
	}
	if _, err := a.Claims.Claim(ctx, "r", t0, queue.ClaimRequest{Owner: "A#1", Max: 1, Lease: time.Second}); err == nil {
		t.Fatal("an owner with '#' was accepted")
	}
}

// TestRedisClockDecidesSlotsAndLeases: with no time given, claims, renewals and due marks
// use Redis's clock, whatever the caller's clock says.
func TestRedisClockDecidesSlotsAndLeases(t *testing.T) {
	t.Parallel()
	s := newSchedulers(t, 1)[0]
	ctx := context.Background()
	before := time.Now()
	if _, err := s.Claims.MarkDueAt(ctx, "r", time.Time{}, "k"); err != nil {
		t.Fatal(err)
	}
	req := queue.ClaimRequest{Outflow: queue.Outflow{Every: time.Hour}, Owner: "A", Max: 10, Lease: time.Second}
	c, err := s.Claims.Claim(ctx, "r", time.Time{}, req)
	after := time.Now()
	// The test process and redis-server share this machine's clock.
	if err != nil || len(c.Claims) != 1 || c.Now.Before(before.Add(-time.Millisecond)) || c.Now.After(after.Add(time.Millisecond)) {
		t.Fatalf("claim at Redis's time: %+v, %v (local %v..%v)", c, err, before, after)
	}
	if c.Claims[0].Slot.Before(c.Claims[0].Due) || c.Claims[0].Slot.Before(c.Now) || c.Claims[0].Due.Before(before.Add(-time.Millisecond)) {
		t.Fatalf("slot %v, due %v, now %v", c.Claims[0].Slot, c.Claims[0].Due, c.Now)
	}
	rn, err := s.Claims.Renew(ctx, "r", "A", time.Time{}, time.Second, []queue.Held{{Key: "k", Fence: c.Claims[0].Fence}})
	if err != nil || !rn.Held[0] || rn.Now.Before(c.Now) {
		t.Fatalf("renewal: %+v, %v", rn, err)
	}
	s.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "k", Mode: queue.Released, Fence: c.Claims[0].Fence})
	// The next slot is an hour later in Redis's time: a claim now gets nothing and says when.
	c2, err := s.Claims.Claim(ctx, "r", time.Time{}, req)
	if err != nil || len(c2.Claims) != 0 || !c2.Next.Equal(c.Claims[0].Slot.Add(time.Hour)) {
		t.Fatalf("second claim: %+v, %v", c2, err)
	}
}
