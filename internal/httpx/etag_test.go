package httpx

import "testing"

func TestParseIfMatch(t *testing.T) {
	for _, c := range []struct {
		in         string
		rev        uint64
		anyRev, ok bool
	}{
		{`"3"`, 3, false, true},
		{`3`, 3, false, true},
		{` "0" `, 0, false, true},
		{`*`, 0, true, true},
		{`W/"3"`, 0, false, false},
		{`"3", "4"`, 0, false, false},
		{`"-3"`, 0, false, false},
		{`""`, 0, false, false},
		{`"3`, 0, false, false},
	} {
		rev, anyRev, ok := ParseIfMatch(c.in)
		if ok != c.ok || ok && (rev != c.rev || anyRev != c.anyRev) {
			t.Errorf("ParseIfMatch(%q) = %d, %v, %v; want %d, %v, %v", c.in, rev, anyRev, ok, c.rev, c.anyRev, c.ok)
		}
	}
	if got := RevisionETag(7); got != `"7"` {
		t.Errorf("RevisionETag(7) = %s", got)
	}
	if rev, anyRev, ok := ParseIfMatch(RevisionETag(7)); !ok || anyRev || rev != 7 {
		t.Errorf("ParseIfMatch(RevisionETag(7)) = %d, %v, %v", rev, anyRev, ok)
	}
}
