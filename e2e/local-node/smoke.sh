#!/usr/bin/env bash
# e2e/local-node/smoke.sh: the chart on a real node, before the e2e suite exists. Starts the
# node (up.sh), installs deploy/helm/kube-rdma with the imported localhost/kube-rdma:e2e image,
# waits for the DaemonSet, checks that every pool registered with the kubelet, runs a pod of
# the test image, uninstalls the chart and checks it left no socket and no CDI spec, then stops
# the node (down.sh), also on failure.
#
#   bash e2e/local-node/build.sh && bash e2e/local-node/images.sh && bash e2e/local-node/smoke.sh
#
# The node has no RDMA devices yet (the fixture tree is the next step), so the pools are empty.
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
PATH=$BIN:$PATH
METRICS_PORT=${METRICS_PORT:-39478}

finish() {
  local rc=$?
  trap - EXIT
  bash "$HERE/down.sh" || rc=1
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

bash "$HERE/up.sh" >/dev/null
START=$(date +%s)

log "helm install"
helm install kube-rdma "$REPO/deploy/helm/kube-rdma" --namespace kube-rdma --create-namespace \
  --set image.repository=localhost/kube-rdma,image.tag=e2e,image.pullPolicy=Never \
  --set "devicePlugin.cdiDir=$NODE_RUN/cdi" \
  --set "devicePlugin.metricsPort=$METRICS_PORT" --wait --timeout 120s >/dev/null
kubectl -n kube-rdma rollout status ds/kube-rdma --timeout=60s >/dev/null
log "DaemonSet ready ($(($(date +%s) - START)) s after up)"

# Every pool serves a socket and registered (the kubelet lists registered resources in the
# node's capacity, with 0 for an empty pool).
for pool in ib roce-shared; do
  deadline=$(($(date +%s) + 30))
  until kubectl get node "$NODE_NAME" -o jsonpath="{.status.capacity}" | grep -q "rdma.kube-rdma.io/$pool"; do
    [[ $(date +%s) -lt $deadline ]] || die "pool $pool not in the node's capacity"
    sleep 0.5
  done
  [[ -S /var/lib/kubelet/device-plugins/kube-rdma-$pool.sock ]] || die "no socket for pool $pool"
done
log "pools registered: $(kubectl get node "$NODE_NAME" -o jsonpath='{.status.capacity}')"

kubectl run rdma-test --image=localhost/rdma-test:e2e --image-pull-policy=Never --restart=Never \
  --command -- sh -c 'ibv_devices; ip -o link' >/dev/null
kubectl wait --for=jsonpath='{.status.phase}'=Succeeded pod/rdma-test --timeout=60s >/dev/null
kubectl logs rdma-test | sed 's/^/  rdma-test: /' >&2
kubectl delete pod rdma-test --wait >/dev/null

helm uninstall kube-rdma --namespace kube-rdma --wait --timeout 60s >/dev/null
deadline=$(($(date +%s) + 30))
while compgen -G "/var/lib/kubelet/device-plugins/kube-rdma-*.sock" >/dev/null ||
  compgen -G "$NODE_RUN/cdi/kube-rdma-*" >/dev/null; do
  if [[ $(date +%s) -ge $deadline ]]; then
    ls -l /var/lib/kubelet/device-plugins/ "$NODE_RUN/cdi/" >&2
    die "helm uninstall left sockets or CDI specs"
  fi
  sleep 0.5
done
log "uninstalled; no socket and no CDI spec left. smoke test passed"
