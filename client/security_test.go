package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
)

// Against an ingress with -submit-tokens and -admin-tokens: WithSubmitToken submits,
// follows and cancels; no token or another domain's token is ErrUnauthorized (401, 403)
// and is not retried; a read admin token reads but cannot tune.
func TestClientTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rules, []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 5, outflow: {unit: minute, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:1/unused"}
`), 0o644)
	submit := filepath.Join(dir, "submit")
	os.WriteFile(submit, []byte("shop submit:orders submit-orders-0123456789\nmkt submit:marketing submit-mkt-0123456789ab\n"+
		"gw check:orders check-orders-0123456789ab\n"), 0o600)
	admin := filepath.Join(dir, "admin")
	os.WriteFile(admin, []byte("grafana read read-token-0123456789ab\n"), 0o600)
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags([]string{"-rules", rules, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(),
		"-submit-tokens", submit, "-admin-tokens", admin, "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	base := "http://" + m.Addr.String()
	key := []client.Entry{{Key: "merchant_id", Value: "m-1"}}

	anon, _ := client.New(base)
	if _, err := anon.Submit(ctx, "orders", key, 1); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("submit without a token: %v, want ErrUnauthorized", err)
	}
	other, _ := client.New(base, client.WithSubmitToken("submit-mkt-0123456789ab"))
	var pe *client.ProblemError
	if _, err := other.Submit(ctx, "orders", key, 1); !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &pe) || pe.Status != 403 || pe.Attempts != 1 {
		t.Fatalf("submit with another domain's token: %v, want a 403 ErrUnauthorized, not retried", err)
	}
	shop, _ := client.New(base, client.WithSubmitToken("submit-orders-0123456789"), client.WithAdminToken("read-token-0123456789ab"))
	sub, err := shop.Submit(ctx, "orders", key, map[string]int{"n": 1})
	if err != nil {
		t.Fatalf("submit with the domain's token: %v", err)
	}
	if st, err := shop.Status(ctx, sub.ID); err != nil || st.ID != sub.ID {
		t.Fatalf("status: %+v %v", st, err)
	}
	if _, err := other.Cancel(ctx, sub.ID); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("cancel with another domain's token: %v", err)
	}
	if _, err := shop.Cancel(ctx, sub.ID); err != nil {
		t.Fatalf("cancel with the domain's token: %v", err)
	}

	// Checks need a check token: a submit token is not sent (and would be refused), none is 401.
	if _, err := shop.Check(ctx, "orders", [][]client.Entry{key}, 1); !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &pe) || pe.Status != 401 {
		t.Fatalf("check with only a submit token: %v, want a 401 ErrUnauthorized", err)
	}
	gw, _ := client.New(base, client.WithCheckToken("check-orders-0123456789ab"))
	if _, err := gw.Check(ctx, "orders", [][]client.Entry{key}, 1); err != nil {
		t.Fatalf("check with the domain's check token: %v", err)
	}
	if _, err := gw.Check(ctx, "marketing", [][]client.Entry{{{Key: "user_id", Value: "u-1"}}}, 1); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("check of another domain: %v, want ErrForbidden", err)
	}
	if _, err := gw.Submit(ctx, "orders", key, 1); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("a check token submits: %v, want ErrUnauthorized", err)
	}

	if qs, err := shop.Admin().Queues(ctx); err != nil || len(qs) != 1 {
		t.Fatalf("read token lists queues: %v %v", qs, err)
	}
	paused := true
	if _, err := shop.Admin().Tune(ctx, "orders", client.Patch{Paused: &paused}); !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &pe) || pe.Status != 403 {
		t.Fatalf("read token tunes: %v, want a 403 ErrUnauthorized", err)
	}
}

// Nil options are ignored, and neither errors, BaseURL nor a printed Client show a
// password of the base URL or a token.
func TestNilOptionsAndRedaction(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 202, header: queuedHeaders, body: queuedBody})
	c, err := client.New(s.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), "orders", orders, 1, nil); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"htp://user:s3cr3t@host", "http://user:s3cr3t@host/%zz"} {
		if _, err := client.New(bad); err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("New(%q): %v", bad, err)
		}
	}
	c, err = client.New("http://user:s3cr3t@example.com", client.WithAdminToken("adm-s3cr3t"), client.WithSubmitToken("sub-s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{c.BaseURL(), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(*c)} {
		if strings.Contains(out, "s3cr3t") {
			t.Errorf("printed %s", out)
		}
	}
}
