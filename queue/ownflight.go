package queue

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keys in flight under the own engine (the admin API's in_flight): each drainer reports, with
// its ownership renewal of a rule (OwnRequest.ReportInFlight, the same pipelined round trip,
// one script per rule and renewal, never per message), how many of the rule's keys it is
// delivering now, in the rule's ownership slot:
//
//	<prefix>sl:{T.own}:flight  HASH  drainer -> its keys in flight (a count)
//
// A report counts only while its drainer's announcement in :members lasts (own.lua renews it
// with the leases, so a dead drainer's report stops counting once its leases would expire,
// OwnLease after its last renewal); every report names the fields of drainers no longer
// live, which it removes (ownflight.lua). The hash holds one field per live drainer, plus
// those that died since a drainer last reported. The count is as fresh as the renewal (one
// OwnRenew period), which is what a view of the queue needs.

var (
	//go:embed ownflight.lua
	ownFlightSrc    string
	ownFlightScript = redis.NewScript(ownFlightSrc)
)

// ownFlightReadScript sums the reports of the live drainers (InFlight).
var ownFlightReadScript = redis.NewScript(`
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local vals = redis.call('HGETALL', KEYS[1])
local sum = 0
for i = 1, #vals, 2 do
  local exp = redis.call('ZSCORE', KEYS[2], vals[i])
  if exp and tonumber(exp) > now then sum = sum + (tonumber(vals[i + 1]) or 0) end
end
return sum`)

func (s *store) ownFlightKeys(rule string) []string {
	return []string{s.ownKey(rule, "flight"), s.ownKey(rule, "members")}
}

// queueInFlight adds r's report to a renewal's pipeline, after its own.lua call (nil when r
// reports nothing).
func (s *store) queueInFlight(ctx context.Context, pipe redis.Pipeliner, now time.Time, r OwnRequest) *redis.Cmd {
	if !r.ReportInFlight {
		return nil
	}
	return ownFlightScript.EvalSha(ctx, pipe, s.ownFlightKeys(r.Rule), ownFlightArgs(now, r)...)
}

func ownFlightArgs(now time.Time, r OwnRequest) []any {
	n := max(r.InFlight, 0)
	if r.Leave {
		n = 0
	}
	return []any{usOrZero(now), r.Owner, strconv.Itoa(n)}
}

// inFlightReported sets Owned.InFlightErr from the reports' answers, running a report again
// whose script the server did not know yet (NOSCRIPT, as Own does for own.lua).
func (s *store) inFlightReported(ctx context.Context, now time.Time, reqs []OwnRequest, cmds []*redis.Cmd, out []Owned) {
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		err := cmd.Err()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = ownFlightScript.Run(ctx, s.rdb, s.ownFlightKeys(reqs[i].Rule), ownFlightArgs(now, reqs[i])...).Err()
		}
		if err != nil {
			out[i].InFlightErr = fmt.Errorf("queue: report keys in flight of rule %q: %w", reqs[i].Rule, err)
		}
	}
}

// InFlight is how many of rule's keys the own engine's drainers are delivering now: the sum
// of the live drainers' reports (OwnRequest.ReportInFlight), as of their last renewal. now is
// zero for Redis's clock (a drainer counts until its announcement expires), or a time for
// tests. One script call, reading one field per drainer.
func (s Ownership) InFlight(ctx context.Context, rule string, now time.Time) (int64, error) {
	n, err := ownFlightReadScript.Run(ctx, s.rdb, s.ownFlightKeys(rule), usOrZero(now)).Int64()
	if err != nil {
		return 0, fmt.Errorf("queue: keys in flight of rule %q: %w", rule, err)
	}
	return n, nil
}
