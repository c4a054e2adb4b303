#!/usr/bin/env bash
# e2e/local-node/dra-phase.sh: the DRA phase of run.sh, on the node run.sh started (up.sh runs it
# with the DRA alpha gates), after the chart of the earlier phases was uninstalled. run.sh runs
# it with the suite's E2E_* environment exported; E2E_DRA=0 makes run.sh skip it.
#
# 1. fakegpudra, a stand-in GPU DRA driver (gpu.e2e.kube-rdma.io), publishes the fixture's two
#    GPUs with pcieRoot, pciBusID and kube-rdma.io/pcieSwitch; a DeviceClass of the same name.
# 2. helm install with dra.enabled and three pools: ib-dra (frontend dra, the two InfiniBand
#    HCAs, one under each GPU's switch), vf-dra (frontend dra, the first half of the RoCE VFs,
#    all on GPU0's switch) and vf-dp (the device plugin, the other half); no CNI, no NRI: a
#    claim's container and a device plugin pod's get the same kind of thing (CDI device nodes
#    and NCCL environment), so their start latencies compare. The dra pools are not named ib
#    and vf: the earlier phases' device plugin advertised rdma.kube-rdma.io/ib and /vf, which
#    the kubelet keeps in the node's allocatable at 0 once their plugin is gone, and the
#    scheduler gives an extended resource the node lists to the device plugin, not to a
#    DeviceClass's extendedResourceName.
# 3. go test ./e2e/suite -run '^(TestDRA.*|TestUninstall)$': the claims (dra_test.go), then
#    helm uninstall and the node-state check against the state taken before step 2.
# 4. Once the driver is gone from the kubelet, no ResourceSlice of rdma.kube-rdma.io stays.
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
PATH=$BIN:$PATH:/usr/local/go/bin
METRICS_PORT=${METRICS_PORT:-39478}
GPU_DRIVER=gpu.e2e.kube-rdma.io
REPORT=${E2E_REPORT:?run by run.sh, which sets E2E_REPORT}

node_in_use || die "no local node is running (run.sh runs this after its other phases)"
log "DRA phase"

"$HERE/hook.sh" node-state >"$NODE_RUN/node-state.dra"
(cd "$REPO" && go build -o "$NODE_RUN/fakegpudra" ./e2e/local-node/fakegpudra)
start fakegpudra "$NODE_RUN/fakegpudra" -kubeconfig "$KUBECONFIG" -node "$NODE_NAME" \
  -sysfs-root "$FIXTURE/sys" -proc-root "$FIXTURE/proc" -cdi-dir "$NODE_RUN/cdi" \
  -plugin-dir "$NODE_RUN/kubelet/plugins/$GPU_DRIVER" -registry-dir "$NODE_RUN/kubelet/plugins_registry"
kubectl apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: $GPU_DRIVER}
spec:
  selectors:
  - cel: {expression: 'device.driver == "$GPU_DRIVER"'}
YAML

# The VFs are mlx5_3.. (nodesim.LocalNode): half to each pool, by RDMA device name.
half=$((FIXTURE_VFS / 2))
vf_dra=$(seq -s, -f 'mlx5_%g' 3 $((2 + half)))
vf_dp=$(seq -s, -f 'mlx5_%g' $((3 + half)) $((2 + FIXTURE_VFS)))
cat >"$NODE_RUN/values-dra.yaml" <<YAML
config:
  pools:
  - {name: ib-dra, mode: exclusive, frontend: dra, selectors: {linkLayers: [InfiniBand]}}
  - {name: vf-dra, mode: exclusive, frontend: dra, nccl: false, selectors: {linkLayers: [Ethernet], kinds: [VF], rdmaDevices: [$vf_dra]}}
  - {name: vf-dp, mode: exclusive, nccl: false, selectors: {linkLayers: [Ethernet], kinds: [VF], rdmaDevices: [$vf_dp]}}
dra: {enabled: true}
YAML
start=$(date +%s.%N)
helm install kube-rdma "$REPO/deploy/helm/kube-rdma" --namespace kube-rdma --create-namespace \
  -f "$NODE_RUN/values-node.yaml" -f "$NODE_RUN/values-dra.yaml" --wait --timeout 180s >/dev/null
kubectl -n kube-rdma rollout status ds/kube-rdma --timeout=120s >/dev/null
echo "dra: chart installed with dra.enabled (pools ib-dra and vf-dra frontend dra, vf-dp device plugin), DaemonSet ready: $(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {printf "%.1f", n - s}') s" >>"$REPORT"

# ib-dra is NCCL's fabric: the VF pools set no NCCL_* (a config with two NCCL pools is refused).
export E2E_POOLS=vf-dp:exclusive:$((FIXTURE_VFS - half)) E2E_CHAINED_POOL='' E2E_MEMLOCK='' E2E_NCCL_POOLS=ib-dra
export E2E_DRA_POOLS=ib-dra:2,vf-dra:$half E2E_DRA_ALIGN_POOL=ib-dra E2E_DRA_LATENCY_POOL=vf-dra
export E2E_DRA_LATENCY_PODS=${E2E_DRA_LATENCY_PODS:-5} E2E_DRA_GPU_DRIVER=$GPU_DRIVER
# mlx5_0: the device a claim for any HCA of ib-dra gets first (device names sort by PCI address),
# so a claim that still gets it while it is tainted shows.
export E2E_DRA_PORT_DEVICE=mlx5_0 E2E_NODE_STATE_BEFORE=$NODE_RUN/node-state.dra
(cd "$REPO" && go test -count=1 -v -timeout 20m ./e2e/suite -run '^(TestDRA.*|TestUninstall)$')

# The kubelet deletes the slices of a driver that unregistered (after a grace period).
deadline=$(($(date +%s) + 120))
while [[ -n $(kubectl get resourceslices --field-selector "spec.driver=rdma.kube-rdma.io" -o name) ]]; do
  [[ $(date +%s) -lt $deadline ]] || die "ResourceSlices of rdma.kube-rdma.io left 120 s after helm uninstall"
  sleep 1
done
echo "dra: no ResourceSlice of rdma.kube-rdma.io left $(($(date +%s) - deadline + 120)) s after the chart's uninstall" >>"$REPORT"
