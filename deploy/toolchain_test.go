package deploy_test

import (
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// dockerfileArgs returns the default of every ARG of the Dockerfile.
func dockerfileArgs(df string) map[string]string {
	args := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ARG\s+([A-Za-z_]+)=(\S+)`).FindAllStringSubmatch(df, -1) {
		args[m[1]] = m[2]
	}
	return args
}

// makeVar returns the default (`NAME ?= value`) of a Makefile variable.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*\?=\s*(\S+)\s*$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile has no %s ?= default", name)
	}
	return m[1]
}

// The toolchain is pinned in one release everywhere it is chosen: the Makefile's GOTOOLCHAIN
// (what make builds and tests with), go.mod's toolchain line (what a plain `go build` with
// GOTOOLCHAIN=auto uses) and the Dockerfile's builder image (what ships). A floating image
// tag (golang:1.26) built whatever point release the registry had, with 13 called
// standard-library vulnerabilities (issue #32).
func TestToolchainPinned(t *testing.T) {
	t.Parallel()
	mk := makeVar(t, read(t, "../Makefile"), "GOTOOLCHAIN")
	if !regexp.MustCompile(`^go1\.\d+\.\d+$`).MatchString(mk) {
		t.Fatalf("Makefile GOTOOLCHAIN %q is not a full release (go1.N.P)", mk)
	}
	m := regexp.MustCompile(`(?m)^toolchain\s+(\S+)\s*$`).FindStringSubmatch(read(t, "../go.mod"))
	if m == nil {
		t.Fatal("go.mod has no toolchain line")
	}
	if m[1] != mk {
		t.Errorf("go.mod toolchain %s, Makefile GOTOOLCHAIN %s: want one release", m[1], mk)
	}
	df := read(t, "Dockerfile")
	ver := dockerfileArgs(df)["GO_VERSION"]
	if "go"+ver != mk {
		t.Errorf("Dockerfile ARG GO_VERSION=%s, Makefile GOTOOLCHAIN %s: want one release", ver, mk)
	}
	from := regexp.MustCompile(`(?m)^FROM\s+(?:--platform=\S+\s+)?(\S+)\s+AS\s+build\b`).FindStringSubmatch(df)
	if from == nil || from[1] != "golang:${GO_VERSION}" {
		t.Errorf("the build stage is %v, want FROM golang:${GO_VERSION} AS build", from)
	}
	// The image's own go builds: GOTOOLCHAIN=local, so a go.mod that asks for another
	// release fails the build instead of fetching a toolchain inside it.
	if !regexp.MustCompile(`(?m)^ENV\s+GOTOOLCHAIN=local\s*$`).MatchString(df) {
		t.Error("the build stage does not set ENV GOTOOLCHAIN=local")
	}
}

// buildStep is the Dockerfile's `go build` RUN step: its environment assignments and the go
// build arguments, continuation lines joined and cache mounts dropped.
func buildStep(t *testing.T, df string) (env map[string]string, args []string) {
	t.Helper()
	joined := strings.ReplaceAll(df, "\\\n", " ")
	var run string
	for _, l := range strings.Split(joined, "\n") {
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build") {
			run = l
		}
	}
	if run == "" {
		t.Fatal("the Dockerfile has no RUN … go build step")
	}
	env = map[string]string{}
	fields := strings.Fields(strings.TrimPrefix(run, "RUN "))
	i := 0
	for ; i < len(fields) && fields[i] != "go"; i++ {
		if k, v, ok := strings.Cut(fields[i], "="); ok && !strings.HasPrefix(k, "--") {
			env[k] = v
		}
	}
	if i+1 >= len(fields) || fields[i+1] != "build" {
		t.Fatalf("cannot read the go build step: %q", run)
	}
	// Unquote the one quoted argument (-ldflags "-s -w").
	rest := strings.Join(fields[i+2:], " ")
	for rest != "" {
		rest = strings.TrimSpace(rest)
		if strings.HasPrefix(rest, `"`) {
			end := strings.Index(rest[1:], `"`)
			args = append(args, rest[1:end+1])
			rest = rest[end+2:]
			continue
		}
		f, r, _ := strings.Cut(rest, " ")
		args = append(args, f)
		rest = r
	}
	return env, args
}

// The image build is checked without a Docker engine (none runs where the tests do): the
// Dockerfile's build step is read and run here as it is — the same go build arguments, its
// CGO_ENABLED=0 and GOOS — into a temporary directory, and the binaries are what the image
// needs: both commands, static (no ELF interpreter, so they run on distroless/static),
// built with -trimpath (no path of this machine inside) and the Dockerfile's -ldflags. What
// this cannot check is the golang image itself (pulled by the engine); its release is
// TestToolchainPinned's. With `make test` the go that runs is the Makefile's GOTOOLCHAIN,
// the image's release, and the test says so; with another go it says which it used.
func TestDockerfileBuildMirrored(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: builds both binaries with -trimpath (a build of its own: 250 s on a busy 2-core machine with a cold cache, seconds once cached)")
	}
	t.Parallel()
	df := read(t, "Dockerfile")
	env, args := buildStep(t, df)
	if env["CGO_ENABLED"] != "0" {
		t.Fatalf("the build step sets CGO_ENABLED=%q, want 0 (the runtime image has no libc)", env["CGO_ENABLED"])
	}
	out := t.TempDir()
	var cmdArgs []string
	var pkgs []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o":
			if args[i+1] != "/out/" {
				t.Fatalf("the build step writes to %q, want /out/ (what the runtime stages copy)", args[i+1])
			}
			cmdArgs = append(cmdArgs, "-o", out+string(filepath.Separator))
			i++
		case strings.HasPrefix(a, "./"):
			pkgs = append(pkgs, a)
			cmdArgs = append(cmdArgs, a)
		default:
			cmdArgs = append(cmdArgs, a)
		}
	}
	for _, want := range []string{"-trimpath", "-ldflags"} {
		if !strings.Contains(strings.Join(args, " "), want) {
			t.Errorf("the build step has no %s", want)
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIPPED: no go on PATH")
	}
	cmd := exec.Command(goBin, append([]string{"build"}, cmdArgs...)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(cmdArgs, " "), err, b)
	}
	wd, _ := filepath.Abs("..")
	for _, pkg := range pkgs {
		bin := filepath.Join(out, filepath.Base(pkg))
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked (has an ELF interpreter): distroless/static cannot run it", pkg)
			}
		}
		libs, _ := f.ImportedLibraries()
		// -ldflags "-s": no symbol table (build info omits -ldflags under -trimpath, as they
		// may hold paths, so the flag is checked by its effect).
		if _, err := f.Symbols(); err == nil {
			t.Errorf("%s has a symbol table: not built with the Dockerfile's -ldflags \"-s -w\"", pkg)
		}
		f.Close()
		if len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v", pkg, libs)
		}
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatalf("%s: build info: %v", pkg, err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || settings["GOOS"] != "linux" {
			t.Errorf("%s built with -trimpath=%q CGO_ENABLED=%q GOOS=%q, want true, 0, linux",
				pkg, settings["-trimpath"], settings["CGO_ENABLED"], settings["GOOS"])
		}
		if data, _ := os.ReadFile(bin); strings.Contains(string(data), wd) {
			t.Errorf("%s contains this checkout's path %s: not trimmed", pkg, wd)
		}
		if pin := "go" + dockerfileArgs(df)["GO_VERSION"]; info.GoVersion != pin {
			t.Logf("%s built with %s here; the image builds with %s (make test runs the Makefile's GOTOOLCHAIN, which is it)", pkg, info.GoVersion, pin)
		}
	}
}

// `make run` (sluice dev with the admin token "dev") listens on loopback unless told
// otherwise: every address it passes defaults to 127.0.0.1.
func TestMakeRunListensOnLoopback(t *testing.T) {
	t.Parallel()
	mk := read(t, "../Makefile")
	for _, v := range []string{"HTTP_ADDR", "GRPC_ADDR", "NATS_ADDR", "SINK_ADDR"} {
		if addr := makeVar(t, mk, v); !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("Makefile %s defaults to %q, want 127.0.0.1:PORT", v, addr)
		}
	}
	run := regexp.MustCompile(`(?ms)^run:\n(.*?)\n\n`).FindStringSubmatch(mk)
	if run == nil {
		t.Fatal("Makefile has no run target")
	}
	for _, f := range []string{"-http '$(HTTP_ADDR)'", "-grpc '$(GRPC_ADDR)'", "-nats-addr '$(NATS_ADDR)'", "-sink-addr '$(SINK_ADDR)'"} {
		if !strings.Contains(run[1], f) {
			t.Errorf("make run does not pass %s", f)
		}
	}
}

// The compose files publish the unauthenticated NATS and Redis (and the sentinels) on the
// host's loopback only, or not at all: anyone on the network could otherwise read and
// rewrite every queue and the scheduler's state.
func TestComposeBackendsNotPublished(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"docker-compose.yml", "docker-compose.sentinel.yml"} {
		var c struct {
			Services map[string]struct {
				Image   string `yaml:"image"`
				Ports   []any  `yaml:"ports"`
				Command []any  `yaml:"command"`
			} `yaml:"services"`
		}
		decodeFile(t, file, &c)
		for name, s := range c.Services {
			backend := strings.HasPrefix(name, "nats") || strings.HasPrefix(name, "redis") || strings.HasPrefix(name, "sentinel")
			if !backend {
				continue
			}
			for _, p := range s.Ports {
				ps, ok := p.(string)
				if !ok || !strings.HasPrefix(ps, "127.0.0.1:") {
					t.Errorf("%s: %s publishes %v on every interface; want 127.0.0.1:HOST:CONTAINER or no port", file, name, p)
				}
			}
		}
	}
}

// The Kubernetes drainer gets no admin token: it serves no admin API, and a secret it holds
// without using is one more place to steal it from.
func TestK8sDrainerHasNoAdminToken(t *testing.T) {
	t.Parallel()
	y := read(t, "k8s/drainer.yaml")
	for _, bad := range []string{"SLUICE_ADMIN_TOKEN", "sluice-admin", "ADMIN_TOKENS"} {
		if strings.Contains(y, bad) {
			t.Errorf("k8s/drainer.yaml mentions %s", bad)
		}
	}
	if !strings.Contains(read(t, "k8s/ingress.yaml"), "SLUICE_ADMIN_TOKEN") {
		t.Error("k8s/ingress.yaml lost its admin token")
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
