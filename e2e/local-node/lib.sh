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
# The cgroup (below each v1 controller's root) every pod and container of the node goes into.
CGROUP_ROOT=${CGROUP_ROOT:-kube-rdma-e2e}
BRIDGE=${BRIDGE:-krdmae2e0}
POD_SUBNET=${POD_SUBNET:-10.244.77.0/24}

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
