#!/usr/bin/env bash
# check-dockerfile.sh [DOCKERFILE] runs the build stage of the Dockerfile
# without a container engine, so that CI proves its commands work on a
# machine without Docker.
#
# It builds the context like docker does (the files git knows about, tracked
# or untracked but not ignored, minus .dockerignore), lays out an empty
# directory as the stage's root file system, and replays the stage's
# WORKDIR, ENV, ARG, COPY and RUN instructions there: paths inside the image
# become paths under that root, RUN commands run with sh -c in the working
# directory, RUN --mount flags are dropped (the host's Go caches serve
# instead). Finally it checks that every file a later stage copies out of the
# build stage (COPY --from=<stage>) exists. The base image itself is not used:
# the host provides Go, gcc and the shell tools.
#
# Environment: BUILD_STAGE (default: build) names the stage; KEEP=1 keeps the
# temporary directory.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DOCKERFILE=${1:-$REPO_ROOT/Dockerfile}
STAGE=${BUILD_STAGE:-build}

log() { printf '[%6.1fs] %s\n' "$SECONDS" "$*"; }
die() { printf 'check-dockerfile: %s\n' "$*" >&2; exit 1; }

[[ -r $DOCKERFILE ]] || die "cannot read $DOCKERFILE"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/check-dockerfile.XXXXXX")
if [[ ${KEEP:-} == 1 ]]; then
	log "keeping $TMP"
else
	trap 'rm -rf "$TMP"' EXIT
fi
CONTEXT=$TMP/context
ROOT=$TMP/root
mkdir -p "$CONTEXT" "$ROOT"

# ignored PATH reports whether .dockerignore excludes PATH: a pattern matches
# the path itself, a parent directory, or the path as a shell glob. Negated
# patterns (!) are not supported.
IGNORE=()
if [[ -r $REPO_ROOT/.dockerignore ]]; then
	while IFS= read -r line || [[ -n $line ]]; do
		line=${line%%#*}
		line=${line//[[:space:]]/}
		[[ -z $line ]] && continue
		[[ $line == !* ]] && die ".dockerignore: negated pattern '$line' is not supported"
		IGNORE+=("${line#/}")
	done <"$REPO_ROOT/.dockerignore"
fi
ignored() {
	local p
	for p in "${IGNORE[@]}"; do
		# shellcheck disable=SC2053 # $p is a glob on purpose
		[[ $1 == "$p" || $1 == "$p"/* || $1 == $p ]] && return 0
	done
	return 1
}

log "build context from git ls-files minus .dockerignore"
(
	cd "$REPO_ROOT"
	git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
		[[ -e $f ]] && ! ignored "$f" && printf '%s\0' "$f"
	done | tar --null -T - -cf - | tar -xf - -C "$CONTEXT"
)
log "context: $(find "$CONTEXT" -type f | wc -l) files"

# Join continued lines, drop comments and blank lines.
INSTRUCTIONS=()
buf=""
while IFS= read -r line || [[ -n $line ]]; do
	[[ -z $buf && $line =~ ^[[:space:]]*(#|$) ]] && continue
	if [[ $line == *\\ ]]; then
		buf+="${line%\\} "
		continue
	fi
	INSTRUCTIONS+=("$buf$line")
	buf=""
done <"$DOCKERFILE"

# path PATH maps an image path (absolute, or relative to WORKDIR) under ROOT.
WORKDIR=/
path() { if [[ $1 == /* ]]; then echo "$ROOT$1"; else echo "$ROOT${WORKDIR%/}/$1"; fi; }

in_stage=false seen_stage=false
COPIES_OUT=()
for ins in "${INSTRUCTIONS[@]}"; do
	read -r keyword rest <<<"$ins"
	keyword=${keyword^^}
	if [[ $keyword == FROM ]]; then
		in_stage=false
		if [[ ${rest,,} =~ [[:space:]]as[[:space:]]+([^[:space:]]+)$ && ${BASH_REMATCH[1]} == "${STAGE,,}" ]]; then
			in_stage=true seen_stage=true
			log "stage $STAGE: $ins"
		fi
		continue
	fi
	if ! $in_stage; then
		if [[ $keyword == COPY && $rest == --from="$STAGE"* ]]; then
			COPIES_OUT+=("${rest#--from="$STAGE" }")
		fi
		continue
	fi
	case $keyword in
	WORKDIR)
		[[ $rest == /* ]] || rest="${WORKDIR%/}/$rest"
		WORKDIR=$rest
		mkdir -p "$ROOT$WORKDIR"
		;;
	ENV | ARG)
		[[ $rest == *=* ]] || { [[ $keyword == ARG ]] && continue; die "ENV without '=' is not supported: $ins"; }
		eval "export $rest"
		;;
	COPY)
		[[ $rest == --* ]] && die "COPY flags are not supported in stage $STAGE: $ins"
		read -r -a args <<<"$rest"
		dest=$(path "${args[-1]}")
		unset 'args[-1]'
		mkdir -p "$dest"
		for src in "${args[@]}"; do
			if [[ $src == . ]]; then
				cp -a "$CONTEXT/." "$dest/"
			else
				cp -a "$CONTEXT/$src" "$dest/"
			fi
		done
		;;
	RUN)
		while [[ $rest =~ ^--[a-z]+=[^[:space:]]+[[:space:]]+(.*)$ ]]; do rest=${BASH_REMATCH[1]}; done
		start=$SECONDS
		log "RUN $rest"
		(cd "$ROOT$WORKDIR" && sh -c "$rest") || die "RUN failed: $rest"
		log "  ok in $((SECONDS - start))s"
		;;
	LABEL | USER | EXPOSE | ENTRYPOINT | CMD) ;;
	*) die "instruction $keyword is not supported in stage $STAGE: $ins" ;;
	esac
done
$seen_stage || die "no stage named $STAGE in $DOCKERFILE"

# The files later stages take from the build stage must exist.
for c in "${COPIES_OUT[@]}"; do
	read -r -a args <<<"$c"
	unset 'args[-1]'
	for src in "${args[@]}"; do
		[[ -e $ROOT$src ]] || die "a later stage copies $src from stage $STAGE, which did not produce it"
		log "produced $src ($(du -h "$ROOT$src" | cut -f1))"
	done
done
log "check-dockerfile: build stage of $(basename "$DOCKERFILE") OK"
