package decide

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-io/sluice/internal/httpx"

	"github.com/sluice-io/sluice/internal/rules"
)

// Envoy parity: the knobs of envoyproxy/ratelimit that change answers (SHADOW_MODE,
// QUOTA_MODE, RESPONSE_DYNAMIC_METADATA, LOCAL_CACHE_SIZE_IN_BYTES) and the bounded
// per-value metric of detailed_metric. README "Envoy / Istio" lists what is kept and
// what differs.

// EnvoyConfig holds the envoy parity options of the ingress (Config documents each flag).
// The zero value is envoy's defaults: all off.
type EnvoyConfig struct {
	ShadowMode              bool  // every answer OK overall (statuses unchanged)
	QuotaMode               bool  // every descriptor in quota mode
	ResponseDynamicMetadata bool  // dynamic_metadata in answers
	LocalCacheBytes         int64 // local over-limit cache size; 0 = off
	// DetailedMetricValues bounds the distinct values per rule in
	// sluice_checks_detailed_total. 0 = only "_other". Negative = default (100).
	DetailedMetricValues int
}

// DefaultDetailedMetricValues is the default of -detailed-metric-values.
const DefaultDetailedMetricValues = 100

// detailedOther is the value label of the checks beyond a rule's distinct values.
const detailedOther = "_other"

// maxDetailedValueBytes bounds a value label of sluice_checks_detailed_total; longer
// values are cut (and end in "…").
const maxDetailedValueBytes = 256

// envoyState is what the parity options need at run time.
type envoyState struct {
	cfg      EnvoyConfig
	cache    *overLimitCache // nil when off
	detailed *prometheus.CounterVec

	mu     sync.Mutex
	values map[string]map[string]struct{} // rule → values with a series of their own
}

func newEnvoyState(cfg EnvoyConfig, reg prometheus.Registerer) *envoyState {
	if cfg.DetailedMetricValues < 0 {
		cfg.DetailedMetricValues = DefaultDetailedMetricValues
	}
	e := &envoyState{cfg: cfg, values: map[string]map[string]struct{}{},
		detailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_checks_detailed_total",
			Help: "Descriptors decided under rules with detailed_metric, by rule, descriptor value (key_value pairs joined by '.'; at most -detailed-metric-values per rule, then \"_other\") and code.",
		}, []string{"rule", "value", "code"}),
	}
	if cfg.LocalCacheBytes > 0 {
		e.cache = newOverLimitCache(cfg.LocalCacheBytes)
	}
	if reg != nil {
		reg.MustRegister(e.detailed)
	}
	return e
}

// countDetailed counts one decided descriptor of a detailed_metric rule. A rule has at
// most DetailedMetricValues values of its own (the first seen); later ones share
// "_other", so a descriptor with a value per user cannot blow up the series.
func (e *envoyState) countDetailed(rule string, es []rules.Entry, code string) {
	var b strings.Builder
	for i, en := range es {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(en.Key)
		if en.Value != "" {
			b.WriteByte('_')
			b.WriteString(en.Value)
		}
	}
	v := b.String()
	if len(v) > maxDetailedValueBytes { // a label value stays short: cut on a rune boundary
		cut := maxDetailedValueBytes
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		v = v[:cut] + "…"
	}
	e.mu.Lock()
	seen := e.values[rule]
	if seen == nil {
		seen = map[string]struct{}{}
		e.values[rule] = seen
	}
	if _, ok := seen[v]; !ok {
		if len(seen) >= e.cfg.DetailedMetricValues {
			v = detailedOther
		} else {
			seen[v] = struct{}{}
		}
	}
	e.mu.Unlock()
	e.detailed.WithLabelValues(rule, v, code).Inc()
}

// overLimitCache remembers limiter keys found over a fixed window that counts as envoy
// does (the count only grows until the window ends, so the key stays over): a check of
// such a key is answered OVER_LIMIT without asking the store until the window's end, as
// envoy's freecache-based local cache. Its size is bounded in bytes (each entry costs
// its key plus overLimitEntryBytes); when full, the oldest entries are dropped first.
type overLimitCache struct {
	max int64

	mu    sync.Mutex
	size  int64
	m     map[string]overLimitEntry
	order []string // insertion order, oldest first (may hold keys already replaced)
	head  int
}

type overLimitEntry struct {
	until time.Time // the end of the window the key is over in
	limit int       // which limit of the rule (index into RateLimits)
	ivl   time.Duration
}

// overLimitEntryBytes is what an entry costs beside its key: the map slot, the entry
// and the order slice's string header, rounded up.
const overLimitEntryBytes = 96

func newOverLimitCache(max int64) *overLimitCache {
	return &overLimitCache{max: max, m: map[string]overLimitEntry{}}
}

// get returns the entry of key when it is still over at now.
func (c *overLimitCache) get(key string, now time.Time) (overLimitEntry, bool) {
	return cacheGet(c, key, now)
}

// cacheGet is get for a key held as a string or as bytes (looked up without a copy).
func cacheGet[K string | []byte](c *overLimitCache, key K, now time.Time) (overLimitEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[string(key)]
	if !ok {
		return e, false
	}
	if !now.Before(e.until) {
		delete(c.m, string(key))
		c.size -= int64(len(key)) + overLimitEntryBytes
		return e, false
	}
	return e, true
}

// put records key as over until e.until. An entry larger than the whole cache is not kept.
func (c *overLimitCache) put(key string, e overLimitEntry) {
	cost := int64(len(key)) + overLimitEntryBytes
	if cost > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok {
		c.size += cost
		c.order = append(c.order, key)
	}
	c.m[key] = e
	for c.size > c.max && c.head < len(c.order) {
		old := c.order[c.head]
		c.order[c.head] = ""
		c.head++
		if _, ok := c.m[old]; ok && old != key {
			delete(c.m, old)
			c.size -= int64(len(old)) + overLimitEntryBytes
		}
	}
	if n := len(c.order) - c.head; n > 2*len(c.m)+64 {
		// Slots of keys gone (expired, or put again later) outnumber the live ones:
		// rebuild the order from the last put of each live key.
		seen := make(map[string]bool, len(c.m))
		keep := make([]string, 0, len(c.m))
		for i := len(c.order) - 1; i >= c.head; i-- {
			k := c.order[i]
			if _, live := c.m[k]; live && !seen[k] {
				seen[k] = true
				keep = append(keep, k)
			}
		}
		slices.Reverse(keep)
		c.order, c.head = keep, 0
	}
}

// len is the number of entries (tests).
func (c *overLimitCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// dynamicMetadata builds envoy's RateLimitResponse.dynamic_metadata: the domain, every
// descriptor (entries as "key=value", its limit override and own hits_addend when set),
// the request's hits_addend when not 0, and the metadata of the rules of the descriptors
// that passed, merged (the first value of a key wins; objects merge recursively).
func dynamicMetadata(domain string, reqHits uint64, descs []checkDescriptor, v *checkVerdict) map[string]any {
	ds := make([]any, len(descs))
	for i, d := range descs {
		es := make([]any, len(d.Entries))
		for j, e := range d.Entries {
			es[j] = e.Key + "=" + e.Value
		}
		m := map[string]any{"entries": es}
		if d.LimitText != "" {
			m["limit"] = d.LimitText
		}
		if d.OwnHits {
			m["hitsAddend"] = float64(d.Hits)
		}
		ds[i] = m
	}
	out := map[string]any{"domain": domain, "descriptors": ds}
	if reqHits != 0 {
		out["hitsAddend"] = float64(reqHits)
	}
	merged := map[string]any{}
	for _, st := range v.Statuses {
		if !st.Over && st.Metadata != nil {
			mergeMetadata(merged, st.Metadata)
		}
	}
	if len(merged) > 0 {
		out["metadata"] = merged
	}
	return out
}

func mergeMetadata(dst, src map[string]any) {
	for k, sv := range src {
		dv, ok := dst[k]
		if !ok {
			dst[k] = copyMeta(sv)
			continue
		}
		dm, dok := dv.(map[string]any)
		sm, sok := sv.(map[string]any)
		if dok && sok {
			mergeMetadata(dm, sm)
		}
	}
}

// copyMeta copies the maps of v, so merging never writes into a rule's metadata.
func copyMeta(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, x := range m {
		out[k] = copyMeta(x)
	}
	return out
}

// overrideText renders a descriptor's limit override for dynamic metadata.
func overrideText(requests uint64, unit string, multiplier uint64) string {
	s := "requests_per_unit:" + strconv.FormatUint(requests, 10) + " unit:" + unit
	if multiplier > 1 {
		s += " unit_multiplier:" + strconv.FormatUint(multiplier, 10)
	}
	return s
}

// wholeSeconds rounds d up to whole seconds, as envoy's duration_until_reset (the
// window's length minus the whole seconds elapsed in it).
func wholeSeconds(d time.Duration) time.Duration {
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return d
}

// handleEnvoyJSON serves POST /json as envoyproxy/ratelimit does: a RateLimitRequest in
// protojson (camelCase or snake_case names), answered by the same decision as gRPC, in
// protojson (camelCase, durations "40s"), 429 when OVER_LIMIT. Bad input is a 400 problem
// naming the field; the limiter store unreachable is a 503 (envoy answers 400 to both).
func (s *Service) handleEnvoyJSON(w http.ResponseWriter, r *http.Request) {
	allowed, ok := s.httpCheckCaller(w, r)
	if !ok {
		return
	}
	body, bp, prob := s.readBody(w, r)
	defer s.releaseBody(bp)
	if prob != nil {
		httpx.WriteProblem(w, *prob)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		httpx.WriteProblem(w, httpx.BadRequest("", "not an envoy RateLimitRequest in protojson: "+err.Error()))
		return
	}
	descs, p := rlsDescriptors(&req)
	if p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	if d := checkDomain(allowed, req.GetDomain()); d != nil {
		s.writeCheckDenied(w, r, d)
		return
	}
	v, err := s.decide(r.Context(), transportHTTP, req.GetDomain(), uint64(req.GetHitsAddend()), descs)
	if s.writeDecideError(w, err) {
		return
	}
	out, err := protojson.Marshal(rlsResponse(v))
	if err != nil {
		s.internalError(w, "", err)
		return
	}
	if v.RateLimit != nil {
		httpx.SetRateLimitHeaders(w.Header(), *v.RateLimit)
	}
	w.Header().Set("Content-Type", "application/json")
	if v.Over {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}
