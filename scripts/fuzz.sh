#!/usr/bin/env bash
# Runs every fuzz target that parses input, one after another, each for FUZZ_EXECS
# executions (default 1,000,000) with FUZZ_PARALLEL workers (default 1), and prints each
# target's executions and seconds. A failure stops the run; the crasher is written to the
# package's testdata/fuzz/<target>/ by go test: keep it as a seed with the fix.
set -euo pipefail
GO=${GO:-go}
EXECS=${FUZZ_EXECS:-1000000}
PAR=${FUZZ_PARALLEL:-1}
ONLY=${FUZZ_ONLY:-}   # a regexp: run only the targets whose name matches

# package            target                what it parses
TARGETS=(
	"./internal/ingress FuzzDecodeSubmit     submit body (fast decoder vs encoding/json)"
	"./internal/ingress FuzzSkipJSONValue    JSON skipping of the fast decoder"
	"./internal/ingress FuzzSplitBatch       batch body (JSON array, NDJSON)"
	"./internal/ingress FuzzCheckHeaders     a submission's headers"
	"./internal/ingress FuzzCheckRequest     POST /v1/check and /json body"
	"./internal/ingress FuzzRLSDescriptors   gRPC RateLimitRequest"
	"./internal/rules   FuzzParse            rules file (YAML)"
	"./internal/overrides FuzzParsePatch     admin PATCH body"
	"./queue            FuzzParseID          message id"
	"./queue            FuzzKeyFromToken     key token of a subject"
	"./queue            FuzzKeyToken         key to token and back"
	"./queue            FuzzDecodeMessage    NATS message headers"
	"./client           FuzzParseRateLimit   RateLimit response headers"
	"./internal/sink    FuzzParseRetryAfter  a sink's Retry-After"
)

summary=()
for t in "${TARGETS[@]}"; do
	read -r pkg name what <<<"$t"
	if [[ -n $ONLY && ! $name =~ $ONLY ]]; then continue; fi
	echo "== $name ($pkg): $what"
	start=$(date +%s.%N)
	out=$(mktemp)
	if ! $GO test -run '^$' -fuzz "^${name}\$" -fuzztime "${EXECS}x" -parallel "$PAR" "$pkg" 2>&1 | tee "$out"; then
		echo "FAIL: $name" >&2
		rm -f "$out"
		exit 1
	fi
	wall=$(echo "$(date +%s.%N) - $start" | bc)
	# The last progress line: "fuzz: elapsed: 31s, execs: 100000 (7403/sec), ..."
	line=$(grep -E '^fuzz: elapsed: ' "$out" | tail -1)
	execs=$(sed -E 's/.*execs: ([0-9]+).*/\1/' <<<"$line")
	secs=$(sed -E 's/^fuzz: elapsed: ([0-9hms.]+),.*/\1/' <<<"$line")
	rm -f "$out"
	summary+=("$(printf '%-20s %-20s %10s execs  fuzzing %6s  wall %6.0fs' "$pkg" "$name" "$execs" "$secs" "$wall")")
done
echo
echo "== fuzz summary (FUZZ_EXECS=$EXECS, -parallel $PAR)"
printf '%s\n' "${summary[@]}"
