package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Statistics for operators (the admin API and the console): a queue's hottest keys and
// the refusals of all ingress processes, both read from the scheduler's Redis keys.

// KeyDepth is one key of a queue and the messages waiting in it (the ingress's counter,
// see SetDepth).
type KeyDepth struct {
	Key   string
	Depth int64
}

// HotKeysScan is the most keys HotKeys reads from a queue's depth counters per call.
const HotKeysScan = 10000

// HotKeys returns up to n keys of rule with the most messages waiting, deepest first
// (ties by key). It reads the keys with messages (the due and claimed keys, with ZSCAN) and
// their depth counters, at most HotKeysScan keys over all partitions: complete is false when
// the queue has more keys with messages than that, and the answer is then the deepest of the
// keys read. Cost: O(keys read) in Redis and here, no stream access.
func (s Depths) HotKeys(ctx context.Context, rule string, n int) (keys []KeyDepth, complete bool, err error) {
	_, parts := s.layout(ctx, rule)
	read := 0
	complete = true
	for i := range parts {
		k := s.part(rule, i)
		for _, set := range []string{k.due, k.lease} {
			if read >= HotKeysScan {
				return topKeys(keys, n), false, nil
			}
			var done bool
			keys, read, done, err = s.hotKeys(ctx, rule, k, set, n, keys, read)
			if err != nil {
				return nil, false, err
			}
			complete = complete && done
		}
	}
	return topKeys(keys, n), complete, nil
}

// hotKeys reads the depths of the keys in set (partition k's due or lease), a page of
// ZSCAN and one pipeline of HGETs at a time.
func (s *store) hotKeys(ctx context.Context, rule string, k ruleKeys, set string, n int, keys []KeyDepth, read int) ([]KeyDepth, int, bool, error) {
	var cursor uint64
	for {
		page, next, err := s.rdb.ZScan(ctx, set, cursor, "", 1000).Result()
		if err != nil {
			return nil, read, false, fmt.Errorf("queue: hot keys of rule %q: %w", rule, err)
		}
		cursor = next
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, 0, len(page)/2)
		for i := 0; i+1 < len(page); i += 2 { // member, score
			cmds = append(cmds, pipe.HGet(ctx, k.depthOf(page[i]), page[i]))
		}
		if len(cmds) > 0 {
			_, _ = pipe.Exec(ctx) // each command's error is read below
		}
		for j, c := range cmds {
			d, err := c.Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, read, false, fmt.Errorf("queue: hot keys of rule %q: %w", rule, err)
			}
			if d > 0 {
				keys = append(keys, KeyDepth{Key: page[2*j], Depth: d})
			}
		}
		read += len(cmds)
		if cursor == 0 || read >= HotKeysScan {
			break
		}
		// Keep memory bounded by n while scanning.
		if len(keys) > 4*n+1000 {
			keys = topKeys(keys, n)
		}
	}
	return keys, read, cursor == 0, nil
}

// HotKeys is Depths.HotKeys from the stream's own per-subject counts (Keys: one stream
// info request with the rule's subject filter, paged by the server), for the own engine,
// which keeps no depth counters: the answer is complete, and costs JetStream about a
// second per 100k keys with messages (the listing the own drainers' repair reads too).
func (q *Queues) HotKeys(ctx context.Context, rule string, n int) ([]KeyDepth, error) {
	depths, err := q.Keys(ctx, rule)
	if err != nil {
		return nil, err
	}
	keys := make([]KeyDepth, 0, len(depths))
	for k, d := range depths {
		if d > 0 {
			keys = append(keys, KeyDepth{Key: k, Depth: int64(d)})
		}
	}
	return topKeys(keys, n), nil
}

// topKeys sorts keys deepest first and keeps n. A key read twice (claimed or released
// between the scans of due and lease) is kept once, at its larger depth.
func topKeys(keys []KeyDepth, n int) []KeyDepth {
	slices.SortFunc(keys, func(a, b KeyDepth) int {
		if a.Key != b.Key {
			return strings.Compare(a.Key, b.Key)
		}
		return int(b.Depth - a.Depth)
	})
	keys = slices.CompactFunc(keys, func(a, b KeyDepth) bool { return a.Key == b.Key })
	slices.SortFunc(keys, func(a, b KeyDepth) int {
		if a.Depth != b.Depth {
			return int(b.Depth - a.Depth)
		}
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	if len(keys) > n {
		keys = keys[:n]
	}
	return keys
}

// Refusals (429s, counted by every ingress) and deliveries (counted by every drainer) are
// counted in ten-second buckets: one Redis string per rule, kind and bucket, kept two
// minutes, written by every process once a second and summed by readers — so the admin
// API's rates are the whole cluster's, whichever ingress answers.
const (
	rateBucket = 10 * time.Second
	rateKeep   = 2 * time.Minute
)

func (s *store) countKey(kind, rule string, bucket int64) string {
	return s.prefix + "sl:{" + RuleToken(rule) + "}:" + kind + ":" + strconv.FormatInt(bucket, 10)
}

// AddRefused counts refusals (429s) per rule at now, for RefusedRate.
func (s Rates) AddRefused(ctx context.Context, counts map[string]int64, now time.Time) error {
	return s.addCounts(ctx, "refused", counts, now)
}

// AddDelivered counts deliveries the sinks accepted, per rule at now, for DeliveredRate.
func (s Rates) AddDelivered(ctx context.Context, counts map[string]int64, now time.Time) error {
	return s.addCounts(ctx, "delivered", counts, now)
}

// RefusedRate is rule's refusals per second over the last minute (the six ten-second
// buckets before the current one), counted by every ingress process.
func (s Rates) RefusedRate(ctx context.Context, rule string, now time.Time) (float64, error) {
	return s.rate(ctx, "refused", rule, now)
}

// DeliveredRate is rule's accepted deliveries per second over the last minute, counted by
// every drainer process.
func (s Rates) DeliveredRate(ctx context.Context, rule string, now time.Time) (float64, error) {
	return s.rate(ctx, "delivered", rule, now)
}

func (s *store) addCounts(ctx context.Context, kind string, counts map[string]int64, now time.Time) error {
	if len(counts) == 0 {
		return nil
	}
	b := now.UnixNano() / int64(rateBucket)
	pipe := s.rdb.Pipeline()
	for rule, n := range counts {
		k := s.countKey(kind, rule, b)
		pipe.IncrBy(ctx, k, n)
		pipe.Expire(ctx, k, rateKeep)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("queue: count %s: %w", kind, err)
	}
	return nil
}

func (s *store) rate(ctx context.Context, kind, rule string, now time.Time) (float64, error) {
	b := now.UnixNano() / int64(rateBucket)
	keys := make([]string, 0, 6)
	for i := int64(1); i <= 6; i++ {
		keys = append(keys, s.countKey(kind, rule, b-i))
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return 0, fmt.Errorf("queue: %s of rule %q: %w", kind, rule, err)
	}
	var sum int64
	for _, v := range vals {
		if str, ok := v.(string); ok {
			n, _ := strconv.ParseInt(str, 10, 64)
			sum += n
		}
	}
	return float64(sum) / (6 * rateBucket).Seconds(), nil
}
