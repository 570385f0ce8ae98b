package queue

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ownership (the "own" drain engine): instead of claiming keys one by one, a drainer owns
// whole ownership partitions of a rule through a lease, and paces, pops and delivers their
// keys in memory; Redis is asked about once per renewal per rule, not once per message.
//
// A key's ownership partition is FNV-1a of the key mod the rule's ownership partition count
// (OwnPartitionOf), independent of the scheduler's Redis-slot partitions (partition.go): a
// rule has e.g. 16 of them even on a single Redis, so drainers share its keys.
//
// State, all in one hash slot per rule ({<rule token>.own}; a rule token never contains
// '.', so this tag is no partition's):
//
//	<prefix>sl:{T.own}:members ZSET  drainer -> expiry of its announcement (µs, Redis's clock)
//	<prefix>sl:{T.own}:leases  HASH  partition -> "<owner> <fence> <expiry µs>"
//	<prefix>sl:{T.own}:fence   STRING the last fencing token handed out
//	<prefix>sl:{T.own}:parts   STRING the partition count the leases are taken under (drainers
//	                                  with another -own-partitions own nothing: Owned.Mismatch)
//	<prefix>sl:{T.own}:pace:<p> HASH key -> the key's next allowed time (µs), for keys whose
//	                                  next slot is further ahead than a handover takes
//	<prefix>sl:{T.own}:try     HASH  key -> retry state of the key's head (strict ordering,
//	                                  written only on failures)
//	<prefix>sl:{T.own}:flight  HASH  drainer -> its keys in flight, sent with its renewal
//	                                  (ownflight.go)
//
// own.lua does one drainer's renewal: announce, renew, give up the surplus, take free
// partitions up to the drainer's share. See its header for the rules.

var (
	//go:embed own.lua
	ownSrc    string
	ownScript = redis.NewScript(ownSrc)
)

// DefaultOwnPartitions is a rule's ownership partition count by default: enough for up to
// 16 drainers to share a rule, few enough that a renewal stays one small script.
const DefaultOwnPartitions = 16

// OwnPartitionOf is key's ownership partition among n (FNV-1a mod n, as PartitionOf).
func OwnPartitionOf(key string, n int) int { return PartitionOf(key, n) }

// OwnRequest is one rule's renewal by one drainer (Scheduler.Ownership.Own).
type OwnRequest struct {
	Rule       string
	Owner      string        // the drainer; no spaces
	Partitions int           // the rule's ownership partition count
	Lease      time.Duration // a lease ends this long after Redis's now
	Leave      bool          // give up every partition and the announcement (soft stop)
	Max        int           // the most partitions to own; 0 = the fair share; -1 = none (announce only)
	// GiveUp names partitions to give up now: Owned.Surplus said so and the drainer has
	// stopped delivering them.
	GiveUp []int
	// Pace is written before the renewal: per owned partition, keys' next allowed times
	// (Redis's clock), so a new owner does not deliver them sooner. Replaces the
	// partition's previous entries; an empty non-nil map clears them.
	Pace map[int]map[string]time.Time
	// PaceTTL is how long written pace entries are kept (at least the longest gap they
	// describe). Default 1 minute. Steer entries are kept as long.
	PaceTTL time.Duration
	// Steer is written with Pace: per owned partition, keys' steering state (the engine's
	// encoding, e.g. a throttled key's adaptive outflow) for a new owner (SteerStates).
	// Replaces the partition's previous entries; an empty non-nil map clears them.
	Steer map[int]map[string]string
	// ReportInFlight: the renewal also reports InFlight, how many of the rule's keys this
	// drainer is delivering now (ownflight.go; 0, or Leave, removes its report).
	ReportInFlight bool
	InFlight       int
}

// Owned is the answer to one OwnRequest.
type Owned struct {
	Now     time.Time     // Redis's clock at the renewal
	Members int           // live drainers of the rule (this one included)
	Rank    int           // this drainer's place among them (0-based): for splitting a rule-wide cap
	Fences  map[int]int64 // partition -> fencing token of this drainer's lease on it
	// Surplus are owned partitions (in Fences) above this drainer's share: stop delivering
	// them and name them in OwnRequest.GiveUp next time.
	Surplus map[int]bool
	// Mismatch, when not 0, is the partition count the rule's leases are held under by other
	// drainers, which differs from this request's Partitions: this drainer owns nothing of the
	// rule (and is not counted in Members) until they agree — the count changes only once no
	// other drainer holds a lease.
	Mismatch int
	Err      error
	// InFlightErr: the report of keys in flight (OwnRequest.ReportInFlight) failed.
	InFlightErr error
}

func (s *store) ownKey(rule, name string) string {
	return s.prefix + "sl:{" + RuleToken(rule) + ".own}:" + name
}

// Own renews the ownership of several rules in one pipelined round trip (split per node by a
// cluster client). now is zero for Redis's clock (drainers), or a time for tests.
func (s Ownership) Own(ctx context.Context, now time.Time, reqs []OwnRequest) []Owned {
	out := make([]Owned, len(reqs))
	if len(reqs) == 0 {
		return out
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(reqs))
	flights := make([]*redis.Cmd, len(reqs))
	for i, r := range reqs {
		for p, keys := range r.Pace {
			k := s.ownKey(r.Rule, "pace:"+strconv.Itoa(p))
			pipe.Del(ctx, k)
			if len(keys) == 0 {
				continue
			}
			args := make([]any, 0, 2*len(keys))
			for key, t := range keys {
				args = append(args, key, t.UnixMicro())
			}
			pipe.HSet(ctx, k, args...)
			ttl := r.PaceTTL
			if ttl <= 0 {
				ttl = time.Minute
			}
			pipe.PExpire(ctx, k, ttl)
		}
		for p, keys := range r.Steer {
			ttl := r.PaceTTL
			if ttl <= 0 {
				ttl = time.Minute
			}
			s.writeSteer(ctx, pipe, r.Rule, p, keys, ttl)
		}
		cmds[i] = ownScript.EvalSha(ctx, pipe, s.ownKeys(r), ownArgs(now, r)...)
		flights[i] = s.queueInFlight(ctx, pipe, now, r) // after own.lua: a new drainer is live
	}
	pipe.Exec(ctx) // errors are per command
	for i, r := range reqs {
		cmd := cmds[i]
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmd = ownScript.Run(ctx, s.rdb, s.ownKeys(r), ownArgs(now, r)...)
		}
		vals, err := cmd.Int64Slice()
		if err != nil {
			out[i].Err = fmt.Errorf("queue: own partitions of rule %q: %w", r.Rule, err)
			continue
		}
		if len(vals) < 3 || len(vals)%2 != 1 {
			out[i].Err = fmt.Errorf("queue: own partitions of rule %q: %w", r.Rule, errUnexpected(len(vals)))
			continue
		}
		o := Owned{Now: fromUS(vals[0]), Members: int(vals[1]), Rank: int(vals[2]), Fences: make(map[int]int64, (len(vals)-3)/2), Surplus: map[int]bool{}}
		if o.Rank < 0 {
			o.Mismatch, o.Rank = -o.Rank, 0
		}
		for j := 3; j < len(vals); j += 2 {
			f := vals[j+1]
			if f < 0 {
				f = -f
				o.Surplus[int(vals[j])] = true
			}
			o.Fences[int(vals[j])] = f
		}
		out[i] = o
	}
	s.inFlightReported(ctx, now, reqs, flights, out)
	return out
}

func (s *store) ownKeys(r OwnRequest) []string {
	return []string{s.ownKey(r.Rule, "members"), s.ownKey(r.Rule, "leases"), s.ownKey(r.Rule, "fence"), s.ownKey(r.Rule, "parts")}
}

func ownArgs(now time.Time, r OwnRequest) []any {
	leave := 0
	if r.Leave {
		leave = 1
	}
	args := []any{usOrZero(now), r.Lease.Microseconds(), r.Owner, r.Partitions, leave, r.Max}
	for _, p := range r.GiveUp {
		args = append(args, p)
	}
	return args
}

// Paces reads the next allowed times previous owners of partitions parts left
// (OwnRequest.Pace), in one pipelined round trip.
func (s Ownership) Paces(ctx context.Context, rule string, parts []int) (map[string]time.Time, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.HGetAll(ctx, s.ownKey(rule, "pace:"+strconv.Itoa(p)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("queue: paces of rule %q: %w", rule, err)
	}
	out := map[string]time.Time{}
	for _, c := range cmds {
		for k, v := range c.Val() {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out[k] = fromUS(n)
			}
		}
	}
	return out, nil
}

// SetOwnRetry records (st non-nil) or clears the retry state of key's head under the own
// engine. Called only when a delivery fails, or when a key that had failed succeeds.
func (s Ownership) SetOwnRetry(ctx context.Context, rule, key string, st *RetryState) error {
	k := s.ownKey(rule, "try")
	var err error
	if st == nil {
		err = s.rdb.HDel(ctx, k, key).Err()
	} else {
		err = s.rdb.HSet(ctx, k, key, st.encode()).Err()
	}
	if err != nil {
		return fmt.Errorf("queue: retry state of rule %q: %w", rule, err)
	}
	return nil
}

// OwnRetries reads the retry states of the keys of the ownership partitions in parts (among
// n): one read for any number of partitions.
func (s Ownership) OwnRetries(ctx context.Context, rule string, parts map[int]bool, n int) (map[string]RetryState, error) {
	m, err := s.rdb.HGetAll(ctx, s.ownKey(rule, "try")).Result()
	if err != nil {
		return nil, fmt.Errorf("queue: retry states of rule %q: %w", rule, err)
	}
	out := map[string]RetryState{}
	for k, v := range m {
		if !parts[OwnPartitionOf(k, n)] {
			continue
		}
		if st, ok := decodeRetryState(v); ok {
			out[k] = st
		}
	}
	return out, nil
}

// Reserve takes up to count slots of rule's total_outflow meter (meter.lua), no later than
// ahead from Redis's now: the own engine reserves in bulk, a few calls per second. It
// returns Redis's now, the first slot and how many were reserved (spaced every apart).
func (s Meter) Reserve(ctx context.Context, rule string, every time.Duration, count int, ahead time.Duration) (now, first time.Time, n int, err error) {
	res, err := s.meter(ctx, rule, time.Time{}, every, count, ahead, 0, 0, 0, 0)
	if err != nil {
		return time.Time{}, time.Time{}, 0, fmt.Errorf("queue: reserve total_outflow of rule %q: %w", rule, err)
	}
	return fromUS(res.now), fromUS(res.first), int(res.n), nil
}

// ForgetDue removes keys from rule's due set (the ingress's marks, which the own engine does
// not read): one ZREM per scheduler partition for any number of keys, so the set holds only
// keys with messages, as under the claim engine. The depth counters are left to their clamp.
func (s Ownership) ForgetDue(ctx context.Context, rule string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for p, ks := range s.byPartition(rule, keys) {
		members := make([]any, len(ks))
		for i, k := range ks {
			members[i] = k
		}
		pipe.ZRem(ctx, s.part(rule, p).due, members...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("queue: forget due keys of rule %q: %w", rule, err)
	}
	return nil
}
