package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sluice tune NAME --key K RATE [--for D] steers one key and says where its outflow comes
// from; --keys-file sends a CSV; a bad line is reported by its line in the file and
// nothing is written; capacity per key is refused with the reason.
func TestTuneKeys(t *testing.T) {
	t.Parallel()
	s := start(t)
	s.sluice(t, opts{}, "tune", "orders", "--key", "m-42", "20/s", "--for", "24h").must(t, 0, "key override until ", "")
	r := s.sluice(t, opts{}, "tune", "orders", "--key", "m-42", "20/s")
	r.must(t, 0, "20/s", "")
	if strings.Contains(r.stdout, "until") {
		t.Errorf("a RATE without --for keeps the end:\n%s", r.stdout)
	}
	s.sluice(t, opts{}, "tune", "orders", "--key", "m-42", "--reset").must(t, 0, "source", "")
	var k map[string]any
	s.get(t, "/v1/admin/queues/orders/keys/m-42", &k)
	if k["source"] != "rule" {
		t.Fatalf("after --reset: %v", k)
	}
	s.sluice(t, opts{}, "tune", "orders", "--key", "m-42", "--capacity", "5").must(t, 2, "", "capacity")

	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("key,outflow,for\n")
	for i := range 500 {
		fmt.Fprintf(&b, "m-%d,%d/m,1h\n", i, 1+i)
	}
	good := filepath.Join(dir, "good.csv")
	os.WriteFile(good, []byte(b.String()), 0o644)
	s.sluice(t, opts{}, "tune", "orders", "--keys-file", good).must(t, 0, "500 keys set", "")
	s.get(t, "/v1/admin/queues/orders/keys/m-59", &k)
	if k["outflow_per_second"] != float64(1) {
		t.Fatalf("m-59: %v", k)
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("key,outflow\na,1/s\n\nb,paused\nc,paused,-1h\n"), 0o644)
	s.sluice(t, opts{}, "tune", "orders", "--keys-file", bad).must(t, 2, "", "bad.csv:5")
	os.WriteFile(bad, []byte("a,1/s\nb,paused\nb,2/s\n"), 0o644)
	s.sluice(t, opts{}, "tune", "orders", "--keys-file", bad).must(t, 1, "", "bad.csv:3: key: repeats line 2 (1 of 3 lines refused, nothing written)")
}
