package process_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestProductionBinariesWithoutDevWorld builds cmd/ingress and cmd/drainer as a user
// would and reads their build info (`go version -m`): neither may link the embedded NATS
// server, the in-process Redis or the browser driver of the console tests — those belong
// to `sluice dev` (cmd/sluice) and to tests. Each binary also answers -version from its
// build info.
func TestProductionBinariesWithoutDevWorld(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	t.Parallel()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir := t.TempDir()
	forbidden := []string{"github.com/nats-io/nats-server", "github.com/alicebob/miniredis", "github.com/chromedp"}
	// The drainer does not link the ingress's server either (gRPC, envoy's protos, the console).
	deps, err := exec.Command(goBin, "list", "-deps", "../../cmd/drainer").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/drainer: %v\n%s", err, deps)
	}
	for _, pkg := range []string{"github.com/sluice-io/sluice/internal/ingress", "github.com/sluice-io/sluice/internal/process/ingress", "github.com/sluice-io/sluice/internal/devstack", "github.com/sluice-io/sluice/internal/devenv"} {
		if strings.Contains(string(deps), pkg+"\n") {
			t.Errorf("cmd/drainer depends on %s", pkg)
		}
	}
	for _, name := range []string{"ingress", "drainer", "sluice"} {
		bin := filepath.Join(dir, name)
		build := exec.Command(goBin, "build", "-o", bin, "./cmd/"+name)
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
		out, err := exec.Command(goBin, "version", "-m", bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go version -m %s: %v\n%s", name, err, out)
		}
		for _, mod := range forbidden {
			linked := strings.Contains(string(out), "\tdep\t"+mod)
			switch {
			case name == "sluice" && mod == "github.com/nats-io/nats-server" && !linked:
				// The check itself must see a module when it is there: sluice dev embeds NATS.
				t.Errorf("cmd/sluice does not show %s in its build info: this test cannot see linked modules\n%s", mod, out)
			case name != "sluice" && linked:
				t.Errorf("cmd/%s links %s (the dev world)", name, mod)
			}
		}
		arg := "-version"
		if name == "sluice" {
			arg = "version"
		}
		v, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(v), name+" ") || !strings.Contains(string(v), runtime.Version()[:4]) {
			t.Errorf("%s %s: %q, %v; want %q and the version from the build info", name, arg, v, err, name+" …")
		}
	}
}
