# sluice — make targets. Everything needs only Go (and installs redis-server for tests when it can).
GO        ?= go
PKGS      ?= ./...
TEST_FLAGS ?= -count=1 -timeout 15m
BENCH_OUT ?= bench-results.txt

## The Go toolchain every target builds and tests with, taken from the Go module proxy on
## first use (~76 MB, seconds): go1.26.8's standard library has called vulnerabilities
## (make vulncheck), go1.27.3 has none. go.mod's toolchain line and deploy/Dockerfile's
## GO_VERSION name the same release (deploy/toolchain_test.go), so a plain `go build` (with
## GOTOOLCHAIN=auto) and the image use it too; go.mod's go line still says 1.26, so a Go
## 1.26 with GOTOOLCHAIN=local builds as well. Ship what make builds.
GOTOOLCHAIN ?= go1.27.3
export GOTOOLCHAIN

.PHONY: run test test-quick bench faults soak lint fmt build clean redis chromium promtool vulncheck fuzz

## Vulnerability database: golang.org/x/vulndb at this pseudo-version (the module has no
## tags) ships the OSV entries govulncheck reads, built offline by scripts/vulncheck.sh.
## Bump: VULNDB_VERSION from `go list -m -json golang.org/x/vulndb@latest` (its Version),
## VULN_VERSION from `go list -m -versions golang.org/x/vuln` (the newest); then run
## `make vulncheck` and commit.
VULNDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
VULN_VERSION   ?= v1.9.0

## run: `sluice dev`, the whole system in one process (embedded NATS, in-process store and
## drainer, demo sink, example rules). Its addresses are variables and listen on 127.0.0.1
## only, so a laptop on a shared network does not offer the admin API with the token "dev" to
## its neighbours: `make run HTTP_ADDR=0.0.0.0:8080` (or `:8080`) listens everywhere.
## The example rules reach the demo sink wherever SINK_ADDR puts it. The console at /ui/
## signs in with SLUICE_ADMIN_TOKEN (default "dev" here).
SLUICE_ADMIN_TOKEN ?= dev
HTTP_ADDR ?= 127.0.0.1:8080
GRPC_ADDR ?= 127.0.0.1:8081
NATS_ADDR ?= 127.0.0.1:4222
SINK_ADDR ?= 127.0.0.1:8090
RULES     ?= deploy/examples
DATA      ?= ./data
run:
	$(GO) build -o bin/sluice ./cmd/sluice
	exec ./bin/sluice dev -rules '$(RULES)' -data '$(DATA)' -http '$(HTTP_ADDR)' -grpc '$(GRPC_ADDR)' \
		-nats-addr '$(NATS_ADDR)' -sink-addr '$(SINK_ADDR)' -admin-token '$(SLUICE_ADMIN_TOKEN)'

## build: compile the binaries into ./bin
build:
	$(GO) build -o bin/ ./cmd/...

## test: every test, against private redis-server and embedded NATS servers (and Chromium for
## the console), with the race detector — except ./integration, whose system under test runs as
## separate processes built without it (under -race its harness and embedded NATS cluster only
## take twice as long, and make test must stay under 10 minutes on 2 cores)
INTEGRATION = $(filter %/integration,$(shell $(GO) list $(PKGS)))
UNIT        = $(filter-out %/integration,$(shell $(GO) list $(PKGS)))
test: redis chromium promtool vulncheck
	$(GO) vet $(PKGS)
	$(GO) test -race $(TEST_FLAGS) $(UNIT)
	$(if $(INTEGRATION),$(GO) test $(TEST_FLAGS) $(INTEGRATION))

## vulncheck: govulncheck ./... against the pinned vulndb; fails when the code calls a vulnerable function
vulncheck:
	@VULNDB_VERSION=$(VULNDB_VERSION) VULN_VERSION=$(VULN_VERSION) GO=$(GO) ./scripts/vulncheck.sh $(PKGS)

## test-quick: the same tests without the race detector (about a third faster)
test-quick: redis chromium
	$(GO) test $(TEST_FLAGS) $(PKGS)

## bench: benchmarks and studies, printed as ratios against the named peers
bench: redis
	SLUICE_BENCH=1 $(GO) test -p 1 -run '^$$' -bench . -benchmem -benchtime 2s $(PKGS) | tee $(BENCH_OUT)
	SLUICE_BENCH=1 SLUICE_BENCH_FLOOR=1 $(GO) test -count=1 -p 1 -timeout 30m -run 'Study|Report|TestRedisMemoryPerDeliveredMessage' -v $(PKGS) | grep -v -E '^(=== (PAUSE|CONT)|ok .*no tests to run)' | tee -a $(BENCH_OUT)

## faults: the fast fault suites and the rolling upgrade from the last tag, writing their tables to
## integration/results/faults.md, faults-redis-ha.md, upgrade.md and the own engine's faults-own.md, faults-redis-ha-own.md
faults: redis
	SLUICE_RESULTS=1 SLUICE_UPGRADE=1 $(GO) test -count=1 -run 'TestFaults|TestRedisFailover|TestRollingUpgrade' -v ./integration/

## soak: long-running load and fault runs (minutes), tables in integration/results/
soak: redis
	SLUICE_RESULTS=1 SLUICE_SOAK=1 $(GO) test -count=1 -run 'Soak' -v -timeout 60m $(PKGS)

## fuzz: every fuzz target that parses input, one after another, each for FUZZ_EXECS
## executions (default 1,000,000) on FUZZ_PARALLEL workers (default 1), printing each
## target's executions and seconds (scripts/fuzz.sh; FUZZ_ONLY=regexp runs some;
## FUZZ_MAX_SECONDS caps each target and reports how far it got). Minutes to an hour.
FUZZ_EXECS       ?= 1000000
FUZZ_PARALLEL    ?= 1
FUZZ_MAX_SECONDS ?= 0
## FUZZ_MINIMIZE: executions spent minimizing each new interesting input (default 1000x; Go's
## default of 60 s each stalled the YAML target for minutes).
FUZZ_MINIMIZE    ?= 1000x
fuzz:
	GO=$(GO) FUZZ_EXECS=$(FUZZ_EXECS) FUZZ_PARALLEL=$(FUZZ_PARALLEL) FUZZ_MAX_SECONDS=$(FUZZ_MAX_SECONDS) FUZZ_MINIMIZE=$(FUZZ_MINIMIZE) FUZZ_ONLY='$(FUZZ_ONLY)' ./scripts/fuzz.sh

## lint: gofmt and go vet
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

redis:
	@./scripts/ensure-redis.sh

chromium:
	@./scripts/ensure-chromium.sh

## promtool: Prometheus's promtool for the alert-rule tests (deploy/alerts_test.go)
promtool:
	@./scripts/ensure-promtool.sh

clean:
	rm -rf bin data $(BENCH_OUT) .cache/vulncheck
