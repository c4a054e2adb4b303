#!/usr/bin/env bash
# hack/release-check.sh: `make release-check`. Starts the local registry (hack/registry.sh),
# runs `make release` twice against it with the same VERSION, and checks what a user of the
# release gets:
#   - the image index lists linux/amd64 and linux/arm64 (crane manifest, printed), and both
#     runs pushed the same index digest and the same chart digest (reproducible);
#   - each platform's config (crane config) has its architecture, the run configuration and
#     the org.opencontainers.image.* annotations are on the index and on each manifest;
#   - the chart is pullable from oci://REGISTRY/charts and its image is REGISTRY/kube-rdma;
#   - the SBOMs are the index's referrers in the registry, one per binary and platform;
#   - the krew manifest's sha256 values are those of the archives.
# The registry is stopped on exit. RELEASE_CHECK_VERSION (default v0.0.0-check) and
# REGISTRY_PORT (default 5799) choose the release and the port.
set -Eeuo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
VERSION=${RELEASE_CHECK_VERSION:-v0.0.0-check}
VER=${VERSION#v}
export REGISTRY_PORT=${REGISTRY_PORT:-5799}
log() { printf '%s release-check: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
start=$(date +%s)

trap 'bash "$REPO/hack/registry.sh" stop' EXIT
addr=$(bash "$REPO/hack/registry.sh" start)
REGISTRY=$addr/kube-rdma
crane=$(bash "$REPO/e2e/local-node/build.sh" crane)/crane
helm=$(bash "$REPO/e2e/local-node/build.sh" helm)/helm
OUT=$REPO/dist/release/$VERSION

digests=() charts=()
for run in 1 2; do
  log "make release, run $run"
  make -C "$REPO" --no-print-directory release VERSION="$VERSION" REGISTRY="$REGISTRY" >&2
  digests+=("$(jq -r .index "$OUT/image.json")")
  charts+=("$(cat "$OUT/chart/oci-digest")")
  log "run $run: index ${digests[-1]}, chart ${charts[-1]}"
done
[[ ${digests[0]} == "${digests[1]}" ]] || die "the two runs pushed different indexes: ${digests[*]}"
[[ ${charts[0]} == "${charts[1]}" ]] || die "the two runs pushed different charts: ${charts[*]}"

image=$REGISTRY/kube-rdma:$VER
log "crane manifest $image"
idx=$("$crane" manifest "$image")
jq . <<<"$idx"
[[ $(jq -r '.mediaType' <<<"$idx") == application/vnd.oci.image.index.v1+json ]] || die "$image is not an OCI image index"
got=$("$crane" digest "$image")
[[ $got == "${digests[0]}" ]] || die "the registry has $got for $image, the runs pushed ${digests[0]}"
platforms=$(jq -r '[.manifests[].platform | "\(.os)/\(.architecture)"] | join(" ")' <<<"$idx")
[[ $platforms == "linux/amd64 linux/arm64" ]] || die "index platforms: $platforms"
for key in source revision version created; do
  [[ -n $(jq -r --arg k "org.opencontainers.image.$key" '.annotations[$k] // empty' <<<"$idx") ]] ||
    die "the index has no org.opencontainers.image.$key annotation"
done
for arch in amd64 arm64; do
  ref=$REGISTRY/kube-rdma@$(jq -r --arg a "$arch" '.manifests[] | select(.platform.architecture == $a) | .digest' <<<"$idx")
  cfg=$("$crane" config "$ref")
  log "crane config $ref: $(jq -c '{architecture, os, created, config}' <<<"$cfg")"
  [[ $(jq -r .architecture <<<"$cfg") == "$arch" && $(jq -r .os <<<"$cfg") == linux ]] || die "$arch config says $(jq -r '.os + "/" + .architecture' <<<"$cfg")"
  [[ $(jq -c .config.Entrypoint <<<"$cfg") == '["/usr/local/bin/device-plugin"]' && $(jq -r .config.User <<<"$cfg") == 0:0 ]] ||
    die "$arch run config: $(jq -c .config <<<"$cfg")"
  man=$("$crane" manifest "$ref")
  for key in source revision version created; do
    [[ -n $(jq -r --arg k "org.opencontainers.image.$key" '.annotations[$k] // empty' <<<"$man") ]] ||
      die "the $arch manifest has no org.opencontainers.image.$key annotation"
  done
  [[ $(jq -r '.annotations["org.opencontainers.image.version"]' <<<"$man") == "$VER" ]] || die "$arch manifest version annotation"
  [[ $(jq -r '.annotations["org.opencontainers.image.created"]' <<<"$man") == $(jq -r .created <<<"$cfg") ]] ||
    die "$arch: the created annotation is not the config's created"
  # crane export writes directories without their trailing slash.
  files=$("$crane" export "$ref" - | tar -tvf - | awk '{print $1, $2, $NF}')
  for want in "-rwxr-xr-x 0/0 usr/local/bin/device-plugin" "-rwxr-xr-x 0/0 usr/local/bin/kube-rdma" \
    "-rwxr-xr-x 0/0 usr/local/bin/kubectl-rdma" "-rw-r--r-- 0/0 etc/passwd" "drwxrwxrwt 0/0 tmp"; do
    grep -qxF -- "$want" <<<"$files" || die "$arch image: no entry '$want' in: $files"
  done
done

log "helm show chart oci://$REGISTRY/charts/kube-rdma --version $VER"
"$helm" show chart "oci://$REGISTRY/charts/kube-rdma" --version "$VER" --plain-http >&2
pulled=$(mktemp -d)
trap 'rm -rf "$pulled"; bash "$REPO/hack/registry.sh" stop' EXIT
"$helm" pull "oci://$REGISTRY/charts/kube-rdma" --version "$VER" --plain-http -d "$pulled" >&2
rendered=$("$helm" template kube-rdma "$pulled/kube-rdma-$VER.tgz" | awk '$1 == "image:" {gsub(/"/, "", $2); print $2; exit}')
[[ $rendered == "$image" ]] || die "the pulled chart renders image $rendered, want $image"

log "referrers of the index (SBOMs)"
refs=$(cd "$REPO" && go run ./hack/ocibuild referrers "$REGISTRY/kube-rdma@${digests[0]}")
echo "$refs"
n=$(grep -c '^application/vnd.cyclonedx+json ' <<<"$refs" || true)
[[ $n == 6 ]] || die "$n CycloneDX referrers of the index, want 6 (3 binaries x 2 platforms)"
mode=$(jq -r .referrers "$OUT/image.json")
log "the registry keeps referrers by: $mode (api: the Referrers API; tag: the sha256-<hex> fallback tag)"
# Each SBOM lists exactly the modules `go version -m` reads from its binary.
for sb in $(jq -r '.sboms[].file' "$OUT/image.json"); do
  bin=$OUT/bin/$(basename "$(dirname "$sb")")/$(basename "$sb" .cdx.json)
  want=$(go version -m "$bin" | awk '$1 == "dep" {m[NR] = $2 "@" $3} $1 == "=>" {delete m[NR - 1]; m[NR] = $2 "@" $3} END {for (k in m) print m[k]}' | LC_ALL=C sort)
  got=$(jq -r '.components[] | select(.name != "stdlib") | "\(.name)@\(.version)"' "$sb" | LC_ALL=C sort)
  [[ $(jq -r .bomFormat "$sb") == CycloneDX && -n $want && $got == "$want" ]] ||
    die "$sb does not list the modules of $bin: $(diff <(echo "$want") <(echo "$got") || true)"
  log "$(basename "$(dirname "$sb")")/$(basename "$sb"): $(wc -l <<<"$got") modules, as go version -m $(basename "$bin")"
done

log "krew manifest checksums"
for f in "$OUT"/krew/*.tar.gz; do
  sum=$(sha256sum "$f" | cut -d' ' -f1)
  grep -q "sha256: \"$sum\"" "$OUT/krew/rdma.yaml" || die "$(basename "$f") sha256 $sum is not in $OUT/krew/rdma.yaml"
  echo "  $(basename "$f") $sum"
done
[[ $(grep -cE '^ +sha256:' "$OUT/krew/rdma.yaml") == "$(find "$OUT/krew" -name '*.tar.gz' | wc -l)" ]] || die "krew manifest and archives differ in number"

log "OK: index ${digests[0]} (both runs), $(($(date +%s) - start)) s"
