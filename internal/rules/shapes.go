package rules

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of NoMatchDetail, so a domain with thousands of rules cannot make an answer
// (or a log line) of any size.
const (
	maxShapes      = 8   // shapes listed; the rest are counted
	maxShapesBytes = 400 // bytes of shapes listed
)

// Shape renders a rule's descriptor path as a client writes it, one entry per level:
// "[message_type=marketing, user_id]" — key=value where the rule names a value (a
// wildcard value stays as written, e.g. path=/api/*), the key alone where any value
// matches (one bucket per value). A value with a space, comma, '=' or bracket is quoted.
func (r *Rule) Shape() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range r.Path {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIfNeeded(e.Key))
		if e.Value != "" {
			b.WriteByte('=')
			b.WriteString(quoteIfNeeded(e.Value))
		}
	}
	b.WriteByte(']')
	return b.String()
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " ,=[]\"") || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}

// Shapes returns the descriptor shapes the rules of domain answer to (Rule.Shape), in
// definition order; nil for a domain no rule has.
func (s *Set) Shapes(domain string) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, r := range s.rules {
		if r.Domain == domain {
			out = append(out, r.Shape())
		}
	}
	return out
}

// NoMatchDetail explains why a descriptor of domain matched no rule, naming what the
// domain does have: `no rule of domain "messaging" matches this descriptor; domain
// "messaging" has: [message_type=marketing, user_id]`, or for an unknown domain the
// domains there are. At most maxShapes shapes (or domains) and about maxShapesBytes
// bytes of them are listed; the rest are counted ("… and 12 more"). For the problem
// detail of a 404, and safe to log.
func (s *Set) NoMatchDetail(domain string) string {
	q := quoteBounded(domain)
	head := "no rule of domain " + q + " matches this descriptor; "
	if shapes := s.Shapes(domain); len(shapes) > 0 {
		return head + "domain " + q + " has: " + boundedList(shapes, ", ")
	}
	domains := s.Domains()
	if len(domains) == 0 {
		return head + "no rules are loaded"
	}
	quoted := make([]string, len(domains))
	for i, d := range domains {
		quoted[i] = quoteBounded(d)
	}
	return head + "there is no such domain; the domains are: " + boundedList(quoted, ", ")
}

// quoteBounded quotes a name for a message, cut to 64 bytes (a request's domain may be
// up to 256).
func quoteBounded(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}

// boundedList joins items with sep, stopping at maxShapes items or maxShapesBytes bytes
// and saying how many were left out.
func boundedList(items []string, sep string) string {
	var b strings.Builder
	n := 0
	for _, it := range items {
		if n == maxShapes || (n > 0 && b.Len()+len(sep)+len(it) > maxShapesBytes) {
			break
		}
		if n > 0 {
			b.WriteString(sep)
		}
		if len(it) > maxShapesBytes {
			cut := maxShapesBytes
			for cut > 0 && !utf8.RuneStart(it[cut]) {
				cut--
			}
			it = it[:cut] + "…"
		}
		b.WriteString(it)
		n++
	}
	if rest := len(items) - n; rest > 0 {
		b.WriteString(" … and " + strconv.Itoa(rest) + " more")
	}
	return b.String()
}
