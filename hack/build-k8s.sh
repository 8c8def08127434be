#!/usr/bin/env bash
# Builds etcd and the Kubernetes binaries the local cluster runs into
# _output/bin, from the separate module in hack/k8s. Binaries already built
# for the pinned version are skipped; a cold build takes ~17 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BIN:-$root/_output/bin}"
mod="$root/hack/k8s"
k8s_version="$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
etcd_version="$(cd "$mod" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
major="${k8s_version#v}"; minor="${major#*.}"; major="${major%%.*}"; minor="${minor%%.*}"
mkdir -p "$bin"
export CGO_ENABLED=0
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

targets=(etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy kubectl)
total=${#targets[@]}; i=0
for name in "${targets[@]}"; do
  i=$((i+1))
  want="$k8s_version"; [ "$name" = etcd ] && want="$etcd_version"
  stamp="$bin/.$name.version"
  if [ -x "$bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "[$i/$total] $name $want: up to date"
    continue
  fi
  pkg="k8s.io/kubernetes/cmd/$name"; [ "$name" = etcd ] && pkg="./etcd"
  echo "[$i/$total] building $name $want ..."
  start=$SECONDS
  (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$want" > "$stamp"
  echo "[$i/$total] built $name in $((SECONDS-start))s"
done
