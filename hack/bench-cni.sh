#!/usr/bin/env bash
# bench-cni.sh: time ADD+DEL of a veth end with the kube-rdma CNI plugin,
# Debian's containernetworking-plugins host-device, and the raw floor
# (`ip link set X netns N` and back), interleaved in the same run, in
# throw-away network namespaces. Needs root. Bounded and self-cleaning.
#
#   N=30 hack/bench-cni.sh
set -euo pipefail

N=${N:-30}
TIMEOUT=${TIMEOUT:-10} # seconds per plugin call
CNI_VERSION=1.0.0      # the highest version Debian's host-device speaks

if [[ $(id -u) -ne 0 ]]; then
	echo "bench-cni.sh: needs root (network namespaces)" >&2
	exit 1
fi
if [[ ! -x /usr/lib/cni/host-device ]]; then
	echo "installing Debian containernetworking-plugins for host-device" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q containernetworking-plugins >/dev/null
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/bench-cni.XXXXXX)
host=krbench-host-$$
pod=krbench-pod-$$
cleanup() {
	ip netns del "$pod" 2>/dev/null || true
	ip netns del "$host" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/bin/kube-rdma" ./cmd/cni)

ip netns add "$host"
ip netns add "$pod"
ip -n "$host" link set lo up
ip -n "$pod" link set lo up
ip -n "$host" link add bench0 type veth peer name bench0p
ip -n "$host" link set bench0 mtu 1500 up

# A sysfs tree naming the RDMA device mlx5_0 whose netdev is bench0 (this
# kernel has no RDMA; the plugin only reads sysfs to resolve the device).
sys=$tmp/sys
fn=$sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0
mkdir -p "$fn/net/bench0" "$fn/infiniband/mlx5_0/ports/1" "$sys/class/infiniband"
echo 0x15b3 >"$fn/vendor"
echo 0x1017 >"$fn/device"
echo 0 >"$fn/net/bench0/dev_port"
echo "4: ACTIVE" >"$fn/infiniband/mlx5_0/ports/1/state"
echo Ethernet >"$fn/infiniband/mlx5_0/ports/1/link_layer"
ln -s ../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0 "$sys/class/infiniband/mlx5_0"

ours_conf=$(printf '{"cniVersion":"%s","name":"bench","type":"kube-rdma","rdmaNetnsMode":"shared","stateDir":"%s","sysfsRoot":"%s","runtimeConfig":{"deviceID":"mlx5_0"}}' \
	"$CNI_VERSION" "$tmp/state" "$sys")
hd_conf=$(printf '{"cniVersion":"%s","name":"bench","type":"host-device","device":"bench0"}' "$CNI_VERSION")

# run_plugin BIN COMMAND CONF: one plugin call as a runtime makes it, from
# inside the host netns.
run_plugin() {
	CNI_COMMAND=$2 CNI_CONTAINERID=bench CNI_NETNS=/run/netns/$pod CNI_IFNAME=net1 CNI_PATH=/usr/lib/cni \
		timeout "$TIMEOUT" nsenter --net=/run/netns/"$host" "$1" <<<"$3" >"$tmp/out" 2>"$tmp/err" || {
		echo "bench-cni.sh: $1 $2 failed:" >&2
		cat "$tmp/out" "$tmp/err" >&2
		exit 1
	}
}

ours() {
	run_plugin "$tmp/bin/kube-rdma" ADD "$ours_conf"
	run_plugin "$tmp/bin/kube-rdma" DEL "$ours_conf"
}
hostdevice() {
	run_plugin /usr/lib/cni/host-device ADD "$hd_conf"
	run_plugin /usr/lib/cni/host-device DEL "$hd_conf"
}
raw() {
	timeout "$TIMEOUT" nsenter --net=/run/netns/"$host" ip link set bench0 netns "$pod"
	timeout "$TIMEOUT" nsenter --net=/run/netns/"$pod" ip link set bench0 netns "$host"
}

# check_home: bench0 is back in the host netns, in the pod nothing is left.
check_home() {
	ip -n "$host" link show bench0 >/dev/null 2>&1 || { echo "bench-cni.sh: bench0 not back after $1" >&2; exit 1; }
	if [[ -n $(ip -n "$pod" -o link show | grep -v ': lo:' || true) ]]; then
		echo "bench-cni.sh: pod netns not empty after $1" >&2
		exit 1
	fi
}

now() { date +%s%N; }
for fn in ours hostdevice raw; do # warm-up, not timed
	$fn
	check_home "$fn"
done
: >"$tmp/times"
for ((i = 0; i < N; i++)); do
	for fn in ours hostdevice raw; do
		t0=$(now)
		$fn
		t1=$(now)
		echo "$fn $((t1 - t0))" >>"$tmp/times"
		check_home "$fn"
	done
done
[[ -z $(ls "$tmp/state"/*.json 2>/dev/null) ]] || { echo "bench-cni.sh: kube-rdma left state behind" >&2; exit 1; }

# stats FN: "mean median" in ms per ADD+DEL pair.
stats() {
	awk -v fn="$1" '$1 == fn { print $2 }' "$tmp/times" | sort -n |
		awk '{ v[NR] = $1; s += $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f %.1f", s / NR / 1e6, m / 1e6 }'
}
read -r ours_mean ours_med <<<"$(stats ours)"
read -r hd_mean hd_med <<<"$(stats hostdevice)"
read -r raw_mean raw_med <<<"$(stats raw)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "ADD+DEL of a veth end, $N iterations each, interleaved (ms per ADD+DEL pair, mean / median):"
printf '  kube-rdma    %6s / %6s\n' "$ours_mean" "$ours_med"
printf '  host-device  %6s / %6s\n' "$hd_mean" "$hd_med"
printf '  raw ip link  %6s / %6s\n' "$raw_mean" "$raw_med"
echo "ratios (median): kube-rdma/host-device=$(ratio "$ours_med" "$hd_med") (target <= 0.80)" \
	"kube-rdma/raw=$(ratio "$ours_med" "$raw_med") host-device/raw=$(ratio "$hd_med" "$raw_med")"
echo "ratios (mean):   kube-rdma/host-device=$(ratio "$ours_mean" "$hd_mean")" \
	"kube-rdma/raw=$(ratio "$ours_mean" "$raw_mean") host-device/raw=$(ratio "$hd_mean" "$raw_mean")"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
