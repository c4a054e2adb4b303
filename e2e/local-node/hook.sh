#!/usr/bin/env bash
# e2e/local-node/hook.sh: the node hook of the e2e suite (e2e/suite) for the node up.sh runs
# on this machine. The suite calls it as $E2E_NODE_HOOK <verb> [args]:
#
#   links                       the host network namespace's link names, one per line
#   records                     the kube-rdma CNI plugin's attachment records (its stateDir)
#   leases                      host-local IPAM leases, <network>/<ip>, of the node's primary
#                               network and of kube-rdma's chained entry
#   port-state DEV PORT up|down set a fixture port ACTIVE/LinkUp or DOWN/Disabled, as the
#                               kernel rewrites sysfs when a cable is pulled or comes back
#   restart-kubelet             stop the kubelet (SIGTERM), start it again, wait for /healthz
#   apiserver stop|start        stop the kube-apiserver (SIGTERM; its command line kept in
#                               host/kube-apiserver.cmdline), or start it again with that
#                               command line and wait for /readyz (the faults phase)
#   nic-remove NETNS IFNAME     delete the fixture NIC (a veth) that is IFNAME in the pod netns
#                               at path NETNS, as a VF or SF removed while its pod runs; prints
#                               the name of its peer in the peers' netns, for nic-restore
#   nic-restore NAME PEER       create the fixture NIC NAME again on the host, up, with its
#                               peer PEER in the peers' netns (the VF or SF back)
#   nic-reprobe NETNS IFNAME NAME NEWNAME MAC
#                               the fixture NIC NAME, IFNAME in the pod netns at path NETNS,
#                               re-probed while its pod runs (an FLR, mlx5 health recovery):
#                               deleted in the pod netns, created again on the host as
#                               NEWNAME with MAC, up, its peer as before, and its fixture
#                               sysfs entries renamed to NEWNAME; prints the peer's name
#   fixture-rename NAME NEWNAME rename the fixture sysfs entries of netdev NAME (the kernel's
#                               sysfs follows a rename; the fixture's does not)
#   runtime-memlock             containerd's own RLIMIT_MEMLOCK, "SOFT HARD" in bytes or
#                               "unlimited": what a container gets when nothing sets its limit
#   node-state                  what the chart may leave on the node, as stable text: the CNI
#                               binary, its node file and uninstall marker, every CNI config (canonical JSON digest), kube-rdma CDI
#                               specs, kube-rdma device plugin sockets, the DRA driver's
#                               sockets and claim records, the daemon's pools file, its
#                               device-info files
#   describe                    "key value" lines: the node, its paths, images and ports;
#                               cni-e2e-binary: the CNI plugin built with kuberdma_e2e;
#                               multus-chart, multus-image: the Multus thick plugin's
#                               chart (e2e/local-node/multus) and image (images.sh);
#                               prev-release, prev-chart and prev-image once prev.sh built
#                               the previous release and up.sh imported its image;
#                               prev-fakerdma-image once its fakerdma variant is imported too
#
# Exit 0 on success; non-zero with a message on stderr.
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"

[[ -f $NODE_RUN/host/pids ]] || die "no node running ($NODE_RUN/host/pids absent; up.sh starts one)"

links() { ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -vxF "$BRIDGE" | sort; }

records() {
  [[ -d $CNI_STATE_DIR ]] || return 0
  find "$CNI_STATE_DIR" -mindepth 1 -maxdepth 1 ! -name lock ! -name podresources-get-disabled ! -name metrics -printf '%f\n' | sort
}

# host-local keeps one file per leased IP in <dataDir>/<network>/, next to last_reserved_ip.<n>
# and a lock file.
leases() {
  local d
  for d in "$NODE_RUN/cni/ipam" "$RDMA_IPAM_DIR"; do
    [[ -d $d ]] || continue
    find "$d" -mindepth 2 -maxdepth 2 -type f ! -name 'last_reserved_ip.*' ! -name lock -printf '%P\n'
  done | sort
}

nic_remove() {
  local ns=$1 ifname=$2 idx peer
  [[ -e $ns ]] || die "nic-remove: no netns at $ns"
  # A veth whose peer is in another netns shows as IFNAME@if<peer's index>.
  idx=$(nsenter --net="$ns" ip -o link show dev "$ifname" | sed -n 's/^[0-9]*: [^@]*@if\([0-9]*\):.*/\1/p')
  [[ -n $idx ]] || die "nic-remove: $ifname in $ns is not a veth with its peer in another netns"
  peer=$(ip -n "$PEER_NETNS" -o link show | awk -F': ' -v i="$idx" '$1 == i {sub(/@.*/, "", $2); print $2}')
  [[ -n $peer ]] || die "nic-remove: the peer of $ifname (index $idx) is not in $PEER_NETNS"
  nsenter --net="$ns" ip link del dev "$ifname"
  echo "$peer"
}

nic_restore() {
  local name=$1 peer=$2
  [[ -e $FIXTURE/sys/class/net/$name ]] || die "nic-restore: $name is not a fixture netdev"
  ip link add "$name" type veth peer name "$peer" netns "$PEER_NETNS"
  ip link set "$name" up
  ip -n "$PEER_NETNS" link set "$peer" up
}

# The fixture's sysfs names a netdev in its function's net/ directory and in class/net (a
# symlink to it): both follow a rename, as the kernel's do.
fixture_rename() {
  local name=$1 new=$2 link dir
  link=$FIXTURE/sys/class/net/$name
  [[ -L $link ]] || die "fixture-rename: $name is not a fixture netdev"
  [[ ! -e $FIXTURE/sys/class/net/$new ]] || die "fixture-rename: $new is a fixture netdev already"
  dir=$(readlink -f "$link")
  mv "$dir" "$(dirname "$dir")/$new"
  ln -s "$(dirname "$(readlink "$link")")/$new" "$FIXTURE/sys/class/net/$new"
  rm "$link"
}

nic_reprobe() {
  local ns=$1 ifname=$2 name=$3 new=$4 mac=$5 peer
  [[ -e $FIXTURE/sys/class/net/$name ]] || die "nic-reprobe: $name is not a fixture netdev"
  peer=$(nic_remove "$ns" "$ifname")
  ip link add "$new" address "$mac" type veth peer name "$peer" netns "$PEER_NETNS"
  ip link set "$new" up
  ip -n "$PEER_NETNS" link set "$peer" up
  fixture_rename "$name" "$new"
  echo "$peer"
}

port_state() {
  local dev=$1 port=$2 want=$3 dir
  dir=$FIXTURE/sys/class/infiniband/$dev/ports/$port
  [[ -d $dir ]] || die "no port $port on fixture device $dev"
  case $want in
    up) echo "4: ACTIVE" >"$dir/state"; echo "5: LinkUp" >"$dir/phys_state" ;;
    down) echo "1: DOWN" >"$dir/state"; echo "3: Disabled" >"$dir/phys_state" ;;
    *) die "port-state: want up or down, not $want" ;;
  esac
}

restart_kubelet() {
  local pid deadline
  pid=$(pid_of kubelet)
  stop "$pid"
  # Replace the old PID's line: down.sh must not signal a PID the kernel may have reused.
  awk '$1 != "kubelet"' "$NODE_RUN/host/pids" >"$NODE_RUN/host/pids.new"
  mv "$NODE_RUN/host/pids.new" "$NODE_RUN/host/pids"
  start_kubelet
  deadline=$(($(date +%s) + 60))
  until kubelet_healthy; do
    [[ $(date +%s) -lt $deadline ]] || die "kubelet not healthy 60 s after restart"
    sleep 0.2
  done
}

# The API server's command line as up.sh started it, kept while it is stopped.
APISERVER_CMDLINE=$NODE_RUN/host/kube-apiserver.cmdline

apiserver() {
  local pid deadline
  local -a cmd
  case $1 in
    stop)
      pid=$(pid_of kube-apiserver)
      alive "$pid" || die "kube-apiserver is not running (pid '$pid')"
      tr '\0' '\n' <"/proc/$pid/cmdline" >"$APISERVER_CMDLINE"
      stop "$pid"
      # down.sh must not signal a PID the kernel may have reused.
      awk '$1 != "kube-apiserver"' "$NODE_RUN/host/pids" >"$NODE_RUN/host/pids.new"
      mv "$NODE_RUN/host/pids.new" "$NODE_RUN/host/pids"
      ;;
    start)
      [[ -s $APISERVER_CMDLINE ]] || die "no $APISERVER_CMDLINE: apiserver stop keeps it"
      ! alive "$(pid_of kube-apiserver)" || die "kube-apiserver is running"
      mapfile -t cmd <"$APISERVER_CMDLINE"
      [[ ${cmd[0]} == */* ]] || cmd[0]=$BIN/${cmd[0]}
      start kube-apiserver "${cmd[@]}"
      rm -f "$APISERVER_CMDLINE"
      deadline=$(($(date +%s) + 90))
      until "$BIN/kubectl" get --raw /readyz >/dev/null 2>&1; do
        [[ $(date +%s) -lt $deadline ]] || die "kube-apiserver not ready 90 s after its start"
        sleep 0.2
      done
      ;;
    *) die "apiserver: want stop or start, not $1" ;;
  esac
}

runtime_memlock() {
  local pid
  pid=$(pid_of containerd)
  [[ -n $pid && -r /proc/$pid/limits ]] || die "containerd is not running (pid '$pid')"
  awk '/^Max locked memory/ {print $4, $5}' "/proc/$pid/limits"
}

describe() {
  local raisable=no
  # runc raises a container's RLIMIT_MEMLOCK from the host; above containerd's own hard limit
  # that takes CAP_SYS_RESOURCE, which some sandboxes' root lacks.
  if prlimit --memlock=unlimited:unlimited true 2>/dev/null; then raisable=yes; fi
  cat <<EOF
harness local-node
node $NODE_NAME
image $IMAGE
test-image $TEST_IMAGE
node-run $NODE_RUN
fixture $FIXTURE
fixture-vfs $FIXTURE_VFS
api-port $API_PORT
metrics-port $METRICS_PORT
cni-state-dir $CNI_STATE_DIR
rdma-ipam-dir $RDMA_IPAM_DIR
nad-crd $HERE/multus/files/nad-crd.yaml
multus-chart $HERE/multus
multus-image $MULTUS_IMAGE
gpu-dra-driver $GPU_DRA_DRIVER
memlock-raisable $raisable
memlock-hard-kib $(ulimit -Hl)
EOF
  # The release the chart and image come from (run.sh: make release to the local registry).
  if [[ $E2E_FROM_REGISTRY == 1 ]]; then
    printf 'chart oci://%s/charts/kube-rdma\nchart-version %s\nchart-plain-http yes\nimage-digest %s\n' \
      "$REGISTRY_PATH" "${RELEASE_VERSION#v}" "$(jq -r .index "$RELEASE_DIST/image.json")"
  fi
  # The CNI plugin built with kuberdma_e2e (images.sh): its fault hook parks an ADD, and its
  # fake RDMA netlink stops answering while a file exists.
  if [[ -x $E2E_CACHE/images/kube-rdma-cni-e2e ]]; then
    echo "cni-e2e-binary $E2E_CACHE/images/kube-rdma-cni-e2e"
  fi
  # The previous release, once prev.sh built it and up.sh imported its image.
  local images
  images=$("$BIN/ctr" images ls -q 2>/dev/null || true)
  if [[ -f $PREV_CHART/Chart.yaml ]] && grep -qxF "$PREV_IMAGE" <<<"$images"; then
    printf 'prev-release %s\nprev-chart %s\nprev-image %s\n' "$PREV_COMMIT" "$PREV_CHART" "$PREV_IMAGE"
    if grep -qxF "$PREV_IMAGE-fakerdma" <<<"$images"; then
      printf 'prev-fakerdma-image %s\n' "$PREV_IMAGE-fakerdma"
    fi
  fi
}

start_standin() {
  # Once per node: a later phase with the same stand-in (upgrade-gpu-aligned, upgrade-dra)
  # finds it running.
  local pid
  pid=$(pid_of "$1")
  if alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$NODE_RUN/$1 "; then
    log "$1 already running (pid $pid)"
    return 0
  fi
  case $1 in
    fakegpu) start fakegpu "$NODE_RUN/fakegpu" -sysfs-root "$FIXTURE/sys" -proc-root "$FIXTURE/proc" ;;
    fakegpudra)
      start fakegpudra "$NODE_RUN/fakegpudra" -kubeconfig "$KUBECONFIG" -node "$NODE_NAME" \
        -sysfs-root "$FIXTURE/sys" -proc-root "$FIXTURE/proc" -cdi-dir "$NODE_RUN/cdi" \
        -plugin-dir "$NODE_RUN/kubelet/plugins/$GPU_DRA_DRIVER" -registry-dir "$NODE_RUN/kubelet/plugins_registry"
      ;;
    *) die "start: want fakegpu or fakegpudra, not $1" ;;
  esac
}

node_state() {
  local f
  command -v jq >/dev/null || die "jq is needed (apt-get install jq)"
  if [[ -e $NODE_RUN/cni/bin/kube-rdma ]]; then
    echo "cni-bin kube-rdma $(sha256sum <"$NODE_RUN/cni/bin/kube-rdma" | cut -c1-16)"
  fi
  find "$NODE_RUN/cni/bin" -mindepth 1 -maxdepth 1 -name '.kube-rdma*' -printf 'cni-bin-temp %f\n'
  # The node file and the uninstall marker next to the binary.
  find "$NODE_RUN/cni/bin" -mindepth 1 -maxdepth 1 -name 'kube-rdma.*' -printf 'cni-bin-file %f\n'
  for f in "$NODE_RUN"/cni/net.d/* "$NODE_RUN"/cni/net.d/.*; do
    [[ -f $f ]] || continue
    # Canonical JSON: a conflist rewritten with other whitespace or key order is the same.
    echo "cni-conf $(basename "$f") $(jq -cS . "$f" 2>/dev/null | sha256sum | cut -c1-16)"
  done
  find "$NODE_RUN/cdi" -mindepth 1 -maxdepth 1 -name 'kube-rdma*' -printf 'cdi %f\n' 2>/dev/null
  # The memlock hook binaries the pools' CDI specs name: the daemon removes them with the specs.
  find /var/lib/kube-rdma/hooks -mindepth 1 -maxdepth 1 -name 'kube-rdma-hook-*' -printf 'memlock-hook %f\n' 2>/dev/null || true
  find /var/lib/kubelet/device-plugins -mindepth 1 -maxdepth 1 -name 'kube-rdma*' -printf 'socket %f\n' 2>/dev/null
  # The daemon's pools file (pkg/hostapi/nodepools) and its lent-devices file beside it, in
  # the chart's allocDir: the default, or the gpuAligned phase's. helm uninstall removes them
  # (the hook, and the daemon on the marker).
  for f in /var/run/kube-rdma/alloc/{_pools,_lent-devices}.json "$NODE_RUN"/alloc/{_pools,_lent-devices}.json; do
    [[ ! -e $f ]] || echo "pools-file $f"
  done
  # The device plugin's NPWG device-info files of our resources (pkg/hostapi/devinfo; the
  # chart in multus mode): the daemon removes them when it stops. The directory stays (the
  # chart's hostPath, shared with Multus and other device plugins).
  find /var/run/k8s.cni.cncf.io/devinfo/dp -mindepth 1 -maxdepth 1 -name 'rdma.kube-rdma.io-*' -printf 'devinfo %f\n' 2>/dev/null || true
  # The DRA driver's registration socket, its plugin socket and its claims' records.
  for f in "$NODE_RUN"/kubelet/plugins_registry/rdma.kube-rdma.io*; do
    [[ ! -e $f ]] || echo "dra-registration $(basename "$f")"
  done
  f=$NODE_RUN/kubelet/plugins/rdma.kube-rdma.io
  if [[ -d $f ]]; then
    find "$f" -mindepth 1 -maxdepth 2 \( -type s -o -path '*/claims/*' \) -printf 'dra %P\n'
  fi
  return 0
}

case ${1:-} in
  describe) describe ;;
  start) [[ $# == 2 ]] || die "usage: hook.sh start fakegpu|fakegpudra"; start_standin "$2" ;;
  links) links ;;
  records) records ;;
  leases) leases ;;
  port-state) [[ $# == 4 ]] || die "usage: hook.sh port-state DEV PORT up|down"; port_state "$2" "$3" "$4" ;;
  restart-kubelet) restart_kubelet ;;
  apiserver) [[ $# == 2 ]] || die "usage: hook.sh apiserver stop|start"; apiserver "$2" ;;
  nic-remove) [[ $# == 3 ]] || die "usage: hook.sh nic-remove NETNS IFNAME"; nic_remove "$2" "$3" ;;
  nic-restore) [[ $# == 3 ]] || die "usage: hook.sh nic-restore NAME PEER"; nic_restore "$2" "$3" ;;
  nic-reprobe) [[ $# == 6 ]] || die "usage: hook.sh nic-reprobe NETNS IFNAME NAME NEWNAME MAC"; nic_reprobe "$2" "$3" "$4" "$5" "$6" ;;
  fixture-rename) [[ $# == 3 ]] || die "usage: hook.sh fixture-rename NAME NEWNAME"; fixture_rename "$2" "$3" ;;
  runtime-memlock) runtime_memlock ;;
  node-state) node_state | sort ;;
  *) die "usage: hook.sh describe|start fakegpu|fakegpudra|links|records|leases|port-state DEV PORT up|down|restart-kubelet|apiserver stop|start|nic-remove NETNS IFNAME|nic-restore NAME PEER|runtime-memlock|node-state" ;;
esac
