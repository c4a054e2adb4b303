#!/usr/bin/env bash
# e2e/local-node/run.sh: the e2e suite (e2e/suite) on a real single-node cluster on this
# machine; what `make e2e-local` runs. Builds or reuses the upstream binaries (build.sh) and
# the images (images.sh) and the previous release's chart and image (prev.sh), starts the node with its fixture RDMA devices (up.sh), runs the
# suite with this node's hook (hook.sh), which installs the chart in each of its phases,
# tests, uninstalls it and checks that the node is as before, and stops the node (down.sh),
# also on failure or interrupt.
#
#   bash e2e/local-node/run.sh [go test flags, e.g. -run TestCluster/device-plugin/ParallelPods]
#
# Needs root. E2E_KEEP_NODE=1 leaves the node running after the suite (down.sh stops it).
# Runs on one machine take turns (node_lock in lib.sh: a second run waits for the first);
# a node whose processes are gone (a killed run) is cleaned up first, a running one is refused
# and left alone.
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
PATH=$BIN:$PATH:/usr/local/go/bin
T0=$(date +%s)

[[ $(id -u) == 0 ]] || die "needs root (it starts a kubelet and containerd)"
node_lock
# Before the trap below: a node someone else runs is theirs to stop, not this run's.
! node_in_use || die "a local node is running ($NODE_RUN; started by up.sh without run.sh?): down.sh stops it"
bash "$HERE/build.sh" >/dev/null
if [[ $E2E_FROM_REGISTRY == 1 ]]; then
  # The registry, the e2e images (the -fakerdma variant also under the release's tag), then the
  # release itself: its image index replaces the plain e2e image's tag, its chart names it.
  T_REL=$(date +%s)
  bash "$REPO/hack/registry.sh" stop "$REGISTRY_PORT" # a killed run's: start from nothing
  bash "$REPO/hack/registry.sh" start "$REGISTRY_PORT" >/dev/null
  E2E_REGISTRY=$REGISTRY_PATH bash "$HERE/images.sh" >/dev/null
  # The suite asks for the -fakerdma variant under the chart's tag plus -fakerdma.
  "$(bash "$HERE/build.sh" crane)/crane" copy "$REGISTRY_PATH/kube-rdma:e2e-fakerdma" \
    "$REGISTRY_PATH/kube-rdma:${RELEASE_VERSION#v}-fakerdma" 2>/dev/null
  # One krew platform and no krew install: CI's krew step checks those.
  (cd "$REPO" && KREW_PLATFORMS=linux/amd64 KREW_CHECK=0 RELEASE_DIST=$RELEASE_DIST \
    VERSION=$RELEASE_VERSION REGISTRY=$REGISTRY_PATH bash hack/release.sh >/dev/null)
  log "release $RELEASE_VERSION in the registry $REGISTRY_PATH: index $(jq -r .index "$RELEASE_DIST/image.json") ($(($(date +%s) - T_REL)) s)"
else
  bash "$HERE/images.sh" >/dev/null
fi
T_PREV=$(date +%s)
bash "$HERE/prev.sh"
T_PREV=$(($(date +%s) - T_PREV))
T_BUILD=$(($(date +%s) - T0))

finish() {
  local rc=$?
  trap - EXIT
  if [[ $rc != 0 ]]; then
    # What the chart's containers said last (a daemon in CrashLoopBackOff says why here).
    for f in "$NODE_RUN"/pod-logs/kube-rdma_*/*/*.log; do
      [[ -f $f ]] || continue
      echo "--- ${f#"$NODE_RUN"/pod-logs/} (last 20 lines)" >&2
      tail -n 20 "$f" >&2 || true # a pod deleted meanwhile takes its log along
    done
  fi
  if [[ ${E2E_KEEP_NODE:-0} == 1 ]]; then
    log "node left running (E2E_KEEP_NODE=1): KUBECONFIG=$KUBECONFIG; stop it with $HERE/down.sh"
  else
    bash "$HERE/down.sh" || rc=1
    if [[ $E2E_FROM_REGISTRY == 1 ]]; then
      bash "$REPO/hack/registry.sh" stop "$REGISTRY_PORT" || rc=1
    fi
  fi
  [[ ! -s ${REPORT:-} ]] || sed 's/^/  /' "$REPORT" >&2
  log "e2e-local: exit $rc after $(($(date +%s) - T0)) s (builds and images: $T_BUILD s, of which the previous release $T_PREV s)"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

REPORT=$E2E_CACHE/e2e-local-report.txt
rm -f "$REPORT"
bash "$HERE/up.sh" >/dev/null
echo "node Ready $(($(date +%s) - T0 - T_BUILD)) s after up.sh started" >"$REPORT"

# The suite drives the rest (e2e/suite, TestCluster): from `hook.sh describe` it builds each
# phase's chart values and expected answers, installs the chart, runs the phase's tests,
# uninstalls it and checks the node is as before: device-plugin, gpu-aligned, dra, upgrade,
# upgrade-gpu-aligned, upgrade-dra, faults.
# The logs of the chart's pods (the daemons, their installers, the hook), which helm uninstall
# deletes with the pods, are kept in $E2E_CACHE/e2e-local-pod-logs for the last run.
rm -rf "$E2E_CACHE/e2e-local-pod-logs"
export E2E_KUBECONFIG=$KUBECONFIG E2E_NODE_HOOK=$HERE/hook.sh E2E_HELM=$BIN/helm E2E_REPORT=$REPORT
export E2E_POD_LOGS=$E2E_CACHE/e2e-local-pod-logs
log "running the e2e suite"
(cd "$REPO" && go test -count=1 -v -timeout 60m -run '^TestCluster$' ./e2e/suite "$@")
