package retry

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/nats-io/nats.go/jetstream"
)

// subjectCount returns how many distinct subjects of stream match filter — here, how many
// messages, since every parked message and every dead letter has a subject of its own.
//
// It asks STREAM.INFO for the filter's subject details with an offset past the end: the
// server reports the total number of matching subjects but sends no subject list. The
// jetstream client's Info(WithSubjectFilter) would instead page through every matching
// subject (tens of bytes each over the wire). The server still walks the matching
// subjects (O(matching), no I/O), so this is for metrics on an interval, never per
// request.
func subjectCount(ctx context.Context, js jetstream.JetStream, apiPrefix, stream, filter string) (uint64, error) {
	req, _ := json.Marshal(struct {
		SubjectsFilter string `json:"subjects_filter"`
		Offset         int    `json:"offset"`
	}{filter, math.MaxInt32})
	resp, err := js.Conn().RequestWithContext(ctx, apiPrefix+"STREAM.INFO."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("retry: count %s in %s: %w", filter, stream, err)
	}
	var info struct {
		Total int `json:"total"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &info); err != nil {
		return 0, fmt.Errorf("retry: count %s in %s: %w", filter, stream, err)
	}
	if info.Error != nil {
		return 0, fmt.Errorf("retry: count %s in %s: %s (%d)", filter, stream, info.Error.Description, info.Error.ErrCode)
	}
	return uint64(info.Total), nil
}
