#!/usr/bin/env bash
# hack/release.sh: a release of kube-rdma (docs/release.md). `make release VERSION=vX.Y.Z
# [REGISTRY=host:port/path]`.
#
#   VERSION=v0.2.0 REGISTRY=127.0.0.1:5000/kube-rdma bash hack/release.sh
#
# Writes dist/release/VERSION/ (RELEASE_DIST overrides):
#   bin/linux_{amd64,arm64}/{device-plugin,kube-rdma,kubectl-rdma}   the image's binaries
#   oci/                     the image as an OCI image layout: index.json names the index
#   image.json               digests: index, each platform's manifest, config and layer, SBOMs
#   sbom/linux_ARCH/NAME.cdx.json   CycloneDX SBOM of each binary (its Go modules)
#   chart/kube-rdma-X.Y.Z.tgz       the chart, version and appVersion X.Y.Z
#   chart/oci-digest         with REGISTRY: the digest of the pushed chart's manifest
#   krew/                    kubectl-rdma archives for every platform of deploy/krew/rdma.yaml
#                            and the krew manifest with their sha256 (hack/krew-dist.sh)
#   summary.txt              what it printed last
# With REGISTRY, it also pushes the image index to REGISTRY/kube-rdma:X.Y.Z (the tag the
# chart's image.tag defaults to: its appVersion, without the v), each SBOM as an OCI
# artifact whose subject is the index, and the chart to oci://REGISTRY/charts/kube-rdma
# (version X.Y.Z); the packaged chart's image.repository is REGISTRY/kube-rdma, so
# `helm install oci://REGISTRY/charts/kube-rdma --version X.Y.Z` pulls the image from the
# same registry. The repository's chart is never edited: a copy is packaged.
#
# Reproducible: the binaries are built with -trimpath, without VCS stamping, their date the
# commit's time; every file and creation time in the image is SOURCE_DATE_EPOCH (default: the
# commit's time). The same commit and toolchain give the same digests (make release-check).
#
# Tools: helm from e2e/local-node/build.sh (cached in $E2E_CACHE/bin), hack/ocibuild.
set -Eeuo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
E2E_CACHE=${E2E_CACHE:-/var/cache/kube-rdma-e2e}
PLATFORMS=(linux/amd64 linux/arm64)
log() { printf '%s release: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
PATH=$PATH:/usr/local/go/bin

VERSION=${VERSION:-}
[[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || die "VERSION=$VERSION: want vMAJOR.MINOR.PATCH"
VER=${VERSION#v}
REGISTRY=${REGISTRY:-}
REGISTRY=${REGISTRY%/}
OUT=${RELEASE_DIST:-$REPO/dist/release/$VERSION}
COMMIT=$(git -C "$REPO" rev-parse HEAD)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct HEAD)}
export SOURCE_DATE_EPOCH
DATE=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
[[ -z $(git -C "$REPO" status --porcelain --untracked-files=no) ]] ||
  log "WARNING: the work tree has uncommitted changes; the release is of commit $COMMIT plus them"
plain_http=()
case $REGISTRY in
  127.0.0.1:* | localhost:* | 127.0.0.1/* | localhost/*) plain_http=(--plain-http) ;;
esac

rm -rf "$OUT"
mkdir -p "$OUT"
start=$(date +%s)

# The binaries, as the Makefile's `build` and the Dockerfile (RELEASE_TAGS, RELEASE_LDFLAGS).
vpkg=github.com/kube-rdma/kube-rdma/internal/version
ldflags="-s -w -X $vpkg.Version=$VERSION -X $vpkg.Commit=$COMMIT -X $vpkg.Date=$DATE"
export CGO_ENABLED=0 GOFLAGS="${RELEASE_GOFLAGS:--p=1} -buildvcs=false"
for p in "${PLATFORMS[@]}"; do
  dir=$OUT/bin/${p%/*}_${p#*/}
  log "building $p"
  for b in device-plugin:./cmd/device-plugin kube-rdma:./cmd/cni kubectl-rdma:./cmd/kubectl-rdma; do
    (cd "$REPO" && GOOS=${p%/*} GOARCH=${p#*/} nice -n 19 go build -tags grpcnotrace -trimpath \
      -ldflags "$ldflags" -o "$dir/${b%%:*}" "${b#*:}") || die "build ${b%%:*} for $p"
  done
done
host=$(go env GOOS)_$(go env GOARCH)
if [[ -d $OUT/bin/$host ]]; then
  for b in device-plugin kube-rdma kubectl-rdma; do
    got=$("$OUT/bin/$host/$b" --version 2>&1) || die "$b --version failed: $got"
    [[ $got == *"$VERSION"* ]] || die "$b --version says $got, want $VERSION"
  done
  log "$host binaries say $VERSION"
fi

# The image: both platforms in one index, SBOMs, pushed when REGISTRY is set.
(cd "$REPO" && go build -o "$OUT/.ocibuild" ./hack/ocibuild) || die "build hack/ocibuild"
platforms=$(IFS=,; echo "${PLATFORMS[*]}")
image=${REGISTRY:-ghcr.io/kube-rdma}/kube-rdma:$VER
push=()
[[ -z $REGISTRY ]] || push=(-push "$image")
etc=$OUT/.etc
mkdir -p "$etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$etc/group"
src=https://github.com/kube-rdma/kube-rdma
"$OUT/.ocibuild" -platform "$platforms" -name "$image" -layout "$OUT/oci" "${push[@]}" \
  -sbom "$OUT/sbom" -summary "$OUT/image.json" \
  -file "$OUT/bin/{os}_{arch}/device-plugin:/usr/local/bin/device-plugin:0755" \
  -file "$OUT/bin/{os}_{arch}/kube-rdma:/usr/local/bin/kube-rdma:0755" \
  -file "$OUT/bin/{os}_{arch}/kubectl-rdma:/usr/local/bin/kubectl-rdma:0755" \
  -file "$etc/passwd:/etc/passwd:0644" -file "$etc/group:/etc/group:0644" \
  -dir /tmp:1777 -user 0:0 -entrypoint '["/usr/local/bin/device-plugin"]' -cmd '["run"]' \
  -annotation "org.opencontainers.image.source=$src" \
  -annotation "org.opencontainers.image.revision=$COMMIT" \
  -annotation "org.opencontainers.image.version=$VER" \
  -annotation "org.opencontainers.image.title=kube-rdma" \
  -annotation "org.opencontainers.image.licenses=Apache-2.0" || die "ocibuild failed"
rm -rf "$etc" "$OUT/.ocibuild"

# The chart: a copy with this version, its image in REGISTRY when given.
HELM=${HELM:-$(bash "$REPO/e2e/local-node/build.sh" helm)/helm}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r "$REPO/deploy/helm/kube-rdma" "$stage/"
if [[ -n $REGISTRY ]]; then
  sed -i "s|^  repository: ghcr.io/kube-rdma/kube-rdma\$|  repository: $REGISTRY/kube-rdma|" "$stage/kube-rdma/values.yaml"
  grep -q "^  repository: $REGISTRY/kube-rdma\$" "$stage/kube-rdma/values.yaml" ||
    die "the chart's values.yaml has no image.repository line ghcr.io/kube-rdma/kube-rdma to point at $REGISTRY"
fi
mkdir -p "$OUT/chart"
"$HELM" package "$stage/kube-rdma" --version "$VER" --app-version "$VER" -d "$OUT/chart" >&2 || die "helm package"
tgz=$OUT/chart/kube-rdma-$VER.tgz
# Reproducible: helm stamps each file with the time of packaging, and helm push takes the
# chart's org.opencontainers.image.created from the archive's mtime. Repack it with sorted
# entries, owner 0:0, every time SOURCE_DATE_EPOCH, gzip without name or time.
repack=$stage/repack
mkdir -p "$repack"
tar -xzmf "$tgz" -C "$repack"
(cd "$repack" && find . -type f | sed 's|^\./||' | LC_ALL=C sort |
  tar --no-recursion --owner=0 --group=0 --numeric-owner --mode=0644 --mtime="@$SOURCE_DATE_EPOCH" -T - -cf -) |
  gzip -n -9 >"$tgz.tmp"
mv "$tgz.tmp" "$tgz"
touch -d "@$SOURCE_DATE_EPOCH" "$tgz"
rendered=$("$HELM" template kube-rdma "$tgz" | awk '$1 == "image:" {print $2; exit}')
[[ $rendered == "\"$image\"" || $rendered == "$image" ]] || die "the packaged chart renders image $rendered, want $image"
chart_digest=
if [[ -n $REGISTRY ]]; then
  pushed=$("$HELM" push "$tgz" "oci://$REGISTRY/charts" "${plain_http[@]}" 2>&1) || { echo "$pushed" >&2; die "helm push"; }
  chart_digest=$(awk '$1 == "Digest:" {print $2}' <<<"$pushed")
  [[ $chart_digest == sha256:* ]] || { echo "$pushed" >&2; die "helm push printed no digest"; }
  echo "$chart_digest" >"$OUT/chart/oci-digest"
  log "chart pushed: oci://$REGISTRY/charts/kube-rdma:$VER $chart_digest"
fi

# kubectl-rdma for krew: every platform of deploy/krew/rdma.yaml, installed by krew as a check.
KREW_DIST=$OUT/krew bash "$REPO/hack/krew-dist.sh" "$VERSION" || die "hack/krew-dist.sh"

{
  echo "kube-rdma $VERSION (commit $COMMIT, SOURCE_DATE_EPOCH $SOURCE_DATE_EPOCH = $DATE)"
  echo "image:  $image"
  echo "index:  $(jq -r .index "$OUT/image.json")"
  jq -r '.manifests[] | "  \(.platform)  \(.digest)  (config \(.config))"' "$OUT/image.json"
  echo "layout: $OUT/oci"
  echo "chart:  $tgz  sha256:$(sha256sum "$tgz" | cut -d' ' -f1)"
  [[ -z $chart_digest ]] || echo "        oci://$REGISTRY/charts/kube-rdma:$VER  $chart_digest"
  echo "sboms (CycloneDX JSON; in the registry: $(jq -r '.referrers // "not pushed"' "$OUT/image.json")):"
  jq -r '.sboms[] | "  \(.platform)  \(.binary)  \(.file | sub(".*/release/"; "dist/release/"))  \(.artifact // "")"' "$OUT/image.json"
  echo "krew:   $OUT/krew/rdma.yaml"
  for f in "$OUT"/krew/*.tar.gz; do echo "  $(basename "$f")  $(sha256sum "$f" | cut -d' ' -f1)"; done
  echo "took $(($(date +%s) - start)) s"
} | tee "$OUT/summary.txt"
