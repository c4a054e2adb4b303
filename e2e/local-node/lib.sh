# e2e/local-node/lib.sh: shared by up.sh and down.sh (sourced, not run).
#
# Everything the node creates lives below $NODE_RUN (state, sockets, CNI config and binaries,
# CDI specs, logs, PKI) or in places listed in $NODE_RUN/host/: the processes it started (by
# PID), the host sysctls the kubelet changes (values before), the iptables chains the kubelet
# adds (chains that existed before), its cgroup subtree, its bridge. down.sh undoes exactly these.
# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts sourcing it

E2E_CACHE=${E2E_CACHE:-/var/cache/kube-rdma-e2e}
NODE_RUN=${NODE_RUN:-/var/lib/kube-rdma-e2e/node}
NODE_NAME=${NODE_NAME:-kube-rdma-e2e}
BIN=${NODE_BIN:-$E2E_CACHE/bin/current}
# Ports on 127.0.0.1, away from the defaults so that a real cluster's components on the same
# machine do not collide with these.
ETCD_PORT=${ETCD_PORT:-32379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-32380}
API_PORT=${API_PORT:-36443}
KUBELET_PORT=${KUBELET_PORT:-30250}
KUBELET_HEALTHZ_PORT=${KUBELET_HEALTHZ_PORT:-30248}
# The daemon's metrics and /state port (hostNetwork), which the suite gives the chart.
METRICS_PORT=${METRICS_PORT:-39478}
# The cgroup (below each v1 controller's root) every pod and container of the node goes into.
CGROUP_ROOT=${CGROUP_ROOT:-kube-rdma-e2e}
BRIDGE=${BRIDGE:-krdmae2e0}
POD_SUBNET=${POD_SUBNET:-10.244.77.0/24}
# The fixture RDMA node (nodesim.LocalNode): its sysfs tree, the VFs on its RoCE PF, and the
# network namespace holding the far ends of the veth links that stand in for its netdevs.
FIXTURE=$NODE_RUN/fixture
FIXTURE_VFS=${FIXTURE_VFS:-24}
PEER_NETNS=${PEER_NETNS:-kube-rdma-e2e-peers}
# The stand-ins for a GPU's device plugin and DRA driver (hook.sh start), and where the fake RDMA
# netlink of the image localhost/kube-rdma:e2e-fakerdma keeps its state (internal/fakerdma).
GPU_DRA_DRIVER=gpu.e2e.kube-rdma.io
FAKE_RDMA_DIR=/run/kube-rdma-e2e-fakerdma
# The images images.sh builds: the chart's (and its -fakerdma variant) and the pods'.
TEST_IMAGE=localhost/rdma-test:e2e
# The Multus thick plugin (images.sh, from build.sh's binaries) and its manifest, a chart of
# this harness (the multus phase).
MULTUS_IMAGE=localhost/multus:e2e
# The chart and its image come from a registry on 127.0.0.1, as users install a release
# (docs/release.md): run.sh starts it (hack/registry.sh), images.sh pushes the -fakerdma
# variant there, `make release` the image index and the chart; containerd pulls the image by its
# tag, the suite installs oci://.../charts/kube-rdma (hook.sh describe: chart, image-digest).
# E2E_FROM_REGISTRY=0: the image imported into containerd and the repository's chart directory,
# as before.
E2E_FROM_REGISTRY=${E2E_FROM_REGISTRY:-1}
REGISTRY_PORT=${E2E_REGISTRY_PORT:-35000}
REGISTRY_ADDR=127.0.0.1:$REGISTRY_PORT
REGISTRY_PATH=$REGISTRY_ADDR/kube-rdma
RELEASE_VERSION=v0.0.0-e2e
RELEASE_DIST=$E2E_CACHE/release
if [[ $E2E_FROM_REGISTRY == 1 ]]; then
  IMAGE=$REGISTRY_PATH/kube-rdma:${RELEASE_VERSION#v}
else
  IMAGE=localhost/kube-rdma:e2e
fi
# The previous release (e2e/previous-release, its first line that is not a comment): prev.sh
# builds its chart and images from `git archive` of the commit into PREV_DIR (reused while the
# commit stays), up.sh imports its kube-rdma image, hook.sh describe names both for the suite's
# upgrade phase.
PREV_COMMIT=$(sed -n '/^[[:space:]]*[0-9a-f]\{40\}/{s/^[[:space:]]*\([0-9a-f]*\).*/\1/p;q}' \
  "$(dirname "${BASH_SOURCE[0]}")/../previous-release" 2>/dev/null || true)
PREV_DIR=$E2E_CACHE/prev/${PREV_COMMIT:-none}
PREV_CHART=$PREV_DIR/src/deploy/helm/kube-rdma
PREV_IMAGES=$PREV_DIR/images
PREV_IMAGE=localhost/kube-rdma:prev-${PREV_COMMIT:0:12}
# The kube-rdma CNI plugin's attachment records and the IPAM data of its chained entry.
CNI_STATE_DIR=$NODE_RUN/cni/kube-rdma
RDMA_IPAM_DIR=$NODE_RUN/cni/ipam-rdma

# The sysctls the kubelet sets when protectKernelDefaults is false (pkg/kubelet/cm, setupNode).
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
IPTABLES_TABLES=(filter nat mangle)

export KUBECONFIG=$NODE_RUN/pki/admin.kubeconfig
export CONTAINERD_ADDRESS=$NODE_RUN/containerd/containerd.sock
export CONTAINERD_NAMESPACE=k8s.io

log() { printf '%s local-node: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# record_pid NAME PID: down.sh stops the processes in the reverse order of this file.
record_pid() { echo "$1 $2" >>"$NODE_RUN/host/pids"; }
pid_of() { awk -v n="$1" '$1 == n {print $2}' "$NODE_RUN/host/pids" 2>/dev/null | tail -1; }
alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }

# node_in_use: a process a previous up.sh recorded still runs (its PID alive with the recorded
# program in its command line: a PID reused by something else does not count).
node_in_use() {
  local name pid
  [[ -f $NODE_RUN/host/pids ]] || return 1
  while read -r name pid; do
    alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name" && return 0
  done <"$NODE_RUN/host/pids"
  return 1
}

# node_lock: hold the machine-wide lock of local-node runs (flock on $NODE_LOCK, fd 9) until the
# calling script exits, waiting up to E2E_LOCK_WAIT seconds (default 1800) for another run to
# finish first. One node per machine: its ports, /var/lib/kubelet and $NODE_RUN are shared.
# The processes the node starts do not inherit the lock (start closes fd 9). A script run by one
# that holds it (run.sh -> up.sh) does not take it again (E2E_NODE_LOCKED=1).
NODE_LOCK=${NODE_LOCK:-/run/lock/kube-rdma-e2e-node.lock}
node_lock() {
  [[ ${E2E_NODE_LOCKED:-0} != 1 ]] || return 0
  mkdir -p "$(dirname "$NODE_LOCK")"
  exec 9>>"$NODE_LOCK"
  if ! flock -n 9; then
    log "another local-node run holds $NODE_LOCK; waiting up to ${E2E_LOCK_WAIT:-1800} s for it"
    flock -w "${E2E_LOCK_WAIT:-1800}" 9 || die "$NODE_LOCK still held after ${E2E_LOCK_WAIT:-1800} s"
  fi
  export E2E_NODE_LOCKED=1
}

# start NAME CMD...: run CMD in the background in a session of its own (a caller's signals and
# pipes do not reach it), logging to logs/NAME.log, and record its PID.
start() {
  local name=$1; shift
  setsid "$@" </dev/null >>"$NODE_RUN/logs/$name.log" 2>&1 9>&- &
  record_pid "$name" $!
}

# stop PID: SIGTERM, then SIGKILL after 10 s.
stop() {
  local pid=$1 i
  alive "$pid" || return 0
  kill "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do alive "$pid" || return 0; sleep 0.1; done
  log "pid $pid ignored SIGTERM, killing"
  kill -9 "$pid" 2>/dev/null || true
}

# start_kubelet: the kubelet with the configuration up.sh wrote (also hook.sh restart-kubelet).
start_kubelet() {
  local ip
  ip=$(cat "$NODE_RUN/host/node-ip")
  start kubelet "$BIN/kubelet" --config "$NODE_RUN/kubelet/config.yaml" --kubeconfig "$KUBECONFIG" \
    --root-dir "$NODE_RUN/kubelet" --cert-dir "$NODE_RUN/kubelet/pki" --hostname-override "$NODE_NAME" \
    --node-ip "$ip"
}
kubelet_healthy() { curl -sf "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" >/dev/null 2>&1; }

# iptables_chains: "<family> <table> <chain>" of every chain that exists now.
iptables_chains() {
  local ipt t
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in "${IPTABLES_TABLES[@]}"; do
      "$ipt" -w 5 -t "$t" -S 2>/dev/null | awk -v f="$ipt" -v t="$t" '$1 == "-N" {print f, t, $2}'
    done
  done
}

cgroup_controllers() {
  local d
  for d in /sys/fs/cgroup/*/; do
    d=${d%/}
    [[ -f $d/cgroup.procs && ! -L $d ]] && echo "$d"
  done
  return 0
}
