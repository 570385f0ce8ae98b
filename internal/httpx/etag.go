package httpx

import (
	"strconv"
	"strings"
)

// RevisionETag is the ETag of a resource at revision rev (0: nothing stored): an
// entity-tag is a quoted string (RFC 9110 §8.8.3), `"3"`.
func RevisionETag(rev uint64) string { return `"` + strconv.FormatUint(rev, 10) + `"` }

// ParseIfMatch reads an If-Match of a revision: one entity-tag as RevisionETag writes it,
// `"3"`; the bare number 3, as clients written against servers that sent the ETag unquoted
// give it back; or *, any revision (anyRev). Anything else — a weak tag, a list — is not ok.
func ParseIfMatch(v string) (rev uint64, anyRev, ok bool) {
	v = strings.TrimSpace(v)
	if v == "*" {
		return 0, true, true
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	rev, err := strconv.ParseUint(v, 10, 64) // no sign, no space, no list
	return rev, false, err == nil
}
