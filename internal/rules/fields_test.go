package rules

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryFieldDocumented: every field a rules file may hold is named in the documentation,
// README.md and docs/*.md (as `field`, or in an example such as `park.max_age: 24h`), so a new
// field cannot ship undocumented. (When the README held the whole reference this read it
// alone; its rules text is now docs/configuration.md's "Rules", docs/envoy.md and
// docs/messages.md.)
func TestEveryFieldDocumented(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	var all strings.Builder
	for _, page := range append(pages, "../../README.md") {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		all.WriteByte('\n')
	}
	doc := all.String()
	for _, list := range [][]string{documentFields, descriptorFields, envoyLimitFields, listLimitFields, rateFields,
		queueFields, parkFields, sinkFields, deliveryFields, replacesFields, overrideFields, windowFields, adaptiveFields, breakerFields} {
		for _, f := range list {
			// `field`, or field: in an example (`park.max_age: 24h`, `delivery: {max_attempts: 8`)
			if !regexp.MustCompile("(^|[`.{\\s])" + regexp.QuoteMeta(f) + "(`|: )").MatchString(doc) {
				t.Errorf("rules field %q is not named in README.md or docs/*.md", f)
			}
		}
	}
}
