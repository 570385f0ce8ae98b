package process_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/rules"
)

func noRules() *rules.Set { return &rules.Set{} }

// TestStackConnectsWithAnNKeySeedFile: -nats-nkey authenticates to a server that accepts
// NKey users only, so no NATS secret sits in -nats or the process list.
func TestStackConnectsWithAnNKeySeedFile(t *testing.T) {
	t.Parallel()
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	node := natstest.StartWith(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	if nc, err := nats.Connect(node.URL()); err == nil {
		nc.Close()
		t.Fatal("the server let a client in without its NKey: the test proves nothing")
	}
	seedFile := filepath.Join(t.TempDir(), "sluice.nk")
	os.WriteFile(seedFile, seed, 0o600)
	openStack(t, process.StackConfig{NATSURL: node.URL(), NATSNKey: seedFile})

	// A seed file that is not there stops the start, naming the flag.
	_, err := process.Open(context.Background(), process.StackConfig{Name: "test", NATSURL: node.URL(), NATSNKey: seedFile + ".missing", Rules: noRules})
	if err == nil || !strings.Contains(err.Error(), "-nats-nkey") {
		t.Fatalf("Open with a missing seed file: %v", err)
	}
}

// TestStackConnectsWithACredentialsFile: -nats-creds (a user JWT and its seed, as nsc
// writes them) authenticates to an operator-mode server.
func TestStackConnectsWithACredentialsFile(t *testing.T) {
	t.Parallel()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	useed, _ := ukp.Seed()
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := jwt.FormatUserConfig(ujwt, useed)
	skp, _ := nkeys.CreateAccount() // the system account operator mode wants
	spub, _ := skp.PublicKey()
	sjwt, _ := jwt.NewAccountClaims(spub).Encode(okp)
	resolver := &server.MemAccResolver{}
	resolver.Store(apub, ajwt)
	resolver.Store(spub, sjwt)
	node := natstest.StartWith(t, func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{oc}
		o.AccountResolver = resolver
		o.SystemAccount = spub
	})
	credsFile := filepath.Join(t.TempDir(), "sluice.creds")
	os.WriteFile(credsFile, creds, 0o600)
	openStack(t, process.StackConfig{NATSURL: node.URL(), NATSCreds: credsFile})

	if _, err := process.Open(context.Background(), process.StackConfig{Name: "test", NATSURL: node.URL(), NATSCreds: credsFile, NATSNKey: credsFile, Rules: noRules}); err == nil ||
		!strings.Contains(err.Error(), "-nats-creds and -nats-nkey") {
		t.Fatalf("Open with both: %v", err)
	}
}

func openStack(t *testing.T, c process.StackConfig) {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	c.Name, c.RedisURL, c.Rules = "test", rs.URL(), noRules
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := process.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.NATS.IsConnected() {
		t.Fatal("not connected")
	}
}

// syncBuffer is a log sink a process and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDrainerNeverLogsTheNATSOrRedisPassword: a drainer started with passwords in -nats and
// -redis logs its start (and everything else) without them.
func TestDrainerNeverLogsTheNATSOrRedisPassword(t *testing.T) {
	t.Parallel()
	node := natstest.StartWith(t, func(o *server.Options) { o.Username, o.Password = "sluice", "natsSecretPW" })
	rs := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "r.yaml")
	os.WriteFile(rulesFile, []byte("domain: d\ndescriptors:\n  - key: k\n    name: q\n    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 1}}\n    sink: {url: \"http://127.0.0.1:9/hook?token=sinkSecret\"}\n"), 0o644)
	natsURL := strings.Replace(node.URL(), "nats://", "nats://sluice:natsSecretPW@", 1)
	redisURL := strings.Replace(rs.URL(), "redis://", "redis://:redisSecretPW@", 1)
	var logs syncBuffer
	m := newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(string) string { return "" }
	if err := m.ParseFlags([]string{"-rules", rulesFile, "-http", "127.0.0.1:0", "-nats", natsURL, "-redis", redisURL}); err != nil {
		t.Fatal(err)
	}
	m.Logger = process.NewLogger("json", "debug", &logs)
	// Redis has no password: Run fails at its first command, with the URL in the error.
	err := m.Run(context.Background())
	if err == nil {
		m.Close()
	}
	var exit bytes.Buffer
	process.ExitCode("drainer", err, &exit)
	out := logs.String() + exit.String()
	t.Logf("%s", out)
	if !strings.Contains(out, "nats") {
		t.Fatalf("nothing logged: %s", out)
	}
	for _, secret := range []string{"natsSecretPW", "redisSecretPW", "sinkSecret"} {
		if strings.Contains(out, secret) {
			t.Errorf("the drainer showed %q:\n%s", secret, out)
		}
	}
}
