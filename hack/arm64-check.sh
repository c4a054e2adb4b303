#!/usr/bin/env bash
# hack/arm64-check.sh: the shipped binaries built for linux/arm64 (Grace Hopper, Grace
# Blackwell nodes) run, and read sysfs as the amd64 build does. `make arm64-check`.
#
#   bash hack/arm64-check.sh [VERSION]     (default: v0.0.0-arm64check)
#
# 1. Cross-builds device-plugin, kube-rdma (cmd/cni) and kubectl-rdma for GOARCH=arm64 with
#    the release flags (CGO off, -trimpath, -tags grpcnotrace, -s -w, version linked in: the
#    Makefile's RELEASE_BUILD), and device-plugin for the host (amd64) with the same flags.
# 2. Runs each arm64 binary's `--version` under qemu-aarch64-static (Debian: apt-get install
#    qemu-user-static; called directly, binfmt need not be registered) and checks it names the
#    binary and VERSION.
# 3. Writes the GB200 sample node (nodesim.GB200: an arm64 compute tray) with the e2e fixture
#    writer (go run ./e2e/local-node/fixture -sample gb200: no shipped binary links nodesim),
#    runs `device-plugin discover -o json` on it with the amd64 build and with the arm64 build
#    under qemu, prints both and fails unless they are byte for byte the same.
#
# No root, no network beyond the Go module proxy; Go's build cache makes a warm run quick.
set -Eeuo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
VERSION=${1:-v0.0.0-arm64check}
QEMU=${QEMU:-qemu-aarch64-static}
log() { printf '%s arm64-check: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v "$QEMU" >/dev/null || die "$QEMU not found (Debian: apt-get install qemu-user-static)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/arm64" "$work/host"

commit=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
vpkg=github.com/kube-rdma/kube-rdma/internal/version
# The commit's date, not now: the same commit links the same binaries, and the build cache holds.
date=$(TZ=UTC git -C "$REPO" log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo unknown)
ldflags="-s -w -X $vpkg.Version=$VERSION -X $vpkg.Commit=$commit -X $vpkg.Date=$date"
build() { # GOARCH OUT PKG
  (cd "$REPO" && CGO_ENABLED=0 GOOS=linux GOARCH=$1 go build -tags grpcnotrace -trimpath \
    -ldflags "$ldflags" -o "$2" "$3") || die "build $3 for $1"
}
t0=$SECONDS
for b in device-plugin:./cmd/device-plugin kube-rdma:./cmd/cni kubectl-rdma:./cmd/kubectl-rdma; do
  build arm64 "$work/arm64/${b%%:*}" "${b#*:}"
done
build "$(go env GOARCH)" "$work/host/device-plugin" ./cmd/device-plugin
log "built in $((SECONDS - t0))s"

for b in device-plugin kube-rdma kubectl-rdma; do
  f=$work/arm64/$b
  file -b "$f" 2>/dev/null | grep -q 'ARM aarch64' || [[ $(od -An -tx1 -j18 -N2 "$f" | tr -d ' ') == b700 ]] ||
    die "$b is not an arm64 ELF"
  out=$("$QEMU" "$f" --version) || die "$b --version under qemu failed"
  printf '%s\n' "$out" | sed "s/^/  arm64 $b: /"
  # cli.Version's first line: "<binary> <version> (commit <commit>, built <date>, <go version>)".
  [[ $(head -1 <<<"$out") == "$b $VERSION (commit $commit, built $date, go"* ]] ||
    die "$b --version: want \"$b $VERSION (commit $commit, built $date, go...\""
done

root=$work/gb200
(cd "$REPO" && go run ./e2e/local-node/fixture -sample gb200 -root "$root") >/dev/null || die "write the gb200 fixture"
discover() { "$@" discover --sysfs-root "$root/sys" --proc-root "$root/proc" -o json; }
discover "$work/host/device-plugin" >"$work/host.json" || die "amd64 discover"
discover "$QEMU" "$work/arm64/device-plugin" >"$work/arm64.json" || die "arm64 discover under qemu"
for a in host arm64; do
  echo "--- device-plugin discover -o json on the gb200 fixture, $a build ($(wc -c <"$work/$a.json") bytes)"
  cat "$work/$a.json"
done
grep -q '"device": "2941"' "$work/arm64.json" || die "arm64 discover: no GB200 GPU in its output"
diff -u "$work/host.json" "$work/arm64.json" || die "discover output differs between the $(go env GOARCH) and arm64 builds"
log "ok: arm64 binaries report $VERSION; discover on gb200 identical on $(go env GOARCH) and arm64 ($(sha256sum <"$work/arm64.json" | cut -c1-16)); $((SECONDS - t0))s"
