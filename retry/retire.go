package retry

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// DeadRule moves every message of rule that waits in the retry stream — parked, scheduled
// for a later delivery, or waiting for a delivery retry — to dead with reason
// ReasonRuleRemoved, and returns how many it moved. It is for a rule that was removed: its
// messages would otherwise wait for their schedules (hours or days for a scheduled one)
// before the re-admitter found the rule gone. Schedules that already fired are the
// re-admitter's, which dead-letters them the same way.
//
// Each message is dead-lettered before its schedule is purged, so a crash in between
// leaves it in both places, never in neither; the dead letter of one id is stored once
// (rollup), so a schedule firing meanwhile, or two processes doing this at once, leave one.
// A schedule this version cannot read is left for the re-admitter.
func (s *Store) DeadRule(ctx context.Context, rule string, dead *DeadLetters) (int, error) {
	st, err := s.handle(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, filter := range []string{
		s.subject(KindPark, token(rule), "*"),
		s.subject(KindRetry, token(rule), "*"),
		s.subject(KindSchedule, token(rule), ">"),
	} {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return n, fmt.Errorf("retry: messages of removed rule %q: %w", rule, err)
		}
		for subj := range info.State.Subjects {
			raw, err := st.GetLastMsgForSubject(ctx, subj)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // fired or cancelled meanwhile
			}
			if err != nil {
				return n, fmt.Errorf("retry: messages of removed rule %q: %w", rule, err)
			}
			m, err := decode(raw.Header, raw.Data)
			if err != nil || m.ID == "" {
				continue
			}
			if m.Rule == "" {
				m.Rule = rule
			}
			if err := dead.Dead(ctx, "", m, ReasonRuleRemoved); err != nil {
				return n, err
			}
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
				return n, fmt.Errorf("retry: messages of removed rule %q: %w", rule, err)
			}
			n++
		}
	}
	return n, nil
}
