#!/usr/bin/env bash
# e2e/local-node/images.sh: build the images the local-node e2e imports into containerd, as
# OCI image layout tar files, without a container engine (hack/ocibuild, on
# go-containerregistry; the same builder make release uses):
#
#   localhost/kube-rdma:e2e   this repository's static binaries, as the Dockerfile's image
#   localhost/kube-rdma:e2e-fakerdma   the same built with the tag kuberdma_e2e: RDMA netlink
#                             faked (internal/fakerdma) for the GPU-aligned phase, which needs
#                             the exclusive RDMA netns mode this kernel cannot give
#   kube-rdma-cni-e2e         that image's CNI plugin as a file, for the faults phase
#   localhost/pause:e2e       the sandbox image (e2e/local-node/pause)
#   localhost/multus:e2e      the Multus CNI thick plugin build.sh built from the module proxy
#                             (daemon, shim, installer, passthru), at the paths upstream's image
#                             has them, for the multus phase (e2e/local-node/multus)
#   localhost/rdma-test:e2e   busybox-static plus rdma-core's ibv_devices/ibv_devinfo, from the
#                             host's Debian suite (downloaded, unpacked, never installed)
#
#   bash e2e/local-node/images.sh [OUT_DIR]     # default: $E2E_CACHE/images
#
# Import with: ctr -n k8s.io images import OUT_DIR/<name>.tar
#
# E2E_REGISTRY=host:port/path also pushes the two kube-rdma images, as one-platform image
# indexes, to E2E_REGISTRY/kube-rdma:$TAG and E2E_REGISTRY/kube-rdma:$TAG-fakerdma (plain
# HTTP for 127.0.0.1: start one with hack/registry.sh start); their index digests go to
# OUT_DIR/kube-rdma.json and OUT_DIR/kube-rdma-fakerdma.json (.index, .reference).
set -Eeuo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/../.." && pwd)
E2E_CACHE=${E2E_CACHE:-/var/cache/kube-rdma-e2e}
OUT=${1:-$E2E_CACHE/images}
TAG=${E2E_IMAGE_TAG:-e2e}
# Test image userland; libraries come from the dependency closure (providers are only a
# Recommends of libibverbs1).
TEST_PKGS=(busybox-static ibverbs-utils ibverbs-providers)

log() { printf '%s local-node-images: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PATH=$PATH:/usr/local/go/bin
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--p=1} -trimpath"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/local-node-images.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT" "$WORK/bin"

# As the Makefile's release build: stripped, gRPC without x/net/trace (RELEASE_TAGS).
gobuild() { (cd "$REPO" && nice -n 19 go build -ldflags='-s -w' "$@"); }
release_tags=grpcnotrace

log "building hack/ocibuild and the binaries"
gobuild -o "$WORK/ocibuild" ./hack/ocibuild
gobuild -tags "$release_tags" -o "$WORK/bin/device-plugin" ./cmd/device-plugin
gobuild -tags "$release_tags" -o "$WORK/bin/kube-rdma" ./cmd/cni
gobuild -tags "$release_tags" -o "$WORK/bin/kubectl-rdma" ./cmd/kubectl-rdma
gobuild -o "$WORK/pause" ./e2e/local-node/pause
mkdir -p "$WORK/fakerdma"
gobuild -tags "kuberdma_e2e,$release_tags" -o "$WORK/fakerdma/device-plugin" ./cmd/device-plugin
gobuild -tags "kuberdma_e2e,$release_tags" -o "$WORK/fakerdma/kube-rdma" ./cmd/cni
# The same CNI plugin on its own: the faults phase puts it on the node for one test (its fault
# hook, pkg/cni/park_e2e.go, parks an ADD between two steps); hook.sh describe names it.
install -m 0755 "$WORK/fakerdma/kube-rdma" "$OUT/kube-rdma-cni-e2e"

# The kube-rdma image: what the Dockerfile's final stage holds (distroless/static without CA
# certificates and time zones, which the binaries do not use).
mkdir -p "$WORK/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$WORK/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$WORK/etc/group"
# push IMAGE: ocibuild's arguments that push IMAGE (kube-rdma or kube-rdma-fakerdma) to
# E2E_REGISTRY, when set.
push() {
  [[ -n ${E2E_REGISTRY:-} ]] || return 0
  local tag=$TAG${1#kube-rdma}
  echo -push "${E2E_REGISTRY%/}/kube-rdma:$tag" -summary "$OUT/$1.json"
}
# shellcheck disable=SC2046  # push's words are separate arguments, none with spaces
"$WORK/ocibuild" -o "$OUT/kube-rdma.tar" -name "localhost/kube-rdma:$TAG" $(push kube-rdma) \
  -file "$WORK/bin/device-plugin:/usr/local/bin/device-plugin:0755" \
  -file "$WORK/bin/kube-rdma:/usr/local/bin/kube-rdma:0755" \
  -file "$WORK/bin/kubectl-rdma:/usr/local/bin/kubectl-rdma:0755" \
  -file "$WORK/etc/passwd:/etc/passwd:0644" -file "$WORK/etc/group:/etc/group:0644" \
  -dir /tmp:1777 -user 0:0 \
  -entrypoint '["/usr/local/bin/device-plugin"]' -cmd '["run"]'
# shellcheck disable=SC2046  # as above
"$WORK/ocibuild" -o "$OUT/kube-rdma-fakerdma.tar" -name "localhost/kube-rdma:$TAG-fakerdma" $(push kube-rdma-fakerdma) \
  -file "$WORK/fakerdma/device-plugin:/usr/local/bin/device-plugin:0755" \
  -file "$WORK/fakerdma/kube-rdma:/usr/local/bin/kube-rdma:0755" \
  -file "$WORK/bin/kubectl-rdma:/usr/local/bin/kubectl-rdma:0755" \
  -file "$WORK/etc/passwd:/etc/passwd:0644" -file "$WORK/etc/group:/etc/group:0644" \
  -dir /tmp:1777 -user 0:0 \
  -entrypoint '["/usr/local/bin/device-plugin"]' -cmd '["run"]'

"$WORK/ocibuild" -o "$OUT/pause.tar" -name "localhost/pause:$TAG" \
  -file "$WORK/pause:/pause:0755" -user 65535:65535 -entrypoint '["/pause"]'

# Multus: build.sh's binaries where upstream's thick image has them (install_multus copies the
# shim and passthru from /usr/src/multus-cni/bin). No shell: the manifest runs the binaries. The
# daemon refuses to start unless os/user finds root in /etc/passwd (a nil dereference without it).
MULTUS_BIN=${E2E_CACHE}/bin/current
for b in multus-daemon multus-shim install_multus passthru-cni; do
  [[ -x $MULTUS_BIN/$b ]] || die "$MULTUS_BIN/$b missing: run e2e/local-node/build.sh multus"
done
"$WORK/ocibuild" -o "$OUT/multus.tar" -name "localhost/multus:$TAG" \
  -file "$(readlink -f "$MULTUS_BIN/multus-daemon"):/usr/src/multus-cni/bin/multus-daemon:0755" \
  -file "$(readlink -f "$MULTUS_BIN/multus-shim"):/usr/src/multus-cni/bin/multus-shim:0755" \
  -file "$(readlink -f "$MULTUS_BIN/install_multus"):/usr/src/multus-cni/bin/install_multus:0755" \
  -file "$(readlink -f "$MULTUS_BIN/passthru-cni"):/usr/src/multus-cni/bin/passthru:0755" \
  -file "$WORK/etc/passwd:/etc/passwd:0644" -file "$WORK/etc/group:/etc/group:0644" \
  -dir /tmp:1777 -user 0:0 -entrypoint '["/usr/src/multus-cni/bin/multus-daemon"]'

# The test image's root: unpacked Debian packages, cached by the exact package versions.
test_root() {
  local closure want list key root debs name ver file
  if ! apt-cache show --no-all-versions "${TEST_PKGS[@]}" >/dev/null 2>&1; then
    log "apt-get update (host package lists)"
    timeout 300 apt-get update -qq || die "apt-get update failed"
  fi
  closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${TEST_PKGS[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
  want=$( { printf '%s\n' "${TEST_PKGS[@]}"; grep -E '^lib|^ibverbs-providers$' <<<"$closure"; } | sort -u)
  # shellcheck disable=SC2086
  list=$(apt-cache show --no-all-versions $want | awk '
    /^Package: /{p=$2} /^Version: /{v=$2} /^Architecture: /{a=$2}
    /^$/{if (p != "") {f=v; gsub(":", "%3a", f); print p, v, p "_" f "_" a ".deb"}; p=""}')
  key=$(sha256sum <<<"$list" | cut -c1-12)
  root=$E2E_CACHE/rootfs/rdma-test-$key
  if [[ ! -d $root ]]; then
    debs=$E2E_CACHE/debs
    mkdir -p "$debs"
    local missing=()
    while read -r name ver file; do [[ -s $debs/$file ]] || missing+=("$name=$ver"); done <<<"$list"
    if [[ ${#missing[@]} -gt 0 ]]; then
      log "downloading ${#missing[@]} packages for the test image"
      (cd "$debs" && timeout 300 apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}") ||
        die "apt-get download failed"
    fi
    rm -rf "$root.tmp"
    mkdir -p "$root.tmp"
    while read -r name ver file; do dpkg-deb -x "$debs/$file" "$root.tmp"; done <<<"$list"
    # Documentation is most of the size and nothing the tests read.
    rm -rf "$root.tmp/usr/share/doc" "$root.tmp/usr/share/man" "$root.tmp/usr/share/locale" "$root.tmp/usr/share/lintian"
    mkdir -p "$root.tmp/bin" "$root.tmp/sbin"
    # busybox-static installs /bin/busybox only: link the applets the tests use.
    local a
    for a in $("$root.tmp/bin/busybox" --list); do
      [[ -e $root.tmp/bin/$a ]] || ln -s busybox "$root.tmp/bin/$a"
    done
    mv "$root.tmp" "$root"
    log "test image root: $(wc -l <<<"$list") packages"
  fi
  echo "$root"
}

ROOT=$(test_root)
"$WORK/ocibuild" -o "$OUT/rdma-test.tar" -name "localhost/rdma-test:$TAG" \
  -tree "$ROOT:/" -dir /tmp:1777 -env PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
  -cmd '["/bin/sh"]'

ls -l "$OUT"/*.tar >&2
echo "$OUT"
