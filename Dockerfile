# syntax=docker/dockerfile:1
# gpudra image: gpu-kubelet-plugin and gpu-controller in /usr/local/bin.
#   make image IMAGE=ghcr.io/gpudra/gpudra TAG=dev
# hack/check-dockerfile.sh runs the build stage's RUN commands without Docker
# (make check-dockerfile), so keep them plain shell that works from WORKDIR.

# The build and runtime images must come from the same Debian release: the
# plugin is a cgo binary linked against the build image's glibc, and C code
# compiled against a newer glibc asks for symbol versions an older one lacks.
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=gcr.io/distroless/base-debian12

FROM ${GO_IMAGE} AS build
WORKDIR /src
# cgo: go-nvml loads libnvidia-ml.so.1 with dlopen at run time. Its bindings
# use NVML calls deprecated in CUDA 13; the warnings are not ours to fix.
ENV CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" GOFLAGS=-buildvcs=false
# Build flags as in the Makefile's SHIP_BUILD_FLAGS (grpcnotrace: see there).
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -tags grpcnotrace -ldflags="-s -w" -o bin/ ./cmd/gpu-kubelet-plugin ./cmd/gpu-controller
RUN ./bin/gpu-kubelet-plugin --help >/dev/null && ./bin/gpu-controller --help >/dev/null
# NVIDIA's nvidia-cdi-hook (the toolkit version go.mod pins), static: the
# plugin installs it into the host's plugin directory and the runtime runs it
# on the host, whatever the host's C library.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    hack/build-cdi-hook.sh bin

# distroless/base: glibc and CA certificates, no shell or package manager. A
# static image would not do: dlopen of the host's libnvidia-ml (under the
# driver root mounted into the plugin pod) needs the C library and loader.
FROM ${BASE_IMAGE}
# Nothing for simulation ships here: a simulated node is a simulated driver
# root on the node (test/fakedriver), which brings its own libnvidia-ml and
# nvidia-smi / nvidia-cuda-mps-control stand-ins.
COPY --from=build /src/bin/gpu-kubelet-plugin /src/bin/gpu-controller /src/bin/nvidia-cdi-hook /usr/local/bin/
# Non-root by default, which is all the controller needs. The plugin's pod runs
# it as root (runAsUser: 0 in the chart's DaemonSet): it writes the kubelet's
# plugin directories and the runtime's CDI directory on the host, both owned
# by root, and opens the GPUs' device nodes.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpu-controller"]
