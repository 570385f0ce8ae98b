package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/proctest"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// The multi-process tests: ingress and drainer binaries as child processes against a
// 3-node JetStream cluster (R3 streams) embedded in the test process, a private
// redis-server and a recording HTTP sink.

// bins are the binaries built once by TestMain.
var bins struct{ ingress, drainer, nats string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := proctest.Build(dir, "./cmd/ingress", "./cmd/drainer", "github.com/nats-io/nats-server/v2"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	bins.ingress, bins.drainer, bins.nats = filepath.Join(dir, "ingress"), filepath.Join(dir, "drainer"), filepath.Join(dir, "nats-server")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const adminToken = "integration-token"

type clusterOptions struct {
	rules     string // rules YAML; "SINK" is replaced with the sink's URL
	ingresses int    // default 2
	// debugAddr, when set, gives the first ingress -debug-addr (pprof), for profiling a report.
	debugAddr      string
	drainers       int // default 2
	drainerWorkers int // default 16
	// allAtOnce starts every process at the same moment (default: the first ingress
	// alone first, see startCluster).
	allAtOnce bool
	// natsProcesses runs the JetStream cluster as nats-server child processes (so a node
	// can be SIGKILLed) instead of embedded servers.
	natsProcesses bool
	// redisSentinel runs Redis as a master, a replica and 3 sentinels (processes use the
	// Sentinel URL); redisCluster as a Redis Cluster of 3 masters with a replica each.
	// Default: one redis-server with AOF.
	redisSentinel, redisCluster bool
	// natsMaxStore limits every NATS node's JetStream file store (embedded cluster only);
	// procEnv is added to every ingress's and drainer's environment (SLUICE_* settings).
	natsMaxStore int64
	procEnv      []string
	// natsSingle runs one embedded NATS server instead of a cluster, and R1 streams.
	natsSingle bool
	// drainerVia, when set, gives drainer i (from 0) the -nats and -redis it connects to
	// (for instance a tcpProxy in front of the cluster's), from the cluster's own URLs.
	drainerVia func(i int, natsURL, redisURL string) (string, string)
}

// cluster is one whole sluice deployment owned by one test.
type cluster struct {
	t         *testing.T
	nats      []*natstest.Node      // embedded cluster, or
	natsProcs *proctest.NATSCluster // nats-server processes (clusterOptions.natsProcesses)
	natsURL   string
	js        jetstream.JetStream
	redis     *redistest.Server    // one server, or
	sentinels *redistest.Sentinels // clusterOptions.redisSentinel, or
	redisCl   *redistest.Cluster   // clusterOptions.redisCluster
	redisURL  string               // the -redis of every process
	sink      *sinktest.Sink
	procEnv   []string // clusterOptions.procEnv
	via       func(i int, natsURL, redisURL string) (string, string)
	debugAddr string // clusterOptions.debugAddr
	replicas  string // the processes' -replicas: "3", or "1" with clusterOptions.natsSingle
	rulesPath string
	ingress   []*proctest.Proc
	drainers  []*proctest.Proc
	http      *http.Client
}

func startCluster(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	if o.ingresses == 0 {
		o.ingresses = 2
	}
	if o.drainers == 0 {
		o.drainers = 2
	}
	if o.drainerWorkers == 0 {
		o.drainerWorkers = 16
	}
	c := &cluster{t: t, procEnv: o.procEnv, via: o.drainerVia, debugAddr: o.debugAddr, http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	c.replicas = "3"
	switch {
	case o.natsSingle:
		n := natstest.StartWith(t, func(so *server.Options) {
			if o.natsMaxStore > 0 {
				so.JetStreamMaxStore = o.natsMaxStore
			}
		})
		c.nats, c.natsURL, c.replicas = []*natstest.Node{n}, n.URL(), "1"
	case o.natsProcesses:
		c.natsProcs = proctest.StartNATSCluster(t, bins.nats, 3)
		c.natsURL = c.natsProcs.URL()
	default:
		c.nats = natstest.StartClusterWith(t, 3, func(so *server.Options) {
			if o.natsMaxStore > 0 {
				so.JetStreamMaxStore = o.natsMaxStore
			}
		})
		c.natsURL = natstest.ClusterURL(c.nats)
	}
	_, c.js = natstest.Connect(t, c.natsURL)
	switch {
	case o.redisSentinel:
		c.sentinels = redistest.StartSentinels(t, redistest.SentinelOptions{})
		c.redisURL = c.sentinels.URL()
	case o.redisCluster:
		c.redisCl = redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1})
		c.redisURL = c.redisCl.URL()
	default:
		c.redis = redistest.Start(t, redistest.Options{TCP: true, AppendOnly: true})
		c.redisURL = c.redis.URL()
	}
	c.sink = sinktest.Start(t)
	c.rulesPath = filepath.Join(t.TempDir(), "rules.yaml")
	c.writeRules(o.rules)

	if !o.natsSingle {
		waitR3(t, c.js)
	}

	c.ingress = make([]*proctest.Proc, o.ingresses)
	c.drainers = make([]*proctest.Proc, o.drainers)
	// The first ingress creates the streams and buckets alone: concurrent creation of one
	// R3 stream by several processes leaves all but one without an answer until they retry,
	// which costs seconds per cluster (TestConcurrentStartOfAllProcesses covers it).
	first := 0
	if !o.allAtOnce {
		c.ingress[0] = c.newIngress("ingress-1")
		if c.ingress[0] == nil {
			t.FailNow()
		}
		first = 1
	}
	var wg sync.WaitGroup
	for i := first; i < len(c.ingress); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.ingress[i] = c.newIngress(fmt.Sprintf("ingress-%d", i+1))
		}()
	}
	for i := range c.drainers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			natsURL, redisURL := c.natsURL, c.redisURL
			if c.via != nil {
				natsURL, redisURL = c.via(i, natsURL, redisURL)
			}
			c.drainers[i] = c.newDrainerVia(fmt.Sprintf("drainer-%d", i+1), o.drainerWorkers, natsURL, redisURL)
		}()
	}
	wg.Wait()
	for _, p := range append(append([]*proctest.Proc{}, c.ingress...), c.drainers...) {
		if p == nil {
			t.FailNow() // the goroutine that started it reported why
		}
	}
	for _, p := range c.ingress {
		c.waitReady(p, 60*time.Second)
	}
	for _, p := range c.drainers {
		c.waitReady(p, 60*time.Second)
	}
	return c
}

// startProc is proctest.Start from a goroutine other than the test's: it reports an error
// and returns nil instead of calling FailNow there.
func (c *cluster) startProc(spec proctest.Spec) (p *proctest.Proc) {
	defer func() {
		if r := recover(); r != nil {
			c.t.Errorf("%s: %v", spec.Name, r)
			p = nil
		}
	}()
	return proctest.Start(goroutineTB{c.t}, spec)
}

// goroutineTB turns Fatal into Error plus a panic that startProc recovers, so a process
// that fails to start off the test goroutine still fails the test cleanly.
type goroutineTB struct{ *testing.T }

func (g goroutineTB) Fatal(args ...any) { g.T.Error(args...); panic(fmt.Sprint(args...)) }
func (g goroutineTB) Fatalf(format string, args ...any) {
	g.T.Errorf(format, args...)
	panic(fmt.Sprintf(format, args...))
}

func (c *cluster) newIngress(name string) *proctest.Proc {
	args := []string{
		"-rules", c.rulesPath, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", c.natsURL, "-redis", c.redisURL,
		"-admin-token", adminToken, "-replicas", c.replicas, "-drain=false", "-status-keep", "1h", "-shutdown-timeout", "3s",
		"-log-format", "json", "-rules-poll", "250ms",
	}
	if c.debugAddr != "" && name == "ingress-1" {
		args = append(args, "-debug-addr", c.debugAddr)
	}
	return c.startProc(proctest.Spec{Name: name, Bin: bins.ingress, ReadyMsg: "ingress: listening", Env: c.procEnv, Args: args})
}

func (c *cluster) newDrainer(name string, workers int) *proctest.Proc {
	return c.newDrainerVia(name, workers, c.natsURL, c.redisURL)
}

// newDrainerVia is newDrainer connecting to natsURL and redisURL (clusterOptions.drainerVia).
func (c *cluster) newDrainerVia(name string, workers int, natsURL, redisURL string) *proctest.Proc {
	return c.startProc(proctest.Spec{Name: name, Bin: bins.drainer, ReadyMsg: "drainer: running", Env: c.procEnv, Args: []string{
		"-rules", c.rulesPath, "-http", "127.0.0.1:0", "-nats", natsURL, "-redis", redisURL,
		"-workers", fmt.Sprint(workers), "-status-keep", "1h", "-replicas", c.replicas, "-shutdown-timeout", "3s", "-log-format", "json",
		"-rules-poll", "250ms",
	}})
}

func (c *cluster) writeRules(yaml string) {
	c.t.Helper()
	yaml = strings.ReplaceAll(yaml, "SINK", c.sink.URL)
	tmp := c.rulesPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, c.rulesPath); err != nil { // atomic: a poll never sees half a file
		c.t.Fatal(err)
	}
}

// waitReady polls /readyz until it answers 200.
func (c *cluster) waitReady(p *proctest.Proc, timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	var err error
	if !waittest.Within(timeout, func() bool {
		var resp *http.Response
		if resp, err = c.http.Get(p.URL() + "/readyz"); err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		c.t.Fatalf("%s not ready after %v: %v", p.Name(), timeout, err)
	}
	return time.Since(start)
}

// streamName is the JetStream stream of a queue rule.
func streamName(rule string) string { return "SLUICE_Q_" + queue.RuleToken(rule) }

// streamLeader returns the server name of the node that leads the stream.
func (c *cluster) streamLeader(stream string) string {
	c.t.Helper()
	var leader string
	var err error
	if !waittest.Within(20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var s jetstream.Stream
		if s, err = c.js.Stream(ctx, stream); err != nil {
			return false
		}
		var info *jetstream.StreamInfo
		if info, err = s.Info(ctx); err == nil && info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		return leader != ""
	}) {
		c.t.Fatalf("no leader of stream %s: %v", stream, err)
	}
	return leader
}

// --- HTTP helpers -----------------------------------------------------------------------

type reply struct {
	Code   int
	Body   map[string]any
	Header http.Header
	Err    error // transport error (no answer)
}

func (r reply) str(field string) string { s, _ := r.Body[field].(string); return s }

type kv = [2]string

func submitBody(domain string, descriptor []kv, payload string) string {
	var d []string
	for _, e := range descriptor {
		d = append(d, fmt.Sprintf(`{"key":%q,"value":%q}`, e[0], e[1]))
	}
	return fmt.Sprintf(`{"domain":%q,"descriptor":[%s],"payload":%s}`, domain, strings.Join(d, ","), payload)
}

// do sends one request to base and decodes a JSON answer. It never fails the test: a
// transport error is returned in reply.Err.
func (c *cluster) do(ctx context.Context, method, url, body string, header map[string]string) reply {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return reply{Err: err}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return reply{Err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{Code: resp.StatusCode, Header: resp.Header}
	if len(bytes.TrimSpace(b)) > 0 && (b[0] == '{') {
		json.Unmarshal(b, &r.Body)
	}
	return r
}

// submit posts a message to ingress i (an optional idempotency key).
func (c *cluster) submit(i int, domain string, descriptor []kv, payload, idem string) reply {
	h := map[string]string{}
	if idem != "" {
		h["Idempotency-Key"] = idem
	}
	return c.do(context.Background(), "POST", c.ingress[i].URL()+"/v1/messages", submitBody(domain, descriptor, payload), h)
}

func (c *cluster) admin(i int, method, path, body string) reply {
	return c.do(context.Background(), method, c.ingress[i].URL()+path, body, map[string]string{"Authorization": "Bearer " + adminToken})
}

func (c *cluster) status(i int, id string) reply {
	return c.do(context.Background(), "GET", c.ingress[i].URL()+"/v1/messages/"+id, "", nil)
}

// waitState polls a message's status (through ingress i) until it is state.
func (c *cluster) waitState(i int, id, state string, timeout time.Duration) reply {
	c.t.Helper()
	var r reply
	waittest.Within(timeout, func() bool { r = c.status(i, id); return r.str("state") == state })
	return r
}

// metrics scrapes one process; errors fail the test.
func (c *cluster) metrics(p *proctest.Proc) proctest.Metrics {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := p.Metrics(ctx)
	if err != nil {
		c.t.Fatalf("%s /metrics: %v", p.Name(), err)
	}
	return m
}

// --- outflow checks ---------------------------------------------------------------------

// arrivalJitter is how much later than its dispatch a delivery may be recorded by the
// sink on a loaded 2-core machine (scheduling of the drainer, the sink and the test
// process). Gaps between deliveries are checked against the outflow interval less this;
// counts over whole windows are the tighter check.
const arrivalJitter = 40 * time.Millisecond

// deliveriesOf returns the deliveries (every attempt, accepted or not) of one rule and,
// when key != "", one key, in arrival order.
func deliveriesOf(all []sinktest.Delivery, rule, key string) []sinktest.Delivery {
	var out []sinktest.Delivery
	for _, d := range all {
		if d.Rule == rule && (key == "" || d.Key == key) {
			out = append(out, d)
		}
	}
	return out
}

// closestGap is the smallest gap between consecutive deliveries (of one key).
func closestGap(ds []sinktest.Delivery) time.Duration {
	best := time.Duration(1<<63 - 1)
	for i := 1; i < len(ds); i++ {
		if g := ds[i].At.Sub(ds[i-1].At); g < best {
			best = g
		}
	}
	return best
}

// maxInWindow is the largest number of deliveries that arrived within any window of
// length w (a sliding window anchored at each delivery).
func maxInWindow(ds []sinktest.Delivery, w time.Duration) int {
	best, j := 0, 0
	for i := range ds {
		for ds[i].At.Sub(ds[j].At) >= w {
			j++
		}
		if n := i - j + 1; n > best {
			best = n
		}
	}
	return best
}

// keysOf groups deliveries by key.
func keysOf(ds []sinktest.Delivery) map[string][]sinktest.Delivery {
	m := map[string][]sinktest.Delivery{}
	for _, d := range ds {
		m[d.Key] = append(m[d.Key], d)
	}
	return m
}

// countIn counts deliveries with from <= At < to.
func countIn(ds []sinktest.Delivery, from, to time.Time) int {
	n := 0
	for _, d := range ds {
		if !d.At.Before(from) && d.At.Before(to) {
			n++
		}
	}
	return n
}

// waitR3 waits until the JetStream cluster can place an R3 stream (every peer known and
// online), which comes a while after the meta leader is elected.
func waitR3(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	cfg := jetstream.StreamConfig{Name: "PROCTEST_R3_PROBE", Subjects: []string{"proctest.r3probe"}, Replicas: 3, Storage: jetstream.MemoryStorage}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.CreateStream(ctx, cfg)
		if err == nil {
			err = js.DeleteStream(ctx, cfg.Name)
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster cannot place an R3 stream: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
