#!/usr/bin/env bash
# Makes sure a promtool binary exists for the alert-rule tests (deploy/alerts_test.go runs
# `promtool check rules` and `promtool test rules` on deploy/prometheus/). Debian ships
# promtool in its prometheus package; the package's service is stopped, the tests never use it.
# Without root or apt it says how to install promtool and exits 0: the Go test then fails
# with the same advice, unless SLUICE_SKIP_PROMTOOL=1 says to skip it.
set -euo pipefail
if [ -n "${SLUICE_PROMTOOL:-}" ] || command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-promtool: promtool missing; installing Debian's prometheus package (it holds promtool)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
  (service prometheus stop || true) >/dev/null 2>&1
  command -v promtool >/dev/null 2>&1 && exit 0
fi
echo "ensure-promtool: promtool not found and not installable here (needs root and apt-get):" \
  "install it with 'sudo apt-get install prometheus' (or 'brew install prometheus')," \
  "or set SLUICE_PROMTOOL=/path/to/promtool; the alert-rule tests fail without it" >&2
exit 0
