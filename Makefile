# NBS — the networking blackboard. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
CLANG ?= clang-19
BIN := bin
BUF := $(GO) tool -modfile=../tools/go.mod buf

.DEFAULT_GOAL := help

# The version stamped into the binaries (nbs-agent --version) and the image's
# tag and labels: the nearest tag and the commit (make image VERSION=v1.2.3).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# The image's timestamps: the commit's time, so a rebuild of one commit
# gives the same image digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
LDFLAGS := -X github.com/nbs-project/nbs/internal/buildinfo.version=$(VERSION)

.PHONY: help
help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# One list of Debian packages (tools/deps/packages.txt) serves every target:
# as root, what is missing is installed; otherwise make stops at once with
# the apt-get command to run.
DEPS := tools/deps/ensure.sh

.PHONY: deps
deps: ## install every Debian package the targets need (tools/deps/packages.txt)
	$(DEPS) all

.PHONY: generate
generate: web-deps ## regenerate committed code: protobuf, bpf2go bindings, docs from the catalogue, the UI's API types
	$(DEPS) generate
	cd proto && $(BUF) lint
	cd proto && $(BUF) generate
	$(GO) generate ./...
	cd web && npm run --silent generate

.PHONY: vmlinux
vmlinux: ## regenerate bpf/include/vmlinux.h from the running kernel's BTF
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/include/vmlinux.h

# The collector embeds web/dist; without npm it still builds, and serves a
# page that says how to build the UI.
HAVE_NPM := $(shell command -v npm 2>/dev/null)

.PHONY: web-deps
web-deps: # npm ci when web/node_modules is missing or older than the lock file
	@command -v npm >/dev/null || { echo "make: npm (Node.js 20) is needed for the UI's build, tests and generated API types" >&2; exit 1; }
	@# npm ci empties node_modules first: through a link (worktrees sharing
	@# one install) that would empty the shared install under everyone.
	cd web && { [ node_modules/.package-lock.json -nt package-lock.json ] || \
	  { [ -L node_modules ] && echo "make: web/node_modules is a link to a shared install older than package-lock.json; not running npm ci through it: update it where it lives" >&2; } || \
	  npm ci --no-audit --no-fund; }

.PHONY: web
web: web-deps ## build the web UI into web/dist (npm ci when node_modules is missing or older than the lock file)
	cd web && npm run build

.PHONY: build
build: $(if $(HAVE_NPM),web) ## build bin/nbs-agent and bin/nbs-collector (and the web UI when npm is present)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/nbs-agent ./agent/cmd/nbs-agent
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/nbs-collector ./collector/cmd/nbs-collector

# No container daemon, no registry: tools/image builds the binaries static
# and writes the image as an OCI layout and a tarball (docs/image.md).
.PHONY: image
image: $(if $(HAVE_NPM),web) ## build the image the Kubernetes manifests run, ghcr.io/nbs-project/nbs:VERSION, into bin/image (OCI layout and nbs.tar)
	cd tools/image && $(GO) run . -repo ../.. -version '$(VERSION)' -created '$(SOURCE_DATE_EPOCH)' -out ../../$(BIN)/image

# go test -json in, go test's own output and the slowest tests out.
TESTTIME := $(BIN)/testtime
TESTTIME_BUILD := $(GO) build -C tools/testtime -o ../../$(TESTTIME) .

# The inner loop. -short makes every test that needs PostgreSQL or the
# namespace lab skip at once (pgcluster.Database, netlab.New), so what runs
# is the unit tests, packages in parallel; make test runs everything.
.PHONY: check
check: web-deps ## the inner loop (under 3 minutes): vet, unit tests (go test -short), web unit tests, generated code fresh
	$(GO) vet ./...
	$(TESTTIME_BUILD)
	set -o pipefail; $(GO) test -short -json ./... | $(TESTTIME) -top 10
	cd web && npm test
	@# Fresh means make generate changes nothing, whatever else is being edited.
	@state() { git diff HEAD --binary | sha256sum; git ls-files -o --exclude-standard | xargs -r sha256sum | sha256sum; }; \
	before=$$(state); $(MAKE) --no-print-directory generate; after=$$(state); \
	[ "$$before" = "$$after" ] || { echo "make check: make generate changed generated code (regenerated now): review it and commit it with its source" >&2; exit 1; }

.PHONY: test
test: ## install what is missing, then run all tests: web unit, Go unit, PostgreSQL, BPF lab, end-to-end, browser
	$(DEPS) test
	@command -v npm >/dev/null || { echo "make test: npm (Node.js 20) is needed for the UI's tests and build" >&2; exit 1; }
	$(MAKE) web
	$(TESTTIME_BUILD)
	@mkdir -p test-artifacts
	@# The runs below are -p 1 (timing) or share 2 cores: build every test
	@# binary first, both cores at once (-exec true runs none of them), and
	@# what the image test builds (static, -trimpath), so the runs start
	@# from the cache.
	$(GO) test -count=1 -run '^$$' -exec true ./... > test-artifacts/prebuild.txt || { cat test-artifacts/prebuild.txt; exit 1; }
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -o /dev/null ./agent/cmd/nbs-agent ./collector/cmd/nbs-collector
	$(GO) build -C tools/image -o /dev/null .
	@# Prometheus 3 (the export tests' OTLP receiver), built from its Go
	@# module once per version into a cache the runs share (minutes the
	@# first time on a machine, nothing after).
	GO=$(GO) tools/prometheus/build.sh >/dev/null
	@# Two phases (tools/gotest.sh): the tests tools/timing-tests.txt lists
	@# (they compare microsecond timings with kernel oracles, or bound a
	@# latency) one package at a time with nothing else running; then the
	@# rest concurrently with go vet, the web unit tests, every fuzz target
	@# for FUZZTIME (2s) and the tools' modules. testtime prints what go test
	@# prints, then the slowest packages and tests; the raw -json stream
	@# stays in test-artifacts/go-test.json.
	GO=$(GO) TESTTIME=$(TESTTIME) FUZZTIME=2s tools/gotest.sh

# make fuzz FUZZTIME=5m runs each target longer; FUZZ_SAVE=1 copies what the
# fuzzer found into testdata/fuzz/<FuzzName>/ to commit.
FUZZTIME ?= 1m
.PHONY: fuzz
fuzz: ## run every Go fuzz target for FUZZTIME each (default 1m; make fuzz FUZZTIME=5m)
	GO=$(GO) FUZZTIME=$(FUZZTIME) tools/fuzz.sh

# Every figure in BENCHMARKS.md, each with its anchor in the same run. The
# machine is noisy: read the ratios each benchmark prints beside its figure.
BENCH_ENV := NBS_REQUIRE_BPF=1 NBS_REQUIRE_PG=1
# The fleets bench/fleet holds, and for how long (issue 18: 10,000 to
# 50,000 nodes for 10 minutes; beyond 8,000 nodes the simulator carries
# several nodes' streams on each connection).
FLEET_NODES ?= 10000,30000,50000
FLEET_DURATION ?= 10m
.PHONY: bench
bench: web ## run every benchmark of BENCHMARKS.md (about three hours; root for the BPF ones)
	$(DEPS) test
	@# The write path, folds and reads in collector/store.
	$(BENCH_ENV) $(GO) test -run '^$$' -bench WriteReports -benchtime 3s ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench 'AdmitNode|CopyDirect' ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench FoldRollups -benchtime 3x ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench 'FoldPending|FoldFullTrees' -benchtime 1x -timeout 60m ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench LatestMerge -benchtime 40x ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench QueueLatest ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench RegisterDefinitions -benchtime 200x ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench 'RegisterNodes|ReportsAfterSweep' -benchtime 20x ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench RegisterFleet -benchtime 1x -timeout 30m ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench 'Counterparts|Tenancy' -benchtime 3s ./collector/store
	$(BENCH_ENV) $(GO) test -run '^$$' -bench AlertEvaluatorReads -benchtime 30x ./collector/alert/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench Gather -benchtime 3x ./collector/export/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 20x -count 5 -benchmem ./collector/export/otlp/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . ./collector/flows/ ./internal/loglinear/
	@# The agent's BPF programs, each beside its floor and its peer.
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x ./bench/latencydrops/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x ./bench/latencytx/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x ./bench/latencyrx/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x ./bench/latencysizes/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x ./bench/latencyecn/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x ./bench/dns/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./bench/evidencecost/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./bench/flows/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . ./agent/source/flows/ ./agent/source/drops/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench Scan -count 3 ./agent/owner/
	@# The agent on a node: throughput on/off, idle, start.
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 90m ./bench/agentcost/
	@# The collector under a fleet, and the simulator's own cost.
	$(BENCH_ENV) NBS_FLEET_NODES=$(FLEET_NODES) NBS_FLEET_DURATION=$(FLEET_DURATION) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 180m ./bench/fleet/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench NodeMemory -benchtime 1x -timeout 40m ./bench/loadgen/
	@# Reads: reports, the API, the flow map, the lifecycle.
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./bench/report/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench CompressedMonth -benchtime 1x -timeout 30m ./bench/lifecycle/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 90m ./bench/api/
	$(BENCH_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./bench/flowmap/
	$(BENCH_ENV) $(GO) test ./web/e2e -run '^$$' -bench FlowMapPage -benchtime 1x -timeout 30m
	$(BENCH_ENV) $(GO) test ./e2e -run '^$$' -bench AlertLatency -benchtime 40x -timeout 30m
	$(BENCH_ENV) $(GO) test -run '^$$' -bench RemoteWriteThroughput -benchtime 1x ./bench/remotewrite/

.PHONY: run
run: ## run the whole system locally: throwaway PostgreSQL, collector, one agent
	$(DEPS) run
	$(MAKE) build
	$(GO) build -o $(BIN)/devrun ./deploy/local/devrun
	@# Run the built binary, not `go run`, which exits 1 after a Ctrl-C
	@# however cleanly devrun stopped everything.
	$(BIN)/devrun

.PHONY: db-stop
db-stop: ## stop the make-run PostgreSQL cluster in .run/pg
	$(GO) run ./deploy/local/devrun --stop-db

.PHONY: lint
lint: ## vet, gofmt and buf lint
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	cd proto && $(BUF) lint
