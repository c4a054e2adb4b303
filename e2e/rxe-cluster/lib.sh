# e2e/rxe-cluster/lib.sh: shared by up.sh, down.sh, hook.sh and run.sh (sourced, not run).
#
# The cluster lives in one network namespace made for the run, $NETNS: a bridge $CTL_BRIDGE
# ($CTL_NET.1) that carries the control plane's traffic to the guests' first NICs, a bridge
# $RDMA_BRIDGE (no address) that joins the guests' second NICs (the soft-RoCE link), the
# control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, bound in
# $NETNS), and the qemu processes (their tap devices are in $NETNS). Nothing is addressed
# outside $NETNS. All state is below $RXEC_RUN; down.sh removes it and the namespace.
# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts sourcing it

E2E_CACHE=${E2E_CACHE:-/var/cache/kube-rdma-e2e}
RXEC_CACHE=${RXEC_CACHE:-$E2E_CACHE/rxe-cluster}
RXEC_RUN=${RXEC_RUN:-/var/lib/kube-rdma-rxec}
BIN=${NODE_BIN:-$E2E_CACHE/bin/current}
# The cluster's Kubernetes minor: newest (the default; modules/kubernetes-newest, linked from
# $E2E_CACHE/bin/kubernetes-newest: the guests run cgroup v2, which kubelets from 1.35 on need)
# or oldest (modules/kubernetes, the local-node e2e's). KBIN has its kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kubectl; BIN the rest.
RXEC_KUBE=${RXEC_KUBE:-newest}
case $RXEC_KUBE in
newest) KBIN=$E2E_CACHE/bin/kubernetes-newest ;;
oldest) KBIN=$BIN ;;
*) printf 'rxe-cluster: RXEC_KUBE=%s: want newest or oldest\n' "$RXEC_KUBE" >&2; exit 2 ;;
esac
NETNS=${RXEC_NETNS:-kube-rdma-rxec}
CTL_BRIDGE=rxecctl0
RDMA_BRIDGE=rxecrdma0
CTL_NET=10.77.0          # control network: host side .1, node i .1$i
RDMA_NET=10.78.0         # soft-RoCE link: node i's NIC .1$i/24 before a pod takes it
API_PORT=6443
ETCD_PORT=2379
KUBELET_PORT=10250
METRICS_PORT=9478
# Guests: count, memory (MiB; the root file system is RAM), vCPUs, qemu accelerator.
RXEC_NODES=${RXEC_NODES:-2}
RXEC_MEM=${RXEC_MEM:-3072}
RXEC_SMP=${RXEC_SMP:-1}
RXEC_ACCEL=${RXEC_ACCEL:-tcg,thread=single}
RXEC_READY_TIMEOUT=${RXEC_READY_TIMEOUT:-600}
# The guest kernel's modules beyond e2e/rxe's: containerd's overlayfs snapshotter, the pods'
# bridge network, the guests' virtio NICs.
RXEC_MODULES="overlay bridge virtio_net"
IMAGE=localhost/kube-rdma:e2e
TEST_IMAGE=localhost/rdma-test:e2e

export KUBECONFIG=$RXEC_RUN/pki/admin.kubeconfig

log() { printf '%s rxe-cluster: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# node_name I, node_ip I, node_rdma_ip I, node_mac I NIC: the guests' identities (I from 1).
node_name() { echo "rxec-$1"; }
node_ip() { echo "$CTL_NET.1$1"; }
node_rdma_ip() { echo "$RDMA_NET.1$1"; }
node_mac() { printf '52:54:00:77:%02x:%02x\n' "$2" "$1"; }

# in_ns CMD...: CMD in the run's network namespace.
in_ns() { ip netns exec "$NETNS" "$@"; }

record_pid() { echo "$1 $2" >>"$RXEC_RUN/pids"; }
alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }

# start NAME CMD...: CMD in $NETNS, in a session of its own, logging to logs/NAME.log, with no
# file descriptor of the caller's but stdin/out/err: a lock the caller holds (`flock
# /tmp/e2e-local.lock bash up.sh`) is not kept by the cluster after the caller exits.
start() {
  local name=$1; shift
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if [[ $fd -gt 2 ]]; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid ip netns exec "$NETNS" "$@" </dev/null >>"$RXEC_RUN/logs/$name.log" 2>&1
  ) &
  record_pid "$name" $!
}

# stop PID: SIGTERM, then SIGKILL after 10 s.
stop() {
  local pid=$1 i
  alive "$pid" || return 0
  kill "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do alive "$pid" || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

# guest_exec I TIMEOUT SCRIPT: run the shell SCRIPT as root in guest I through its command
# directory on the 9p share (the guest's agent loop polls it), print its output, return its
# exit status. 124 when it did not finish in TIMEOUT seconds.
guest_exec() {
  local i=$1 limit=$2 script=$3 dir id deadline rc
  dir=$RXEC_RUN/node$i/share/cmd
  id=$(date +%s%N).$$
  printf '%s\n' "$script" >"$dir/.$id.tmp"
  mv "$dir/.$id.tmp" "$dir/$id.sh"
  deadline=$(($(date +%s) + limit))
  until [[ -f $dir/$id.rc ]]; do
    if [[ $(date +%s) -ge $deadline ]]; then
      rm -f "$dir/$id.sh"
      echo "guest $i: no answer in ${limit}s" >&2
      return 124
    fi
    sleep 0.1
  done
  cat "$dir/$id.out"
  rc=$(cat "$dir/$id.rc")
  rm -f "$dir/$id".*
  return "$rc"
}
