package arch

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/sluice-io/sluice/"

// wrongWay lists the arrows that must not exist: from (a package) must not depend, directly
// or through another package, on to or on any package under it (to is in this module, or
// a full import path of another). Each names why.
var wrongWay = []struct{ from, to, why string }{
	{"retry", "internal/drain", "the public retry library must not link the drainer runtime for its types (internal/delivery holds them)"},
	{"internal/retryrules", "internal/drain", "the adapters speak internal/delivery's interfaces"},
	{"internal/sink", "internal/drain", "sinks report a delivery.Outcome; the drainer imports them, not the reverse"},
	{"internal/delivery", "internal/drain", "the model is below the runtime"},
	{"internal/ingress", "internal/drain", "a handler package never builds or reads the drainer"},
	{"internal/ingress", "internal/process", "processes are assembled in internal/process/…, which imports the handlers"},
	{"internal/drain", "internal/ingress", "the drainer never links the HTTP and gRPC serving"},
	{"internal/process", "internal/ingress", "the drainer binary (cmd/drainer, on internal/process) must not link the ingress's server"},
	{"internal/decide", "internal/drain", "the decision service is a handler package: it never builds or reads the drainer"},
	{"internal/decide", "internal/process", "processes are assembled in internal/process/…, which imports the handlers"},
	{"internal/decide", "internal/ingress", "the decision service is below the HTTP server that routes to it"},
	{"internal/admin", "internal/drain", "the admin API is a handler package: it never builds or reads the drainer"},
	{"internal/admin", "internal/process", "processes are assembled in internal/process/…, which imports the handlers"},
	{"internal/admin", "internal/ingress", "the admin API is below the HTTP server that routes to it"},
	{"internal/ingress", "internal/admin", "the server takes the admin API as an http.Handler; the process builds it"},
	{"internal/request", "internal/ingress", "request decoding is pure: no server"},
	{"internal/request", "internal/decide", "request decoding is pure: no service"},
	{"internal/request", "internal/process", "request decoding is pure: no process"},
	{"internal/request", "internal/drain", "request decoding is pure: no drainer"},
	{"internal/request", "queue", "request decoding is pure: no NATS or Redis"},
	{"internal/request", "github.com/nats-io/nats.go", "request decoding is pure: no NATS"},
	{"internal/request", "github.com/redis/go-redis/v9", "request decoding is pure: no Redis"},
	{"internal/request", "internal/submit", "request decoding is pure: no server (the submission service is above it)"},
	{"internal/request", "internal/admin", "request decoding is pure: no server"},
	{"internal/request", "google.golang.org/grpc", "request decoding is pure: no gRPC server"},
	{"internal/submit", "internal/process", "the submission service is a handler package: processes are assembled in internal/process/…, which imports it"},
	{"internal/submit", "internal/drain", "the submission service is a handler package: it never builds or reads the drainer"},
	{"internal/submit", "internal/ingress", "the submission service is below the HTTP server that mounts it"},
	{"internal/submit", "internal/admin", "the submission service and the admin API are side by side"},
	{"internal/submit", "internal/decide", "the submission service and the decision service are side by side"},
}

// TestNoWrongWayArrows: none of wrongWay's arrows is in `go list -deps` (tests' own imports
// aside: an external test package may reach up to build a whole process).
func TestNoWrongWayArrows(t *testing.T) {
	deps, imports := list(t)
	for _, a := range wrongWay {
		ds, ok := deps[module+a.from]
		if !ok {
			t.Errorf("%s: not in the module (the test's list is out of date)", a.from)
			continue
		}
		to := module + a.to
		if strings.Contains(strings.SplitN(a.to, "/", 2)[0], ".") {
			to = a.to // another module's package: github.com/…
		}
		for _, d := range ds {
			if d == to || strings.HasPrefix(d, to+"/") {
				t.Errorf("%s depends on %s (%s): %s", a.from, strings.TrimPrefix(d, module), chain(imports, module+a.from, d), a.why)
			}
		}
	}
}

// list is every module package's transitive imports (deps) and direct ones (imports), by
// import path.
func list(t *testing.T) (deps, imports map[string][]string) {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goBin, "list", "-json=ImportPath,Imports,Deps", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	deps, imports = map[string][]string{}, map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath    string
			Imports, Deps []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		deps[p.ImportPath] = p.Deps
		imports[p.ImportPath] = p.Imports
	}
	return deps, imports
}

// chain is a shortest chain of direct imports from → … → to, so a failure names the arrow
// to remove.
func chain(imports map[string][]string, from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var c []string
			for q := to; q != ""; q = prev[q] {
				c = append([]string{strings.TrimPrefix(q, module)}, c...)
			}
			return strings.Join(c, " → ")
		}
		for _, i := range imports[p] {
			if _, seen := prev[i]; !seen {
				prev[i] = p
				queue = append(queue, i)
			}
		}
	}
	return "?"
}
