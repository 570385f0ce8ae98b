// Package loadtest drives a function from many goroutines and measures its rate and tail
// latency, for the report tests of `make bench`. It is for tests only.
package loadtest

import (
	"slices"
	"sync"
	"time"
)

// Stats is what one run measured.
type Stats struct {
	Calls    int           // calls done
	Rate     float64       // calls per second
	P50, P99 time.Duration // latency percentiles
}

// Run calls call(w, i) from conc goroutines (w is the goroutine, i its call count) until
// ops calls are done in all (ops > 0) or until the deadline (ops == 0). It returns calls
// per second, the p99 latency and the first error (a goroutine stops at its first error).
func Run(conc, ops int, until time.Time, call func(w, i int) error) (rate float64, p99 time.Duration, err error) {
	st, err := Measure(conc, ops, until, call)
	return st.Rate, st.P99, err
}

// Measure is Run returning every statistic.
func Measure(conc, ops int, until time.Time, call func(w, i int) error) (Stats, error) {
	lat := make([][]time.Duration, conc)
	errs := make([]error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Go(func() {
			mine := make([]time.Duration, 0, max(ops/conc, 1024))
			for i := 0; ; i++ {
				if ops > 0 && i >= (ops+conc-1-w)/conc {
					break
				}
				t0 := time.Now()
				if ops == 0 && !t0.Before(until) {
					break
				}
				if err := call(w, i); err != nil {
					errs[w] = err
					break
				}
				mine = append(mine, time.Since(t0))
			}
			lat[w] = mine
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for w := range lat {
		if errs[w] != nil {
			return Stats{}, errs[w]
		}
		all = append(all, lat[w]...)
	}
	return Summarize(all, elapsed), nil
}

// Summarize computes Stats from latencies measured over elapsed (lat is sorted in place).
func Summarize(lat []time.Duration, elapsed time.Duration) Stats {
	if len(lat) == 0 {
		return Stats{}
	}
	slices.Sort(lat)
	return Stats{Calls: len(lat), Rate: float64(len(lat)) / elapsed.Seconds(), P50: lat[len(lat)/2], P99: lat[len(lat)*99/100]}
}
