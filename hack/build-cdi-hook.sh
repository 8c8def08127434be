#!/usr/bin/env bash
# Builds NVIDIA's nvidia-cdi-hook (nvidia-container-toolkit's cmd/nvidia-cdi-hook, at the version go.mod
# requires; go.mod lists it as a tool) into OUTDIR. The gpudra image ships it and the kubelet plugin installs
# it into the host's plugin directory, because many nodes have no toolkit (GPU Operator nodes keep it
# elsewhere, GKE's COS has none).
#
# The hook runs on the host (runc starts createContainer hooks in the runtime's namespaces), so it is linked
# statically: it must not depend on the host's glibc version. The toolkit needs cgo; the linker's warning
# that dlopen in a static program needs the build's glibc at run time concerns code the hook's commands
# never reach (NVML), so it is filtered out.
#   hack/build-cdi-hook.sh OUTDIR
set -euo pipefail
out=${1:?usage: hack/build-cdi-hook.sh OUTDIR}
mod=github.com/NVIDIA/nvidia-container-toolkit
version=$(go list -m -f '{{.Version}}' "$mod")
mkdir -p "$out"
# go-nvml's bindings warn about NVML calls deprecated in CUDA 13 (as in the Makefile).
export CGO_CFLAGS=${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}
CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo \
	-ldflags "-s -w -linkmode external -extldflags -static -X $mod/internal/info.version=$version" \
	-o "$out/nvidia-cdi-hook" "$mod/cmd/nvidia-cdi-hook" 2>&1 |
	{ grep -v -e "in function \`_cgo_.*_Cfunc_dlopen'" -e "Using 'dlopen' in statically linked" -e "^# $mod/cmd/nvidia-cdi-hook\$" || true; }
test -x "$out/nvidia-cdi-hook" && "$out/nvidia-cdi-hook" --version >/dev/null
