#!/usr/bin/env bash
# Builds CRI-O, the local cluster's second container runtime, into
# _output/bin: crio and its pinns helper (C, in the same module), at the
# version pinned in hack/crio/go.mod, and gpudra-crio-import (hack/crio/cmd),
# which fills a node's image store from the OCI tarballs of make images.
# conmon and runc come from Debian packages (hack/prereqs.txt, group
# cluster). Skips what is already built for the pinned version.
#
# Build tags drop what needs C libraries these machines lack (gpgme, btrfs,
# devicemapper, ostree); seccomp needs libseccomp-dev.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BIN:-$root/_output/bin}"
mod="$root/hack/crio"
module=github.com/cri-o/cri-o
version="$(cd "$mod" && go list -m -f '{{.Version}}' "$module")"
tags="containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp"
mkdir -p "$bin"

up_to_date() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$version" ]; }

if [ ! -e /usr/include/seccomp.h ]; then
  echo "hack/build-crio.sh: /usr/include/seccomp.h is missing; install libseccomp-dev (make prereqs-cluster)" >&2
  exit 1
fi

if up_to_date crio; then
  echo "crio $version: up to date"
else
  echo "building crio $version ..."
  start=$SECONDS
  (cd "$mod" && CGO_ENABLED=1 go build -trimpath -tags "$tags" -ldflags "-s -w" \
    -o "$bin/crio.tmp" "$module/cmd/crio")
  mv "$bin/crio.tmp" "$bin/crio"
  echo "$version" > "$bin/.crio.version"
  echo "built crio in $((SECONDS-start))s"
fi

if up_to_date pinns; then
  echo "pinns $version: up to date"
else
  echo "building pinns $version ..."
  (cd "$mod" && go mod download "$module")
  src="$(cd "$mod" && go list -m -f '{{.Dir}}' "$module")/pinns/src"
  if [ ! -d "$src" ]; then
    echo "hack/build-crio.sh: pinns sources not found at $src (go mod download $module@$version failed?)" >&2
    exit 1
  fi
  gcc -std=c99 -Os -Wall -Wextra -static -o "$bin/pinns.tmp" "$src"/*.c
  strip -s "$bin/pinns.tmp"
  mv "$bin/pinns.tmp" "$bin/pinns"
  echo "$version" > "$bin/.pinns.version"
  echo "built pinns"
fi

# Our own source: go build's cache makes this quick when nothing changed.
(cd "$mod" && CGO_ENABLED=1 go build -trimpath -tags "$tags" -ldflags "-s -w" \
  -o "$bin/gpudra-crio-import" ./cmd/gpudra-crio-import)
echo "built gpudra-crio-import"
