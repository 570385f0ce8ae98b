// Package rules loads, validates, matches and reloads sluice's rules files
// (docs/rules.md is the reference for every field).
//
// # Model
//
// A rules file is one or more YAML documents, each a `domain:` plus a tree of
// `descriptors:` exactly in envoyproxy/ratelimit's format, plus sluice's additions
// (a list of rate limits with an algorithm, queue, overflow, park, sink, delivery,
// ordering). A descriptor that carries a rate_limit (including `unlimited: true`) or a
// queue is a Rule; other descriptors only lead to deeper ones. Load and Parse return
// a *Set: the rules, indexed for matching. An envoy config file loads unchanged.
//
// Validation is strict: unknown fields, bad values and impossible combinations are
// errors (a typo must not silently turn a limit off), and every problem is reported,
// up to MaxErrors, as a ValidationError naming file, line and field:
//
//	deploy/examples/orders.yaml:12: descriptors[0].queue.capacity: must be ≥ 1 (got 0)
//
// As in envoy, a domain may be defined only once across all files.
//
// # Matching
//
// Set.Match follows envoy's GetLimit: walk the request's descriptor entries level by
// level (exact key+value, then wildcard value, then key alone) and take the rule at the
// node the whole descriptor reaches. It also returns the Key, the bucket selector built
// from the request values at the levels configured without a value or with a wildcard:
// "" when there is none, the value verbatim when there is one, EncodeKey (length-prefixed)
// when there are several. Set.Check applies envoy's per-request semantics (unlimited,
// replaces) to the several descriptors of a POST /v1/check request.
//
// # Defaults
//
// algorithm fixed_window · burst = requests_per_unit · overflow reject · park.max_age 24h ·
// sink.timeout 10s · delivery max_attempts 8, min_backoff 1s, max_backoff 5m ·
// ordering strict · delivery.spacing gcra · delivery.adaptive (when set) decrease 0.5,
// increase_per_second 0.05 · sink.breaker (when set) failures 10, min_keys 3, within 10s,
// cool_down 5s, max_cool_down 5m · name = domain and path joined by "_", sanitised to [A-Za-z0-9_-].
// envoy's `requests_per_unit: 0` is valid for a rate limit and denies everything.
//
// # Where each part is parsed
//
// load.go reads files and directories (Load, LoadWith, Parse); parse.go turns documents
// into a Set (domains, merging with Options.MergeDomains, names); descriptor.go walks the
// descriptor tree; limit.go reads rate_limit (rates, algorithms, burst, replaces) and
// units.go holds the one table of rate units; timezone.go a fixed window's time_zone;
// queue.go `queue`; behaviour.go overflow, ordering and park; delivery.go sink and
// delivery; metadata.go envoy's metadata; yamlnode.go the YAML readers they share, each
// naming the file, line and field of a problem.
//
// # Zero value and concurrency
//
// A nil or zero *Set is an empty set that matches nothing. A Set is immutable and safe
// for concurrent use. A Watcher holds the current Set in an atomic pointer, polls the
// files and swaps in a new Set when they change, keeping the last good one (and
// counting the failure) when a change does not load.
//
// # Files
//
//   - model.go: the model: Rule, Rate, Queue, Sink, Delivery, Algorithm, Overflow
//   - load.go: Parse, Load, LoadWith: files and directories into a Set
//   - parse.go: the file parser: documents, defaults, building and naming rules
//   - descriptor.go: descriptors and their nesting
//   - limit.go: rate_limit, lists of limits, replaces
//   - queue.go: queue
//   - delivery.go: sink, sign_keys and delivery
//   - steer.go: delivery.window, delivery.spacing, delivery.adaptive and sink.breaker
//   - behaviour.go: overflow, ordering, park, and where sink and delivery may appear
//   - metadata.go: metadata
//   - timezone.go: time_zone
//   - bytesize.go: sizes (1MiB, 512KiB)
//   - units.go: rate units (second … year)
//   - yamlnode.go: typed reads of YAML nodes, each naming file, line and field when it fails
//   - errors.go: ValidationError(s)
//   - validate.go: Rule.Validate: the invariants of every loaded rule, for rules derived in code
//   - match.go: Set and matching a descriptor to its rule
//   - shapes.go: the descriptor shapes of a domain, for the 404 that names them
//   - signkeys.go: a sink's key files
//   - checkconfig.go: CheckConfig: validate files offline (-check-config, sluice check)
//   - watch.go: Watcher: reload on change, keep the last good rules
//   - doc.go: this overview
package rules
