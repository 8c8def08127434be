# gpudra — see README.md. `make demo` runs the main job, `make test` the tests.
SHELL := /bin/bash
GO ?= go
OUTPUT ?= $(CURDIR)/_output
BIN := $(OUTPUT)/bin
# go-nvml's cgo bindings warn about NVML functions deprecated in CUDA 13; they are not ours to fix.
export CGO_CFLAGS ?= -O2 -Wno-deprecated-declarations
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(OUTPUT)/tools/golangci-lint
# Helm v3 from the Go module proxy; the -X flags are those of Helm's own release
# build (version, and the Kubernetes version of its client-go, which helm
# template/lint assume when no cluster is asked; the chart needs >= 1.34).
HELM_VERSION ?= v3.22.0
HELM_K8S_MINOR ?= 37
HELM := $(OUTPUT)/tools/helm
CHART := deployments/helm/gpudra
PKGS := ./...
BENCH_PKGS := ./internal/...


# (workload-root is a file target's alias, see below)
.PHONY: workload-root all bench bench-cluster bench-computedomain bench-docs bench-drasock bench-report bench-scale build busybox-static check-dockerfile clean cluster-down cluster-status cluster-up containerd crio demo doclinks e2e e2e-deps fake-driver-root fmt fuzz generate gpu-verify helm-lint help image images images-failpoints inspect k8s-binaries kubeconfig lint notebooks policy-versions prereqs-build prereqs-cluster prereqs-lint shellcheck sim-fm-lib sim-nvml-lib test test-faults tracked-files unit verify-generate vet

all: build

help: ## List the targets with what they do
	@grep -hE '^[a-zA-Z0-9_.-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([^:]+):.*## (.*)/  \1\t\2/' | expand -t 24

# How the shipped binaries are built (the Dockerfile uses the same flags), so
# that benchmarks measure what ships. grpcnotrace leaves gRPC's request
# tracing (golang.org/x/net/trace, never enabled) out of the plugin: its
# html/template calls methods by name through reflection, which makes the
# linker keep every exported method of every type (the plugin's code and
# read-only data: 57 MB with it, 36 MB without; idle RSS 10 MiB less). -s -w
# drop the symbol table and DWARF (not loaded at run time, so no memory;
# perf and go tool nm need them).
SHIP_BUILD_FLAGS ?= -tags grpcnotrace -ldflags "-s -w"

# Host packages beyond Go (hack/prereqs.txt): checked first, in milliseconds
# when all are there; hack/prereqs.sh installs the missing ones with apt-get.
PREREQS := ./hack/prereqs.sh
prereqs-build: ## Check Go, gcc and libc6-dev (cgo); install what is missing
	@$(PREREQS) build
prereqs-lint: ## Check shellcheck; install it when missing
	@$(PREREQS) lint
# One call for both groups, so that a fresh machine gets one apt-get install.
prereqs-cluster: ## Check (as root) what the local cluster needs: runc, CNI plugins, iptables, ...; install what is missing
	@$(PREREQS) build cluster

build: prereqs-build sim-nvml-lib sim-fm-lib ## Build the binaries into _output/bin
	@mkdir -p $(BIN)
	$(GO) build -trimpath $(SHIP_BUILD_FLAGS) -o $(BIN)/ ./cmd/...
	$(GO) build -trimpath -o $(BIN)/ ./test/cmd/...

# The simulated libnvidia-ml of fake driver roots (test/nvmlsim; test-only, never shipped).
sim-nvml-lib: prereqs-build ## Build the simulated NVML library into _output/lib
	@mkdir -p $(OUTPUT)/lib
	$(GO) build -buildmode=c-shared -trimpath -ldflags "-s -w -extldflags -Wl,-soname,libnvidia-ml.so.1" -o $(OUTPUT)/lib/libnvidia-ml-sim.so ./test/nvmlsim/lib
	@rm -f $(OUTPUT)/lib/libnvidia-ml-sim.h

# The simulated libnvfm (NVSwitch Fabric Manager's client library) of fake driver roots (test/fmsim; test-only, never shipped).
sim-fm-lib: prereqs-build ## Build the simulated Fabric Manager library into _output/lib
	@mkdir -p $(OUTPUT)/lib
	$(GO) build -buildmode=c-shared -trimpath -ldflags "-s -w -extldflags -Wl,-soname,libnvfm.so.1" -o $(OUTPUT)/lib/libnvfm-sim.so ./test/fmsim/lib
	@rm -f $(OUTPUT)/lib/libnvfm-sim.h

unit: vet ## Unit tests with the race detector (go vet first), demo/lib_test.sh
	$(GO) test -race -count=1 $(PKGS)
	$(GO) test -race -count=1 -tags failpoints ./internal/plugin/failpoint/ ./internal/plugin/prepare/
	bash demo/lib_test.sh

k8s-binaries: ## etcd + Kubernetes binaries for the local cluster (cached in _output/bin)
	./hack/build-k8s.sh

# prereqs-cluster first: a fresh machine learns what it lacks before the long builds.
E2E_DEPS := prereqs-cluster build k8s-binaries containerd crio images $(HELM)
# The suite's output, then each failed test's output again, the earliest last: CI shows only the tail.
FAILED_TESTS = $(GO) run ./test/cmd/gpudra-failed-tests
e2e: $(E2E_DEPS) ## e2e suite on the local containerd cluster with the chart-installed driver (E2E_KEEP_CLUSTER=1 keeps it)
	set -o pipefail; $(GO) test -tags e2e -race -count=1 -timeout 40m -v ./test/e2e/ 2>&1 | $(FAILED_TESTS)

# The e2e suite's builds with its test binary compiled beside them, then the suite with the unit tests
# beside it at nice 10 (hack/test.sh says why).
test: prereqs-build prereqs-cluster ## The README's test command: vet, unit tests (race detector), the e2e suite on the containerd cluster with the chart-installed driver
	MAKE="$(MAKE)" GO="$(GO)" ./hack/test.sh

e2e-deps: $(E2E_DEPS) ## What the e2e suite needs built (make test builds it first)

# The chart's admission policies and RBAC on the oldest API servers gpudra supports (1.34, 1.35),
# where the policies are the plugin's only confinement: each suite run has etcd and that kube-apiserver only.
POLICY_VERSIONS ?= 1.34 1.35
POLICY_TESTS = ^(TestHelmPluginAdmissionPolicy|TestHelmControllerAdmissionPolicy)$$
policy-versions: k8s-binaries $(HELM) ## Chart policies and RBAC evaluated by kube-apiservers 1.34 and 1.35 (built once: 25-42 min each cold on 2 cores)
	for v in $(POLICY_VERSIONS); do MODULE=hack/apiserver-$$v TARGETS=kube-apiserver ./hack/build-k8s.sh || exit 1; done
	set -e; for v in $(POLICY_VERSIONS); do \
	  bin=$$(ls $(OUTPUT)/bin/kube-apiserver-v$$v.* | head -1); echo "== policies on $$(basename $$bin)"; \
	  E2E_APISERVER_ONLY=$$bin $(GO) test -tags e2e -count=1 -timeout 10m -v -run '$(POLICY_TESTS)' ./test/e2e/; done

bench-cluster: $(E2E_DEPS) ## Pod create->Running with and without a GPU claim on the local cluster
	@mkdir -p $(OUTPUT)/bench
	$(GO) test -tags e2e -run '^$$' -bench PodCreateToRunning -benchtime $${N:-50}x -timeout 40m ./test/e2e/ | tee $(OUTPUT)/bench/cluster.txt

bench-scale: $(E2E_DEPS) ## Scheduler allocation over 120 simulated GPU nodes, 800 claims (in-process; then the containerd cluster's scheduler, 120 Node objects with slices; SCALE_SHAPES=. adds dynamic MIG)
	@mkdir -p $(OUTPUT)/bench
	$(GO) test -run '^$$' -bench SchedulerAllocation -benchtime 1x ./internal/plugin/slice/ | tee $(OUTPUT)/bench/scale.txt
	$(GO) test -tags e2e -run '^$$' -bench "SchedulerScale/$${SCALE_SHAPES:-whole-gpus}" -benchtime 1x -timeout 40m ./test/e2e/ | tee -a $(OUTPUT)/bench/scale.txt

bench-computedomain: $(E2E_DEPS) ## ComputeDomain create -> all pods Running and status write conflicts against domain size, on simulated GB200 NVL72 trays (CD_NODES=4, one pod per tray)
	@mkdir -p $(OUTPUT)/bench
	$(GO) test -tags e2e -run '^$$' -bench ComputeDomain -benchtime 1x -timeout 40m ./test/e2e/ | tee $(OUTPUT)/bench/computedomain.txt

bench-drasock: $(E2E_DEPS) ## NodePrepare/NodeUnprepare over a plugin's dra.sock with the kubelet's gRPC API (a plugin process of its own against the containerd cluster's control plane)
	@mkdir -p $(OUTPUT)/bench
	$(GO) test -tags e2e -run '^$$' -bench DRASock -benchtime $${N:-1000}x -timeout 40m ./test/e2e/ | tee $(OUTPUT)/bench/drasock.txt

test-faults: $(E2E_DEPS) images-failpoints ## Fault injection on the containerd cluster: the plugin pod killed at each failpoint under pod churn, kill -9 in a rollback past the kubelet's deadline, corrupt checkpoint, API outage, rolling update
	set -o pipefail; $(GO) test -tags e2e,faults -count=1 -timeout 40m -run '^TestFaults$$' -v ./test/e2e/ 2>&1 | $(FAILED_TESTS)

bench-report: $(E2E_DEPS) ## All benchmarks on the local cluster -> _output/bench/report.md + report.json + performance.md
	test/bench/run.sh

bench-docs: ## Copy the last bench-report's generated page to docs/performance.md (run make bench-report first)
	@test -f $(OUTPUT)/bench/performance.md || { echo "no $(OUTPUT)/bench/performance.md: run make bench-report first" >&2; exit 1; }
	cp $(OUTPUT)/bench/performance.md docs/performance.md

demo: $(E2E_DEPS) ## The README's first command
	./demo/run.sh

notebooks: $(E2E_DEPS) ## Run demo/notebooks/*.ipynb on the local cluster and save their outputs
	NOTEBOOKS_UPDATE=1 $(GO) test -tags e2e -count=1 -timeout 20m -run '^TestNotebook' -v ./test/e2e/

# -fuzzminimizetime 200x: minimizing each new interesting input for the
# default 60 s would take a short run's whole time (the webhook's JSON
# inputs find many); failing inputs are still minimized, more briefly.
# FUZZTIME is a count of inputs, not a duration: with a duration, Go 1.26's
# fuzz coordinator can report its own deadline as a failure of the target
# ("context deadline exceeded", no input written; golang/go#75804, fixed in
# Go 1.27), and a count also lets the seed corpus finish on a busy machine.
fuzz: ## Run every fuzz target briefly (FUZZTIME=2000x inputs each by default)
	@for t in "FuzzDecode ./api/v1alpha1" "FuzzDecodeComputeDomain ./api/v1alpha1" "FuzzDecode ./internal/plugin/checkpoint" \
	  "FuzzDecodeNVIDIA ./internal/shared/compat" "FuzzDecodeComputeDomainNVIDIA ./internal/shared/compat" "FuzzHandler ./internal/controller/webhook" \
	  "FuzzResolve ./internal/plugin/claimconfig" "FuzzSpec ./internal/plugin/cdi"; do \
	  set -- $$t; echo "== $$1 $$2"; \
	  $(GO) test -run '^$$' -fuzz "^$$1$$" -fuzztime $${FUZZTIME:-2000x} -fuzzminimizetime 200x $$2 || exit 1; done

vet: prereqs-build ## go vet of every package, with every build tag (once: lint and test share it)
	$(GO) vet -tags e2e,failpoints,faults $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

lint: prereqs-lint tracked-files vet verify-generate $(GOLANGCI_LINT) helm-lint shellcheck doclinks ## Git tracks only source, go vet, generated code current, golangci-lint, helm lint, shellcheck, Markdown links
	$(GOLANGCI_LINT) run --allow-serial-runners --build-tags e2e,failpoints,faults $(PKGS)

tracked-files: ## Fail on a tracked binary or a file over 300 KiB that hack/large-files.txt does not list with its reason
	$(GO) run ./test/cmd/gpudra-tracked-files

doclinks: ## Every relative link (and #anchor) in README.md, docs/ and the other *.md files resolves
	$(GO) run ./test/cmd/gpudra-doclinks .

# Generated code: api/v1alpha1/zz_generated.deepcopy.go, by deepcopy-gen of
# k8s.io/code-generator pinned in the //go:generate line of api/v1alpha1/doc.go.
generate: ## Regenerate the generated code (go generate ./api/...)
	$(GO) generate ./api/...

VERIFY_GENERATE := $(OUTPUT)/verify-generate
verify-generate: ## Fail when generated code is stale: regenerate into a copy under _output and diff
	@rm -rf $(VERIFY_GENERATE) && mkdir -p $(VERIFY_GENERATE)
	@cp -R api/v1alpha1 $(VERIFY_GENERATE)/ && rm -f $(VERIFY_GENERATE)/v1alpha1/zz_generated.deepcopy.go
	@cd $(VERIFY_GENERATE)/v1alpha1 && $(GO) generate .
	@diff -u api/v1alpha1/zz_generated.deepcopy.go $(VERIFY_GENERATE)/v1alpha1/zz_generated.deepcopy.go || \
	  { echo "api/v1alpha1/zz_generated.deepcopy.go is stale or edited by hand: run make generate and commit the result" >&2; exit 1; }
	@rm -rf $(VERIFY_GENERATE)

SHELL_SCRIPTS = $(shell git ls-files '*.sh' .ci/run)
shellcheck: prereqs-lint ## shellcheck of every shell script in the repository
	shellcheck -x $(SHELL_SCRIPTS)

$(GOLANGCI_LINT):
	@mkdir -p $(dir $@)
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

bench: prereqs-build ## In-process benchmarks (prepare/unprepare, slice building); the figures of record come from make bench-report
	@mkdir -p $(OUTPUT)/bench
	$(GO) test -run '^$$' -bench . -benchmem -count=$${COUNT:-1} $(BENCH_PKGS) | tee $(OUTPUT)/bench/unit.txt

inspect: build ## Show what a simulated node would publish (PROFILE=dgx-h100), through the real NVML path on a fake driver root
	@$(BIN)/gpudra-fake-driver-root --dir=$(OUTPUT)/inspect/$${PROFILE:-dgx-h100} --profile=$${PROFILE:-dgx-h100} --node=localhost \
	  --nvml-library=$(OUTPUT)/lib/libnvidia-ml-sim.so
	$(BIN)/gpu-kubelet-plugin inspect --nvidia-driver-root=$(OUTPUT)/inspect/$${PROFILE:-dgx-h100}

# Fake NVIDIA driver root of a simulated node (test/fakedriver/README.md). Creates device
# nodes, so it runs as root; re-running refreshes the root and keeps its var/lib/gpudra-sim.
fake-driver-root: build ## Fake driver root for a simulated node: make fake-driver-root DIR=<dir> PROFILE=<profile> NODE=<node> [PROFILE_DIR=<dir>]
	@test -n "$(DIR)" -a -n "$(PROFILE)" -a -n "$(NODE)" || \
	  { echo "usage: make fake-driver-root DIR=<dir> PROFILE=<profile> NODE=<node> [PROFILE_DIR=<dir>]" >&2; exit 2; }
	$(BIN)/gpudra-fake-driver-root --dir="$(DIR)" --profile="$(PROFILE)" --node="$(NODE)" \
	  $(if $(PROFILE_DIR),--profile-dir="$(PROFILE_DIR)") --nvml-library=$(OUTPUT)/lib/libnvidia-ml-sim.so \
	  --fm-library=$(OUTPUT)/lib/libnvfm-sim.so

# The local cluster (test/localcluster): real control plane, per simulated GPU node a containerd
# and a kubelet, the driver installed with `helm install` of the chart. gpudra-cluster is its CLI.
CLUSTER := $(BIN)/gpudra-cluster
cluster-up: $(E2E_DEPS) ## Start the local cluster with simulated GPU nodes and the driver installed by its Helm chart
	$(CLUSTER) up

cluster-down: ## Stop the local cluster and remove _output/localcluster
	@if [ -x $(CLUSTER) ]; then $(CLUSTER) down; fi

cluster-status: ## Which components of the local cluster run
	$(CLUSTER) status

kubeconfig: ## Print the local cluster's admin kubeconfig path (use: make -s kubeconfig)
	@$(CLUSTER) kubeconfig

containerd: ## containerd, its runc shim and ctr for the local cluster's nodes (pinned in hack/containerd, cached in _output/bin)
	./hack/build-containerd.sh

crio: prereqs-cluster ## CRI-O (crio, pinns) and gpudra-crio-import for the local cluster's CRI-O nodes (pinned in hack/crio, cached in _output/bin)
	./hack/build-crio.sh

clean:
	rm -rf $(OUTPUT)

$(HELM):
	@mkdir -p $(dir $@)
	GOBIN=$(dir $@) CGO_ENABLED=0 $(GO) install -ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	  $(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(HELM_K8S_MINOR))" \
	  helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

helm-lint: $(HELM) ## helm lint of the chart: defaults, each values-*.yaml, the other certificate modes
	$(HELM) lint --strict --quiet $(CHART)
	@set -e; for v in $(CHART)/values-*.yaml; do echo "$(HELM) lint --strict --quiet $(CHART) --values $$v"; \
	  $(HELM) lint --strict --quiet $(CHART) --values $$v; done
	$(HELM) lint --strict --quiet $(CHART) --set controller.certMode=certManager
	$(HELM) lint --strict --quiet $(CHART) --set controller.certMode=secret,controller.certSecretName=tls
	$(HELM) lint --strict --quiet $(CHART) --set controller.enabled=false
	$(HELM) lint --strict --quiet $(CHART) --set compatibility=nvidia
	$(HELM) lint --strict --quiet $(CHART) --set compatibility=nvidia,kubeletPlugin.passthrough=true,controller.enabled=false
	$(HELM) lint --strict --quiet $(CHART) --set monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true,monitoring.grafanaDashboard.enabled=true
	$(HELM) lint --strict --quiet $(CHART) --set kubeletPlugin.metrics.authentication=true,monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true
	$(HELM) lint --strict --quiet $(CHART) --set 'kubeletPlugin.nodeGroups[0].name=shares,kubeletPlugin.nodeGroups[0].nodeSelector.gpudra\.io/plugin-profile=shares,kubeletPlugin.nodeGroups[0].mig=static,kubeletPlugin.nodeGroups[0].extraArgs={--gpu-sharing=consumable}'

IMAGE ?= ghcr.io/gpudra/gpudra
TAG ?= dev
image: ## Container image with both binaries (needs a Docker engine): IMAGE=... TAG=...
	docker build -t $(IMAGE):$(TAG) .

check-dockerfile: ## Run the Dockerfile's build-stage RUN commands as plain shell in a copy of the repository
	hack/check-dockerfile.sh

# Images for a local cluster whose nodes run containerd (test/images): OCI image
# layout tarballs for `ctr -n k8s.io images import`, made without Docker or a
# registry. Their binaries go to _output/images/bin: gpu-kubelet-plugin and
# gpu-controller built as the Dockerfile builds them (gpudra-images refuses
# others), the pause program and gpudra-gpus static.
IMAGES_DIR := $(OUTPUT)/images
IMAGE_BIN := $(IMAGES_DIR)/bin
BUSYBOX_ROOT := $(OUTPUT)/busybox-static
images: prereqs-build busybox-static workload-root ## pause, workload (also one with NVIDIA_VISIBLE_DEVICES=all, as CUDA images set it) and gpudra (ghcr.io/gpudra/gpudra:dev) images as OCI tarballs in _output/images, no Docker
	@mkdir -p $(IMAGE_BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(IMAGE_BIN)/ ./test/cmd/gpudra-pause ./test/cmd/gpudra-gpus
	CGO_ENABLED=1 $(GO) build -trimpath $(SHIP_BUILD_FLAGS) -o $(IMAGE_BIN)/ ./cmd/gpu-kubelet-plugin ./cmd/gpu-controller
	hack/build-cdi-hook.sh $(IMAGE_BIN)
	$(GO) run ./test/cmd/gpudra-images build --out $(IMAGES_DIR) --bin-dir $(IMAGE_BIN) --busybox-root $(BUSYBOX_ROOT) --debian-root $(WORKLOAD_ROOT)

# The fault suite's image: ghcr.io/gpudra/gpudra:failpoints, the gpudra image
# with gpu-kubelet-plugin built with -tags failpoints (internal/plugin/failpoint). It goes
# to its own directory, so the cluster imports it only when the fault suite
# asks (gpudra-images refuses it as the shipped image and vice versa).
FAILPOINTS_DIR := $(IMAGES_DIR)/failpoints
images-failpoints: prereqs-build ## ghcr.io/gpudra/gpudra:failpoints (plugin built with -tags failpoints) in _output/images/failpoints, for make test-faults
	@mkdir -p $(FAILPOINTS_DIR)/bin
	CGO_ENABLED=1 $(GO) build -trimpath -tags grpcnotrace,failpoints -ldflags "-s -w" -o $(FAILPOINTS_DIR)/bin/ ./cmd/gpu-kubelet-plugin
	CGO_ENABLED=1 $(GO) build -trimpath $(SHIP_BUILD_FLAGS) -o $(FAILPOINTS_DIR)/bin/ ./cmd/gpu-controller
	hack/build-cdi-hook.sh $(FAILPOINTS_DIR)/bin
	$(GO) run ./test/cmd/gpudra-images build-failpoints --out $(FAILPOINTS_DIR) --bin-dir $(FAILPOINTS_DIR)/bin

# The workload image's shell and tools: Debian's busybox-static package, from
# the archive (apt-get download, after apt-get update where the package index
# lacks it) or, without one, from the apt cache.
busybox-static: $(BUSYBOX_ROOT)/bin/busybox ## Debian's busybox-static package unpacked into _output/busybox-static

$(BUSYBOX_ROOT)/bin/busybox:
	@rm -rf $(OUTPUT)/deb/busybox-static && mkdir -p $(OUTPUT)/deb/busybox-static
	$(PREREQS) apt-download busybox-static $(OUTPUT)/deb/busybox-static
	rm -rf $(BUSYBOX_ROOT)
	dpkg-deb -x "$$(ls $(OUTPUT)/deb/busybox-static/busybox-static_*.deb | tail -1)" $(BUSYBOX_ROOT)
	@test -x $@ || { echo "busybox-static: the package has no bin/busybox" >&2; exit 1; }

# The workload image's C library, loader, ldconfig and bash: Debian packages
# of this machine's release unpacked into one root, so that NVIDIA-style
# manifests (bash -c, ldconfig) run as written and the real nvidia-cdi-hook's
# update-ldcache has a C library to index. The package list is the one place
# that names them; a changed list rebuilds the root.
WORKLOAD_ROOT := $(OUTPUT)/workload-root
WORKLOAD_DEBS := libc6 libc-bin libgcc-s1 bash libtinfo6
workload-root: $(WORKLOAD_ROOT)/.packages ## Debian's libc6, libc-bin, bash (and their libraries) unpacked into _output/workload-root

$(WORKLOAD_ROOT)/.packages: Makefile
	@rm -rf $(OUTPUT)/deb/workload $(WORKLOAD_ROOT) && mkdir -p $(OUTPUT)/deb/workload $(WORKLOAD_ROOT)
	for p in $(WORKLOAD_DEBS); do $(PREREQS) apt-download $$p $(OUTPUT)/deb/workload || exit 1; done
	for d in $(OUTPUT)/deb/workload/*.deb; do dpkg-deb -x "$$d" $(WORKLOAD_ROOT) || exit 1; done
	@test -x $(WORKLOAD_ROOT)/bin/bash && test -x $(WORKLOAD_ROOT)/sbin/ldconfig || { echo "workload-root: no bin/bash or sbin/ldconfig" >&2; exit 1; }
	/sbin/ldconfig -r $(WORKLOAD_ROOT)
	echo $(WORKLOAD_DEBS) >$@

# GPU verification kit (test/gpuverify): one binary to copy to a machine with
# NVIDIA GPUs. cgo, as go-nvml needs (dlopen of libnvidia-ml); netgo/osusergo
# keep name lookups out of libc. The build fails if the binary links anything
# but the C library dynamically or reaches 64 MiB; it needs the glibc of the
# build machine or newer (printed).
GPU_VERIFY := $(OUTPUT)/gpu-verify/gpudra-gpu-verify
gpu-verify: prereqs-build ## Build the read-only GPU verification kit into _output/gpu-verify/
	@mkdir -p $(dir $(GPU_VERIFY))
	CGO_ENABLED=1 $(GO) build -trimpath -tags netgo,osusergo -ldflags "-s -w" -o $(GPU_VERIFY) ./test/cmd/gpudra-gpu-verify
	hack/build-cdi-hook.sh $(dir $(GPU_VERIFY))
	@size=$$(stat -c %s $(GPU_VERIFY)); echo "$(GPU_VERIFY): $$((size / 1048576)) MiB ($$size bytes); ldd:"; \
	  ldd $(GPU_VERIFY) | sed 's/^[[:space:]]*/  /'; \
	  test $$size -lt 67108864 || { echo "gpu-verify: the binary is 64 MiB or more" >&2; exit 1; }; \
	  if ldd $(GPU_VERIFY) | grep -vqE 'linux-vdso|/ld-linux|lib(c|dl|pthread)\.so'; then \
	    echo "gpu-verify: links more than libc/libdl dynamically" >&2; exit 1; fi; \
	  if command -v objdump >/dev/null; then echo "needs glibc >= $$(objdump -T $(GPU_VERIFY) | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | cut -d_ -f2)"; fi
	@echo "Usage: copy the directory (the kit and the image's nvidia-cdi-hook, which the kit names in its specs and starts) to the GPU machine and run ./gpudra-gpu-verify [--nvidia-driver-root=/] [--nvidia-cdi-hook-path=...] [--watch=60s] [-json] [-fail-on-table-corrections]; exit status 0: every check passed"
