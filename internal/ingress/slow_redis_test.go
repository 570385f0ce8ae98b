package ingress_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/internal/redistest"
)

// slowProxy forwards TCP connections to a Redis server and holds every reply chunk back
// by delay before passing it on (in order), so each command takes delay longer.
type slowProxy struct {
	ln    net.Listener
	delay time.Duration
	wg    sync.WaitGroup
}

func startSlowProxy(t *testing.T, network, addr string, delay time.Duration) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, delay: delay}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial(network, addr)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Add(2)
			go func() { // requests go straight through
				defer p.wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := up.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				up.Close()
			}()
			go func() { // replies wait delay after they arrived
				defer p.wg.Done()
				type chunk struct {
					at   time.Time
					data []byte
				}
				ch := make(chan chunk, 1024)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for k := range ch {
						time.Sleep(time.Until(k.at.Add(p.delay))) // the scenario: every byte p.delay late
						if _, err := c.Write(k.data); err != nil {
							return
						}
					}
				}()
				buf := make([]byte, 32<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						ch <- chunk{time.Now(), append([]byte(nil), buf[:n]...)}
					}
					if err != nil {
						break
					}
				}
				close(ch)
				<-done
				c.Close()
			}()
		}
	}()
	return p
}

// TestGRPCAnswersWithinDeadlineWhenRedisIsSlow: Redis answers 50 ms late. A gRPC caller
// with a 40 ms deadline (Envoy sends its filter timeout as the call's deadline) still gets
// an answer in time, decided locally as in degraded mode — limits enforced, the process
// not put into degraded mode.
func TestGRPCAnswersWithinDeadlineWhenRedisIsSlow(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t, redistest.Options{})
	proxy := startSlowProxy(t, r.Network(), r.Addr(), 50*time.Millisecond)
	e := startParityEnv(t, parityRules(t), newFrozen().clock(), "-redis", "redis://"+proxy.ln.Addr().String())

	ask := func(deadline time.Duration) (*rlsv3.RateLimitResponse, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		resp, err := e.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc("user", "slow")}})
		return resp, time.Since(start), err
	}
	// Each call is answered within its deadline, counted by the local limiter: 19, 18, …
	// left, then OVER_LIMIT. The machine is shared, so a call may still miss its deadline
	// now and then (a scheduling stall, not Redis): up to six such are tolerated — without
	// the local answer every call misses.
	misses, last, answered := 0, uint32(20), 0
	const maxMisses = 6
	for i := 0; i < 20+maxMisses && last > 0; i++ {
		resp, took, err := ask(40 * time.Millisecond)
		if status.Code(err) == codes.DeadlineExceeded {
			if misses++; misses > maxMisses {
				t.Fatalf("call %d: %v after %v: more than %d calls missed their deadline", i+1, err, took, maxMisses)
			}
			continue
		}
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		answered++
		st := resp.Statuses[0]
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && last <= 1+uint32(misses) {
			last = 0 // the missed calls were counted too (decided locally, answered too late)
			break
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 20 || st.LimitRemaining >= last || last-st.LimitRemaining > 1+uint32(misses) {
			t.Fatalf("call %d: %s remaining %d after %d", i+1, resp.OverallCode, st.LimitRemaining, last)
		}
		last = st.LimitRemaining
	}
	if last != 0 {
		t.Fatalf("the limit was not used up: %d left", last)
	}
	for {
		resp, took, err := ask(40 * time.Millisecond)
		if status.Code(err) == codes.DeadlineExceeded && misses < maxMisses {
			misses++
			continue
		}
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("over the limit: %v after %v, %v (the local limiter must enforce the limit)", resp.GetOverallCode(), took, err)
		}
		break
	}
	// Slower than the callers could wait is not an outage: degraded mode was not entered
	// (it would send every caller, patient or not, to the local limiter).
	if m := e.do("GET", "/metrics", ""); !strings.Contains(m.raw, "\nsluice_limiter_degraded 0\n") {
		t.Fatalf("degraded mode was entered:\n%s", grep(m.raw, "sluice_limiter_degraded"))
	}
	// A deadline already too short for anything but the local decision is still met.
	if _, _, err := ask(3 * time.Millisecond); err != nil && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("3 ms deadline: %v", err)
	}
}
