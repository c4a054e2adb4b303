#!/usr/bin/env bash
# hack/actionlint.sh: lints the GitHub Actions workflows (.github/workflows/*.yml) with
# actionlint, which also runs shellcheck on every `run:` block when shellcheck is on PATH (it
# must be: this script fails without it, so that check is never skipped silently).
# `make actionlint`.
#
# actionlint (github.com/rhysd/actionlint, ACTIONLINT_VERSION) is built from the Go module
# proxy once and cached in $E2E_CACHE/bin. The workflows themselves cannot run here: they run
# on GitHub's hosted runners.
set -Eeuo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
ACTIONLINT_VERSION=${ACTIONLINT_VERSION:-v1.7.12}
E2E_CACHE=${E2E_CACHE:-/var/cache/kube-rdma-e2e}
SHELLCHECK=${SHELLCHECK:-shellcheck}
log() { printf '%s actionlint: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v "$SHELLCHECK" >/dev/null || die "$SHELLCHECK not found (Debian: apt-get install shellcheck): actionlint would skip the run: blocks"
AL=$E2E_CACHE/bin/actionlint-$ACTIONLINT_VERSION
if [[ ! -x $AL ]]; then
  log "building actionlint $ACTIONLINT_VERSION from the module proxy"
  dir=$(cd "$REPO" && go mod download -json "github.com/rhysd/actionlint@$ACTIONLINT_VERSION" | awk -F'"' '$2 == "Dir" {print $4}')
  [[ -d $dir ]] || die "go mod download github.com/rhysd/actionlint@$ACTIONLINT_VERSION failed"
  mkdir -p "$E2E_CACHE/bin"
  (cd "$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" -o "$AL.tmp" ./cmd/actionlint) ||
    die "build actionlint"
  mv "$AL.tmp" "$AL"
fi
log "$("$AL" -version | head -1), $("$SHELLCHECK" --version | sed -n 's/^version: /shellcheck /p')"
cd "$REPO"
mapfile -t files < <(git ls-files '.github/workflows/*.yml' '.github/workflows/*.yaml'; ls .github/workflows/*.y*ml 2>/dev/null)
mapfile -t files < <(printf '%s\n' "${files[@]}" | sort -u)
[[ ${#files[@]} -gt 0 && -n ${files[0]} ]] || die "no workflows under .github/workflows"
"$AL" -shellcheck "$(command -v "$SHELLCHECK")" "${files[@]}"
log "no findings in ${files[*]}"
