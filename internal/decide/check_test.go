package decide

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

// durations in /v1/check answers must parse as protobuf JSON Durations, to the same value.
func TestProtoDurationParsesWithProtojson(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, 3353 * time.Millisecond, 43 * time.Second, 250 * time.Millisecond,
		90*time.Minute + 1, -1500 * time.Millisecond, 24*time.Hour - time.Microsecond, 1000000001} {
		s := protoDuration(d)
		var pd durationpb.Duration
		if err := protojson.Unmarshal([]byte(strconv.Quote(s)), &pd); err != nil {
			t.Errorf("protoDuration(%v) = %s: %v", d, s, err)
			continue
		}
		if got := pd.AsDuration(); got != d {
			t.Errorf("protoDuration(%v) = %s, parses back as %v", d, s, got)
		}
	}
	if got := protoDuration(3353 * time.Millisecond); got != "3.353s" {
		t.Errorf("protoDuration(3.353s) = %s", got)
	}
}
