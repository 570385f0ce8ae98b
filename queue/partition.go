package queue

import (
	"context"
	_ "embed"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Partitions: a rule's scheduler state is split into P partitions, each its own Redis hash
// tag, so one busy rule spreads over every master of a Redis Cluster instead of living in
// one slot. A key's partition is FNV-1a (32 bits) of its bytes mod P: stable, cheap, and the
// same in every process that has the same P.
//
// Partition 0 is the rule's historical hash tag ({t}), partition i > 0 is {t.i-j}, j chosen
// so the partitions' slots are evenly spread (partTag; a rule token never contains '.', so
// no two rules' tags collide): with P = 1 the keyspace is exactly the one sluice used before
// partitions, and the rule-wide keys — the total_outflow meter (sl:{t}:total), the
// reconcile lock, idempotency keys, refusal and delivery counts, the partition high-water
// mark — stay in {t}.
//
// While processes disagree on P (a rules reload reaching them at different times, or old
// and new versions side by side), a key can be due in two partitions, each the key's own
// for some drainer, and be delivered from both: see the README.
//
// Every script touches one partition (one slot). A claim call visits all partitions in one
// pipelined round trip (the cluster client splits it per node); a rule with total_outflow
// and P > 1 first reserves slots from its meter (meter.lua) and gives back what was unused.
//
// Changing P of a live rule: sl:{t}:parts records the highest P any process used, and claims
// visit every partition below it, so keys left in a partition that is no longer theirs are
// found. A drainer never delivers such a key: its claim moves it (move.lua, then adopt.lua)
// into the partition its hash now names, where it is claimed again at the same slot. The
// ingress and the reconciler only ever mark keys in their new partition. See the README.

var (
	//go:embed meter.lua
	meterSrc string
	//go:embed move.lua
	moveSrc string
	//go:embed adopt.lua
	adoptSrc string

	meterScript = redis.NewScript(meterSrc)
	moveScript  = redis.NewScript(moveSrc)
	adoptScript = redis.NewScript(adoptSrc)
	//go:embed parts.lua
	partsSrc    string
	partsScript = redis.NewScript(partsSrc)
)

// ClusterPartitions is the partition count of a rule that sets none, on a Redis Cluster: 8
// partitions, their slots 2,048 apart (partTag), put 2 or 3 on each master of a 3-master
// cluster and at least one on each of up to 8 masters with even slot ranges, while a claim
// call costs at most 8 small scripts (each partition's share of the batch, and the releases
// of its keys). On a single Redis (or Sentinel) the default is 1: partitions spread nothing
// there and each costs a script per claim.
const ClusterPartitions = 8

// MaxPartitions bounds a rule's partition count.
const MaxPartitions = 256

// layoutTTL is how long a process trusts the high-water mark it read: another process that
// raised it (a rule reload) is noticed within this time.
const layoutTTL = 5 * time.Second

// DefaultPartitions is the partition count of rules that set none, for a client: 1 on a
// single Redis, ClusterPartitions on a *redis.ClusterClient.
func DefaultPartitions(rdb redis.UniversalClient) int {
	if _, ok := rdb.(*redis.ClusterClient); ok {
		return ClusterPartitions
	}
	return 1
}

// PartitionOf is the partition of key among n: FNV-1a of the key's bytes mod n.
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(fnv32a(key) % uint32(n))
}

func fnv32a(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h
}

// Depth buckets: a partition's depth counters (admit.lua) are spread over
// depthBuckets small hashes, <prefix>sl:{T}:depth:<b>, b the top 14 bits of the key's
// FNV-1a (the partition is the hash modulo P: for a power of two its low bits, and close to
// independent of the top bits for any P). A key's bucket
// does not depend on the partition count, so processes that disagree on it (a rules reload
// on its way) still count a key in one place within a partition.
//
// Why: a hash of up to hash-max-listpack-entries fields (512 by default) of up to
// hash-max-listpack-value bytes (64) is stored as one compact listpack, ~16 B per field for
// short keys, where one big hash costs ~64 B per field (measured on redis-server 7.0 with
// 1M keys). With 16,384 buckets a partition's buckets start turning into ordinary hashes
// (and stay so) from about 7M keys, when some reach 512 entries; a key longer than 64 bytes
// makes its bucket one at once. Such a bucket costs what one big hash did. A bucket costs
// ~90 B of its own, so below ~30k keys per partition, where most buckets hold one or two
// keys, a counter costs ~60–100 B: a few MB at most, which is why the count is fixed rather
// than grown.
//
// The scripts name a bucket from the partition's depth key and the bucket number the caller
// passes with each key (depth .. ':' .. b), so a bucket is not among the script's declared
// KEYS, only in the same hash tag and so the same slot. Redis and Valkey, Cluster included,
// run such scripts; a Redis-compatible server that insists on declared keys (Dragonfly's
// default) does not. The bare <prefix>sl:{T}:depth is the single hash of earlier versions,
// deleted by Reconcile (reconcile.go).
const depthBuckets = 1 << 14

// DepthKey is the Redis hash that holds key's depth counter in rule (field: the key), under
// rule's current partition count: for tools and tests that read the counter.
func (s Depths) DepthKey(rule, key string) string { return s.home(rule, key).depthOf(key) }

// depthBucket is key's depth bucket in [0, depthBuckets).
func depthBucket(key string) int { return int(fnv32a(key) >> 18) }

// depthOf names the hash that holds key's depth counter in partition k.
func (k ruleKeys) depthOf(key string) string { return depthBucketKey(k.depth, depthBucket(key)) }

func depthBucketKey(depth string, b int) string { return depth + ":" + strconv.Itoa(b) }

// partTag is the hash tag of partition i of rule: the rule's token for partition 0, and for
// i > 0 "<token>.<i>-<j>" with the smallest j ≥ 0 whose hash slot falls within slotSpread
// slots after slot(token) + bitrev14(i). The bit-reversed positions spread the first P
// partitions evenly over the 16,384 slots for any P (for P = 8: 2,048 slots apart), and a
// cluster's masters own even slot ranges (as redis-cli --cluster create gives them), so
// every master holds about P/masters partitions — where hashing plain "<token>.<i>" left
// one of 3 masters without any of 8 partitions 12 % of the time. A partition's tag does not
// depend on P: changing P keeps partitions 0 … min(old, new)-1 where they are.
func partTag(rule string, i int) string {
	t := RuleToken(rule)
	if i == 0 {
		return t
	}
	if v, ok := tagCache.Load(t); ok {
		if tags := *v.(*[]string); i < len(tags) {
			return tags[i]
		}
	}
	tags := make([]string, MaxPartitions)
	tags[0] = t
	base := int(keySlot(t))
	for k := 1; k < MaxPartitions; k++ {
		target := (base + int(bitrev14(uint16(k)))) % clusterSlots
		prefix := t + "." + strconv.Itoa(k) + "-"
		for j := 0; ; j++ {
			tag := prefix + strconv.Itoa(j)
			if d := (int(keySlot(tag)) - target + clusterSlots) % clusterSlots; d < slotSpread {
				tags[k] = tag
				break
			}
		}
	}
	tagCache.Store(t, &tags)
	return tags[i]
}

const (
	clusterSlots = 16384
	slotSpread   = 64 // ~256 CRC16s per partition, once per rule and process
)

var tagCache sync.Map // rule token -> *[]string, the tags of its MaxPartitions partitions

func bitrev14(v uint16) uint16 {
	var r uint16
	for b := 0; b < 14; b++ {
		r = r<<1 | v&1
		v >>= 1
	}
	return r
}

// keySlot is the Redis Cluster hash slot of a hash tag: CRC16 (XMODEM) mod 16384.
func keySlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % clusterSlots
}

// part returns the keys of partition i of rule.
func (s *store) part(rule string, i int) ruleKeys {
	b := s.prefix + "sl:{" + partTag(rule, i) + "}:"
	return ruleKeys{b + "due", b + "lease", b + "held", b + "dirty", b + "total", b + "try", b + "depth", b + "idle", b + "fence"}
}

// home returns the keys of key's partition under rule's current partition count.
func (s *store) home(rule, key string) ruleKeys {
	return s.part(rule, PartitionOf(key, s.partitions(rule)))
}

// Partitions is rule's partition count: SchedulerConfig.Partitions, or the default.
func (s *Scheduler) Partitions(rule string) int { return s.partitions(rule) }

func (s *store) partitions(rule string) int {
	p := 0
	if s.parts != nil {
		p = s.parts(rule)
	}
	if p <= 0 {
		p = s.defParts
	}
	return min(p, MaxPartitions)
}

type layout struct {
	p, n int
	at   time.Time
}

// layout returns rule's partition count p and how many partitions hold its state, n ≥ p
// (the high-water mark of every count used): claims, counts and deletes visit n.
func (s *store) layout(ctx context.Context, rule string) (p, n int) {
	p = s.partitions(rule)
	if v, ok := s.layouts.Load(rule); ok {
		if l := v.(layout); l.p == p && time.Since(l.at) < layoutTTL {
			return p, l.n
		}
	}
	hw, err := partsScript.Run(ctx, s.rdb, []string{s.prefix + "sl:{" + RuleToken(rule) + "}:parts"}, p).Int()
	n = max(p, min(hw, MaxPartitions))
	if err != nil {
		n = p // try again next call
		if v, ok := s.layouts.Load(rule); ok {
			n = max(p, v.(layout).n)
		}
		return p, n
	}
	s.layouts.Store(rule, layout{p: p, n: n, at: time.Now()})
	return p, n
}

// call is one script call of a pipelined batch (runAll).
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// runAll runs calls in one pipeline (split per node by a cluster client) with EVALSHA, and
// runs again, one by one with EVAL, those a node did not know the script of (NOSCRIPT: a
// script that did not run changed nothing). Each call's cmd holds its result.
func (s *store) runAll(ctx context.Context, calls []*call) {
	if len(calls) == 1 {
		c := calls[0]
		c.cmd = c.script.Run(ctx, s.rdb, c.keys, c.args...)
		return
	}
	pipe := s.rdb.Pipeline()
	for _, c := range calls {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	pipe.Exec(ctx) // errors are per command
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			c.cmd = c.script.Run(ctx, s.rdb, c.keys, c.args...)
		}
	}
}

// refunds holds, per rule, total_outflow slots of emptied keys not yet given back to the
// meter of a partitioned rule (the next reservation gives them back).
type refunds struct{ m sync.Map }

func (r *refunds) add(rule string, n int64) {
	if n <= 0 {
		return
	}
	v, _ := r.m.LoadOrStore(rule, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
}

func (r *refunds) take(rule string) int64 {
	if v, ok := r.m.Load(rule); ok {
		return v.(*atomic.Int64).Swap(0)
	}
	return 0
}

// reservation is the reply of meter.lua.
type reservation struct{ now, first, n int64 }

// meter runs meter.lua on rule's total_outflow meter (see its header).
func (s *store) meter(ctx context.Context, rule string, now time.Time, every time.Duration, count int, ahead time.Duration, floor, refund, expect, to int64) (reservation, error) {
	a := int64(-1)
	if ahead >= 0 {
		a = ahead.Microseconds()
	}
	res, err := meterScript.Run(ctx, s.rdb, []string{s.part(rule, 0).total},
		usOrZero(now), every.Microseconds(), count, a, floor, refund, expect, to).Int64Slice()
	if err != nil {
		return reservation{}, err
	}
	if len(res) != 3 {
		return reservation{}, errUnexpected(len(res))
	}
	return reservation{res[0], res[1], res[2]}, nil
}

// byPartition groups keys by their partition under rule's current count, in order.
func (s *store) byPartition(rule string, keys []string) map[int][]string {
	p := s.partitions(rule)
	if p == 1 {
		return map[int][]string{0: keys}
	}
	out := make(map[int][]string, p)
	for _, k := range keys {
		i := PartitionOf(k, p)
		out[i] = append(out[i], k)
	}
	return out
}
