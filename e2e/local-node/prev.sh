#!/usr/bin/env bash
# e2e/local-node/prev.sh: build the previous release (e2e/previous-release) for the suite's
# upgrade phase: its source from `git archive` of the commit, built with that tree's own
# images.sh under the tag prev-<commit, 12 digits>, into $E2E_CACHE/prev/<commit>/:
#
#   src/                         the commit's tree; src/deploy/helm/kube-rdma is its chart
#   images/kube-rdma.tar         localhost/kube-rdma:prev-<commit> (up.sh imports it)
#   images/kube-rdma-fakerdma.tar  localhost/kube-rdma:prev-<commit>-fakerdma, its binaries
#                                with RDMA netlink faked (the upgrade-gpu-aligned phase)
#
# A second run with the same commit reuses them (a cache without the fakerdma image, from
# before the upgrade-gpu-aligned phase, is built again). No commit named, or the commit not in this
# repository (a shallow clone): it says so and builds nothing, and the suite skips the upgrade
# phase with that reason (hook.sh describe names no prev-chart).
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"

[[ -n $PREV_COMMIT ]] || { log "previous release: none named in e2e/previous-release; the upgrade phase skips"; exit 0; }
if [[ -s $PREV_IMAGES/kube-rdma.tar && -s $PREV_IMAGES/kube-rdma-fakerdma.tar && -f $PREV_CHART/Chart.yaml ]]; then
  log "previous release ${PREV_COMMIT:0:12}: reusing $PREV_DIR"
  exit 0
fi
if ! git -C "$REPO" cat-file -e "$PREV_COMMIT^{commit}" 2>/dev/null; then
  log "previous release ${PREV_COMMIT:0:12}: not in this repository (shallow clone?); the upgrade phase skips"
  exit 0
fi
T0=$(date +%s)
tmp=$PREV_DIR.tmp
rm -rf "$tmp"
mkdir -p "$tmp/src"
git -C "$REPO" archive "$PREV_COMMIT" | tar -x -C "$tmp/src"
# That tree's own images.sh: its binaries as it built them. Only the kube-rdma image and its
# fakerdma variant are kept: the pods' images are this tree's.
E2E_IMAGE_TAG=${PREV_IMAGE##*:} bash "$tmp/src/e2e/local-node/images.sh" "$tmp/images" >/dev/null
[[ -s $tmp/images/kube-rdma-fakerdma.tar ]] || die "previous release ${PREV_COMMIT:0:12}: its images.sh built no kube-rdma-fakerdma.tar"
find "$tmp/images" -name '*.tar' ! -name kube-rdma.tar ! -name kube-rdma-fakerdma.tar -delete
rm -rf "$PREV_DIR"
mv "$tmp" "$PREV_DIR"
log "previous release ${PREV_COMMIT:0:12}: chart and image $PREV_IMAGE built in $(($(date +%s) - T0)) s"
