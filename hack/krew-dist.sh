#!/usr/bin/env bash
# hack/krew-dist.sh: the release artifacts of `kubectl rdma` for krew, and a check that krew
# itself installs them. `make krew-dist`.
#
#   bash hack/krew-dist.sh [VERSION]      (default: the manifest's spec.version)
#   KREW_PLATFORMS=linux/amd64 bash hack/krew-dist.sh   (CI: one platform; the others keep
#                                                        their zero checksums)
#
# Builds kubectl-rdma for every platform deploy/krew/rdma.yaml lists (CGO off, version linked
# in), packs each as kubectl-rdma_VERSION_OS_ARCH.tar.gz, and writes dist/krew/rdma.yaml: the
# repository's manifest with this version and each archive's real sha256 (the repository's
# copy carries zeros until a release publishes archives at its uris). Then, unless
# KREW_CHECK=0, it installs the linux/amd64 archive with krew (`krew install --manifest
# --archive`, into a throw-away KREW_ROOT), runs the installed `kubectl-rdma version` and
# `--help`, and uninstalls it: krew validates the manifest, the checksum and the file layout.
#
# krew (sigs.k8s.io/krew, KREW_VERSION) is built from the Go module proxy once and cached in
# $E2E_CACHE/bin. No network beyond the module proxy; no root.
set -Eeuo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
MANIFEST=$REPO/deploy/krew/rdma.yaml
OUT=${KREW_DIST:-$REPO/dist/krew}
KREW_VERSION=${KREW_VERSION:-v0.4.4}
E2E_CACHE=${E2E_CACHE:-/var/cache/kube-rdma-e2e}
log() { printf '%s krew-dist: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

VERSION=${1:-$(awk '$1 == "version:" {print $2; exit}' "$MANIFEST")}
[[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || die "version $VERSION is not vMAJOR.MINOR.PATCH"
mapfile -t LISTED < <(awk '$1 == "os:" {os = $2} $1 == "arch:" {print os "/" $2}' "$MANIFEST")
[[ ${#LISTED[@]} -gt 0 ]] || die "no platforms in $MANIFEST"
read -r -a PLATFORMS <<<"${KREW_PLATFORMS:-${LISTED[*]}}"
for p in "${PLATFORMS[@]}"; do
  [[ " ${LISTED[*]} " == *" $p "* ]] || die "KREW_PLATFORMS: $p is not a platform of $MANIFEST (${LISTED[*]})"
done

rm -rf "$OUT"
mkdir -p "$OUT"
commit=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
ldflags="-s -w -X github.com/kube-rdma/kube-rdma/internal/version.Version=$VERSION"
ldflags+=" -X github.com/kube-rdma/kube-rdma/internal/version.Commit=$commit"
cp "$MANIFEST" "$OUT/rdma.yaml"
sed -i "s/^\(  version: \).*/\1$VERSION/" "$OUT/rdma.yaml"
for p in "${PLATFORMS[@]}"; do
  os=${p%/*} arch=${p#*/}
  name=kubectl-rdma_${VERSION}_${os}_${arch}
  stage=$(mktemp -d)
  (cd "$REPO" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -tags grpcnotrace -trimpath -ldflags "$ldflags" \
    -o "$stage/kubectl-rdma" ./cmd/kubectl-rdma) || die "build $p"
  # Reproducible: fixed owner, mode and time, no directory entry.
  tar --owner=0 --group=0 --numeric-owner --mode=0755 --mtime=@0 -C "$stage" -czf "$OUT/$name.tar.gz" kubectl-rdma
  rm -rf "$stage"
  sum=$(sha256sum "$OUT/$name.tar.gz" | cut -d' ' -f1)
  # The platform's uri names its archive; its sha256 is on the line after.
  awk -v name="$name.tar.gz" -v sum="$sum" -v ver="$VERSION" '
    index($0, "uri:") && index($0, "_" substr(name, index(name, "_") + 1 + length(ver) + 1)) {
      sub(/download\/[^\/]+\/kubectl-rdma_[^ ]+/, "download/" ver "/" name); print; fix = 1; next }
    fix && index($0, "sha256:") { sub(/"[0-9a-f]+"/, "\"" sum "\""); fix = 0 }
    { print }' "$OUT/rdma.yaml" >"$OUT/rdma.yaml.new"
  mv "$OUT/rdma.yaml.new" "$OUT/rdma.yaml"
  grep -q "$sum" "$OUT/rdma.yaml" || die "no platform entry for $name in $MANIFEST"
  log "$name.tar.gz $(du -h "$OUT/$name.tar.gz" | cut -f1) sha256 $sum"
done
if [[ -z ${KREW_PLATFORMS:-} ]] && grep -q '"0\{64\}"' "$OUT/rdma.yaml"; then
  die "a platform kept a zero checksum in $OUT/rdma.yaml"
fi
log "manifest: $OUT/rdma.yaml"
[[ ${KREW_CHECK:-1} == 1 ]] || exit 0

# krew, from the module proxy (`go install` of it fails on the proxy's deprecation lookup:
# build it in its module directory instead).
KREW=$E2E_CACHE/bin/krew-$KREW_VERSION
if [[ ! -x $KREW ]]; then
  log "building krew $KREW_VERSION from the module proxy"
  dir=$(cd "$REPO" && go mod download -json "sigs.k8s.io/krew@$KREW_VERSION" | awk -F'"' '$2 == "Dir" {print $4}')
  [[ -d $dir ]] || die "go mod download sigs.k8s.io/krew@$KREW_VERSION failed"
  mkdir -p "$E2E_CACHE/bin"
  (cd "$dir" && GOFLAGS=-mod=mod go build -o "$KREW.tmp" ./cmd/krew) || die "build krew"
  mv "$KREW.tmp" "$KREW"
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
export KREW_ROOT=$root KREW_NO_UPGRADE_CHECK=1
# krew uninstall wants a local plugin index (a git clone `krew update` makes, from GitHub): an
# empty one does, the plugin being installed from the manifest.
mkdir -p "$root/index/default/plugins"
git -C "$root/index/default" init -q
archive=$OUT/kubectl-rdma_${VERSION}_linux_amd64.tar.gz
[[ -f $archive ]] || die "KREW_PLATFORMS has no linux/amd64: nothing for krew to install here"
"$KREW" install --manifest="$OUT/rdma.yaml" --archive="$archive" >"$root/install.log" 2>&1 ||
  { cat "$root/install.log" >&2; die "krew install --manifest --archive failed"; }
got=$("$root/bin/kubectl-rdma" version) || die "the installed kubectl-rdma version failed"
[[ $got == *"$VERSION"* ]] || die "the installed kubectl-rdma says $got, want $VERSION"
"$root/bin/kubectl-rdma" --help >/dev/null || die "the installed kubectl-rdma --help failed"
"$KREW" uninstall rdma >"$root/uninstall.log" 2>&1 || { cat "$root/uninstall.log" >&2; die "krew uninstall rdma failed"; }
[[ ! -e $root/bin/kubectl-rdma ]] || die "krew uninstall left $root/bin/kubectl-rdma"
log "krew $KREW_VERSION installed the linux/amd64 archive, kubectl-rdma version: $got; uninstalled"
