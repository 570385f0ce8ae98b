package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-io/sluice/client"
)

// connCounter is an httptest server answering every Submit 202 and counting the
// connections it accepted.
func connCounter(tb testing.TB) (*httptest.Server, *atomic.Int64) {
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(202)
		w.Write([]byte(queuedBody))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	tb.Cleanup(s.Close)
	return s, &conns
}

// submitFrom runs n Submits spread over g goroutines.
func submitFrom(tb testing.TB, c *client.Client, g, n int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range g {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := c.Submit(context.Background(), "orders", orders, 1); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// With its own transport, a client keeps as many idle connections as goroutines are
// expected to call at once (DefaultConcurrency): once 32 goroutines have each had a
// connection, 1,280 more Submits open none. (net/http's default pool of 2 closes all but
// two after each burst: 32 goroutines opened 445 connections for 1,229 requests.) The
// first round may open a few more than 32: a goroutine dials while another is handing
// its connection back.
func TestIdlePoolFitsConcurrency(t *testing.T) {
	t.Parallel()
	const goroutines, calls = 32, 1280
	s, conns := connCounter(t)
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	submitFrom(t, c, goroutines, calls)
	warm := conns.Load()
	if warm > 2*goroutines {
		t.Fatalf("%d connections for %d goroutines", warm, goroutines)
	}
	submitFrom(t, c, goroutines, calls)
	if n := conns.Load() - warm; n != 0 {
		t.Fatalf("%d new connections for %d more Submits from %d goroutines, %d idle ones open", n, calls, goroutines, warm)
	}
	if _, err := client.New(s.URL, client.WithConcurrency(0)); err == nil {
		t.Fatal("WithConcurrency(0) accepted")
	}
}

// BenchmarkConcurrentSubmit: 32 goroutines submitting against a local server, with the
// idle pool of net/http's default (2) and the client's (DefaultConcurrency); conns/op is
// the connections opened per Submit.
func BenchmarkConcurrentSubmit(b *testing.B) {
	for _, bc := range []struct {
		name string
		opt  client.Option
	}{
		{"idle=2", client.WithConcurrency(2)},
		{"idle=default", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, conns := connCounter(b)
			c, err := client.New(s.URL, bc.opt)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			submitFrom(b, c, 32, b.N)
			b.ReportMetric(float64(conns.Load())/float64(b.N), "conns/op")
		})
	}
}
