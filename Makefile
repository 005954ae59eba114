# kairos-capi: the commands people type. Every target works on a machine with only Go.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

ROOT := $(abspath .)
BIN := $(ROOT)/bin
MODULES := common common/provider bootstrap/api bootstrap controlplane/api controlplane release test

# Go's build cache keys a package's compilation by its folder unless -trimpath is set, so every
# fresh clone (CI's, a second worktree) compiled each package of this tree again (the test
# module's test binaries: 100 s in a fresh clone, 55 s with -trimpath; make verify: 125 s, 94 s).
# With -trimpath the same source hits the cache wherever it is checked out; goreleaser, the
# envtest assets and the historic releases of test/clusterctl build with it too.
export GOFLAGS += -trimpath
# Without cgo, as the released managers are built (.goreleaser.yaml's env): the tests then run the
# code that ships, and goreleaser's snapshot build in the release module's tests finds every
# package in the build cache. With cgo (Go's default where a C compiler is found) the same
# packages had other build IDs and a cold run compiled them all once more for goreleaser
# (TestGoreleaser: 738 s cold, of which 347 s built goreleaser itself).
export CGO_ENABLED := 0

CONTROLLER_GEN_VERSION := v0.21.0
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)

# The unit-test modules build and run their packages side by side (go test's default -p). The
# test module's packages start API servers and etcd members. TEST_ALONE runs with the machine to
# itself: test/lifecycle keeps 2 cores busy with six scenarios side by side (its light packages
# beside it saved nothing: both slowed down by as much). The rest of the module runs
# TEST_PACKAGES_AT_ONCE packages at a time: alone, each keeps the 2 cores only about half busy;
# two at a time left the machine idle for a third of that phase's last seven minutes (1.38 of 2
# cores on average), three at a time keeps it 1.86 busy (824 s -> 689 s by hand, 747 s in a full
# run with other compiles beside it; an envtest start that once timed out at three now has
# minutes: framework.envtestStartTimeout). Fuzzing beside the test module instead of after it
# (nice 19, longer fuzz times) was tried: it took as much from test/lifecycle (+84 s) as it saved. TEST_FIRST, the
# longest of them, are listed first so that go test starts them first (longest first fills the
# slots best). README "Test times" has the measurements.
TEST_ALONE := ./lifecycle
TEST_FIRST := ./clusterctl ./simnode ./cmd/sandbox ./bench/e2e ./bootstrap ./bench/fleet ./controlplane
TEST_PACKAGES_AT_ONCE ?= 3
# TEST_ELSEWHERE run by targets of their own, not by make test: test/vsphere (make test-capv)
# needs root, CAPV's manager built from source (13 minutes cold) and 10 to 20 minutes more (day 2),
# which make test's time budget (issue 32) does not have yet.
TEST_ELSEWHERE := ./vsphere
GO_TEST_FLAGS ?= -count=1
TEST_TIMEOUT ?= 60m

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy, CRDs, RBAC and webhook manifests from markers.
	cd bootstrap/api && $(CONTROLLER_GEN) object paths=./...
	cd bootstrap/api && $(CONTROLLER_GEN) crd paths=./... output:crd:dir=$(ROOT)/bootstrap/config/crd/bases
	cd bootstrap && $(CONTROLLER_GEN) rbac:roleName=manager-role webhook paths=./... \
		output:rbac:dir=$(ROOT)/bootstrap/config/rbac output:webhook:dir=$(ROOT)/bootstrap/config/webhook
	cd controlplane/api && $(CONTROLLER_GEN) object paths=./...
	cd controlplane/api && $(CONTROLLER_GEN) crd paths=./... output:crd:dir=$(ROOT)/controlplane/config/crd/bases
	cd controlplane && $(CONTROLLER_GEN) rbac:roleName=manager-role webhook paths=./... \
		output:rbac:dir=$(ROOT)/controlplane/config/rbac output:webhook:dir=$(ROOT)/controlplane/config/webhook
	cd test/infrastructure && $(CONTROLLER_GEN) object crd paths=./... output:crd:dir=$(ROOT)/test/infrastructure/config/crd/bases

.PHONY: fmt
fmt: ## gofmt every module.
	gofmt -w $$(git ls-files '*.go')

.PHONY: verify
verify: generate ## Generated files up to date, gofmt, the module gates (verify-modules), go vet of every module in the workspace.
	@if [ -n "$$(git status --porcelain -- '*zz_generated*' '*/config/*')" ]; then \
		git status --porcelain -- '*zz_generated*' '*/config/*'; git diff -- '*zz_generated*' '*/config/*' | head -100; \
		echo "generated files are out of date: run 'make generate' and commit the result"; exit 1; fi
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	@./hack/verify-modules.sh $(MODULES)
	@for m in $(MODULES); do echo "go vet ./$$m/... (workspace)"; (cd $$m && go vet ./...) || exit 1; done

.PHONY: verify-modules
verify-modules: ## Module gates: release/modules.yaml matches, tidy, go work sync changes nothing, GOWORK=off vet (compiles every package).
	@./hack/verify-modules.sh $(MODULES)

# Like goreleaser: GOWORK=off, so the binaries get the versions their own go.mod pins (the
# sibling modules come from the tree through the go.mod replace directives).
.PHONY: build
build: ## Build the manager binaries into bin/ (GOWORK=off, as released).
	cd bootstrap && GOWORK=off go build -o $(BIN)/kairos-bootstrap-manager .
	cd controlplane && GOWORK=off go build -o $(BIN)/kairos-controlplane-manager .

##@ Testing

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd from source (cached per version) and print their folder.
	@./hack/envtest-assets.sh

.PHONY: capv-manager
capv-manager: ## Build the vSphere provider's (CAPV) manager from source (cached per CAPV_VERSION, default v1.16.1) and print its path.
	@./hack/capv-manager.sh

# TEST_JSON_DIR, when set, keeps each module's `go test -json` stream there instead of printing
# it (hack/test-times.sh reads them).
TEST_JSON_DIR ?=

# goreleaser (which the release module's tests run) and the envtest assets are built while make
# verify runs, each in its own process group: cold, verify waits minutes for module downloads
# with the 2 cores partly idle. goreleaser's build from source takes about 6 minutes of them;
# the envtest build beside verify made the assets ready 60 s sooner (verify itself 230 s slower:
# the cores are mostly busy). Warm, both scripts only print their cached paths.
# make test runs in a TMPDIR of its own (hack/leave-nothing.sh): a run that passes fails all the
# same when it left a file there or a process running; a failing run keeps the folder and says
# where. test-all is the run itself.
.PHONY: test
test: ## Run every test of every module (make verify first; builds goreleaser and the envtest assets when needed); fails if it leaves a file in TMPDIR or a process running.
	@./hack/leave-nothing.sh $(MAKE) --no-print-directory test-all

.PHONY: test-all
test-all:
	@mkdir -p $(BIN); setsid ./hack/goreleaser.sh >$(BIN)/goreleaser.path 2>$(BIN)/goreleaser.log & gr=$$!; \
	setsid ./hack/envtest-assets.sh >$(BIN)/envtest.path 2>$(BIN)/envtest.log & ea=$$!; \
	trap 'kill -- -'$$gr' -'$$ea' 2>/dev/null || true' EXIT; \
	$(MAKE) --no-print-directory verify; \
	if ! wait $$ea; then cat $(BIN)/envtest.log; echo "hack/envtest-assets.sh failed"; exit 1; fi; \
	export KUBEBUILDER_ASSETS="$$(cat $(BIN)/envtest.path)"; echo "envtest assets: $$KUBEBUILDER_ASSETS"; \
	if ! wait $$gr; then cat $(BIN)/goreleaser.log; echo "hack/goreleaser.sh failed"; exit 1; fi; \
	export GORELEASER="$$(cat $(BIN)/goreleaser.path)"; echo "goreleaser: $$GORELEASER"; \
	for m in $(MODULES); do [ $$m = test ] && continue; echo "== go test ./$$m/..."; \
		(cd $$m && go test $(GO_TEST_FLAGS) -timeout $(TEST_TIMEOUT) ./... $(if $(TEST_JSON_DIR),-json >"$(TEST_JSON_DIR)/$$(echo $$m | tr / -).json")) || exit 1; done
	cd test && echo "== go test $(TEST_ALONE) (alone)" && \
		go test -p 1 $(GO_TEST_FLAGS) -timeout $(TEST_TIMEOUT) $(TEST_ALONE) $(if $(TEST_JSON_DIR),-json >"$(TEST_JSON_DIR)/test-alone.json")
	cd test && rest=$$(go list ./... | grep -v $(foreach p,$(TEST_ALONE) $(TEST_FIRST) $(TEST_ELSEWHERE),-e '/test/$(patsubst ./%,%,$(p))$$')) && \
		echo "== go test ./test/... but $(TEST_ALONE) ($(TEST_PACKAGES_AT_ONCE) at a time, $(TEST_FIRST) first)" && \
		go test -p $(TEST_PACKAGES_AT_ONCE) $(GO_TEST_FLAGS) -timeout $(TEST_TIMEOUT) $(TEST_FIRST) $$rest $(if $(TEST_JSON_DIR),-json >"$(TEST_JSON_DIR)/test.json")
	$(MAKE) --no-print-directory fuzz

.PHONY: test-capv
test-capv: ## The vSphere flavor through CAPV's own manager on vcsim, whose VMs boot as simulated Kairos nodes (test/vsphere; needs root: the test runs in a network namespace of its own). Not in make test.
	export KUBEBUILDER_ASSETS="$$(./hack/envtest-assets.sh)"; ./hack/capv-manager.sh >/dev/null && cd test && go test -count=1 -timeout 60m -v ./vsphere

.PHONY: test-times
test-times: ## make test, timed: wall time, time per package and the slowest tests (COLD=1: empty caches).
	./hack/test-times.sh

# Fuzz targets: package and target, run for FUZZTIME each by make fuzz (and make test). A finding
# is written to the package's testdata/fuzz/ and fails the run; commit it with the fix so that
# it stays a regression seed.
FUZZ_TARGETS := common/merge:FuzzMerge common/token:FuzzParseTokens common/render:FuzzDocument \
	common/internal/kubeconfig:FuzzParse common/pki:FuzzParse
FUZZTIME ?= 15s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 15s) each.
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; echo "== fuzz $$fn ./$$pkg ($(FUZZTIME))"; \
		./hack/fuzz.sh $$pkg $$fn $(FUZZTIME) || exit 1; done

.PHONY: bench
bench: ## Run the benchmarks.
	cd common && go test -run '^$$' -bench . -benchmem ./...

BENCH_N ?= 200

.PHONY: bench-e2e
bench-e2e: ## Kairos bootstrap manager vs CABPK vs the write floor against one API server (BENCH_N=200, BENCH_FLAGS; not in make test).
	export KUBEBUILDER_ASSETS="$$(./hack/envtest-assets.sh)"; cd test && go run ./cmd/bench-e2e -n $(BENCH_N) $(BENCH_FLAGS)

# FLEET_N are the fleet sizes make bench-fleet runs, one after the other; FLEET_FLAGS more flags
# of test/cmd/bench-fleet (-distribution k0s|k3s|mixed, -sync-period, -window, -out, -keep). The
# managers run at their default sync period unless FLEET_FLAGS sets -sync-period (the table says
# which); the window is 1.1 sync periods + 15 s, so at the default (10m) each N takes 12 minutes
# of measuring besides starting its clusters.
FLEET_N ?= 250 500 1000

.PHONY: bench-fleet
bench-fleet: ## Control-plane and bootstrap managers' steady-state cost per single-node cluster, N clusters simulated by test/fleet (FLEET_N="250 500 1000", FLEET_FLAGS; not in make test).
	export KUBEBUILDER_ASSETS="$$(./hack/envtest-assets.sh)"; cd test && go run ./cmd/bench-fleet -n "$(FLEET_N)" $(FLEET_FLAGS)

##@ Running

# SANDBOX_ARGS are the sandbox's flags (-cluster NAME, -workers N). The sandbox is built and
# exec'd, not run with go run: go run exits 1 when it is interrupted, whatever the program it
# ran returned, so Ctrl-C, the documented way to stop the sandbox, ended in a make error. In a
# terminal the sandbox also takes the terminal's foreground for itself (test/cmd/sandbox,
# takeTerminal), so that Ctrl-C does not reach make, which would end by it: status 0.
# IN_PLACE=1 (or true, yes) adds -in-place: Cluster API with its RuntimeSDK and InPlaceUpdates feature gates and
# the Kairos in-place update extension registered (issue 20).
# INFRA=vsphere adds -infra vsphere: the cluster comes from the vSphere flavor, through CAPV's own
# manager (built from source on first use, minutes) on a simulated vCenter (issue 33); as root, in
# a network namespace of the sandbox's own.
SANDBOX_ARGS ?=
IN_PLACE ?=
INFRA ?=

.PHONY: sandbox
sandbox: ## Run Cluster API, both providers and simulated Kairos machines locally, with a demo cluster (Ctrl-C stops it; IN_PLACE=1: in-place updates; RESTORE=1: etcd snapshots and a restore; INFRA=vsphere: through CAPV on vcsim, as root).
	export KUBEBUILDER_ASSETS="$$(./hack/envtest-assets.sh)"; cd test && go build -o $(BIN)/sandbox ./cmd/sandbox && exec $(BIN)/sandbox $(SANDBOX_ARGS) $(if $(filter 1 true yes,$(IN_PLACE)),-in-place) $(if $(filter 1 true yes,$(RESTORE)),-restore) $(if $(INFRA),-infra $(INFRA))

.PHONY: sandbox-restore
sandbox-restore: ## The sandbox on one control-plane node without workers, with etcd snapshots; once ready, its VM is destroyed and the cluster restored (Ctrl-C stops it).
	$(MAKE) --no-print-directory sandbox RESTORE=1 SANDBOX_ARGS="$(SANDBOX_ARGS) -workers 0"

.PHONY: sandbox-in-place
sandbox-in-place: ## The sandbox on one control-plane node without workers, upgraded in place to v1.37.0 once ready (Ctrl-C stops it).
	$(MAKE) --no-print-directory sandbox IN_PLACE=1 SANDBOX_ARGS="$(SANDBOX_ARGS) -workers 0"

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/controller-gen $(CONTROLLER_GEN)

##@ Release

.PHONY: release-repo
release-repo: ## Add a provider release to a clusterctl repository tree: PROVIDER=bootstrap|controlplane VERSION=vX.Y.Z [OUT=out]
	@if [ -z "$(PROVIDER)" ] || [ -z "$(VERSION)" ]; then \
		echo "usage: make release-repo PROVIDER=bootstrap|controlplane VERSION=vX.Y.Z [OUT=out]"; exit 2; fi
	cd release && go run ./cmd/release -provider "$(PROVIDER)" -version "$(VERSION)" -out "$(abspath $(or $(OUT),out))"

.PHONY: goreleaser-check
goreleaser-check: ## Validate .goreleaser.yaml with the pinned goreleaser (built from source and cached on first use).
	"$$(./hack/goreleaser.sh)" check

.PHONY: goreleaser-snapshot
goreleaser-snapshot: ## Build both manager binaries for this platform into dist/ (goreleaser snapshot, no images).
	"$$(./hack/goreleaser.sh)" build --snapshot --clean --single-target

# --skip=ko: in a snapshot, ko loads the images into a local Docker daemon (after pulling the
# base image); see release/goreleaser_test.go.
.PHONY: goreleaser-release-snapshot
goreleaser-release-snapshot: ## The release pipeline of one provider into dist/, publishing nothing: PROVIDER=bootstrap|controlplane
	@if [ "$(PROVIDER)" != bootstrap ] && [ "$(PROVIDER)" != controlplane ]; then \
		echo "usage: make goreleaser-release-snapshot PROVIDER=bootstrap|controlplane"; exit 2; fi
	KAIROS_PROVIDER=$(PROVIDER) "$$(./hack/goreleaser.sh)" release --snapshot --clean --skip=publish --skip=ko
