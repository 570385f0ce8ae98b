#!/usr/bin/env bash
# Makes sure a redis-server binary exists for the tests; tests start their own private servers,
# Redis Clusters and Sentinels from it (a sentinel is `redis-server --sentinel`, so Debian's
# separate redis-sentinel package, which only adds a service around the same binary, is not needed).
set -euo pipefail
if [ -n "${SLUICE_REDIS_SERVER:-}" ] || command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-redis: redis-server missing; installing Debian's redis-server package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends redis-server >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends redis-server >/dev/null; }
  # The package may start a system service; the tests never use it.
  (service redis-server stop || true) >/dev/null 2>&1
  command -v redis-server >/dev/null 2>&1 && exit 0
fi
echo "redis-server is required by the tests: install it with 'sudo apt-get install redis-server' (or 'brew install redis'), or set SLUICE_REDIS_SERVER=/path/to/redis-server" >&2
exit 1
