package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bucket"
)

// FuzzNeverOverAdmits checks, for any limit and any sequence of calls, that the hits
// granted in every span of Δ ms stay within the algorithm's bound:
//
//	token_bucket, leaky_bucket:        burst + rate × Δ / interval   (exact)
//	sliding_window_log:                rate + rate × Δ / interval    (exact; burst = rate)
//	fixed_window, sliding_window_counter: rate × (⌊Δ / interval⌋ + 2)  (≤ 2× at a window edge)
//
// The trace bytes are read in pairs: time step (ms, scaled) and hits.
func FuzzNeverOverAdmits(f *testing.F) {
	f.Add(byte(0), uint16(10), uint32(1000), uint16(0), []byte{0, 5, 1, 5, 200, 3, 0, 9})
	f.Add(byte(2), uint16(7), uint32(60000), uint16(0), []byte{255, 7, 255, 7, 10, 1, 255, 7, 1, 7})
	f.Add(byte(4), uint16(3), uint32(100), uint16(0), []byte{1, 1, 1, 1, 98, 1, 1, 3, 50, 2})
	f.Add(byte(1), uint16(1), uint32(1), uint16(5), []byte{0, 5, 0, 1, 1, 1, 2, 2})
	f.Add(byte(3), uint16(100), uint32(5000), uint16(0), []byte{0, 90, 100, 50, 3, 60})
	f.Fuzz(func(t *testing.T, algByte byte, rate uint16, ivl uint32, burst uint16, trace []byte) {
		alg := allAlgorithms[int(algByte)%len(allAlgorithms)]
		l := bucket.Limit{Algorithm: alg, Rate: int64(rate%1000) + 1, Interval: time.Duration(ivl%3_600_000+1) * ms, Burst: int64(burst % 1000)}
		R, I, B := l.Rate, l.Interval.Milliseconds(), l.Rate
		if l.Burst > 0 && (alg == bucket.TokenBucket || alg == bucket.LeakyBucket) {
			B = l.Burst
		}
		m := bucket.NewMemory(bucket.MemoryConfig{})
		type grant struct{ t, n int64 }
		var grants []grant
		now := int64(0)
		for i := 0; i+1 < len(trace) && i < 400; i += 2 {
			// Steps are a small multiple of the interval so windows and refills happen.
			now += int64(trace[i]) * max(1, I/64)
			n := int64(trace[i+1] % 16)
			r, err := m.Allow(context.Background(), "k", []bucket.Limit{l}, n, t0.Add(time.Duration(now)*ms))
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed && n > 0 {
				grants = append(grants, grant{now, n})
			}
		}
		for i := range grants {
			sum := int64(0)
			for j := i; j < len(grants); j++ {
				sum += grants[j].n
				span := grants[j].t - grants[i].t
				var ok bool
				switch alg {
				case bucket.FixedWindow, bucket.SlidingWindowCounter:
					ok = sum <= R*(span/I+2)
				default:
					ok = sum*I <= B*I+R*span
				}
				if !ok {
					t.Fatalf("%s %d/%dms burst %d: %d hits granted in %dms (grants %v)", alg, R, I, B, sum, span, grants)
				}
			}
		}
	})
}
