#!/usr/bin/env bash
# Runs govulncheck against a vulnerability database built offline from a pinned
# golang.org/x/vulndb module (its data/osv holds the OSV entries; its cmd/indexdb turns
# them into the database `govulncheck -db file://…` reads). Nothing is fetched but Go
# modules from the module proxy, and the database is built once per pinned version under
# .cache/vulncheck/ in the repository. Fails (exit 3) when the code calls a vulnerable
# function; vulnerabilities in imported but uncalled code are reported, not fatal.
#
# Bump: VULNDB_VERSION is the pseudo-version of `go list -m -json golang.org/x/vulndb@latest`
# (the module has no tags), VULN_VERSION the newest of `go list -m -versions golang.org/x/vuln`.
set -euo pipefail
: "${VULNDB_VERSION:?set by the Makefile}" "${VULN_VERSION:?set by the Makefile}"
GO=${GO:-go}
root=$(pwd)
cache="$root/.cache/vulncheck"
bin="$cache/bin-$VULN_VERSION-$VULNDB_VERSION"
db="$cache/db-$VULNDB_VERSION"
mkdir -p "$bin"
if [ ! -x "$bin/govulncheck" ]; then
  GOBIN="$bin" GOFLAGS=-mod=mod "$GO" install "golang.org/x/vuln/cmd/govulncheck@$VULN_VERSION"
fi
if [ ! -f "$db/index/db.json" ]; then
  [ -x "$bin/indexdb" ] || GOBIN="$bin" GOFLAGS=-mod=mod "$GO" install "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION"
  src=$("$GO" mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src/data/osv" ] || { echo "vulncheck: golang.org/x/vulndb@$VULNDB_VERSION has no data/osv" >&2; exit 1; }
  rm -rf "$db.tmp"
  "$bin/indexdb" -vulns "$src/data/osv" -out "$db.tmp"
  rm -rf "$db" && mv "$db.tmp" "$db"
  echo "vulncheck: database of golang.org/x/vulndb@$VULNDB_VERSION ($(ls "$src/data/osv" | wc -l) entries) in $db" >&2
fi
exec "$bin/govulncheck" -db "file://$db" "${@:-./...}"
