package ingress_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	svc "github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
)

// startTokenFiles runs an ingress whose admin and submit tokens all come from files, and
// returns a channel that gets a value after each look of the reload loop at them.
func startTokenFiles(t *testing.T, logw io.Writer, extra ...string) (*ingress.Main, <-chan struct{}) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(path, []byte(routesRules), 0o644)
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	args := append([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(), "-shutdown-timeout", "2s"}, extra...)
	cfg, err := ingress.ParseFlags(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checked := make(chan struct{}, 1)
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(logw, nil)), TokensChecked: func() {
		select {
		case checked <- struct{}{}:
		default:
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, checked
}

// waitChecks waits for two looks of the reload loop: the first may have begun before the
// files were written, the second began after.
func waitChecks(t *testing.T, checked <-chan struct{}) {
	t.Helper()
	select {
	case <-checked: // a look that may have ended before the files were written
	default:
	}
	for range 2 {
		select {
		case <-checked:
		case <-time.After(10 * time.Second):
			t.Fatal("the token files were not looked at within 10s")
		}
	}
}

// TestRevokedTokensStopWorkingWhateverElseTheFileHolds: editing a token file is how a
// token is revoked, so a reload fails closed — an emptied -admin-token-file, a tokens file
// with a bad line, a deleted file: the tokens the files no longer hold (or hold on a bad
// line) stop working within the reload interval, the good lines' tokens keep working, and
// the broken files are reported (log, sluice_token_file_broken,
// sluice_token_reload_failures_total). No request is needed for the reload.
func TestRevokedTokensStopWorkingWhateverElseTheFileHolds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const (
		fileSecret = "file-secret-0123456789abcdef"
		submit1    = "submit-one-0123456789abcdef"
		submit2    = "submit-two-0123456789abcdef"
	)
	single := filepath.Join(dir, "admin-token")
	admins := filepath.Join(dir, "admin-tokens")
	submits := filepath.Join(dir, "submit-tokens")
	os.WriteFile(single, []byte(fileSecret+"\n"), 0o600)
	os.WriteFile(admins, []byte("viewer read "+viewerSecret+"\nops operate "+opsSecret+"\n"), 0o600)
	os.WriteFile(submits, []byte("one submit "+submit1+"\ntwo submit "+submit2+"\n"), 0o600)
	logs := &syncBuffer{}
	m, checked := startTokenFiles(t, logs, "-admin-token-file", single, "-admin-tokens", admins, "-submit-tokens", submits)
	base := "http://" + m.Addr.String()
	status := func(method, path, token, body string) int { return call(t, method, base+path, token, body).status }
	order := `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":1}}`
	for _, tok := range []string{fileSecret, viewerSecret, opsSecret} {
		if got := status("GET", "/v1/admin/whoami", tok, ""); got != 200 {
			t.Fatalf("before: whoami %d", got)
		}
	}
	if got := status("POST", "/v1/messages", submit2, order); got != 202 {
		t.Fatalf("before: submit %d", got)
	}

	// Emptied, a bad line (the viewer's scope), a removed line beside a bad one.
	os.WriteFile(single, nil, 0o600)
	os.WriteFile(admins, []byte("viewer root "+viewerSecret+"\nops operate "+opsSecret+"\n"), 0o600)
	os.WriteFile(submits, []byte("one submit "+submit1+"\nthis line is broken\n"), 0o600)
	waitChecks(t, checked)
	for _, c := range []struct {
		what, method, path, token, body string
		want                            int
	}{
		{"the emptied -admin-token-file's token", "GET", "/v1/admin/whoami", fileSecret, "", 401},
		{"the bad line's token", "GET", "/v1/admin/whoami", viewerSecret, "", 401},
		{"a good line's token beside the bad one", "GET", "/v1/admin/whoami", opsSecret, "", 200},
		{"the removed submit token", "POST", "/v1/messages", submit2, order, 401},
		{"the kept submit token", "POST", "/v1/messages", submit1, order, 202},
	} {
		if got := status(c.method, c.path, c.token, c.body); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	metrics := scrapeText(t, base)
	for _, want := range []string{
		`sluice_token_file_broken{flag="-admin-token-file"} 1`,
		`sluice_token_file_broken{flag="-admin-tokens"} 1`,
		`sluice_token_file_broken{flag="-submit-tokens"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(metrics, `sluice_token_reload_failures_total{flag="-admin-tokens"} `) ||
		strings.Contains(metrics, `sluice_token_reload_failures_total{flag="-admin-tokens"} 0`) {
		t.Errorf("sluice_token_reload_failures_total does not count the broken load")
	}
	if n := strings.Count(logs.String(), "token file broken"); n < 3 {
		t.Errorf("%d token-file-broken log lines, want one per file:\n%s", n, logs.String())
	}

	// Deleted: none of its tokens. Repaired: reported healthy again.
	os.Remove(admins)
	os.WriteFile(submits, []byte("one submit "+submit1+"\n"), 0o600)
	waitChecks(t, checked)
	if got := status("GET", "/v1/admin/whoami", opsSecret, ""); got != 401 {
		t.Errorf("a token of a deleted file: %d, want 401", got)
	}
	if metrics := scrapeText(t, base); !strings.Contains(metrics, `sluice_token_file_broken{flag="-submit-tokens"} 0`) {
		t.Errorf("the repaired -submit-tokens still reported broken")
	}
	for _, secret := range []string{fileSecret, viewerSecret, opsSecret, submit1, submit2} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log holds the secret %q", secret)
		}
	}
}

func scrapeText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestAdminTokenHasAMinimumLength: a short -admin-token (flag or environment) stops the
// start, naming the flag, as a short token in a token file does; `sluice dev` builds its
// Config without flags and keeps its short local token.
func TestAdminTokenHasAMinimumLength(t *testing.T) {
	t.Parallel()
	if _, err := ingress.ParseFlags([]string{"-rules", "r.yaml", "-admin-token", "short-token"}, func(string) string { return "" }, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "-admin-token: 11 characters, want at least 16") {
		t.Fatalf("a short -admin-token: %v", err)
	}
	env := map[string]string{"SLUICE_ADMIN_TOKEN": "short"}
	if _, err := ingress.ParseFlags([]string{"-rules", "r.yaml"}, func(k string) string { return env[k] }, io.Discard); err == nil || !strings.Contains(err.Error(), "-admin-token") {
		t.Fatalf("a short SLUICE_ADMIN_TOKEN: %v", err)
	}
	if _, err := ingress.ParseFlags([]string{"-rules", "r.yaml", "-admin-token", "long-enough-0123456789"}, func(string) string { return "" }, io.Discard); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "admin-token")
	os.WriteFile(short, []byte("short\n"), 0o600)
	if _, err := svc.OpenAuth(svc.AuthFiles{AdminTokenFile: short}, nil); err == nil || !strings.Contains(err.Error(), "-admin-token-file") {
		t.Fatalf("a short -admin-token-file: %v", err)
	}
}
