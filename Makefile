# gpudra — see README.md. `make demo` runs the main job, `make test` the tests.
SHELL := /bin/bash
GO ?= go
OUTPUT ?= $(CURDIR)/_output
BIN := $(OUTPUT)/bin
# go-nvml's cgo bindings warn about NVML functions deprecated in CUDA 13; they are not ours to fix.
export CGO_CFLAGS ?= -O2 -Wno-deprecated-declarations
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(OUTPUT)/tools/golangci-lint
PKGS := ./...
BENCH_PKGS := ./pkg/...

.PHONY: all build test unit e2e lint vet fmt bench demo inspect clean tools k8s-binaries

all: build

build: ## Build the binaries into _output/bin
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ ./cmd/... ./test/cmd/...

test: unit e2e ## The README's test command: vet, unit tests with the race detector, fuzz seeds, e2e on the local cluster

unit:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 $(PKGS)

k8s-binaries: ## etcd + Kubernetes binaries for the local cluster (cached in _output/bin)
	./hack/build-k8s.sh

e2e: build k8s-binaries ## e2e suite against the local cluster (starts it, tears it down; E2E_KEEP_CLUSTER=1 keeps it)
	$(GO) test -tags e2e -race -count=1 -timeout 40m -v ./test/e2e/

bench-cluster: build k8s-binaries ## Pod create->Running with and without a GPU claim on the local cluster
	@mkdir -p $(OUTPUT)/bench
	$(GO) test -tags e2e -run '^$$' -bench PodCreateToRunning -benchtime $${N:-50}x -timeout 40m ./test/e2e/ | tee $(OUTPUT)/bench/cluster.txt

demo: build k8s-binaries ## The README's first command
	./demo/run.sh

fuzz: ## Run every fuzz target briefly (FUZZTIME=10s by default)
	@for t in "FuzzDecode ./api/v1alpha1" "FuzzDecode ./pkg/checkpoint"; do \
	  set -- $$t; echo "== $$1 $$2"; $(GO) test -run '^$$' -fuzz "^$$1$$" -fuzztime $${FUZZTIME:-10s} $$2 || exit 1; done

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

lint: vet $(GOLANGCI_LINT) ## go vet + golangci-lint
	$(GOLANGCI_LINT) run --build-tags e2e $(PKGS)

$(GOLANGCI_LINT):
	@mkdir -p $(dir $@)
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

bench: ## Benchmarks (prepare/unprepare, slice building); numbers go in README
	@mkdir -p $(OUTPUT)/bench
	$(GO) test -run '^$$' -bench . -benchmem -count=$${COUNT:-1} $(BENCH_PKGS) | tee $(OUTPUT)/bench/unit.txt

inspect: ## Show what a simulated DGX H100 node would publish
	$(GO) run ./cmd/gpu-kubelet-plugin inspect --simulate=$${PROFILE:-dgx-h100}

.PHONY: cluster-up cluster-down kubeconfig
cluster-up: ## Start a local cluster (no Docker) with simulated GPU nodes; see test/cluster/cluster.sh
	test/cluster/cluster.sh up

cluster-down: ## Stop the local cluster and remove _output/cluster
	test/cluster/cluster.sh down

kubeconfig: ## Print the local cluster's admin kubeconfig path (use: make -s kubeconfig)
	@test/cluster/cluster.sh kubeconfig

clean:
	rm -rf $(OUTPUT)
