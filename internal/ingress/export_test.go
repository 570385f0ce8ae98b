package ingress

import (
	"github.com/sluice-io/sluice/internal/admin"
	"github.com/sluice-io/sluice/internal/request"
	"github.com/sluice-io/sluice/internal/submit"
)

// ScanSubmission decodes a plain single submission as the ingress does (scanOne), for the
// admission report's floor handlers: the descriptor's first value and the payload; ok is
// false for a body the scanner leaves to encoding/json.
func ScanSubmission(body []byte) (key string, payload []byte, ok bool) {
	var req request.Submit
	if !request.ScanOne(body, &req) || len(req.Descriptor) == 0 {
		return "", nil, false
	}
	return req.Descriptor[0].Value, req.Payload, true
}

// WriteQueued writes the 202 body of a queued message as the ingress does, for the floor
// handlers.
var WriteQueued = submit.WriteQueued

// SetAdminHooks sets the test seams of s's admin handler (admin.Admin.SetHooks): afterStore
// runs once a PATCH's override is stored, afterReplay after each dead letter a replay-all
// handled (with their count). nil leaves a hook unset.
func SetAdminHooks(s *Server, afterStore func(), afterReplay func(n int)) {
	s.cfg.Admin.(*admin.Admin).SetHooks(afterStore, afterReplay, nil)
}

// SetAdminAfterAdmit sets the seam that runs once a replayed dead letter is back in its
// queue, before its dead letter is removed.
func SetAdminAfterAdmit(s *Server, f func()) {
	s.cfg.Admin.(*admin.Admin).SetHooks(nil, nil, f)
}
