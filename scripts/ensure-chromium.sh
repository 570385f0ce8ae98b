#!/usr/bin/env bash
# Makes sure a Chromium binary exists for the console's browser tests (internal/ingress,
# TestConsoleInBrowser). As root with apt-get it installs Debian's chromium package; otherwise
# it says how, and the browser tests skip with that message (they never skip silently).
set -euo pipefail
if [ -n "${SLUICE_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: chromium missing; installing Debian's chromium package (about a minute)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null; } \
    || true
  command -v chromium >/dev/null 2>&1 && exit 0
fi
echo "ensure-chromium: no chromium: the console's browser tests will be SKIPPED. Install it with 'sudo apt-get install chromium' (or set SLUICE_CHROMIUM=/path/to/chrome)" >&2
exit 0
