package queue

import (
	"fmt"
	"testing"
)

// A key read in both scans of HotKeys (claimed or released between them) is listed once,
// at its larger depth.
func TestTopKeysListsAKeyOnce(t *testing.T) {
	keys := []KeyDepth{{"a", 3}, {"b", 9}, {"a", 5}, {"c", 1}, {"b", 8}, {"d", 5}}
	got := fmt.Sprint(topKeys(keys, 3))
	if want := "[{b 9} {a 5} {d 5}]"; got != want {
		t.Fatalf("topKeys = %s, want %s", got, want)
	}
}
