package proctest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/proctest"
)

func TestScrapeParsesSeriesAndSums(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `# HELP sluice_rules_reload_total reloads
# TYPE sluice_rules_reload_total counter
sluice_rules_reload_total{result="error"} 2
sluice_rules_reload_total{result="ok"} 5
go_goroutines 42
process_resident_memory_bytes 3.3554432e+07
`)
	}))
	defer srv.Close()
	m, err := proctest.Scrape(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Get(`sluice_rules_reload_total{result="error"}`); got != 2 {
		t.Errorf("error reloads: %v", got)
	}
	if got := m.Sum("sluice_rules_reload_total"); got != 7 {
		t.Errorf("sum: %v", got)
	}
	if got := m.Sum("sluice_rules_reload_total", `result="ok"`); got != 5 {
		t.Errorf("ok: %v", got)
	}
	if m.Get("go_goroutines") != 42 || m.Get("process_resident_memory_bytes") != 32<<20 {
		t.Errorf("process series: %v", m)
	}
}

// A child that logs a JSON line with its address is ready; Kill and Restart work and the
// log keeps every run.
func TestStartKillRestart(t *testing.T) {
	t.Parallel()
	p := proctest.Start(t, proctest.Spec{Name: "child", Bin: "/bin/sh", ReadyMsg: "listening",
		Args:         []string{"-c", `echo '{"msg":"listening","addr":"127.0.0.1:4321"}'; exec sleep 60`, "-http", "127.0.0.1:0"},
		StartTimeout: 10 * time.Second})
	if p.Addr() != "127.0.0.1:4321" || !p.Running() {
		t.Fatalf("addr %q running %v", p.Addr(), p.Running())
	}
	p.Kill()
	if p.Running() {
		t.Fatal("running after Kill")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if !p.Running() || strings.Count(p.LogTail(10), "=== proctest: start") != 2 {
		t.Fatalf("after Restart: running %v, log:\n%s", p.Running(), p.LogTail(10))
	}
	if err := p.Term(5 * time.Second); err == nil {
		t.Fatal("sleep killed by SIGTERM reported a clean exit")
	}
}

// RestartWith starts the child again with another environment, at the same address, and
// later restarts keep it.
func TestRestartWithChangesEnv(t *testing.T) {
	t.Parallel()
	p := proctest.Start(t, proctest.Spec{Name: "env", Bin: "/bin/sh", ReadyMsg: "listening", Env: []string{"SLUICE_X=one"},
		Args:         []string{"-c", `echo "{\"msg\":\"listening\",\"addr\":\"127.0.0.1:4322\",\"x\":\"$SLUICE_X\"}"; exec sleep 60`, "-http", "127.0.0.1:0"},
		StartTimeout: 10 * time.Second})
	if !p.LogContains(`"x":"one"`) {
		t.Fatalf("first start:\n%s", p.LogTail(10))
	}
	if err := p.RestartWith([]string{"SLUICE_X=two"}); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != "127.0.0.1:4322" || !strings.HasSuffix(strings.TrimSpace(p.LogTail(1)), `"x":"two"}`) {
		t.Fatalf("after RestartWith: addr %q, log:\n%s", p.Addr(), p.LogTail(10))
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if strings.Count(p.LogTail(10), `"x":"two"`) != 2 {
		t.Fatalf("a later Restart forgot the environment:\n%s", p.LogTail(10))
	}
}

// A child that exits before it is ready fails the start with its log.
func TestStartReportsEarlyExit(t *testing.T) {
	t.Parallel()
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { recover() }()
		proctest.Start(ft, proctest.Spec{Name: "dies", Bin: "/bin/sh", Args: []string{"-c", "echo boom >&2; exit 3"}})
	}()
	if !strings.Contains(ft.msg, "exited before it was ready") || !strings.Contains(ft.msg, "boom") {
		t.Fatalf("start of a dying child: %q", ft.msg)
	}
}

type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic("fatal")
}
