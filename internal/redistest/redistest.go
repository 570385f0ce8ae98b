// Package redistest starts private redis-server processes for tests.
//
// Every test binary gets its own server (Shared), started lazily on a unix socket in a
// temporary directory, so tests never depend on a server on a fixed port and never touch
// each other's data. Each test gets its own key prefix (Prefix) instead of FLUSHDB, so
// tests in one package can run in parallel against the shared server.
//
// Fault tests that must stop and restart Redis start their own server with Start and a
// TCP address, which survives a Restart.
//
// Tests of Redis Cluster and Sentinel start those from the same binary: SharedCluster (one
// 3-master cluster with a replica each per test binary, ~2.5 s to form) or StartCluster, and
// StartSentinels (a master, a replica and three sentinels; ~2.5 s until a failover can be
// authorised).
//
// The redis-server binary is found on PATH or in $SLUICE_REDIS_SERVER. `make test`
// installs it when missing; a test run without it fails loudly rather than skipping.
//
// This package is for tests only; production code never imports it.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/freeport"
)

// Options configure a private server. The zero value is a unix-socket server without persistence.
type Options struct {
	// TCP listens on a free 127.0.0.1 port instead of a unix socket. Default false.
	TCP bool
	// AppendOnly turns on AOF persistence (fsync every second), so a Restart keeps data. Default false.
	AppendOnly bool
	// Extra are more redis-server arguments, e.g. a --tls-port with its certificate files
	// (the server still answers the readiness probe on its plain socket). Default none.
	Extra []string

	// args are extra redis-server arguments (cluster mode, replicaof); sentinelConf makes
	// the process a sentinel with that configuration file (see cluster.go, sentinel.go).
	args         []string
	sentinelConf string
}

// Server is one redis-server process owned by a test binary.
type Server struct {
	opts    Options
	dir     string
	network string // "unix" or "tcp"
	addr    string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	prefixSeq  atomic.Int64
)

// Shared returns the test binary's shared server, starting it on first use. It is
// stopped by Main, and killed with the test binary in any case (parent-death signal).
func Shared(tb testing.TB) *Server {
	tb.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-redis-")
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = start(dir, Options{})
	})
	if sharedErr != nil {
		tb.Fatalf("redistest: %v", sharedErr)
	}
	return shared
}

// Main runs the package's tests and stops the shared server and cluster afterwards. Use it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Stop()
		os.RemoveAll(shared.dir)
	}
	if cluster != nil {
		cluster.Stop()
		os.RemoveAll(cluster.dir)
	}
	os.Exit(code)
}

// Start starts a server owned by one test; it is stopped when the test ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := start(tb.TempDir(), opts)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Binary returns the path of redis-server, or an error that says how to install it.
func Binary() (string, error) {
	if p := os.Getenv("SLUICE_REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server not found on PATH: run `make test` (installs it as root) or `sudo apt-get install redis-server`, or set SLUICE_REDIS_SERVER")
	}
	return p, nil
}

func start(dir string, opts Options) (*Server, error) {
	s := &Server{opts: opts, dir: dir, network: "unix", addr: filepath.Join(dir, "redis.sock")}
	if opts.TCP {
		s.network = "tcp"
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if opts.TCP {
			port, perr := freeport.Loopback()
			if perr != nil {
				return nil, perr
			}
			s.addr = "127.0.0.1:" + strconv.Itoa(port)
		}
		if err = s.launch(); err == nil {
			return s, nil
		}
		if !opts.TCP {
			break // a socket in a private directory cannot collide; retrying will not help
		}
	}
	return nil, err
}

func (s *Server) launch() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	args := []string{
		"--save", "", "--dir", s.dir, "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--appendonly", "no",
	}
	if s.opts.AppendOnly {
		args[len(args)-1] = "yes"
		args = append(args, "--appendfsync", "everysec")
	}
	if s.opts.sentinelConf != "" {
		// Sentinel mode takes its configuration file first and rewrites it (it records
		// what it learns); persistence options mean nothing to it.
		args = []string{s.opts.sentinelConf, "--sentinel", "--daemonize", "no",
			"--logfile", filepath.Join(s.dir, "redis.log")}
	}
	if s.network == "unix" {
		args = append(args, "--port", "0", "--unixsocket", s.addr, "--unixsocketperm", "700")
	} else {
		host, port, _ := net.SplitHostPort(s.addr)
		args = append(args, "--bind", host, "--port", port)
	}
	args = append(args, s.opts.args...)
	args = append(args, s.opts.Extra...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() { exited <- cmd.Wait(); close(done) }()

	client := redis.NewClient(&redis.Options{Network: s.network, Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited: %v: %s", s.addr, err, tail(string(log)))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return fmt.Errorf("redis-server on %s not ready after 10s: %w", s.addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// Network is "unix" or "tcp".
func (s *Server) Network() string { return s.network }

// Addr is the socket path or host:port.
func (s *Server) Addr() string { return s.addr }

// URL is a redis:// or unix:// URL for -redis flags.
func (s *Server) URL() string {
	if s.network == "unix" {
		return "unix://" + s.addr
	}
	return "redis://" + s.addr
}

// Options returns go-redis options for this server.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Network: s.network, Addr: s.addr}
}

// Client returns a new client, closed when the test ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(s.Options())
	tb.Cleanup(func() { c.Close() })
	return c
}

// Stop kills the server (SIGKILL: no final save, like a crash). Safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done // the address is free again once the process is gone, so a Restart can bind it
	s.cmd = nil
}

// Restart starts the server again on the same address (and, with AppendOnly, the same data).
func (s *Server) Restart() error {
	s.Stop()
	var err error
	for i := 0; i < 50; i++ {
		if err = s.launch(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Prefix returns a key prefix unique to this test within the test binary, e.g. "t12.TestFoo:".
// It never contains '{' or '}', so callers can add their own hash tags after it.
func Prefix(tb testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch r {
		case '{', '}', ' ', '/':
			return '_'
		}
		return r
	}, tb.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t%d.%s:", prefixSeq.Add(1), name)
}

func tail(s string) string {
	if len(s) > 600 {
		return s[len(s)-600:]
	}
	return s
}
