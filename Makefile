# agentos-gateway: two commands on a fresh machine, `make run` and `make test`.
# Every prerequisite is installed by the targets below; nothing is expected on the
# machine beyond Go, Node.js/npm (for the install step only) and apt.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ENGINE_DIR   := deps/agentos
ENGINE_STAMP := $(ENGINE_DIR)/node_modules/.installed
WEB_STAMP    := web/node_modules/.installed
SDK_DIR      := sdk/typescript
SDK_STAMP    := $(SDK_DIR)/node_modules/.installed
SDK_DIST     := $(SDK_DIR)/dist/index.js
# The Python SDK runs on Debian's Python and its packages (scripts/ensure-tools.sh),
# not on a python3 that PATH may name first (a pyenv shim).
PY_SDK_DIR   := sdk/python
PYTHON       ?= /usr/bin/python3
MCP_CLIENT_DIR   := mcp/testdata/client
MCP_CLIENT_STAMP := $(MCP_CLIENT_DIR)/node_modules/.installed
GO           ?= go
GOTESTFLAGS  ?=
TEST_TIMEOUT ?= 40m
# The end-to-end tests wait on the engine far more than they compute (the
# suite keeps about one of two cores busy run one at a time), so up to
# TEST_PARALLEL of the tests marked t.Parallel run at once in a package.
TEST_PARALLEL ?= 4

.PHONY: help setup build run test test-short bench soak durability fuzz vet fmt generate tidy-check

help:
	@echo "make run    start the gateway (installs everything through make setup);"
	@echo "            flags go in ARGS, such as make run ARGS=\"--addr 127.0.0.1:9090\""
	@echo "make build  build the gateway binary, bin/agentos-gateway, and the CLI, bin/agentos"
	@echo "make test   run the whole test suite (what .ci/run calls)"
	@echo "make bench  run the benchmarks side by side with the official SDK"
	@echo "make durability  run the durability fault run (hibernations, restarts, kills) against a model"
	@echo "make soak   run the gateway under load for SOAK_MINUTES (10) while killing sidecars"

## setup: install the pinned agentOS engine (sidecar binary + software packages)
## and the web console's front-end packages (its bundle's test rebuilds it),
## build the TypeScript SDK into sdk/typescript/dist, and install the official
## TypeScript MCP client the MCP tests drive the gateway with.
setup: $(ENGINE_STAMP) $(WEB_STAMP) $(SDK_DIST) $(MCP_CLIENT_STAMP)

# The stamp is newer than the lockfile once `npm ci` has installed exactly what
# it pins, so a second `make setup` does nothing.
$(ENGINE_STAMP): $(ENGINE_DIR)/package.json $(ENGINE_DIR)/package-lock.json
	@echo "make setup: installing the pinned agentOS sidecar and software into $(ENGINE_DIR)/node_modules"
	@cd $(ENGINE_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

$(WEB_STAMP): web/package.json web/package-lock.json
	@echo "make setup: installing the web console's pinned packages into web/node_modules"
	@cd web && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

# The TypeScript SDK's build tools (typescript, openapi-typescript), pinned
# by its lockfile; the SDK itself has no runtime dependency.
$(SDK_STAMP): $(SDK_DIR)/package.json $(SDK_DIR)/package-lock.json
	@echo "make setup: installing the TypeScript SDK's pinned build tools into $(SDK_DIR)/node_modules"
	@cd $(SDK_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

# The official TypeScript MCP SDK, pinned by its lockfile, whose client the
# tests of the MCP server run (cmd/agentos/mcp_test.go).
$(MCP_CLIENT_STAMP): $(MCP_CLIENT_DIR)/package.json $(MCP_CLIENT_DIR)/package-lock.json
	@echo "make setup: installing the official TypeScript MCP client into $(MCP_CLIENT_DIR)/node_modules"
	@cd $(MCP_CLIENT_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

# dist/ is built, never committed: it is rebuilt whenever a source changes.
$(SDK_DIST): $(SDK_STAMP) $(SDK_DIR)/tsconfig.json $(wildcard $(SDK_DIR)/src/*.ts)
	@echo "make setup: building the TypeScript SDK into $(SDK_DIR)/dist"
	@cd $(SDK_DIR) && rm -rf dist && npm run --silent build
	@touch $@

# Flags for the gateway, such as ARGS="--addr 127.0.0.1:9090 --log-format console".
ARGS ?=

run: setup
	$(GO) run ./cmd/server $(ARGS)

## build: the gateway binary, bin/agentos-gateway, and the command line,
## bin/agentos. Run the gateway from the checkout (it
## finds the engine under deps/ from its working directory) or point
## AGENTOS_SIDECAR_BIN and AGENTOS_PACKAGES_DIR at an engine installed elsewhere.
build: setup
	$(GO) build -o bin/agentos ./cmd/agentos
	$(GO) build -o bin/agentos-gateway ./cmd/server

# The store's tests run against SQLite and a throwaway PostgreSQL server that
# this target installs (apt) and starts, and always stops, even on failure.
# The console's pure modules (web/src/*.test.mjs) have unit tests of their own
# on Node's built-in runner, run before the Go suite (whose browser test drives
# the whole console).
test: setup tidy-check
	@scripts/ensure-tools.sh
	$(GO) vet ./...
	node --test web/src/*.test.mjs
	cd $(SDK_DIR) && npm run --silent check-schema && npm run --silent check
	cd $(SDK_DIR) && node $$(node -e 'typeof WebSocket === "function" || console.log("--experimental-websocket")') --test test/*.test.mjs
	cd $(PY_SDK_DIR) && PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m mypy --strict --cache-dir=/dev/null agentos_gateway
	cd $(PY_SDK_DIR) && PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -p no:cacheprovider
	@pgdir=""; report="$$(mktemp -t agentos-gateway-test.XXXXXX.json)"; \
	trap 'rm -f "$$report"; [[ -z "$$pgdir" ]] || scripts/postgres-test.sh stop "$$pgdir"' EXIT; \
	if [[ -z "$${AGENTOS_GATEWAY_TEST_POSTGRES:-}" ]]; then \
		pgdir="$$(mktemp -d -t agentos-gateway-pg.XXXXXX)"; \
		AGENTOS_GATEWAY_TEST_POSTGRES="$$(scripts/postgres-test.sh start "$$pgdir")"; \
		export AGENTOS_GATEWAY_TEST_POSTGRES; \
	fi; \
	status=0; $(GO) tool gotestsum --format pkgname-and-test-fails --jsonfile "$$report" -- \
		-race -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) $(GOTESTFLAGS) ./... || status=$$?; \
	echo "make test: the ten slowest tests"; \
	$(GO) tool gotestsum tool slowest --jsonfile "$$report" --num 10; \
	exit $$status

test-short: setup
	$(GO) test -race -short -count=1 ./...

# Go benchmarks and the same operations through the official SDK, in one run,
# reported as ratios.
bench: setup
	bench/run.sh

# The soak (soak, cmd/soak): the real gateway binary under mixed load from 3
# tenants for SOAK_MINUTES minutes, a sidecar SIGKILLed every minute, then
# the report. Fails when a write was lost, a stream hung or anything leaked.
# make test runs its 1-minute version (soak.TestSoak).
SOAK_MINUTES ?= 10
soak: setup
	@bindir="$$(mktemp -d -t agentos-soak-bin.XXXXXX)"; trap 'rm -rf "$$bindir"' EXIT; \
		$(GO) build -o "$$bindir/agentos-gateway" ./cmd/server; \
		$(GO) build -o "$$bindir/soak" ./cmd/soak; \
		SOAK_MINUTES=$(SOAK_MINUTES) "$$bindir/soak" --gateway "$$bindir/agentos-gateway" $(SOAK_FLAGS)

# The durability fault run (durability/): random sequences of writes,
# hibernations, wakes, restarts and kills against the real gateway binary,
# each checked against a model of what was acknowledged; on SQLite, and on
# two nodes sharing a throwaway PostgreSQL server.
durability: setup
	@scripts/ensure-tools.sh
	@pgdir="$$(mktemp -d -t agentos-gateway-pg.XXXXXX)"; \
		trap 'scripts/postgres-test.sh stop "$$pgdir"' EXIT; \
		AGENTOS_GATEWAY_TEST_POSTGRES="$$(scripts/postgres-test.sh start "$$pgdir")"; \
		export AGENTOS_GATEWAY_TEST_POSTGRES; \
		AGENTOS_DURABILITY=1 $(GO) test -count=1 -timeout 120m -v ./durability/

# Every fuzz target of a parser of untrusted bytes, FUZZTIME each (their seed
# corpora also run in make test). Targets are listed by package and name.
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	./agentos/protocol:FuzzUnmarshalFrame ./agentos/protocol:FuzzACP ./agentos/protocol:FuzzFrameReader \
	./agentos:FuzzCommandArgv ./archive:FuzzExtract ./client:FuzzParseContentRange ./client:FuzzSSE \
	./handlers:FuzzDecodeJSON ./handlers:FuzzQueryParams ./handlers:FuzzLastEventID \
	./handlers:FuzzEncodeBytes ./handlers:FuzzRewritePlainError ./sessions:FuzzValidateContent \
	./cluster:FuzzParseForwarded ./schedules:FuzzParse \
	./internal/mockopenai:FuzzDescribe \
	./handlers:FuzzParsePreviewHost \
	./vms:FuzzAllowHostDir ./vms:FuzzMergeLayers \
	./webhook:FuzzVerify ./bindings:FuzzValidate \
	./lineshell:FuzzEditor ./lineshell:FuzzParseState

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg="$${t%%:*}"; name="$${t##*:}"; \
		echo "fuzz $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg" || exit 1; \
	done

generate: $(WEB_STAMP) $(SDK_STAMP)
	$(GO) generate ./...
	cd $(SDK_DIR) && npm run --silent generate

vet:
	$(GO) vet ./...

# The suite fails when go.mod or go.sum is not what `go mod tidy` makes of
# them, or when a file is not gofmt-formatted.
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './deps/*'))"; \
		if [[ -n "$$unformatted" ]]; then echo "not gofmt-formatted: $$unformatted"; exit 1; fi

fmt:
	gofmt -l -w $$(git ls-files '*.go')
