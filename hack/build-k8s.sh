#!/usr/bin/env bash
# Builds etcd and the Kubernetes binaries the local cluster runs into
# _output/bin, from the separate module in hack/k8s. Binaries already built
# for the pinned version are skipped; a cold build takes ~17 minutes on 2 cores.
#
# MODULE=hack/apiserver-1.34 TARGETS=kube-apiserver builds the commands of
# another module instead, named <command>-<version> (kube-apiserver-v1.34.4):
# the older API servers `make policy-versions` checks the chart's policies on.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BIN:-$root/_output/bin}"
mod="$root/${MODULE:-hack/k8s}"
k8s_version="$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
suffix=""; [ -n "${MODULE:-}" ] && suffix="-$k8s_version"
major="${k8s_version#v}"; minor="${major#*.}"; major="${major%%.*}"; minor="${minor%%.*}"
mkdir -p "$bin"
export CGO_ENABLED=0
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

read -r -a targets <<< "${TARGETS:-etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy kubectl}"
total=${#targets[@]}; i=0
for name in "${targets[@]}"; do
  i=$((i+1))
  want="$k8s_version"
  [ "$name" = etcd ] && want="$(cd "$mod" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
  out="$name$suffix"
  stamp="$bin/.$out.version"
  if [ -x "$bin/$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "[$i/$total] $out $want: up to date"
    continue
  fi
  pkg="k8s.io/kubernetes/cmd/$name"; [ "$name" = etcd ] && pkg="./etcd"
  echo "[$i/$total] building $out $want ..."
  start=$SECONDS
  (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  echo "$want" > "$stamp"
  echo "[$i/$total] built $out in $((SECONDS-start))s"
done
