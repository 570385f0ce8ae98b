package retry

import "time"

// Rule is what the retry queue needs to know of a rule: its name, how long its messages
// may stay parked, and whether a key's messages keep their order when they go back into
// its queue. A program builds it from its own configuration; sluice builds it from its
// rules file.
type Rule struct {
	// Name is the rule's name. It is part of every subject in the retry and dead-letter
	// streams and of every message's Rule field.
	Name string
	// ParkMaxAge: a message parked longer than this becomes a dead letter. Zero means
	// ReadmitterConfig.DefaultMaxAge (24h).
	ParkMaxAge time.Duration
	// Relaxed is `ordering: relaxed`: messages of one key that fire together go back
	// independently, each after its own jittered backoff. False (strict, the default):
	// once one of a key's messages found no room, the key's messages that fired with it
	// park behind it, so they go back in the order they were parked.
	Relaxed bool
}

// RuleLookup finds a rule by name; false means there is no such rule (it was removed),
// and its messages go to the dead letters with reason ReasonRuleRemoved.
type RuleLookup func(name string) (Rule, bool)

// Rules is a RuleLookup over a fixed list of rules, for programs whose rules do not change.
func Rules(rules ...Rule) RuleLookup {
	byName := make(map[string]Rule, len(rules))
	for _, r := range rules {
		byName[r.Name] = r
	}
	return func(name string) (Rule, bool) {
		r, ok := byName[name]
		return r, ok
	}
}
