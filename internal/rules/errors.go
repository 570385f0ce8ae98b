package rules

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoRulesFiles is returned by Load when the given paths name no rules file at all
// (e.g. an empty directory). An empty rules set would make every request unmatched, so a
// reload that suddenly finds no file is refused and the last good rules stay in force.
var ErrNoRulesFiles = errors.New("rules: no rules files found")

// MaxErrors caps how many problems one Load or Parse reports. Past the cap a final
// entry says how many more were found; fixing the first ones usually fixes the rest.
const MaxErrors = 20

// ValidationError is one problem in a rules file: where it is and what is wrong.
//
// Error() reads like a compiler message so editors can jump to it:
//
//	deploy/examples/orders.yaml:12: descriptors[0].queue.capacity: must be ≥ 1 (got 0)
//
// Line is 1-based; 0 when the problem has no single position (e.g. a missing file).
// Field is the YAML path from the document root, empty for syntax errors.
type ValidationError struct {
	File    string
	Line    int
	Field   string
	Message string
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Message)
	return b.String()
}

// ValidationErrors is every problem found in one Load or Parse, in file order.
// Load and Parse return it wrapped ("rules: …"); both
//
//	var ve *rules.ValidationError; errors.As(err, &ve)   // the first problem
//	var all rules.ValidationErrors; errors.As(err, &all) // all of them
//
// work.
type ValidationErrors []*ValidationError

func (es ValidationErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As and errors.Is see each *ValidationError.
func (es ValidationErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
