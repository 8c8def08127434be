#!/usr/bin/env bash
# Builds the container runtime of the local cluster's nodes into _output/bin:
# containerd, containerd-shim-runc-v2 and ctr, at the version pinned in
# hack/containerd/go.mod. runc and the CNI plugins come from Debian packages
# (see .ci/run). Skips what is already built for the pinned version.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BIN:-$root/_output/bin}"
mod="$root/hack/containerd"
version="$(cd "$mod" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
mkdir -p "$bin"
ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$version"
for name in containerd containerd-shim-runc-v2 ctr; do
  stamp="$bin/.$name.version"
  if [ -x "$bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    echo "$name $version: up to date"
    continue
  fi
  echo "building $name $version ..."
  start=$SECONDS
  cgo=0; [ "$name" = containerd ] && cgo=1
  (cd "$mod" && CGO_ENABLED=$cgo go build -trimpath -tags "no_btrfs urfave_cli_no_docs" -ldflags "$ldflags" \
    -o "$bin/$name.tmp" "github.com/containerd/containerd/v2/cmd/$name")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$version" > "$stamp"
  echo "built $name in $((SECONDS-start))s"
done
