# Switchyard: a control plane for distributed LLM inference.
# Run `make help` for the targets.

GO        ?= go
BUF       := $(GO) tool -modfile=tools/go.mod buf
HELM      := $(GO) tool -modfile=tools/go.mod helm
CHART     := deploy/helm/switchyard
BIN       := bin
SERVICES  := $(notdir $(wildcard services/*))
PYTHON    ?= /usr/bin/python3
TESTFLAGS ?=
# Test binaries run at once. Most packages wait on sockets, leases and
# timeouts rather than compute (a -count=1 run on 2 cores averaged 1.15 cores
# busy at go's default of one per core), so a third overlaps that waiting.
# A fourth was measured (make test on a quiet 2-core machine: 312 and 320 s
# at -p 3, 300, 284 and 310 s at -p 4) and is not used yet: the two -p 4
# runs that failed did so on tests that wait for asynchronous state, one of
# them not yet understood.
TESTP     ?= 3
TS_EXAMPLES := examples/node-worker examples/node-client

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build every binary (services and benchmark commands) into bin/.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $$($(GO) list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./...)

.PHONY: generate
generate: ## Regenerate gen/ from proto/ (Go through buf; Python through protoc; TypeScript through npm's protoc-gen-es).
	$(BUF) generate
	@command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null || \
	  { echo "generate: Python stubs need protoc and grpc_python_plugin (apt-get install protobuf-compiler protobuf-compiler-grpc)"; exit 1; }
	$(BUF) generate --template buf.gen.python.yaml
	@test -x tools/ts/node_modules/.bin/protoc-gen-es || npm ci --prefix tools/ts --silent --no-audit --no-fund
	$(BUF) generate --template buf.gen.ts.yaml

.PHONY: check-generate
check-generate: generate ## Regenerate and fail if gen/ differs from what is committed.
	@git add -N gen >/dev/null 2>&1 || true
	@git diff --exit-code --stat -- gen || { echo "check-generate: gen/ is stale; run 'make generate' and commit"; exit 1; }

.PHONY: lint
lint: check-imports ## The import rules (check-imports), gofmt, go vet, staticcheck, buf lint, helm lint (the chart with its defaults and each ci/ values file), tsc of the TypeScript examples.
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(BUF) lint
	$(HELM) lint --strict $(CHART)
	@for f in $(CHART)/ci/*-values.yaml; do echo "helm lint --values $$f"; $(HELM) lint --strict --quiet $(CHART) --values $$f || exit 1; done
	@for d in $(TS_EXAMPLES); do \
	  if [ -x $$d/node_modules/.bin/tsc ]; then echo "tsc $$d"; (cd $$d && node_modules/.bin/tsc --noEmit -p .) || exit 1; \
	  else echo "lint: skipping tsc in $$d (run npm ci there)"; fi; done

.PHONY: check-imports
# The lab (bench/) imports the product; the product never imports the lab:
# nothing under services/ or pkg/, tests included, depends on a package under
# bench/. And pkg/ (tests aside: the clients' Example tests start a control
# plane from services/stack) depends on nothing under services/.
MODULE := github.com/switchyard-llm/switchyard
check-imports: ## Fail if services/ or pkg/ (tests included) import bench/, or pkg/ imports services/; names each import that breaks a rule.
	@list=$$($(GO) list -deps -test -f '{{.ImportPath}}{{range .Imports}}	{{.}}{{end}}' ./services/... ./pkg/...) || exit 1; \
	  out=$$(printf '%s\n' "$$list" | awk -F'\t' 'index($$1, "$(MODULE)/bench/") != 1 { for (i = 2; i <= NF; i++) if (index($$i, "$(MODULE)/bench/") == 1) print "  " $$1 " imports " $$i }' | sort -u); \
	  if [ -n "$$out" ]; then echo "check-imports: the product imports the lab (bench/):"; echo "$$out"; exit 1; fi
	@list=$$($(GO) list -deps -f '{{.ImportPath}}{{range .Imports}}	{{.}}{{end}}' ./pkg/...) || exit 1; \
	  out=$$(printf '%s\n' "$$list" | awk -F'\t' 'index($$1, "$(MODULE)/services/") != 1 { for (i = 2; i <= NF; i++) if (index($$i, "$(MODULE)/services/") == 1) print "  " $$1 " imports " $$i }' | sort -u); \
	  if [ -n "$$out" ]; then echo "check-imports: pkg/ imports services/:"; echo "$$out"; exit 1; fi

# Packages whose tests are simulations in virtual time, one goroutine each:
# the race detector slows them about ninefold (bench/replay: 29 s without it,
# 250 s with it on 2 cores).
SIM_PKGS := ./bench/replay/... ./bench/plannersim/...

.PHONY: test
test: ## Unit and integration tests, the soak and fault tests in their short form, without the race detector (make test-race runs them with it; CI runs both).
	$(GO) test -short -timeout 15m -p $(TESTP) $(TESTFLAGS) ./...

# The race detector costs about twice the wall time of make test on 2 cores
# (the build of every raced test binary alone is about 300 CPU-seconds warm):
# make test leaves it off to stay a quick check, and .ci/run runs this target
# after it, so nothing lands without a raced run.
.PHONY: test-race
test-race: ## make test's tests under the race detector, the virtual-time simulations included.
	$(GO) test -race -short -timeout 20m -p $(TESTP) $(TESTFLAGS) ./...

.PHONY: test-race-sim
test-race-sim: ## Only the virtual-time simulations' tests (short form) under the race detector.
	$(GO) test -race -short -timeout 15m $(TESTFLAGS) $(SIM_PKGS)

.PHONY: test-long
test-long: ## Every test at full length, including the soak and fault tests and the Kubernetes envtest suites.
	assets=$$(hack/envtest-binaries.sh) && \
	KUBEBUILDER_ASSETS=$$assets SWITCHYARD_REQUIRE_ENVTEST=1 $(GO) test -race -timeout 60m $(TESTFLAGS) ./...

.PHONY: images
images: ## One OCI image per service without a Docker engine: bin/images/<service>.tar, for docker load -i.
	$(GO) run ./hack/images -out $(BIN)/images

.PHONY: test-images
test-images: ## The compose test's stand-ins for the official etcd (with etcdctl) and NATS images, from their Go modules at go.mod's versions: bin/images/etcd.tar, bin/images/nats.tar (switchyard-test/<name>:<version>).
	$(GO) run ./hack/images -test-images -out $(BIN)/images

.PHONY: test-partition
test-partition: ## The network partition tests at full length (root: namespaces, veth, nftables).
	$(GO) test -race -count=1 -timeout 30m -v ./deploy/partition

.PHONY: bench
bench: build ## Benchmark functions, then each benchmark command's table.
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 500ms ./... | grep -E '^(Benchmark|ok|FAIL|PASS)' || true
	@for b in $(BIN)/*-bench; do [ -x "$$b" ] || continue; echo "== $$b"; "$$b" || exit 1; done
	@# The replay sweeps the shipped trace above; then the two generated ones.
	@for t in low-reuse sessions; do echo "== $(BIN)/router-replay-bench --trace $$t"; \
	  $(BIN)/router-replay-bench --trace $$t --out $(BIN)/router-replay-$$t || exit 1; done

.PHONY: bench-goals
# GOAL_TRACES: comma list of built-in trace names or Mooncake JSON-lines
# files (.jsonl, .jsonl.gz), for example held-out traces from router-trace-gen.
GOAL_TRACES ?= mooncake,low-reuse,sessions
bench-goals: ## The routing goal table (hit rates vs the pooled bound, goodput vs round-robin and the capacity bound, TTFT vs the floor, replicas) for GOAL_TRACES, with a verdict per goal, then kv against the peers' policies (dynamo, llm-d, sglang) and round-robin; also bin/router-replay-goals.md.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./bench/replay/cmd/router-replay-bench
	$(BIN)/router-replay-bench --goals --trace $(GOAL_TRACES) --goodput-steps 2 --out $(BIN)/router-replay-goals

.PHONY: run
# make run builds only the binaries the stack starts (and the CLI), not the
# benchmarks: PORT, MOCKERS, ROUTER_MODE and KV_EVENTS_MODE choose the
# frontend port, the number of mocker workers, the routing mode and the KV
# event plane (jetstream, core, direct, none; see the README's router section).
# PLANNER=1 runs the planner too, which starts and stops mockers between
# MIN_REPLICAS and MAX_REPLICAS to hold the latency objectives (one mocker
# to begin with). PREFILL=N DECODE=M runs a disaggregated stack instead: N
# prefill and M decode mockers (no aggregated ones unless MOCKERS is given),
# the router pairing them as DISAGGREGATION says (auto, always, off).
PORT        ?= 8000
PLANNER     ?= 0
MIN_REPLICAS ?= 1
MAX_REPLICAS ?= 4
PREFILL     ?= 0
DECODE      ?= 0
DISAGGREGATION ?= auto
MOCKERS     ?= $(if $(filter 1,$(PLANNER)),1,$(if $(filter-out 0,$(PREFILL) $(DECODE)),0,2))
ROUTER_MODE ?= kv
KV_EVENTS_MODE ?= jetstream
RUN_CMDS    := services/registry/cmd/registry services/eventbus/cmd/eventbus services/router/cmd/router \
               services/mocker/cmd/mocker services/frontend/cmd/frontend services/stack/cmd/switchyard-stack services/ctl/cmd/switchyard \
               services/planner/cmd/planner

run: ## Run the whole stack on this machine (make run PORT=8080 MOCKERS=4 ROUTER_MODE=round-robin KV_EVENTS_MODE=direct; PLANNER=1 MIN_REPLICAS=1 MAX_REPLICAS=4 adds the planner; PREFILL=2 DECODE=2 DISAGGREGATION=auto runs it disaggregated): registry, eventbus, router, mockers, frontend.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./,$(RUN_CMDS))
	$(BIN)/switchyard-stack --bin-dir $(BIN) --data-dir .data --http-port $(PORT) --mockers $(MOCKERS) --router-mode $(ROUTER_MODE) --kv-events-mode $(KV_EVENTS_MODE) \
	  --prefill-workers $(PREFILL) --decode-workers $(DECODE) --disaggregation $(DISAGGREGATION) \
	  $(if $(filter 1,$(PLANNER)),--planner --min-replicas $(MIN_REPLICAS) --max-replicas $(MAX_REPLICAS))

.PHONY: clean
clean: ## Remove binaries and local run data.
	rm -rf $(BIN) .data
