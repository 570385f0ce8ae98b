package cli_test

import (
	"os"
	"path/filepath"
	"testing"
)

// sluice tune NAME --key K --window SPEC gives one key its own delivery window (shown with
// its source), --window rule gives the rule's back, a typo is named before anything is
// sent, and a keys file's fourth column sets windows; the server names a bad one.
func TestTuneKeyWindow(t *testing.T) {
	t.Parallel()
	s := start(t)
	r := s.sluice(t, opts{}, "tune", "orders", "--key", "m-42", "--window", "mon-fri 09:00-18:00 Europe/Paris", "--for", "24h")
	r.must(t, 0, "mon-fri 09:00-18:00 Europe/Paris", "")
	r.must(t, 0, "key override until ", "")
	var k map[string]any
	s.get(t, "/v1/admin/queues/orders/keys/m-42", &k)
	w, _ := k["window"].(map[string]any)
	if w["from"] != "09:00" || w["to"] != "18:00" || w["time_zone"] != "Europe/Paris" || k["source"] != "rule" {
		t.Fatalf("after --window: %v", k)
	}
	s.sluice(t, opts{}, "tune", "orders", "--key", "m-42", "--window", "rule").must(t, 0, "always", "")
	s.get(t, "/v1/admin/queues/orders/keys/m-42", &k)
	if k["window"] != nil || k["window_source"] != "rule" || k["override"] != nil {
		t.Fatalf("after --window rule: %v", k)
	}
	s.sluice(t, opts{}, "tune", "orders", "--key", "m-42", "--window", "mon-fri 9:00-18:00 UTC").must(t, 2, "", "window.from")
	s.sluice(t, opts{}, "tune", "orders", "--key", "m-42", "--window", "22:00-06:00 Mars/Olympus").must(t, 2, "", "window.time_zone")

	dir := t.TempDir()
	good := filepath.Join(dir, "good.csv")
	os.WriteFile(good, []byte("key,outflow,for,window\na,5/s,,22:00-06:00 Asia/Seoul\nb,,1h,\"sat,sun 10:00-16:00 UTC\"\n"), 0o644)
	s.sluice(t, opts{}, "tune", "orders", "--keys-file", good).must(t, 0, "2 keys set", "")
	s.get(t, "/v1/admin/queues/orders/keys/b", &k)
	if w, _ := k["window"].(map[string]any); w["from"] != "10:00" || k["outflow_per_second"] == float64(5) {
		t.Fatalf("b: %v", k)
	}
}
