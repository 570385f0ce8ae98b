#!/usr/bin/env bash
# Runs every fuzz target that parses input, one after another, each for FUZZ_EXECS
# executions (default 1,000,000) with FUZZ_PARALLEL workers (default 1), and prints each
# target's executions and seconds. A failure stops the run; the crasher is written to the
# package's testdata/fuzz/<target>/ by go test: keep it as a seed with the fix.
# FUZZ_MAX_SECONDS (default 0: none) stops a target that has not reached FUZZ_EXECS by then
# and reports how far it got, marked "stopped" (on a busy machine some targets run at a few
# hundred executions a second).
set -euo pipefail
GO=${GO:-go}
EXECS=${FUZZ_EXECS:-1000000}
PAR=${FUZZ_PARALLEL:-1}
ONLY=${FUZZ_ONLY:-}   # a regexp: run only the targets whose name matches
MAXSEC=${FUZZ_MAX_SECONDS:-0}
# Minimization of each new interesting input, in executions. Go's default (60 s per input)
# stalled FuzzParse for minutes at a time early in a run, its exec count frozen ("0/sec"):
# yaml inputs are found interesting by the hundred in the first seconds. Crashers are
# minimized within the same budget.
MINIMIZE=${FUZZ_MINIMIZE:-1000x}

# package            target                what it parses
TARGETS=(
	"./internal/ingress FuzzSubmitBody       submit body (decode and validate)"
	"./internal/ingress FuzzSplitBatch       batch body (JSON array, NDJSON)"
	"./internal/ingress FuzzSubmitBatch      POST /v1/messages with a domain token: media type, batch, every item's authorization"
	"./internal/ingress FuzzCheckHeaders     a submission's headers"
	"./internal/decide FuzzCheckRequest      POST /v1/check and /json body"
	"./internal/decide FuzzRLSDescriptors    gRPC RateLimitRequest"
	"./internal/rules   FuzzParse            rules file (YAML)"
	"./internal/overrides FuzzParsePatch     admin PATCH body"
	"./queue            FuzzParseID          message id"
	"./queue            FuzzKeyFromToken     key token of a subject"
	"./queue            FuzzKeyToken         key to token and back"
	"./queue            FuzzDecodeMessage    NATS message headers"
	"./queue            FuzzReadPubAck       a publish's answer (PubAck)"
	"./client           FuzzParseRateLimit   RateLimit response headers"
	"./internal/cli     FuzzParseRate        a rate typed to sluice tune"
	"./internal/sink    FuzzParseRetryAfter  a sink's Retry-After"
	"./internal/window  FuzzNextOpen         a delivery window (days, from, to, zone) and an instant"
)

summary=()
for t in "${TARGETS[@]}"; do
	read -r pkg name what <<<"$t"
	if [[ -n $ONLY && ! $name =~ $ONLY ]]; then continue; fi
	echo "== $name ($pkg): $what"
	start=$(date +%s.%N)
	out=$(mktemp)
	# -timeout 0: go test's default 10m would end a long run as a failure.
	cmd=($GO test -timeout 0 -run '^$' -fuzz "^${name}\$" -fuzztime "${EXECS}x" -fuzzminimizetime "$MINIMIZE" -parallel "$PAR" "$pkg")
	note=""
	set +e
	if [[ $MAXSEC != 0 ]]; then
		timeout -s INT "$MAXSEC" "${cmd[@]}" 2>&1 | tee "$out"
		rc=${PIPESTATUS[0]}
	else
		"${cmd[@]}" 2>&1 | tee "$out"
		rc=${PIPESTATUS[0]}
	fi
	set -e
	if [[ $rc == 124 ]] || { [[ $MAXSEC != 0 ]] && [[ $rc != 0 ]] && ! grep -qE '^--- FAIL|^panic|Failing input' "$out"; }; then
		note="stopped at ${MAXSEC}s"
	elif [[ $rc != 0 ]]; then
		echo "FAIL: $name" >&2
		rm -f "$out"
		exit 1
	fi
	wall=$(echo "$(date +%s.%N) - $start" | bc)
	# The last progress line: "fuzz: elapsed: 31s, execs: 100000 (7403/sec), ..."
	line=$(grep -E '^fuzz: elapsed: ' "$out" | tail -1 || true)
	execs=$(sed -E 's/.*execs: ([0-9]+).*/\1/' <<<"$line")
	secs=$(sed -E 's/^fuzz: elapsed: ([0-9hms.]+),.*/\1/' <<<"$line")
	rm -f "$out"
	summary+=("$(printf '%-20s %-20s %10s execs  fuzzing %7s  wall %6.0fs  %s' "$pkg" "$name" "$execs" "$secs" "$wall" "$note")")
done
echo
echo "== fuzz summary (FUZZ_EXECS=$EXECS, -parallel $PAR, FUZZ_MAX_SECONDS=$MAXSEC)"
printf '%s\n' "${summary[@]}"
