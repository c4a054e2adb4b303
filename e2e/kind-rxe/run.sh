#!/usr/bin/env bash
# e2e/kind-rxe/run.sh: a kind cluster (one control plane, two workers) with one soft-RoCE (rxe)
# device per worker, the kube-rdma chart installed in chained CNI mode, the shared e2e suite
# (e2e/suite) run against it, then ib_write_bw between pods on the two workers.
#
#   sudo bash e2e/kind-rxe/run.sh          # KEEP=1 keeps the cluster afterwards
#
# Needs a host with Docker, kind, helm, kubectl, Go, iproute2's rdma, and the rdma_rxe module.
# See e2e/kind-rxe/README.md. Not run on the project's CI machines (no Docker, no RDMA there).
set -Eeuo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
REPO=$(cd "$HERE/../.." && pwd)

KIND_CLUSTER=${KIND_CLUSTER:-kube-rdma-rxe}
KEEP=${KEEP:-0}
DOCKER=${DOCKER:-docker}
KIND=${KIND:-kind}
HELM=${HELM:-helm}
GO=${GO:-go}
TAG=${KIND_RXE_TAG:-kind-e2e}
IMAGE_REPO=localhost/kube-rdma
IMAGE=$IMAGE_REPO:$TAG
TEST_IMAGE=localhost/rdma-test:$TAG
# The RDMA network: a Docker network of its own, attached to the workers as a second netdev.
# The chained plugin moves a pool device's netdev into the pod, so it must not be the node's
# eth0 (the node would lose the API server). A /24: Docker assigns .1-.63, the pods' IPAM
# .64-.254, each worker from its own start (see seed_ipam).
RDMA_NET=${KIND_RXE_NETWORK:-kube-rdma-rxe}
RDMA_PREFIX=${KIND_RXE_SUBNET_PREFIX:-172.31.250}
KERNEL_MIN=${KIND_RXE_KERNEL_MIN:-7.2}
TIMEOUT=${KIND_RXE_TIMEOUT:-300}
BW_SECONDS=${KIND_RXE_BW_SECONDS:-5}

START=$SECONDS
log() { printf '%s kind-rxe: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kind-rxe.XXXXXX")
export KUBECONFIG=$WORK/kubeconfig
CLUSTER_CREATED=0
NETWORK_CREATED=0

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local rc=$?
  if [[ $KEEP == 1 && $CLUSTER_CREATED == 1 ]]; then
    local kept=${TMPDIR:-/tmp}/kind-rxe-$KIND_CLUSTER.kubeconfig
    cp "$KUBECONFIG" "$kept" 2>/dev/null || true
    log "KEEP=1: cluster $KIND_CLUSTER kept; KUBECONFIG=$kept;" \
      "hook: KIND_CLUSTER=$KIND_CLUSTER $HERE/hook.sh links; delete: $KIND delete cluster --name $KIND_CLUSTER" \
      "&& $DOCKER network rm $RDMA_NET"
  else
    if [[ $CLUSTER_CREATED == 1 ]]; then
      log "deleting cluster $KIND_CLUSTER"
      # The rxe devices go with their netdevs when the node containers (and their netns) go.
      "$KIND" delete cluster --name "$KIND_CLUSTER" >&2 || log "kind delete cluster failed"
    fi
    if [[ $NETWORK_CREATED == 1 ]]; then "$DOCKER" network rm "$RDMA_NET" >/dev/null || log "docker network rm $RDMA_NET failed"; fi
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# version_ge A B: A >= B for dotted numeric versions.
version_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]; }

# ---------------------------------------------------------------------------------------------
# prerequisites: say everything that is missing, then stop.

prerequisites() {
  local missing=() c
  [[ $(id -u) == 0 ]] || missing+=("root (modprobe rdma_rxe, nsenter into the kind nodes' network namespaces)")
  for c in "$DOCKER" "$KIND" "$HELM" "$GO" rdma nsenter modprobe; do
    command -v "$c" >/dev/null || missing+=("$c on PATH")
  done
  if command -v "$DOCKER" >/dev/null && ! "$DOCKER" info >/dev/null 2>&1; then
    missing+=("a Docker engine ($DOCKER info fails)")
  fi
  if command -v modprobe >/dev/null && [[ $(id -u) == 0 ]]; then
    local m
    for m in rdma_rxe ib_uverbs rdma_ucm; do
      [[ -d /sys/module/$m ]] || modprobe "$m" 2>/dev/null || missing+=("kernel module $m (modprobe $m failed)")
    done
  fi
  # rxe traffic between network namespaces (every kind node is one) needs a kernel with
  # netns-aware rxe (e2e/rxe/README.md, "Kernel facts").
  local kv
  kv=$(uname -r | grep -oE '^[0-9]+\.[0-9]+')
  version_ge "$kv" "$KERNEL_MIN" ||
    missing+=("kernel $KERNEL_MIN or newer for rxe across network namespaces (this is $(uname -r); KIND_RXE_KERNEL_MIN=0 to try anyway)")
  if command -v rdma >/dev/null && rdma system show 2>/dev/null | grep -q 'netns exclusive'; then
    missing+=("RDMA netns mode shared (it is exclusive: rdma system set netns shared): rxe devices cannot leave the host netns")
  fi
  if command -v "$KIND" >/dev/null && ! "$KIND" version 2>/dev/null | grep -q 'v0\.33\.'; then
    log "warning: kind.yaml pins the v1.34.11 node image built for kind v0.33.x; this is $("$KIND" version 2>/dev/null || echo unknown)"
  fi
  if ((${#missing[@]})); then
    log "missing prerequisites:"
    for c in "${missing[@]}"; do printf '  - %s\n' "$c" >&2; done
    exit 1
  fi
  "$DOCKER" network inspect "$RDMA_NET" >/dev/null 2>&1 &&
    die "docker network $RDMA_NET exists (left by a KEEP=1 run?): docker network rm $RDMA_NET, or set KIND_RXE_NETWORK"
  "$KIND" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER" &&
    die "kind cluster $KIND_CLUSTER exists: $KIND delete cluster --name $KIND_CLUSTER, or set KIND_CLUSTER"
  return 0
}

# ---------------------------------------------------------------------------------------------
# images and cluster

build_images() {
  log "docker build $IMAGE (Dockerfile at the repository root)"
  "$DOCKER" build -q -t "$IMAGE" \
    --build-arg VERSION="$(git -C "$REPO" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
    --build-arg COMMIT="$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)" \
    --build-arg DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "$REPO" >/dev/null
  log "docker build $TEST_IMAGE (e2e/kind-rxe/Dockerfile)"
  "$DOCKER" build -q -t "$TEST_IMAGE" "$HERE" >/dev/null
}

create_cluster() {
  log "kind create cluster $KIND_CLUSTER"
  CLUSTER_CREATED=1
  "$KIND" create cluster --name "$KIND_CLUSTER" --config "$HERE/kind.yaml" --kubeconfig "$KUBECONFIG" --wait "${TIMEOUT}s" >&2
  "$KIND" load docker-image --name "$KIND_CLUSTER" "$IMAGE" "$TEST_IMAGE" >&2
  mapfile -t WORKERS < <("$KIND" get nodes --name "$KIND_CLUSTER" | grep -- '-worker' | sort -V)
  [[ ${#WORKERS[@]} == 2 ]] || die "expected 2 workers, kind lists: ${WORKERS[*]}"
  local n
  for n in "${WORKERS[@]}"; do
    "$DOCKER" exec "$n" containerd config dump 2>/dev/null | grep -q 'enable_cdi = true' ||
      die "CDI is off in $n's containerd (containerd config dump): the containerdConfigPatches of kind.yaml did not apply"
  done
}

# ---------------------------------------------------------------------------------------------
# RDMA: per worker, a netdev on the RDMA network and an rxe device on it.

# The rxe device is created from the host, in the node's network namespace (nsenter -n): the
# kernel resolves the netdev name in the namespace of the netlink socket, and the host's rdma
# tool works whatever the node image ships (kindest/node need not have iproute2's rdma).
# `docker exec <node> rdma link add` would do the same where the node image has it.
#
# RDMA device names are global to the kernel (the shared netns mode shows every device in
# every namespace), so worker i gets rxe<i>, and each worker's release selects only its own.
#
# Device nodes: a node container's /dev is a tmpfs Docker filled when the container started,
# so /dev/infiniband/uverbsN of an rxe created later is not there. The node mounts its own
# devtmpfs instance (the kernel's, live) and binds its infiniband/ over /dev/infiniband; the
# kubelet, containerd and the device plugin's /dev mount see it from then on.
setup_rdma() {
  log "docker network $RDMA_NET ($RDMA_PREFIX.0/24) for the RDMA netdevs"
  "$DOCKER" network create --driver bridge --subnet "$RDMA_PREFIX.0/24" --ip-range "$RDMA_PREFIX.0/26" \
    "$RDMA_NET" >/dev/null
  NETWORK_CREATED=1
  local i n mac nd pid
  for i in "${!WORKERS[@]}"; do
    n=${WORKERS[$i]}
    "$DOCKER" network connect "$RDMA_NET" "$n"
    mac=$("$DOCKER" inspect -f "{{(index .NetworkSettings.Networks \"$RDMA_NET\").MacAddress}}" "$n")
    nd=$("$DOCKER" exec "$n" ip -o link show | awk -v mac="$mac" '$0 ~ "link/ether " mac {sub(/:$/, "", $2); sub(/@.*/, "", $2); print $2}')
    [[ -n $nd ]] || die "$n: no netdev with MAC $mac after docker network connect"
    "$DOCKER" exec "$n" sh -c 'mkdir -p /run/kind-rxe-devtmpfs /dev/infiniband &&
      { mountpoint -q /run/kind-rxe-devtmpfs || mount -t devtmpfs devtmpfs /run/kind-rxe-devtmpfs; } &&
      mount --bind /run/kind-rxe-devtmpfs/infiniband /dev/infiniband' ||
      die "$n: cannot mount devtmpfs for /dev/infiniband"
    pid=$("$DOCKER" inspect -f '{{.State.Pid}}' "$n")
    log "$n: rxe$i on $nd (MAC $mac)"
    nsenter -t "$pid" -n rdma link add "rxe$i" type rxe netdev "$nd" ||
      die "$n: rdma link add rxe$i type rxe netdev $nd (in the node's netns) failed"
    wait_for "$n: rxe$i port 1 ACTIVE" 60 port_active "rxe$i"
    wait_for "$n: /dev/infiniband/uverbs* of rxe$i" 30 has_uverbs "$n" "rxe$i"
  done
}

# shellcheck disable=SC2317  # called through wait_for
port_active() { rdma link show "$1/1" | grep -q 'state ACTIVE'; }

# shellcheck disable=SC2317  # called through wait_for
# has_uverbs NODE DEV: the node's /dev/infiniband has DEV's uverbs device node.
has_uverbs() {
  "$DOCKER" exec -i "$1" sh -s -- "$2" <<'EOF'
for u in /sys/class/infiniband_verbs/uverbs*; do
  [ "$(cat "$u/ibdev" 2>/dev/null)" = "$1" ] && [ -c "/dev/infiniband/${u##*/}" ] && exit 0
done
exit 1
EOF
}

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds, or fail after SECONDS.
wait_for() {
  local what=$1 secs=$2 deadline
  shift 2
  deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${secs}s waiting for $what"
    sleep 1
  done
}

# kindnet writes its conflist (10-kindnet.conflist) with cniVersion 0.3.1, which kube-rdma
# speaks (0.3.0 to 1.1.0): the list is chained as kindnet wrote it.
# CONFLIST: the first *.conflist in lexical order, the one the runtime and the chart use.
prepare_conflists() {
  local n v dir=/etc/cni/net.d
  wait_for "${WORKERS[0]}: a conflist in $dir" 120 first_conflist "${WORKERS[0]}"
  CONFLIST=$(first_conflist "${WORKERS[0]}")
  for n in "${WORKERS[@]}"; do
    wait_for "$n: $CONFLIST" 120 "$DOCKER" exec "$n" test -s "$CONFLIST"
    [[ $(first_conflist "$n") == "$CONFLIST" ]] || die "$n: the first conflist is $(first_conflist "$n"), not $CONFLIST"
    v=$("$DOCKER" exec "$n" sed -nE 's/.*"cniVersion": *"([^"]+)".*/\1/p' "$CONFLIST" | head -n1)
    case $v in
      0.3.0 | 0.3.1 | 0.4.0 | 1.0.0 | 1.1.0) log "$n: $CONFLIST at cniVersion $v" ;;
      *) die "$n: $CONFLIST has cniVersion '$v', which kube-rdma does not speak" ;;
    esac
  done
  CNI_NETWORK=$("$DOCKER" exec "${WORKERS[0]}" sed -nE 's/.*"name": *"([^"]+)".*/\1/p' "$CONFLIST" | head -n1)
  [[ -n $CNI_NETWORK ]] || die "no network name in $CONFLIST"
}

# shellcheck disable=SC2317  # called through wait_for
# first_conflist NODE: the path of the node's first *.conflist in lexical order.
first_conflist() {
  "$DOCKER" exec "$1" sh -c 'ls /etc/cni/net.d/*.conflist 2>/dev/null | LC_ALL=C sort | head -n1 | grep .'
}

# The chained IPAM is the same host-local range on every node (one chart, one plugin entry),
# so each worker starts its allocations elsewhere: host-local continues after
# last_reserved_ip.0. Worker i starts at .64+32*i: 32 addresses each before two could meet.
seed_ipam() {
  local i start
  for i in "${!WORKERS[@]}"; do
    ((i > 0)) || continue
    start=$((64 + 32 * i - 1))
    "$DOCKER" exec "${WORKERS[$i]}" sh -c "mkdir -p /var/lib/cni/networks/$CNI_NETWORK &&
      printf %s $RDMA_PREFIX.$start >/var/lib/cni/networks/$CNI_NETWORK/last_reserved_ip.0"
  done
}

# ---------------------------------------------------------------------------------------------
# the suite: its kind-rxe harness (e2e/suite/kindrxe_test.go) installs one release per worker,
# with a pool of that worker's rxe device (see setup_rdma), runs the device plugin tests on the
# first worker, `kubectl rdma bw` between pods on the two workers, uninstalls, and checks each
# worker's hook.sh node-state against before the install. hook.sh describe tells it what this
# script provisioned (the variables exported here).

run_suite() {
  log "go test ./e2e/suite -run TestCluster (kind-rxe: workers ${WORKERS[*]})"
  SUITE=PASS
  (cd "$REPO" && env \
    E2E_KUBECONFIG="$KUBECONFIG" \
    E2E_NODE_HOOK="$HERE/hook.sh" \
    E2E_HELM="$(command -v "$HELM")" \
    KIND_CLUSTER="$KIND_CLUSTER" DOCKER="$DOCKER" KIND="$KIND" \
    KIND_RXE_TAG="$TAG" KIND_RXE_SUBNET_PREFIX="$RDMA_PREFIX" KIND_RXE_BW_SECONDS="$BW_SECONDS" \
    "$GO" test ./e2e/suite -count=1 -v -timeout 30m -run '^TestCluster$' "$@") >&2 || SUITE=FAIL
  log "suite: $SUITE"
}

main() {
  prerequisites
  build_images
  create_cluster
  setup_rdma
  prepare_conflists
  seed_ipam
  run_suite "$@"
  echo "kind-rxe: suite $SUITE in $((SECONDS - START))s"
  [[ $SUITE == PASS ]]
}

# shellcheck disable=SC2317  # main exits itself; the exit guards against a main that returns
{ main "$@"; exit $?; }
