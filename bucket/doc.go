// Package bucket decides admission limits: may n more hits for a key pass its limits
// now? It implements the five algorithms of the rules file — token bucket, leaky
// bucket (GCRA), fixed window, sliding window log and sliding window counter — over
// two stores that make identical decisions: Memory (this process) and Redis (shared
// by every ingress process, one EVALSHA per decision, or INCRBY and PEXPIRE for envoy's
// counting). Degraded wraps Redis with a
// local fallback for outages.
//
// # Model
//
// A Store's Allow(ctx, key, limits, n, now) evaluates every Limit of one key together
// and returns a Result: one Decision per limit, whether the request passes, and which
// decision should drive the response headers (Result.Index). A denial is a value,
// never an error. Decisions carry what the rate-limit headers need: Limit and Window
// (X-RateLimit-Limit; RateLimit-Policy q= and w=), Remaining (X-RateLimit-Remaining;
// r=), ResetAfter (X-RateLimit-Reset; t=) and RetryAfter (Retry-After; round up to
// whole seconds, at least 1).
//
//   - All-or-nothing: the hits are counted against every limit only when every
//     enforced limit allows them; a denied request consumes nothing anywhere. The one
//     exception is a fixed window with Limit.CountOver (envoy's counting of a
//     hits_addend): it counts the hits whatever the answer, allows them while its count
//     stays within Rate, and reports Remaining 0 once over.
//   - n is the number of hits (envoy's hits_addend, or a weight). n == 0 peeks: it
//     reports the state without counting. A request with n above a limit's capacity
//     can never pass: its RetryAfter is Never.
//   - Shadow mode is per limit (Limit.Shadow, envoy's shadow_mode): the limit is
//     decided and reported (Decision.Allowed false, Result.ShadowDenied true) but
//     never denies. To run a whole deployment in shadow mode, set it on every limit.
//   - Algorithms are pure functions of (state, now) in integer milliseconds
//     (algorithms.go); nothing in this package reads the clock. Tests never sleep.
//
// # Algorithms, and which limits are hard
//
// All five take Rate hits per Interval. Over any span of Δ they admit at most:
//
//	token_bucket            Burst + Rate·Δ/Interval       hard; Burst (default Rate) at once after a quiet period
//	leaky_bucket            Burst + Rate·Δ/Interval       hard; same decisions as token_bucket (GCRA is its
//	                                                      virtual-scheduling form); the state is a water level
//	sliding_window_log      Rate in every window of       hard and exact; costs one timestamp per hit
//	                        length Interval
//	fixed_window            2·Rate within a moment        soft: Rate per aligned window, so Rate at the end of
//	                        around a window edge          one window and Rate at the start of the next pass
//	sliding_window_counter  Rate per aligned window;      soft: the estimate cur + ⌊prev·(1 − elapsed)⌋ assumes
//	                        < 2·Rate in a sliding window  the previous window's hits were spread evenly. It
//	                                                      can wrongly allow (hits bunched at the previous
//	                                                      window's end) or wrongly deny (bunched at its start)
//
// FuzzNeverOverAdmits checks these bounds. TestAccuracyStudy (make bench) measures
// the counter against an exact window on a synthetic 10M-request trace: decisions
// for sources far below their limit are always right; for sources hammering their
// limit about 15% of decisions differ from an exact window. Cloudflare's 0.003% (on
// 400M real requests) reflects traffic that is rarely near its limit.
//
// Windows are aligned to the Unix epoch (a 1-minute window starts on the minute, a
// day at 00:00 UTC), as in envoyproxy/ratelimit. The default algorithm is
// fixed_window, also as in envoy. A fixed window with a Location is aligned to that
// zone's wall clock instead (a day from its midnight, 23 or 25 hours long across a
// daylight-saving change; zone.go); the caller computes the window of now and the
// script counts in it, so the Lua port needs no time zone data.
//
// # Units and bounds
//
// Time is kept in whole milliseconds: Interval must be a whole number of them, and
// events in the same millisecond share it. All arithmetic is exact integer arithmetic
// (the Redis script's doubles are exact below 2^53), so max(Rate, Burst) × Interval
// in ms must stay below 2^53 (e.g. 104 million per day); Limit.Validate says so.
//
// # Zero values, defaults, concurrency
//
// The zero Limit is invalid (Rate and Interval are required). MemoryConfig,
// RedisConfig and DegradedConfig are ready to use as zero values; each field
// documents its default and WithDefaults fills them in. Memory, Redis and Degraded
// are safe for concurrent use by any number of goroutines.
//
// # Memory store
//
// Keys are spread over 128 shards (a map and a mutex each) by a seeded hash. A
// decision on an existing key allocates nothing. Each key remembers when its state
// becomes equivalent to no state (a full bucket, an expired window); such keys are
// dropped by a sweep of their shard that runs at most once per SweepInterval of the
// callers' time, from inside Allow, so memory follows the live keys. The sliding
// window log keeps a ring of at most Rate timestamps per key.
//
// # Redis store
//
// Each decision is one EVALSHA of limits.lua (go-redis falls back to EVAL once when a
// server has not seen it), so it is atomic under any concurrency and across processes.
// The exception is a key whose only limit is a fixed window with CountOver (envoy's
// counting): its count after the call is the whole decision, so it is one INCRBY (atomic)
// and a PEXPIRE of a counter per window, "<key's name below>:c<window>" (countover.go).
// Decisions that overlap in time share a pipeline (RedisConfig.Batch): still one
// EVALSHA each, but one network write and read for the lot, which is what bounds a
// busy ingress. A decision alone goes straight out. A caller whose context ends while
// its decision is queued or in flight gets the context's error; the decision may
// still have been counted, as with any request whose reply is lost.
// Every limit of a key has its own Redis key, all under one hash tag so a decision
// touches one Redis Cluster slot:
//
//	<prefix>{<key>}:<algorithm code><interval in ms>     e.g. sl:{orders/m-42}:tb1000
//
// with codes tb, lb, fw, sl, sc ("@<zone>" follows for a fixed window with a Location,
// e.g. fw86400000@Asia/Seoul; "#i" is appended when two limits of a key share an
// algorithm and interval). The buckets and windows store 24 bytes (three doubles);
// the log is a sorted set of hit times. Every write sets a TTL — the time until the
// state is as good as absent, plus RedisConfig.TTLSlack — so idle keys disappear by
// themselves. A denial writes nothing, except that the log drops hits that have left
// its window.
//
// # Clocks
//
// Callers pass now; the scripts do not read Redis's TIME. That keeps one code path
// for both stores, makes every decision reproducible at a fixed instant (the
// conformance suite runs the same table against both), and lets a replica or a
// test replay decisions. The price is that ingress hosts must keep their clocks in
// sync (NTP; typically within a few ms). With hosts d apart:
//
//   - a host that is ahead refills buckets and rolls windows up to d early, so at most
//     about Rate·d/Interval extra hits pass per key (a few ms against windows of
//     seconds or more is negligible);
//   - a host that is behind never undoes another's progress: a state newer than its
//     now is used as is (no refill, no rolling back a window), which can only deny —
//     except for a lone CountOver fixed window in Redis, whose lagging caller counts in
//     its own (previous) window as envoy's does, so up to d into a new window it may let
//     up to Rate more hits pass (countover.go);
//   - expiry runs on Redis's clock, not the callers'; TTLSlack (default 1s) covers a
//     difference up to that much, so state never expires before the callers think.
//
// # Outages
//
// Degraded decides with the primary store while it answers (each call bounded by
// DegradedConfig.Timeout) and otherwise with a local Memory store whose limits are
// divided by the number of live processes, rounded up: together the processes admit
// about the global limit, at most one hit per process per limit more. A caller whose
// context deadline is nearer than the Timeout gets the primary for what is left of it
// less a reserve; if the primary has not answered by then, that call alone is decided
// locally (the mode does not change: the primary is slow for this caller, not down). It retries the
// primary once per ProbeInterval and reports transitions through OnChange (for a
// metric and a log line) and InDegradedMode.
package bucket
