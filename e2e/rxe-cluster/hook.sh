#!/usr/bin/env bash
# e2e/rxe-cluster/hook.sh: the node hook of the e2e suite (E2E_NODE_HOOK) for the rxe cluster's
# qemu guests, done through each guest's command directory (lib.sh guest_exec):
#
#   hook.sh describe | links | records | leases | node-state | restart-kubelet | cni-chained
#   hook.sh port-state DEV PORT up|down
#   hook.sh port-wait DEV up|down
#   hook.sh host-bw SERVER_NODE CLIENT_NODE SECONDS
#
# The verbs and their output are e2e/kind-rxe/hook.sh's (e2e/suite reads both), except:
# describe says "harness rxe-cluster" and names the pods' image with perftest and rping
# (perf-image; test-image has neither, as the suite's NodeState test wants); node-state's CNI
# configs are canonical JSON digests (as e2e/local-node's), and it also lists the guest's links (name and UP or
# DOWN), its RDMA links and the RDMA NIC's IPv4 addresses, so that the uninstall check covers
# the NIC the chained CNI moved; host-bw runs ib_write_bw between two guests' root network
# namespaces (rxe0 on eth1, the pods' flags: -s 65536 -F --report_gbits -u 18) and prints its
# "ib_write_bw ...: N Gb/sec average" line.
#
# The guest scripts in single quotes expand in the guest.
# shellcheck disable=SC2016
#
# NODE picks the guest by node name (rxec-<i>); default the first. Exit 0 on success, else
# non-zero with a line on stderr.
set -Eeuo pipefail
command -v jq >/dev/null || { echo "rxe-cluster hook: jq is needed (apt-get install jq)" >&2; exit 1; }
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
IP=/usr/sbin/ip # busybox's sh prefers its own ip applet, which has no -o or -br
RDMA=/usr/bin/rdma

die() { echo "rxe-cluster hook: $*" >&2; exit 1; }

# index NODE: the guest index of node name rxec-<i>.
index() {
  local n=${1:-rxec-1} i
  i=${n#rxec-}
  [[ $i =~ ^[0-9]+$ && -d $RXEC_RUN/node$i/share/cmd ]] || die "no guest for node $n"
  echo "$i"
}

# gx SCRIPT: run SCRIPT in the guest of $NODE (30 s).
gx() { guest_exec "$I" "${GX_TIMEOUT:-30}" "$1"; }

verb_describe() {
  local names=() i=1
  while [[ -d $RXEC_RUN/node$i ]]; do names+=("$(node_name "$i")"); i=$((i + 1)); done
  [[ ${#names[@]} -gt 0 ]] || die "describe: no guests in $RXEC_RUN"
  printf '%s\n' "harness rxe-cluster" "image $IMAGE" "test-image $TEST_IMAGE" \
    "perf-image localhost/rdma-perf:e2e" "nodes ${names[*]}" "rdma-subnet-prefix $RDMA_NET" "rdma-device rxe0" \
    "api-server $CTL_NET.1:$API_PORT" "bw-seconds ${RXEC_BW_SECONDS:-5}" \
    "rdma-netns-mode $(sed -n 's/^RDMA_NETNS_MODE=//p' "$RXEC_RUN/node1/share/node.env")"
}

# links: the guest's links but cni0, the pods' bridge, which the first pod's sandbox creates
# (e2e/local-node/hook.sh leaves its bridge out the same way).
verb_links() { gx "$IP -o link show" | awk -F': ' '{sub(/@.*/, "", $2); if ($2 != "cni0") print $2}' | LC_ALL=C sort; }

verb_records() {
  gx 'cd /var/lib/cni/kube-rdma 2>/dev/null || exit 0
for f in * .[!.]*; do
  [ -e "$f" ] && [ "$f" != lock ] && [ "$f" != podresources-get-disabled ] && [ "$f" != metrics ] && echo "$f"
done
:' | LC_ALL=C sort
}

verb_leases() {
  # The chained entry's (host-local's default dataDir) and the primary network's.
  gx 'for d in /var/lib/cni/networks /var/lib/cni/primary-ipam; do
  cd $d 2>/dev/null || continue
  for f in */*; do
    [ -f "$f" ] || continue
    case ${f##*/} in lock|last_reserved_ip.*) continue ;; esac
    echo "$f"
  done
done
:' | LC_ALL=C sort
}

verb_port_state() {
  [[ $# == 3 ]] || die "usage: port-state DEV PORT up|down"
  local state=$3
  [[ $state == up || $state == down ]] || die "port-state: state $state is not up or down"
  gx "$(link_set "$1" "$2" "$state")"
}

# link_set DEV PORT up|down: a guest script that sets the state of DEV's netdev, not eth0: in the
# guest's root netns, or in the one pod netns (containerd's, under /var/run/netns) that has a
# link of that name when a pod holds the device (the CNI moved it there as net1). It leaves t0
# (/proc/uptime) and w0 (the wall clock, seconds.microseconds: busybox date has no %N, its
# adjtimex prints the kernel's time) taken just before the change.
link_set() {
  local s
  s=$(cat <<'EOS'
nd=$(cat /sys/class/infiniband/@DEV@/ports/@PORT@/gid_attrs/ndevs/0 2>/dev/null) || { echo 'no port @PORT@ on @DEV@' >&2; exit 1; }
[ $nd != eth0 ] || { echo 'eth0 carries the control traffic' >&2; exit 1; }
in=
if [ ! -e /sys/class/net/$nd ]; then
  found=
  for ns in $(@IP@ netns list | awk '{print $1}'); do
    @IP@ -n "$ns" link show dev "$nd" >/dev/null 2>&1 && found="$found $ns"
  done
  set -- $found
  [ $# = 1 ] || { echo "$nd (port @PORT@ of @DEV@) is not in the root netns, and in $# pod netns:$found" >&2; exit 1; }
  in="-n $1"
fi
t0=$(cut -d' ' -f1 /proc/uptime)
w0=$(busybox adjtimex | awk '/tv_sec/ { s = $2 } /tv_usec/ { u = $2 } END { printf "%d.%06d", s, u }')
@IP@ $in link set $nd @STATE@ || exit 1
read -r tl _ </proc/uptime
EOS
)
  s=${s//@DEV@/$1}; s=${s//@PORT@/$2}; s=${s//@STATE@/$3}
  echo "${s//@IP@/$IP}"
}

# port-wait DEV up|down: port-state, then wait until the daemon's /state (in the guest, every
# 20 ms) reports the device Healthy or Unhealthy; prints the seconds from the link change to
# the poll that saw it, the wall clock of the change (seconds.microseconds), the device's
# healthSince in that /state (when the daemon's re-read found it) and the seconds the guest
# took from before that wall clock until `ip link set` had returned (its forks, on a TCG vCPU
# that the kubelet and containerd share: the part of the daemon's figure that is the guest's).
verb_port_wait() {
  [[ $# == 2 ]] || die "usage: port-wait DEV up|down"
  local dev=$1 state=$2 want=Healthy s
  [[ $state == down ]] && want=Unhealthy
  [[ $state == up || $state == down ]] || die "port-wait: state $state is not up or down"
  # The first pool device naming DEV: /state is indented JSON, each device's health and
  # healthSince come before its rdmaDevices, one name per line.
  s=$(cat <<'EOS'
while :; do
  got=$(wget -q -O- http://127.0.0.1:@PORT@/state 2>/dev/null | awk -v dev='"@DEV@"' '
    $1 == dev || $1 == dev "," { print h, s; exit }
    $1 == "\"health\":" { h = $2 }
    $1 == "\"healthSince\":" { s = $2 }' | tr -d '",')
  case $got in "@WANT@ "*) break ;; esac
  read -r now _ </proc/uptime
  awk -v a="$t0" -v b="$now" 'BEGIN { exit !(b - a < 45) }' || { echo "the daemon did not report @DEV@ @WANT@ in 45 s (last: $got)" >&2; exit 1; }
  sleep 0.02
done
t1=$(cut -d' ' -f1 /proc/uptime)
awk -v a="$t0" -v b="$t1" -v w="$w0" -v s="${got#* }" -v l="$tl" 'BEGIN { printf "%.2f %s %s %.2f\n", b - a, w, s, l - a }'
EOS
)
  s=${s//@DEV@/$dev}; s=${s//@WANT@/$want}
  # 55 s: the 45 s above and a starved TCG guest's time to pick the command up, within the
  # suite's minute for the hook.
  GX_TIMEOUT=55 gx "$(link_set "$dev" 1 "$state")
${s//@PORT@/$METRICS_PORT}"
}

verb_restart_kubelet() {
  GX_TIMEOUT=90 gx 'kill $(cat /run/kubelet.pid); i=0
while kill -0 $(cat /run/kubelet.pid) 2>/dev/null; do i=$((i + 1)); [ $i -lt 100 ] || kill -9 $(cat /run/kubelet.pid); sleep 0.1; done
sh /run/rxec-kubelet.sh
i=0
until wget -q -O- http://127.0.0.1:10248/healthz 2>/dev/null | grep -q ok; do
  i=$((i + 1)); [ $i -lt 300 ] || { echo "kubelet not healthy 60 s after its restart" >&2; exit 1; }; sleep 0.2
done'
}

verb_cni_chained() {
  gx 'f=$(ls /etc/cni/net.d/*.conflist 2>/dev/null | LC_ALL=C sort | head -n1)
[ -n "$f" ] || { echo "no conflist in /etc/cni/net.d" >&2; exit 1; }
grep -q "\"kube-rdma\"" "$f" || { echo "no kube-rdma entry in $f" >&2; exit 1; }
echo "$f"'
}

verb_node_state() {
  gx "bin=/opt/cni/bin/kube-rdma
if [ -f \$bin ]; then echo \"cni-bin \$bin sha256:\$(sha256sum \$bin | cut -d' ' -f1)\"; else echo \"cni-bin \$bin absent\"; fi
for d in /var/run/cdi /etc/cdi; do for f in \"\$d\"/kube-rdma-*; do [ -e \"\$f\" ] && echo \"cdi \$f\"; done; done
for f in /var/lib/kubelet/device-plugins/kube-rdma-*; do [ -e \"\$f\" ] && echo \"device-plugin \$f\"; done
for f in /var/lib/kube-rdma/hooks/kube-rdma-hook-*; do [ -e \"\$f\" ] && echo \"memlock-hook \$f\"; done
[ -e /var/run/kube-rdma/alloc/_pools.json ] && echo 'pools-file /var/run/kube-rdma/alloc/_pools.json'
[ -e /var/run/kube-rdma/alloc/_lent-devices.json ] && echo 'pools-file /var/run/kube-rdma/alloc/_lent-devices.json'
$IP -o link show | awk -F': ' '{n = \$2; sub(/@.*/, \"\", n); if (n !~ /^(veth|cni0)/) print \"link \" n (\$3 ~ /[<,]UP[,>]/ ? \" UP\" : \" DOWN\")}'
$RDMA link show | sed 's/^/rdma-/'
$IP -o -4 addr show dev eth1 2>/dev/null | awk '{print \"addr eth1 \" \$4}'
:" | LC_ALL=C sort
  # Every CNI config as canonical JSON (jq -cS, here): the installer rewrites the primary
  # conflist with other whitespace and key order, which is the same config.
  local f
  for f in $(gx 'for f in /etc/cni/net.d/*.conflist /etc/cni/net.d/*.conf /etc/cni/net.d/*.json; do [ -f "$f" ] && echo "$f"; done; :'); do
    echo "cni-conf $f $(gx "cat $f" | jq -cS . | sha256sum | cut -c1-16)"
  done
}

# host-bw SERVER CLIENT SECONDS: ib_write_bw between the root netns of two guests.
verb_host_bw() {
  [[ $# == 3 ]] || die "usage: host-bw SERVER_NODE CLIENT_NODE SECONDS"
  local s c secs=$3 port=18600
  # The RoCE v2 GID index of the IPv4 address (the kernel adds it shortly after the address).
  local gid='n=0; while [ $n -lt 50 ]; do
  for t in /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/*; do
    if [ "$(cat $t 2>/dev/null)" = "RoCE v2" ] && grep -q ffff /sys/class/infiniband/rxe0/ports/1/gids/${t##*/}; then echo ${t##*/}; exit 0; fi
  done
  n=$((n + 1)); sleep 0.1
done'
  s=$(index "$1") c=$(index "$2")
  # The guests' RDMA NICs have no address of their own (guest-node.sh): one for this run.
  local g
  for g in "$s" "$c"; do
    guest_exec "$g" 10 "$IP addr add $(node_rdma_ip "$g")/24 dev eth1" >/dev/null || die "host-bw: address on guest $g's eth1"
  done
  # shellcheck disable=SC2064  # the guests' indexes now
  trap "guest_exec $s 10 '$IP addr del $(node_rdma_ip "$s")/24 dev eth1' >/dev/null 2>&1; guest_exec $c 10 '$IP addr del $(node_rdma_ip "$c")/24 dev eth1' >/dev/null 2>&1" EXIT
  local args="-d rxe0 -s 65536 -D $secs -p $port -F --report_gbits -u 18"
  local tmp
  tmp=$(mktemp)
  guest_exec "$s" $((secs + 60)) "ib_write_bw $args -x \$( ($gid) )" >"$tmp" 2>&1 &
  local spid=$! out
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sleep 1
    if out=$(guest_exec "$c" $((secs + 60)) "ib_write_bw $args -x \$( ($gid) ) $(node_ip "$s")" 2>&1); then break; fi
    grep -q "Couldn't connect" <<<"$out" || break
  done
  wait "$spid" || { cat "$tmp" >&2; rm -f "$tmp"; die "host-bw: server on $1 failed"; }
  rm -f "$tmp"
  grep -q 'Gb/sec\|BW average' <<<"$out" || die "host-bw: client on $2: $out"
  echo "$out"
}

main() {
  [[ $# -ge 1 ]] || die "usage: hook.sh describe|links|records|leases|node-state|restart-kubelet|cni-chained|port-state DEV PORT up|down|host-bw S C SECS"
  local verb=$1
  shift
  if [[ $verb == describe ]]; then verb_describe; return; fi
  if [[ $verb == host-bw ]]; then verb_host_bw "$@"; return; fi
  I=$(index "${NODE:-${E2E_NODE:-}}")
  case $verb in
    links) verb_links ;;
    records) verb_records ;;
    leases) verb_leases ;;
    port-state) verb_port_state "$@" ;;
    port-wait) verb_port_wait "$@" ;;
    restart-kubelet) verb_restart_kubelet ;;
    node-state) verb_node_state ;;
    cni-chained) verb_cni_chained ;;
    *) die "unknown verb $verb" ;;
  esac
}

main "$@"
