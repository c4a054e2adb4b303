#!/usr/bin/env bash
# e2e/local-node/run.sh: the e2e suite (e2e/suite) on a real single-node cluster on this
# machine; what `make e2e-local` runs. Builds or reuses the upstream binaries (build.sh) and
# the images (images.sh), starts the node with its fixture RDMA devices (up.sh), installs the
# chart with the imported image in chained CNI mode, runs the suite with this node's hook
# (hook.sh), which ends with `helm uninstall` and a check that the node is as before, and
# stops the node (down.sh), also on failure or interrupt.
#
#   bash e2e/local-node/run.sh [go test flags, e.g. -run TestParallelPods]
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
METRICS_PORT=${METRICS_PORT:-39478}
T0=$(date +%s)

[[ $(id -u) == 0 ]] || die "needs root (it starts a kubelet and containerd)"
node_lock
# Before the trap below: a node someone else runs is theirs to stop, not this run's.
! node_in_use || die "a local node is running ($NODE_RUN; started by up.sh without run.sh?): down.sh stops it"
bash "$HERE/build.sh" >/dev/null
bash "$HERE/images.sh" >/dev/null
T_BUILD=$(($(date +%s) - T0))

finish() {
  local rc=$?
  trap - EXIT
  if [[ $rc != 0 ]]; then
    # What the chart's containers said last (a daemon in CrashLoopBackOff says why here).
    for f in "$NODE_RUN"/pod-logs/kube-rdma_*/*/*.log; do
      [[ -f $f ]] || continue
      echo "--- ${f#"$NODE_RUN"/pod-logs/} (last 20 lines)" >&2
      tail -n 20 "$f" >&2
    done
  fi
  if [[ ${E2E_KEEP_NODE:-0} == 1 ]]; then
    log "node left running (E2E_KEEP_NODE=1): KUBECONFIG=$KUBECONFIG; stop it with $HERE/down.sh"
  else
    bash "$HERE/down.sh" || rc=1
  fi
  [[ ! -s ${REPORT:-} ]] || sed 's/^/  /' "$REPORT" >&2
  log "e2e-local: exit $rc after $(($(date +%s) - T0)) s (builds and images: $T_BUILD s)"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

REPORT=$E2E_CACHE/e2e-local-report.txt
rm -f "$REPORT"
bash "$HERE/up.sh" >/dev/null
echo "node Ready $(($(date +%s) - T0 - T_BUILD)) s after up.sh started" >"$REPORT"
"$HERE/hook.sh" node-state >"$NODE_RUN/node-state.before"

# RLIMIT_MEMLOCK the daemon's NRI plugin gives containers with our devices. runc raises a
# container's limit from the host; above the runtime's own hard limit that takes
# CAP_SYS_RESOURCE, which root has on a node but not in some sandboxes (this machine's
# among them: containerd keeps the 8 MiB hard limit it started with). There the pools get
# limits below it (the same mechanism, lowering instead of raising), or every pod with a
# device would fail to start.
if prlimit --memlock=unlimited:unlimited true 2>/dev/null; then
  ML_IB=512Mi ML_OTHERS="" E2E_MEMLOCK=ib:536870912,vf:unlimited,roce-shared:unlimited
else
  ML_IB=4Mi ML_OTHERS=", memlock: 6Mi" E2E_MEMLOCK=ib:4194304,vf:6291456,roce-shared:6291456
  echo "memlock: this machine's root cannot raise RLIMIT_MEMLOCK (no CAP_SYS_RESOURCE): pools at 4Mi and 6Mi, below containerd's $(ulimit -Hl) KiB" >>"$REPORT"
fi
export E2E_MEMLOCK

# What every phase's chart install shares (helm install -f values-node.yaml -f <phase's>): the
# image, the node's paths and the API server's own address.
cat >"$NODE_RUN/values-node.yaml" <<YAML
image: {repository: localhost/kube-rdma, tag: e2e, pullPolicy: Never}
config: {resourcePrefix: rdma.kube-rdma.io}
devicePlugin:
  cdiDir: "$NODE_RUN/cdi"
  metricsPort: $METRICS_PORT
  # No kube-proxy on this node: the service address the in-cluster config names (10.96.0.1)
  # does not answer, so the node-state publisher and the DRA driver go to the API server directly.
  extraEnv:
  - {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
  - {name: KUBERNETES_SERVICE_PORT, value: "$API_PORT"}
hostPaths: {sysfsRoot: "$FIXTURE/sys", kubeletDir: "$NODE_RUN/kubelet"}
cni: {binDir: "$NODE_RUN/cni/bin", confDir: "$NODE_RUN/cni/net.d"}
YAML
# Pools of every kind on the fixture node: exclusive InfiniBand HCAs, exclusive RoCE VFs whose
# netdevs the chained CNI entry moves into pods, the RoCE PF shared by 8 pods. ib is NCCL's
# fabric; the others set no NCCL_* (nccl: false), so a pod with ib and vf gets ib's NCCL_IB_HCA.
cat >"$NODE_RUN/values.yaml" <<YAML
config:
  pools:
  - {name: ib, mode: exclusive, memlock: $ML_IB, selectors: {linkLayers: [InfiniBand]}}
  - {name: vf, mode: exclusive, nccl: false$ML_OTHERS, selectors: {kinds: [VF], linkLayers: [Ethernet]}}
  - {name: roce-shared, mode: shared, slots: 8, nccl: false$ML_OTHERS, selectors: {kinds: [PF], linkLayers: [Ethernet]}}
# containerd runs with NRI on (up.sh): the daemon's NRI plugin sets RLIMIT_MEMLOCK of the
# containers with our devices (the pools' memlock above).
nri: {enabled: true, socket: "$NODE_RUN/nri/nri.sock"}
cni:
  install: true
  mode: chained
  # This kernel has no RDMA netlink: say the mode instead of asking it.
  pluginConfig: {rdmaNetnsMode: shared, stateDir: "$CNI_STATE_DIR", logFile: "$NODE_RUN/logs/kube-rdma-cni.log"}
  chained:
    pool: vf
    ipam: {type: host-local, ranges: [[{subnet: 192.168.77.0/24}]], dataDir: "$RDMA_IPAM_DIR"}
YAML
# The chart's output in each CNI mode, validated by this API server (schemas, defaulting,
# admission) without creating anything.
kubectl create namespace kube-rdma >/dev/null
kubectl apply -f "$HERE/nad-crd.yaml" >/dev/null
kubectl wait --for=condition=Established crd/network-attachment-definitions.k8s.cni.cncf.io --timeout=30s >/dev/null
dry_run() {
  helm template kube-rdma "$REPO/deploy/helm/kube-rdma" --namespace kube-rdma "$@" |
    kubectl create --dry-run=server -f - >/dev/null || die "the API server refused the chart's output ($*)"
}
dry_run
dry_run --set cni.install=true,cni.mode=chained,cni.chained.pool=ib
dry_run --set cni.install=true,cni.mode=multus --set-json 'cni.networks=[{"name":"rdma-ib","pool":"ib"}]'
# The DRA front end: its RBAC and a DeviceClass (resource.k8s.io/v1, its CEL selector compiled
# by this API server; extendedResourceName is dropped without DRAExtendedResource).
dry_run --set dra.enabled=true --set-json \
  'config.pools=[{"name":"ib","mode":"exclusive","frontend":"dra","selectors":{"linkLayers":["InfiniBand"]}}]'
kubectl delete -f "$HERE/nad-crd.yaml" --wait >/dev/null
echo "chart output accepted by the API server (dry-run) in CNI modes none, chained, multus, and with dra.enabled" >>"$REPORT"

start=$(date +%s.%N)
helm install kube-rdma "$REPO/deploy/helm/kube-rdma" --namespace kube-rdma --create-namespace \
  -f "$NODE_RUN/values-node.yaml" -f "$NODE_RUN/values.yaml" --wait --timeout 180s >/dev/null
# helm's --wait can pass a DaemonSet whose status the controller has not filled in yet.
kubectl -n kube-rdma rollout status ds/kube-rdma --timeout=120s >/dev/null
echo "chart installed, DaemonSet ready: $(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {printf "%.1f", n - s}') s" >>"$REPORT"

export E2E_KUBECONFIG=$KUBECONFIG E2E_NODE=$NODE_NAME E2E_NODE_HOOK=$HERE/hook.sh E2E_IMAGE=localhost/rdma-test:e2e
export E2E_IMAGE_PULL_POLICY=Never E2E_RESOURCE_PREFIX=rdma.kube-rdma.io
export E2E_POOLS="ib:exclusive:2,vf:exclusive:$FIXTURE_VFS,roce-shared:shared:8"
export E2E_CHAINED_POOL=vf E2E_NCCL_POOLS=ib E2E_PORT_DEVICE=mlx5_1 E2E_FIXTURE_DEVICES=1
export E2E_HELM=$BIN/helm E2E_HELM_RELEASE=kube-rdma E2E_HELM_NAMESPACE=kube-rdma
export E2E_CHART=$REPO/deploy/helm/kube-rdma E2E_NODE_STATE_BEFORE=$NODE_RUN/node-state.before
export E2E_DAEMON_STATE=http://127.0.0.1:$METRICS_PORT/state
export E2E_UNINSTALL=1 E2E_PARALLEL_PODS=${E2E_PARALLEL_PODS:-20} E2E_REPORT=$REPORT
log "running the e2e suite"
(cd "$REPO" && go test -count=1 -v -timeout 40m ./e2e/suite "$@")

# --- GPU-aligned phase ---------------------------------------------------------------------------
# The suite uninstalled the chart. Now the InfiniBand pool gets binding gpuAligned. Such a pool
# needs the exclusive RDMA netns mode, which this kernel (no RDMA netlink) can neither report
# nor provide, so this phase installs the image built with the tag kuberdma_e2e, whose binaries
# fake RDMA netlink (internal/fakerdma: a state file of which netns each RDMA device is in);
# the netdev moves, the kubelet, PodResources and containerd are real. fakegpu stands in for
# NVIDIA's GPU device plugin: the fixture's two H100s as nvidia.com/gpu, by UUID.
# E2E_GPU_ALIGNED=0 skips it.
gpu_aligned_phase() { # (body not indented, like its heredocs)
log "GPU-aligned phase"
FAKE_RDMA_DIR=/run/kube-rdma-e2e-fakerdma
[[ ! -e $FAKE_RDMA_DIR ]] || die "$FAKE_RDMA_DIR exists (left by an earlier run?)"
echo "$FAKE_RDMA_DIR" >>"$NODE_RUN/host/created-dirs"
(cd "$REPO" && go build -o "$NODE_RUN/fakegpu" ./e2e/local-node/fakegpu)
start fakegpu "$NODE_RUN/fakegpu" -sysfs-root "$FIXTURE/sys" -proc-root "$FIXTURE/proc"
# The answer key, from the fixture's layout (nodesim.LocalNode): each GPU's PCIe switch holds
# one InfiniBand HCA. GPU UUIDs as the fixture's procfs gives them.
gpu_uuid() { sed -n 's/^GPU UUID:[[:space:]]*//p' "$FIXTURE/proc/driver/nvidia/gpus/$1/information"; }
E2E_GPU_NICS="$(gpu_uuid 0000:19:00.0)=mlx5_0/ibp24s0,$(gpu_uuid 0000:9b:00.0)=mlx5_1/ibp154s0"
export E2E_GPU_NICS E2E_GPU_ALIGNED_POOL=ib E2E_FAKE_RDMA_STATE=$FAKE_RDMA_DIR/state.json
"$HERE/hook.sh" node-state >"$NODE_RUN/node-state.gpualigned"
cat >"$NODE_RUN/values-gpualigned.yaml" <<YAML
image: {tag: e2e-fakerdma}
config:
  pools:
  - {name: ib, mode: exclusive, binding: gpuAligned, selectors: {linkLayers: [InfiniBand]}}
devicePlugin: {allocDir: "$NODE_RUN/alloc"}
cni:
  install: true
  mode: chained
  pluginConfig: {rdmaNetnsMode: exclusive, procRoot: "$FIXTURE/proc", stateDir: "$CNI_STATE_DIR", logFile: "$NODE_RUN/logs/kube-rdma-cni.log"}
  chained: {pool: ib}
YAML
helm install kube-rdma "$REPO/deploy/helm/kube-rdma" --namespace kube-rdma --create-namespace \
  -f "$NODE_RUN/values-node.yaml" -f "$NODE_RUN/values-gpualigned.yaml" --wait --timeout 180s >/dev/null
kubectl -n kube-rdma rollout status ds/kube-rdma --timeout=120s >/dev/null
export E2E_POOLS=ib:exclusive:2 E2E_CHAINED_POOL='' E2E_MEMLOCK='' E2E_NODE_STATE_BEFORE=$NODE_RUN/node-state.gpualigned
(cd "$REPO" && go test -count=1 -v -timeout 15m ./e2e/suite -run '^(TestGPUAligned|TestUninstall)$')
}
# The phases below install the chart again; a -run that left out the suite's TestUninstall left
# it installed.
if [[ ${E2E_GPU_ALIGNED:-1} == 1 || ${E2E_DRA:-1} == 1 ]] && helm status kube-rdma --namespace kube-rdma >/dev/null 2>&1; then
  helm uninstall kube-rdma --namespace kube-rdma --wait --timeout 180s >/dev/null
fi
if [[ ${E2E_GPU_ALIGNED:-1} == 1 ]]; then gpu_aligned_phase; fi

# --- DRA phase -----------------------------------------------------------------------------------
# The pools served as a DRA driver: claims from templates, GPU and NIC aligned by matchAttribute
# with a stand-in GPU DRA driver, port-down taints, extended resources through DeviceClasses,
# pod start latency against the device plugin (dra-phase.sh says how). E2E_DRA=0 skips it.
if [[ ${E2E_DRA:-1} == 1 ]]; then bash "$HERE/dra-phase.sh"; fi
