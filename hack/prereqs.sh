#!/usr/bin/env bash
# The host's prerequisites beyond the Go module proxy, in one place.
#
#   hack/prereqs.sh GROUP...                  check Go and the packages of the groups
#                                             (build, lint, cluster: hack/prereqs.txt);
#                                             install the missing ones with apt-get
#   hack/prereqs.sh apt-download PACKAGE DIR  apt-get download PACKAGE's .deb into DIR,
#                                             updating the package index when it lacks it
#
# make runs it before anything long: make build/unit/vet (build), make lint
# (build, lint), make cluster-up/demo/test/e2e/test-faults (build, cluster);
# .ci/run asks for all three. When everything is there it only looks (a few
# milliseconds). Installing needs root: as root it runs apt-get itself, with
# sudo it uses sudo, otherwise it stops at once and prints the command to run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list=$here/prereqs.txt

die() {
  echo "prereqs: $*" >&2
  exit 1
}

# root is the command prefix that runs a command as root: nothing as root,
# sudo where there is one; it fails otherwise.
root() {
  if [ "$EUID" = 0 ]; then
    root=()
  elif command -v sudo >/dev/null; then
    root=(sudo)
  else
    return 1
  fi
}

# check_go fails unless go is in PATH and at least the go.mod's version.
check_go() {
  local want='' have key value
  while read -r key value _; do
    [ "$key" = go ] && want=$value && break
  done <"$here/../go.mod"
  command -v go >/dev/null || die "no go in PATH: install Go >= $want from https://go.dev/dl/ (Debian's golang package is older)"
  have=$(go env GOVERSION)
  have=${have#go}
  if [ "$(printf '%s\n%s\n' "$want" "${have%% *}" | sort -V | head -1)" != "$want" ]; then
    die "go $have is older than go.mod's $want: install Go >= $want from https://go.dev/dl/"
  fi
}

# missing prints the packages of the groups whose check fails, once each.
missing() {
  local group check pkg _ g seen=" "
  while read -r group check pkg _; do
    case $group in '' | '#'*) continue ;; esac
    for g in "$@"; do
      [ "$g" = "$group" ] || continue
      if [[ $check == /* ]]; then
        [ -e "$check" ] && continue
      else
        command -v "$check" >/dev/null && continue
      fi
      case $seen in *" $pkg "*) continue ;; esac
      seen+="$pkg "
      echo "$pkg"
    done
  done <"$list"
}

install_groups() {
  local g pkgs start=$SECONDS
  for g in "$@"; do
    grep -qE "^${g}[[:space:]]" "$list" || die "unknown group $g (hack/prereqs.txt has: $(awk '!/^#/ && NF { print $1 }' "$list" | sort -u | xargs))"
  done
  check_go
  mapfile -t pkgs < <(missing "$@")
  if [[ " $* " == *" cluster "* ]] && [ "$EUID" != 0 ]; then
    die "the local cluster runs as root (its nodes mount, make cgroups and run containers): run make as root${pkgs[*]:+; it will install ${pkgs[*]}}"
  fi
  [ ${#pkgs[@]} -gt 0 ] || return 0
  command -v apt-get >/dev/null ||
    die "missing packages (Debian names): ${pkgs[*]}; this script installs them with apt-get only: install them with your package manager"
  root || die "missing packages, and installing them needs root: run as root:  apt-get update && apt-get install -y --no-install-recommends ${pkgs[*]}"
  echo "prereqs ($*): installing ${pkgs[*]} (apt-get update, apt-get install)"
  export DEBIAN_FRONTEND=noninteractive
  "${root[@]}" apt-get update -qq
  "${root[@]}" apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
  mapfile -t pkgs < <(missing "$@")
  [ ${#pkgs[@]} -eq 0 ] || die "still missing after apt-get install: ${pkgs[*]} (see hack/prereqs.txt for what each must provide)"
  echo "prereqs ($*): installed in $((SECONDS - start))s"
}

# apt_download fetches a package's .deb into a directory: from the archive,
# after apt-get update when the package index lacks it (a fresh machine has
# none), or else from the apt cache.
apt_download() {
  local pkg=$1 dir=$2 debs
  cd "$dir"
  apt-get download "$pkg" && return 0
  if root; then
    echo "prereqs: apt-get download $pkg failed; updating the package index (apt-get update) and trying again"
    "${root[@]}" apt-get update -qq && apt-get download "$pkg" && return 0
  fi
  debs=(/var/cache/apt/archives/"$pkg"_*.deb)
  if [ -e "${debs[0]}" ]; then
    cp "${debs[@]}" . && return 0
  fi
  die "apt-get download $pkg failed and the apt cache has no ${pkg}_*.deb: run as root:  apt-get update, then make again"
}

case ${1:-} in
'' | -h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' && exit 0 ;;
apt-download) [ $# -eq 3 ] || die "usage: $0 apt-download PACKAGE DIR"; apt_download "$2" "$3" ;;
*) install_groups "$@" ;;
esac
