#!/usr/bin/env bash
# e2e/rxe-cluster/run.sh: what `make e2e-rxe-cluster` runs. Builds or reuses the upstream
# binaries (e2e/local-node/build.sh), the kube-rdma and pause images (e2e/local-node/images.sh)
# and the pods' image (images.sh), starts the rxe cluster (up.sh: $RXEC_NODES qemu guests,
# default 2), runs the e2e suite's rxe-cluster harness against it (e2e/suite, TestCluster, with
# hook.sh), stops the cluster (down.sh, also on failure or interrupt), checks that nothing of
# it is left on the host, and prints one report line. See e2e/rxe-cluster/README.md.
#
#   bash e2e/rxe-cluster/run.sh [go test flags, e.g. -run TestCluster/rxe-cluster/CrossNode]
#
# Needs root. RXEC_KEEP=1 leaves the cluster running (down.sh stops it).
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
PATH=$KBIN:$BIN:$PATH:/usr/local/go/bin
T0=$(date +%s)

[[ $(id -u) == 0 ]] || die "needs root (it starts qemu guests and a control plane in a netns)"
[[ ! -e $RXEC_RUN/pids ]] || die "a cluster is running ($RXEC_RUN): down.sh stops it"
bash "$REPO/e2e/local-node/build.sh" >/dev/null
[[ $RXEC_KUBE != newest ]] || bash "$REPO/e2e/local-node/build.sh" kubernetes-newest >/dev/null
bash "$REPO/e2e/local-node/images.sh" >/dev/null
bash "$HERE/images.sh" >/dev/null
T_BUILD=$(($(date +%s) - T0))

REPORT=$RXEC_CACHE/report.txt
mkdir -p "$RXEC_CACHE"
rm -f "$REPORT"
finish() {
  local rc=$? left=()
  trap - EXIT
  if [[ ${RXEC_KEEP:-0} == 1 ]]; then
    log "cluster left running (RXEC_KEEP=1): ip netns exec $NETNS kubectl (KUBECONFIG=$KUBECONFIG); stop it with $HERE/down.sh"
  else
    bash "$HERE/down.sh" || rc=1
    # What the cluster must not leave on the host.
    ip netns list | grep -qw "$NETNS" && left+=("netns $NETNS")
    [[ -e $RXEC_RUN ]] && left+=("$RXEC_RUN")
    pgrep -f "mount_tag=rxec" >/dev/null && left+=("qemu processes")
    ip link show "$CTL_BRIDGE" >/dev/null 2>&1 && left+=("link $CTL_BRIDGE")
    [[ ${#left[@]} == 0 ]] || { log "left on the host: ${left[*]}"; rc=1; }
    echo "host leftovers after down: ${left[*]:-none}" >>"$REPORT"
  fi
  [[ ! -s $REPORT ]] || sed 's/^/  /' "$REPORT" >&2
  log "e2e-rxe-cluster: exit $rc after $(($(date +%s) - T0)) s (builds and images: $T_BUILD s)"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

bash "$HERE/up.sh" >/dev/null
{
  echo "nodes: $RXEC_NODES qemu guests ($RXEC_ACCEL, $RXEC_SMP vCPU, $RXEC_MEM MiB), kernel $(awk '{print $3}' "$RXEC_RUN/guest-image")"
  echo "kubernetes: $("$KBIN/kubelet" --version) (the $RXEC_KUBE supported minor; feature gates: $(cat "$RXEC_RUN/feature-gates"))"
  awk '$2 == "ready" {printf "node %s Ready %.1f s after up.sh started\n", $1, $3}' "$RXEC_RUN/times"
} >>"$REPORT"

export E2E_KUBECONFIG=$KUBECONFIG E2E_NODE_HOOK=$HERE/hook.sh E2E_HELM=$BIN/helm E2E_REPORT=$REPORT E2E_POD_LOGS=$RXEC_RUN/logs/pods
# E2E_DEADLINE (unix seconds; .ci/run sets CI's): go test's timeout ends 2 min before it, room
# for the teardown, and the suite gets that same end as its E2E_DEADLINE: it skips a phase with
# less time left than the phase's budget, so a phase it starts can end before go test's timeout.
timeout=2400
if [[ -n ${E2E_DEADLINE:-} ]]; then
  [[ $E2E_DEADLINE =~ ^[0-9]+$ ]] || { log "E2E_DEADLINE=$E2E_DEADLINE: want unix seconds"; exit 1; }
  E2E_DEADLINE=$((E2E_DEADLINE - 120))
  secs_left=$((E2E_DEADLINE - $(date +%s)))
  ((secs_left >= timeout)) || timeout=$((secs_left > 60 ? secs_left : 60))
  log "the suite's E2E_DEADLINE in ${secs_left} s: its timeout ${timeout} s"
fi
log "running the e2e suite (rxe-cluster harness)"
(cd "$REPO" && in_ns go test -count=1 -v -timeout "${timeout}s" -run '^TestCluster$' ./e2e/suite "$@") 2>&1 | tee "$RXEC_RUN/logs/go-test.log"
