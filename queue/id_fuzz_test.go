package queue_test

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/queue"
)

// idByte is a character NewID may use: [A-Za-z0-9_.-].
func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// FuzzParseID: ParseID never panics on any string; an id it accepts is exactly the id
// NewID makes for its parts (so one message has one spelling), its IDToken is its uuid and
// stable; an id NewID makes for any rule and acceptable key is accepted and names them.
func FuzzParseID(f *testing.F) {
	for _, s := range []struct{ id, rule, key string }{
		{"0190f3a4-5b6c-7d8e-9f01-23456789abcd.orders.kbWVyY2hhbnQtNDI", "orders", "merchant-42"},
		{"0190F3A4-5B6C-7D8E-9F01-23456789ABCD.orders.kbWVyY2hhbnQtNDI", "orders.m", "a.b\n🦀 %"},
		{"0190f3a4-5b6c-7d8e-9f01-23456789abcd", "", ""},
		{"0190f3a4-5b6c-4d8e-9f01-23456789abcd.r.k", "r", ""},
		{"0190f3a4-5b6c-7d8e-9f01-23456789abcd.r.kAB", "r r", "\xff"},
		{"0190f3a4-5b6c-7d8e-9f01-23456789abcd..k", strings.Repeat("x", 70), strings.Repeat("k", 257)},
		{"urn:uuid:0190f3a4-5b6c-7d8e-9f01-23456789abcd.r.k", "r", "k"},
	} {
		f.Add(s.id, s.rule, s.key)
	}
	f.Fuzz(func(t *testing.T, id, rule, key string) {
		ref, ok := queue.ParseID(id)
		tok := queue.IDToken(id)
		if tok != queue.IDToken(id) {
			t.Fatalf("IDToken(%q) is not stable", id)
		}
		for i := 0; i < len(tok); i++ {
			if !idByte(tok[i]) || tok[i] == '.' {
				t.Fatalf("IDToken(%q) = %q: byte %q is no subject token character", id, tok, tok[i])
			}
		}
		if ok {
			if want := ref.UUID.String() + "." + ref.RuleToken + "." + queue.KeyToken(ref.Key); id != want {
				t.Fatalf("ParseID accepted %q, which NewID spells %q", id, want)
			}
			if ref.UUID.Version() != 7 || queue.CheckKey(ref.Key) != nil || queue.RuleToken(ref.RuleToken) != ref.RuleToken {
				t.Fatalf("ParseID(%q) = %+v", id, ref)
			}
			if tok != ref.UUID.String() {
				t.Fatalf("IDToken(%q) = %q, want its uuid", id, tok)
			}
		}
		if queue.CheckKey(key) != nil {
			return
		}
		nid, err := queue.NewID(rule, key)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(nid); i++ {
			if !idByte(nid[i]) {
				t.Fatalf("NewID(%q, %q) = %q has byte %q", rule, key, nid, nid[i])
			}
		}
		got, ok := queue.ParseID(nid)
		if !ok || got.Key != key || got.RuleToken != queue.RuleToken(rule) || queue.IDToken(nid) != got.UUID.String() {
			t.Fatalf("NewID(%q, %q) = %q: ParseID = %+v, %v", rule, key, nid, got, ok)
		}
	})
}

// FuzzKeyFromToken: KeyFromToken never panics, and a token it accepts is exactly the
// KeyToken of the key it returns (one key, one subject).
func FuzzKeyFromToken(f *testing.F) {
	for _, s := range []string{"k", "kAB", "kAA", "kbWVyY2hhbnQtNDI", "ka.b", "xAA", "k====", "kA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		key, err := queue.KeyFromToken(tok)
		if err != nil {
			return
		}
		if back := queue.KeyToken(key); back != tok {
			t.Fatalf("KeyFromToken(%q) = %q, whose token is %q", tok, key, back)
		}
	})
}

// TestNewIDSpellsItsUUIDAsUUIDDoes: ids spell their uuid as uuid.UUID.String does, so
// ParseID (which insists on that spelling) reads every id NewID makes.
func TestNewIDSpellsItsUUIDAsUUIDDoes(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id, err := queue.NewID("orders", "m-1")
		if err != nil {
			t.Fatal(err)
		}
		ref, ok := queue.ParseID(id)
		if !ok || ref.UUID.String() != id[:36] || ref.Key != "m-1" {
			t.Fatalf("NewID made %q: ParseID %+v, %v", id, ref, ok)
		}
		if seen[id] {
			t.Fatalf("NewID made %q twice", id)
		}
		seen[id] = true
	}
}
