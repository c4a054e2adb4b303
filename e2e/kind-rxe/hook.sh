#!/usr/bin/env bash
# e2e/kind-rxe/hook.sh: the node hook of the e2e suite (E2E_NODE_HOOK) for a kind node, done
# with `docker exec <node>`:
#
#   hook.sh describe | links | records | leases | node-state | restart-kubelet | cni-chained
#   hook.sh port-state DEV PORT up|down
#
# describe (what run.sh provisioned, for the suite's kind-rxe harness, e2e/suite/kindrxe_test.go)
# reads run.sh's KIND_RXE_TAG, KIND_RXE_SUBNET_PREFIX and KIND_RXE_BW_SECONDS; cni-chained
# succeeds once the node's first conflist has the kube-rdma entry.
#
# NODE picks the kind node (a node container's name is its Kubernetes node name); default
# E2E_NODE, else the first worker of KIND_CLUSTER (default kube-rdma-rxe). Exit 0 on success,
# else non-zero with one line on stderr. See e2e/kind-rxe/README.md for each verb's output.
set -Eeuo pipefail

KIND_CLUSTER=${KIND_CLUSTER:-kube-rdma-rxe}
DOCKER=${DOCKER:-docker}
KIND=${KIND:-kind}
# The plugin's stateDir (chart: cni.pluginConfig.stateDir) and where host-local keeps leases.
STATE_DIR=${STATE_DIR:-/var/lib/cni/kube-rdma}
LEASE_DIR=${LEASE_DIR:-/var/lib/cni/networks}
CNI_BIN_DIR=${CNI_BIN_DIR:-/opt/cni/bin}
CNI_CONF_DIR=${CNI_CONF_DIR:-/etc/cni/net.d}
CDI_DIRS=${CDI_DIRS:-/var/run/cdi /etc/cdi}
DEVICE_PLUGIN_DIR=${DEVICE_PLUGIN_DIR:-/var/lib/kubelet/device-plugins}
KUBELET_HEALTHZ=${KUBELET_HEALTHZ:-http://127.0.0.1:10248/healthz}
KUBELET_TIMEOUT=${KUBELET_TIMEOUT:-120}

die() { echo "kind-rxe hook: $*" >&2; exit 1; }

node() {
  if [[ -n ${NODE:-} ]]; then echo "$NODE"; return; fi
  if [[ -n ${E2E_NODE:-} ]]; then echo "$E2E_NODE"; return; fi
  local n
  n=$("$KIND" get nodes --name "$KIND_CLUSTER" 2>/dev/null | grep -- '-worker' | sort -V | head -n1) || true
  [[ -n $n ]] || die "no NODE given and no worker in kind cluster $KIND_CLUSTER"
  echo "$n"
}

# nx CMD...: run CMD in the node container.
nx() { "$DOCKER" exec "$N" "$@"; }
# nsh ARG... <<'EOF': run the sh script on stdin in the node container, with ARGs as $1...
nsh() { "$DOCKER" exec -i "$N" sh -s -- "$@"; }

# rdma_netdev DEV PORT: the node's netdev under RDMA device DEV, checked to be this node's.
# In the RDMA "shared" netns mode every node container sees every rxe device of the host
# kernel, and each worker's RDMA netdev may have the same name, so the name alone could name
# another node's link. A RoCE port's GID 0 is fe80::<EUI-64 of its netdev's MAC>: it must
# match the MAC of the netdev of that name in this node.
rdma_netdev() {
  local dev=$1 port=$2 base nd mac gid0 want
  base=/sys/class/infiniband/$dev
  nx test -d "$base/ports/$port" || die "port-state: $N has no RDMA device $dev with port $port"
  nd=$(nx cat "$base/parent" 2>/dev/null || nx cat "$base/ports/$port/gid_attrs/ndevs/0" 2>/dev/null) ||
    die "port-state: cannot tell the netdev of $dev port $port on $N"
  mac=$(nx cat "/sys/class/net/$nd/address" 2>/dev/null) ||
    die "port-state: $dev's netdev $nd is not in $N's network namespace (moved into a pod?)"
  gid0=$(nx cat "$base/ports/$port/gids/0")
  local a b c d e f
  IFS=: read -r a b c d e f <<<"$mac"
  want=$(printf 'fe80:0000:0000:0000:%02x%s:%sff:fe%s:%s%s' $((0x$a ^ 2)) "$b" "$c" "$d" "$e" "$f")
  [[ $gid0 == "$want" ]] ||
    die "port-state: $dev (GID 0 $gid0) is not on $N's $nd (MAC $mac): it belongs to another node"
  echo "$nd"
}

verb_links() {
  nx ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | LC_ALL=C sort
}

verb_records() {
  nsh "$STATE_DIR" <<'EOF' | LC_ALL=C sort
cd "$1" 2>/dev/null || exit 0
for f in * .[!.]*; do
  [ -e "$f" ] && [ "$f" != lock ] && [ "$f" != podresources-get-disabled ] && [ "$f" != metrics ] && echo "$f"
done
:
EOF
}

verb_leases() {
  # host-local keeps one file per lease, named by the IP, in <dataDir>/<network>/, next to
  # last_reserved_ip.<range set> and lock.
  nsh "$LEASE_DIR" <<'EOF' | LC_ALL=C sort
cd "$1" 2>/dev/null || exit 0
for f in */*; do
  [ -f "$f" ] || continue
  case ${f##*/} in lock|last_reserved_ip.*) continue ;; esac
  echo "$f"
done
:
EOF
}

verb_port_state() {
  [[ $# == 3 ]] || die "usage: port-state DEV PORT up|down"
  local dev=$1 port=$2 state=$3 nd route
  [[ $state == up || $state == down ]] || die "port-state: state $state is not up or down"
  nd=$(rdma_netdev "$dev" "$port")
  # Never the node's own uplink: without it the kubelet loses the API server.
  route=$(nx ip -o route show default 2>/dev/null || true)
  if [[ $route =~ (^|[[:space:]])dev[[:space:]]+$nd([[:space:]]|$) ]]; then
    die "port-state: $dev's netdev $nd carries $N's default route; refusing to take it $state"
  fi
  nx ip link set dev "$nd" "$state" || die "port-state: ip link set $nd $state on $N failed"
}

verb_restart_kubelet() {
  nx systemctl restart kubelet || die "restart-kubelet: systemctl restart kubelet on $N failed"
  local deadline=$((SECONDS + KUBELET_TIMEOUT)) out
  while ((SECONDS < deadline)); do
    out=$(nx curl -fsS --max-time 2 "$KUBELET_HEALTHZ" 2>/dev/null || true)
    [[ $out == ok ]] && return 0
    sleep 0.5
  done
  die "restart-kubelet: $KUBELET_HEALTHZ on $N did not answer ok within ${KUBELET_TIMEOUT}s"
}

# node-state: what the chart may leave on the node, one line per item, sorted:
#   cni-bin <dir>/kube-rdma sha256:<hex>|absent
#   conflist <path> sha256:<hex>          (every *.conf, *.conflist, *.json in the conf dir)
#   cdi <path>                            (kube-rdma-* in each CDI dir)
#   device-plugin <path>                  (kube-rdma-* in the device-plugins dir)
#   pools-file <path>                     (the daemon's, in the chart's default allocDir)
verb_describe() {
  local tag=${KIND_RXE_TAG:-kind-e2e} workers
  workers=$("$KIND" get nodes --name "$KIND_CLUSTER" 2>/dev/null | grep -- '-worker' | sort -V | tr '\n' ' ') || true
  [[ -n $workers ]] || die "describe: no worker in kind cluster $KIND_CLUSTER"
  printf '%s\n' "harness kind-rxe" "image localhost/kube-rdma:$tag" "test-image localhost/rdma-test:$tag" \
    "workers $workers" "rdma-subnet-prefix ${KIND_RXE_SUBNET_PREFIX:-172.31.250}" "bw-seconds ${KIND_RXE_BW_SECONDS:-5}"
}

verb_cni_chained() {
  nsh "$CNI_CONF_DIR" <<'EOF'
f=$(ls "$1"/*.conflist 2>/dev/null | LC_ALL=C sort | head -n1)
[ -n "$f" ] || { echo "no conflist in $1" >&2; exit 1; }
grep -q '"kube-rdma"' "$f" || { echo "no kube-rdma entry in $f" >&2; exit 1; }
echo "$f"
EOF
}

verb_node_state() {
  nsh "$CNI_BIN_DIR" "$CNI_CONF_DIR" "$DEVICE_PLUGIN_DIR" "$CDI_DIRS" <<'EOF' | LC_ALL=C sort
bin=$1/kube-rdma conf=$2 dp=$3 cdi=$4
if [ -f "$bin" ]; then echo "cni-bin $bin sha256:$(sha256sum "$bin" | cut -d" " -f1)"
else echo "cni-bin $bin absent"; fi
for f in "$conf"/*.conflist "$conf"/*.conf "$conf"/*.json; do
  [ -f "$f" ] && echo "conflist $f sha256:$(sha256sum "$f" | cut -d" " -f1)"
done
for d in $cdi; do for f in "$d"/kube-rdma-*; do [ -e "$f" ] && echo "cdi $f"; done; done
for f in "$dp"/kube-rdma-*; do [ -e "$f" ] && echo "device-plugin $f"; done
[ -e /var/run/kube-rdma/alloc/_pools.json ] && echo "pools-file /var/run/kube-rdma/alloc/_pools.json"
[ -e /var/run/kube-rdma/alloc/_lent-devices.json ] && echo "pools-file /var/run/kube-rdma/alloc/_lent-devices.json"
:
EOF
}

main() {
  [[ $# -ge 1 ]] || die "usage: hook.sh describe|links|records|leases|node-state|restart-kubelet|cni-chained|port-state DEV PORT up|down"
  if [[ $1 == describe ]]; then verb_describe; return; fi
  N=$(node)
  "$DOCKER" inspect -f '{{.State.Running}}' "$N" 2>/dev/null | grep -qx true || die "kind node $N is not a running container"
  local verb=$1
  shift
  case $verb in
    links) verb_links ;;
    records) verb_records ;;
    leases) verb_leases ;;
    port-state) verb_port_state "$@" ;;
    restart-kubelet) verb_restart_kubelet ;;
    node-state) verb_node_state ;;
    cni-chained) verb_cni_chained ;;
    *) die "unknown verb $verb" ;;
  esac
}

main "$@"
