package rules

import (
	"os"
	"regexp"
	"testing"
)

// TestEveryFieldDocumented: every field a rules file may hold is named in README.md or
// docs/rules.md, the reference the README points to (as `field`, or in an example such as
// `park.max_age: 24h`), so a new field cannot ship undocumented.
func TestEveryFieldDocumented(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(readme) + "\n" + string(ref)
	for _, list := range [][]string{documentFields, descriptorFields, envoyLimitFields, listLimitFields, rateFields,
		queueFields, parkFields, sinkFields, deliveryFields, replacesFields, overrideFields} {
		for _, f := range list {
			// `field`, or field: in an example (`park.max_age: 24h`, `delivery: {max_attempts: 8`)
			if !regexp.MustCompile("(^|[`.{\\s])" + regexp.QuoteMeta(f) + "(`|: )").MatchString(doc) {
				t.Errorf("rules field %q is not named in README.md or docs/rules.md", f)
			}
		}
	}
}
