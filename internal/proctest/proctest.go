// Package proctest runs sluice's binaries (cmd/ingress, cmd/drainer) as child processes
// in tests: built once per test binary, started on free loopback ports, killed with the
// test (parent-death signal and t.Cleanup), their stderr kept in a file the test prints
// on failure.
//
// A Proc learns its HTTP address from its own log line ("ingress: listening" or
// "drainer: running", which carry "addr"), so no port is ever guessed; a restarted Proc
// asks for the same port again, so clients keep their URL across a restart.
//
// This package is for tests only; production code never imports it.
package proctest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build compiles the packages (e.g. "./cmd/ingress") of the module that contains the
// working directory into dir, and returns dir. It runs `go build` once, so the build cache
// makes a second test binary cheap.
func Build(dir string, pkgs ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	args := append([]string{"build", "-o", dir + string(os.PathSeparator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("proctest: go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// ModuleRoot is the directory of the go.mod above the working directory.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("proctest: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("proctest: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// Spec says how to start one process.
type Spec struct {
	Name string   // for logs and failure output, e.g. "ingress-1"
	Bin  string   // path of the binary
	Args []string // flags; must include "-http 127.0.0.1:0" (or a fixed loopback port)
	// ReadyMsg is the log message that carries the listen address in its "addr" field,
	// e.g. "ingress: listening". Default: the first JSON line with an "addr" field.
	ReadyMsg string
	// Addr and ReadyURL replace ReadyMsg for programs that do not log JSON (nats-server):
	// the process listens on the fixed Addr and is ready once ReadyURL answers 200.
	Addr     string
	ReadyURL string
	// StartTimeout bounds the wait for readiness. Default 60s.
	StartTimeout time.Duration
	// Env is added to the test process's environment (for programs configured by
	// environment variables, such as envoyproxy/ratelimit).
	Env []string
}

// Proc is one child process. Its methods are safe for concurrent use.
type Proc struct {
	spec    Spec
	logPath string
	tb      testing.TB
	ctx     context.Context // cancelled when the test ends: kills whatever still runs

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	exit   *error // the exit error of cmd, valid once done is closed
	addr   string // host:port, kept across restarts
	starts int
}

// Start starts the process and waits until it logs its address. It is killed when the
// test ends; if the test failed, the tail of its log is printed.
func Start(tb testing.TB, spec Spec) *Proc {
	tb.Helper()
	if spec.StartTimeout <= 0 {
		spec.StartTimeout = 60 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proc{spec: spec, tb: tb, ctx: ctx, logPath: filepath.Join(tb.TempDir(), spec.Name+".log")}
	tb.Cleanup(func() {
		p.Kill()
		cancel()
		if tb.Failed() {
			tb.Logf("--- %s: last lines of %s ---\n%s", spec.Name, p.logPath, p.LogTail(40))
		}
	})
	if err := p.start(); err != nil {
		tb.Fatal(err)
	}
	return p
}

// Pid is the running process's id, or 0.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// RSS is the running process's resident memory in bytes (VmRSS), or 0.
func (p *Proc) RSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Name is the process's name from its Spec.
func (p *Proc) Name() string { return p.spec.Name }

// Addr is host:port of the process's HTTP listener.
func (p *Proc) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// URL is http://Addr.
func (p *Proc) URL() string { return "http://" + p.Addr() }

// LogPath is the file that receives the process's stdout and stderr (all runs appended).
func (p *Proc) LogPath() string { return p.logPath }

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *Proc) args() []string {
	args := append([]string(nil), p.spec.Args...)
	if p.addr != "" {
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-http" {
				args[i+1] = p.addr
			}
		}
	}
	return args
}

func (p *Proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts++
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== proctest: start #%d of %s %s\n", p.starts, p.spec.Bin, strings.Join(p.args(), " "))
	offset, _ := logf.Seek(0, io.SeekEnd)
	// The context kills whatever still runs when the test ends, the parent-death signal
	// when the test binary dies; Kill and Term are the normal ways to stop a Proc.
	cmd := exec.CommandContext(p.ctx, p.spec.Bin, p.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(p.spec.Env) > 0 {
		cmd.Env = append(os.Environ(), p.spec.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("proctest: start %s: %w", p.spec.Name, err)
	}
	done := make(chan struct{})
	exit := new(error) // written before done is closed, read after
	go func() {
		*exit = cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.cmd, p.done, p.exit = cmd, done, exit
	deadline := time.Now().Add(p.spec.StartTimeout)
	for {
		if p.spec.ReadyURL != "" {
			if httpOK(p.spec.ReadyURL) {
				p.addr = p.spec.Addr
				return nil
			}
		} else if addr := p.findAddr(offset); addr != "" {
			p.addr = addr
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("proctest: %s exited before it was ready: %v\n%s", p.spec.Name, *exit, p.logTailLocked(30))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return fmt.Errorf("proctest: %s not ready after %v\n%s", p.spec.Name, p.spec.StartTimeout, p.logTailLocked(30))
		}
	}
}

func httpOK(url string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// findAddr scans the log from offset for the ready line.
func (p *Proc) findAddr(offset int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	f.Seek(offset, io.SeekStart)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) != nil || rec.Addr == "" {
			continue
		}
		if p.spec.ReadyMsg != "" && rec.Msg != p.spec.ReadyMsg {
			continue
		}
		host, port, err := net.SplitHostPort(rec.Addr)
		if err != nil {
			continue
		}
		if host == "" || host == "::" || host == "0.0.0.0" {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, port)
	}
	return ""
}

// Kill sends SIGKILL and waits for the process to exit (a crash). Safe to call twice.
func (p *Proc) Kill() { p.stop(syscall.SIGKILL, 0) }

// Term sends SIGTERM and waits up to timeout for a graceful exit, then kills. It returns
// the exit error (nil for exit status 0).
func (p *Proc) Term(timeout time.Duration) error { return p.stop(syscall.SIGTERM, timeout) }

func (p *Proc) stop(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	cmd, done, exit := p.cmd, p.done, p.exit
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
	default:
		cmd.Process.Signal(sig)
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		select {
		case <-done:
		case <-time.After(timeout):
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("proctest: %s did not exit within %v of %v", p.spec.Name, timeout, sig)
		}
	}
	return *exit
}

// Restart starts a stopped (or killed) process again with the same flags and port. A
// running process is killed first. The port may still be held for a moment by the old
// process's sockets, so a failed start is retried for a few seconds.
func (p *Proc) Restart() error {
	p.Kill()
	var err error
	for i := 0; i < 20; i++ {
		if err = p.start(); err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
	return err
}

// RestartWith is Restart with env in place of the Spec's Env, for this start and later ones:
// a rolling restart that changes a setting given by environment (SLUICE_*), at the same
// address, so clients that know the process by its URL reach the new one.
func (p *Proc) RestartWith(env []string) error {
	p.mu.Lock()
	p.spec.Env = append([]string(nil), env...)
	p.mu.Unlock()
	return p.Restart()
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logTailLocked(n)
}

func (p *Proc) logTailLocked(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogContains reports whether the process's log contains s.
func (p *Proc) LogContains(s string) bool {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Contains(b, []byte(s))
}

// Metrics is a scrape of a Prometheus text endpoint: series (name plus labels, exactly as
// exposed, e.g. `sluice_rules_reload_total{result="error"}`) to value.
type Metrics map[string]float64

// Get returns the value of a series, 0 if absent.
func (m Metrics) Get(series string) float64 { return m[series] }

// Sum adds every series of a metric name whose labels contain all of the given
// `name="value"` pairs.
func (m Metrics) Sum(name string, labels ...string) float64 {
	var s float64
	for k, v := range m {
		base, lbl, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(lbl, l) {
				ok = false
				break
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

// Scrape reads url (a /metrics endpoint).
func Scrape(ctx context.Context, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("proctest: %s: %s", url, resp.Status)
	}
	m := Metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// Metrics scrapes the process's /metrics.
func (p *Proc) Metrics(ctx context.Context) (Metrics, error) {
	return Scrape(ctx, p.URL()+"/metrics")
}
