#!/usr/bin/env bash
# bench-cni.sh: time ADD+DEL of a veth end with the kube-rdma CNI plugin,
# Debian's containernetworking-plugins host-device, and the raw floor
# (`ip link set X netns N` and back), interleaved in the same run, in
# throw-away network namespaces. Needs root. Bounded and self-cleaning.
# It also prints where an ADD and a DEL of ours spend their time (median per
# phase, from KUBE_RDMA_CNI_TIMINGS, see pkg/cni/timings.go) beside two exec
# floors timed the same way in the same run: a Go hello-world and `ip -V`.
#
# The GPU-aligned arm (docs/gpu-aligned.md) is ADD+DEL of a gpuAligned pool
# in standalone mode, interleaved with the others: the plugin asks a
# PodResources server (hack/bench-cni-gpu: podrestest's grpc-go server on a
# unix socket, and a nodesim sysfs/procfs tree with two GPUs and two NICs)
# for the pod's slot and GPU, aligns, moves the netdev and, in exclusive RDMA
# netns mode, the RDMA device, and writes nccl.conf, env and binding.json.
# This kernel has no RDMA netlink, so that arm's plugin is built with
# -tags kuberdma_e2e and its RDMA device move is internal/fakerdma's state
# file: the arm measures everything but the kernel's RDMA move.
#
#   N=30 hack/bench-cni.sh
#
# BEFORE=path/to/an/older/kube-rdma adds that build as one more interleaved
# arm (same configuration, no timings), for before/after in the same run.
set -euo pipefail

N=${N:-30}
BEFORE=${BEFORE:-}
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
stub=
cleanup() {
	if [[ -n $stub ]]; then
		kill "$stub" 2>/dev/null || true
		wait "$stub" 2>/dev/null || true
	fi
	ip netns del "$pod" 2>/dev/null || true
	ip netns del "$host" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/bin/kube-rdma" ./cmd/cni)
# The GPU-aligned arm's plugin: the same, linking the fake RDMA netlink.
(cd "$repo" && CGO_ENABLED=0 go build -tags kuberdma_e2e -trimpath -ldflags='-s -w' -o "$tmp/bin/kube-rdma-e2e" ./cmd/cni)
(cd "$repo" && go build -o "$tmp/bin/bench-cni-gpu" ./hack/bench-cni-gpu)
# The exec start-up floor of any Go plugin: an empty main, built the same way.
mkdir -p "$tmp/hello"
printf 'package main\n\nfunc main() {}\n' >"$tmp/hello/main.go"
(cd "$tmp/hello" && GO111MODULE=off CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/bin/hello" main.go)

ip netns add "$host"
ip netns add "$pod"
ip -n "$host" link set lo up
ip -n "$pod" link set lo up
ip -n "$host" link add bench0 type veth peer name bench0p
ip -n "$host" link set bench0 mtu 1500 up
# The GPU-aligned pool's other NIC, which the binding must pass over.
ip -n "$host" link add bench1 type veth peer name bench1p
ip -n "$host" link set bench1 mtu 1500 up

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
# The plugin takes its host paths from its node file (docs/cni.md), which must
# hold the netconf's (still named there for $BEFORE); no kubelet here.
# allocDir of its own: the node's pools file (<allocDir>/_pools.json) a daemon on this host may
# have written must not decide which device the bench may move (none there: not checked).
mkdir -p "$tmp/alloc"
printf '{"version":1,"stateDir":"%s","sysfsRoot":"%s","allocDir":"%s","requirePodResources":false}\n' "$tmp/state" "$sys" "$tmp/alloc" >"$tmp/ours-node.json"
# The GPU-aligned arm's node, pool and kubelet, up for the whole run.
ga=$tmp/ga
mkdir -p "$ga"
"$tmp/bin/bench-cni-gpu" -root "$ga/node" -alloc-dir "$ga/alloc" -socket "$ga/kubelet.sock" -timeout $((300 + 10 * N))s \
	>"$ga/node.out" 2>"$ga/node.err" &
stub=$!
for ((w = 0; w < 200; w++)); do # up to ~10 s
	grep -qx ready "$ga/node.out" && break
	kill -0 "$stub" 2>/dev/null || break
	sleep 0.05
done
grep -qx ready "$ga/node.out" || { echo "bench-cni.sh: bench-cni-gpu did not come up:" >&2; cat "$ga/node.err" >&2; exit 1; }
declare -A gn
while read -r k v; do gn[$k]=$v; done <"$ga/node.out"
ga_conf=$(printf '{"cniVersion":"%s","name":"bench-ga","type":"kube-rdma","rdmaNetnsMode":"exclusive","stateDir":"%s","sysfsRoot":"%s","procRoot":"%s","allocDir":"%s","kubeletSocket":"%s","resourceName":"%s","gpuResourceName":"%s"}' \
	"$CNI_VERSION" "$ga/state" "${gn[sys]}" "${gn[proc]}" "$ga/alloc" "$ga/kubelet.sock" "${gn[resource]}" "${gn[gpuResource]}")
printf '{"version":1,"stateDir":"%s","sysfsRoot":"%s","procRoot":"%s","allocDir":"%s","kubeletSocket":"%s"}\n' \
	"$ga/state" "${gn[sys]}" "${gn[proc]}" "$ga/alloc" "$ga/kubelet.sock" >"$ga/node.json"
# As containerd passes them.
ga_args="IgnoreUnknown=1;K8S_POD_NAMESPACE=${gn[namespace]};K8S_POD_NAME=${gn[pod]};K8S_POD_INFRA_CONTAINER_ID=bench;K8S_POD_UID=0b1d2c3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"
# The container's allocation dir: allocdir.AllocID of its one slot.
ga_allocdir=$ga/alloc/bench-gpu/$(printf %s bench-gpu-slot-0 | sha256sum | cut -c1-16)
export KUBE_RDMA_FAKE_RDMA_STATE=$ga/fakerdma.json

hd_conf=$(printf '{"cniVersion":"%s","name":"bench","type":"host-device","device":"bench0"}' "$CNI_VERSION")

# run_plugin BIN COMMAND CONF: one plugin call as a runtime makes it, from
# inside the host netns; CNI_IFNAME is $ifname, else net1; the node file is
# $node, else ours.
run_plugin() {
	KUBE_RDMA_CNI_NODE_FILE=${node:-$tmp/ours-node.json} KUBE_RDMA_CNI_T0=$EPOCHREALTIME CNI_COMMAND=$2 CNI_CONTAINERID=bench CNI_NETNS=/run/netns/$pod CNI_IFNAME=${ifname:-net1} CNI_PATH=/usr/lib/cni \
		timeout "$TIMEOUT" nsenter --net=/run/netns/"$host" "$1" <<<"$3" >"$tmp/out" 2>"$tmp/err" || {
		echo "bench-cni.sh: $1 $2 failed:" >&2
		cat "$tmp/out" "$tmp/err" >&2
		exit 1
	}
}

# ours: with per-phase timings on (a few clock reads and one append per
# command), and the wall time of each call, to split off process exit.
ours() {
	local t
	export KUBE_RDMA_CNI_TIMINGS=$tmp/phases
	for c in ADD DEL; do
		t=$EPOCHREALTIME
		run_plugin "$tmp/bin/kube-rdma" "$c" "$ours_conf"
		echo "$t $EPOCHREALTIME" >>"$tmp/walls"
	done
	unset KUBE_RDMA_CNI_TIMINGS
}
# ga: the GPU-aligned arm, timed as ours is. Standalone mode is chained
# after the pod's primary network, so CNI_IFNAME is eth0 and the NIC goes
# in as net1. The first call (warm-up) checks that the ADD bound the pod's
# GPU to its NIC.
ga_checked=
ga_bound=
ga() {
	local t
	export KUBE_RDMA_CNI_TIMINGS=$tmp/ga-phases
	t=$EPOCHREALTIME
	node=$ga/node.json ifname=eth0 CNI_ARGS=$ga_args run_plugin "$tmp/bin/kube-rdma-e2e" ADD "$ga_conf"
	echo "$t $EPOCHREALTIME" >>"$tmp/ga-walls"
	[[ -n $ga_checked ]] || ga_check
	t=$EPOCHREALTIME
	node=$ga/node.json ifname=eth0 CNI_ARGS=$ga_args run_plugin "$tmp/bin/kube-rdma-e2e" DEL "$ga_conf"
	echo "$t $EPOCHREALTIME" >>"$tmp/ga-walls"
	unset KUBE_RDMA_CNI_TIMINGS
	if grep -q mlx5 "$KUBE_RDMA_FAKE_RDMA_STATE"; then
		echo "bench-cni.sh: an RDMA device is still in a pod after the GPU-aligned DEL: $(cat "$KUBE_RDMA_FAKE_RDMA_STATE")" >&2
		exit 1
	fi
}
# ga_check: after a GPU-aligned ADD, the pod has the NIC PIX to its GPU as
# net1 (its netdev left the host netns, the other NIC's did not), its RDMA
# device moved (in the fake), and binding.json and nccl.conf say so.
ga_check() {
	local nic=${gn[nic]} b fails=()
	b=$(tr -d ' \n\t' <"$ga_allocdir/binding.json" 2>/dev/null || true)
	[[ $(tr -d ' \n\t' <"$tmp/out") == *'"name":"net1"'* ]] || fails+=("the result has no net1")
	ip -n "$pod" link show net1 >/dev/null 2>&1 || fails+=("no net1 in the pod netns")
	! ip -n "$host" link show "${gn[netdev]}" >/dev/null 2>&1 || fails+=("${gn[netdev]} is still in the host netns")
	ip -n "$host" link show bench1 >/dev/null 2>&1 || fails+=("bench1, the other NIC's netdev, left the host netns")
	grep -q "\"$nic\"" "$KUBE_RDMA_FAKE_RDMA_STATE" 2>/dev/null || fails+=("$nic is not in the pod (fake RDMA state)")
	[[ $b == *'"nics":["'"$nic"'"]'* && $b == *'"level":"PIX"'* && $b == *"${gn[gpu]}"* ]] ||
		fails+=("binding.json is not $nic PIX to ${gn[gpu]}: $b")
	grep -qx "NCCL_IB_HCA==$nic" "$ga_allocdir/nccl.conf" 2>/dev/null || fails+=("nccl.conf does not name $nic")
	if ((${#fails[@]})); then
		echo "bench-cni.sh: the GPU-aligned ADD did not bind as it must:" >&2
		printf '  %s\n' "${fails[@]}" >&2
		cat "$tmp/out" "$tmp/err" >&2
		exit 1
	fi
	ga_bound="pod GPU ${gn[gpu]} -> $nic (netdev ${gn[netdev]} as net1, PIX); nccl.conf: $(paste -sd' ' "$ga_allocdir/nccl.conf")"
	ga_checked=1
}
before() {
	run_plugin "$BEFORE" ADD "$ours_conf"
	run_plugin "$BEFORE" DEL "$ours_conf"
}
hostdevice() {
	run_plugin /usr/lib/cni/host-device ADD "$hd_conf"
	run_plugin /usr/lib/cni/host-device DEL "$hd_conf"
}
raw() {
	timeout "$TIMEOUT" nsenter --net=/run/netns/"$host" ip link set bench0 netns "$pod"
	timeout "$TIMEOUT" nsenter --net=/run/netns/"$pod" ip link set bench0 netns "$host"
}
# Exec floors, two execs each (a pair), the way the runtime-side calls are made.
hello() {
	timeout "$TIMEOUT" nsenter --net=/run/netns/"$host" "$tmp/bin/hello"
	timeout "$TIMEOUT" nsenter --net=/run/netns/"$host" "$tmp/bin/hello"
}
ipv() {
	timeout "$TIMEOUT" nsenter --net=/run/netns/"$host" ip -V >/dev/null
	timeout "$TIMEOUT" nsenter --net=/run/netns/"$host" ip -V >/dev/null
}

# check_home: bench0 is back in the host netns, in the pod nothing is left.
check_home() {
	ip -n "$host" link show bench0 >/dev/null 2>&1 || { echo "bench-cni.sh: bench0 not back after $1" >&2; exit 1; }
	if [[ -n $(ip -n "$pod" -o link show | grep -v ': lo:' || true) ]]; then
		echo "bench-cni.sh: pod netns not empty after $1" >&2
		exit 1
	fi
}

fns=(ours ga hostdevice raw hello ipv)
[[ -z $BEFORE ]] || fns+=(before)
for fn in "${fns[@]}"; do # warm-up, not timed
	$fn
	check_home "$fn"
done
: >"$tmp/times"
: >"$tmp/phases"
: >"$tmp/walls"
: >"$tmp/ga-phases"
: >"$tmp/ga-walls"
for ((i = 0; i < N; i++)); do
	for fn in "${fns[@]}"; do
		t0=$EPOCHREALTIME
		$fn
		t1=$EPOCHREALTIME
		echo "$fn $t0 $t1" >>"$tmp/times"
		check_home "$fn"
	done
done
[[ -z $(ls "$tmp/state"/*.json "$ga/state"/*.json 2>/dev/null) ]] || { echo "bench-cni.sh: kube-rdma left state behind" >&2; exit 1; }

# stats FN: "mean median p90" in ms per ADD+DEL pair.
stats() {
	awk -v fn="$1" '$1 == fn { printf "%.3f\n", ($3 - $2) * 1000 }' "$tmp/times" | sort -n |
		awk '{ v[NR] = $1; s += $1 } END {
			m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			p = int(NR * 0.9 + 0.999); if (p < 1) p = 1
			printf "%.1f %.1f %.1f", s / NR, m, v[p] }'
}
read -r ours_mean ours_med ours_p90 <<<"$(stats ours)"
read -r ga_mean ga_med ga_p90 <<<"$(stats ga)"
read -r hd_mean hd_med hd_p90 <<<"$(stats hostdevice)"
read -r raw_mean raw_med raw_p90 <<<"$(stats raw)"
read -r _ hello_med _ <<<"$(stats hello)"
read -r _ ipv_med _ <<<"$(stats ipv)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "ADD+DEL of a veth end, $N iterations each, interleaved (ms per ADD+DEL pair, mean / median / p90):"
printf '  kube-rdma    %6s / %6s / %6s\n' "$ours_mean" "$ours_med" "$ours_p90"
printf '  GPU-aligned  %6s / %6s / %6s  (kube-rdma -tags kuberdma_e2e: RDMA device move faked, see below)\n' "$ga_mean" "$ga_med" "$ga_p90"
printf '  host-device  %6s / %6s / %6s\n' "$hd_mean" "$hd_med" "$hd_p90"
printf '  raw ip link  %6s / %6s / %6s\n' "$raw_mean" "$raw_med" "$raw_p90"
if [[ -n $BEFORE ]]; then
	read -r b_mean b_med b_p90 <<<"$(stats before)"
	printf '  BEFORE       %6s / %6s / %6s  (%s)\n' "$b_mean" "$b_med" "$b_p90" "$BEFORE"
	echo "ratios, BEFORE (median / p90): BEFORE/raw=$(ratio "$b_med" "$raw_med") / $(ratio "$b_p90" "$raw_p90")" \
		"BEFORE/host-device=$(ratio "$b_med" "$hd_med") / $(ratio "$b_p90" "$hd_p90") kube-rdma/BEFORE=$(ratio "$ours_med" "$b_med")"
fi
echo "ratios (median): kube-rdma/raw=$(ratio "$ours_med" "$raw_med") (target <= 1.10)" \
	"kube-rdma/host-device=$(ratio "$ours_med" "$hd_med") host-device/raw=$(ratio "$hd_med" "$raw_med")"
echo "ratios (p90):    kube-rdma/raw=$(ratio "$ours_p90" "$raw_p90")" \
	"kube-rdma/host-device=$(ratio "$ours_p90" "$hd_p90") host-device/raw=$(ratio "$hd_p90" "$raw_p90")"
echo "ratios (mean):   kube-rdma/raw=$(ratio "$ours_mean" "$raw_mean")" \
	"kube-rdma/host-device=$(ratio "$ours_mean" "$hd_mean") host-device/raw=$(ratio "$hd_mean" "$raw_mean")"

# The breakdown: median per phase of the ADDs and DELs above. "exit" is the
# call's wall time (as the loop measured it) less the phases: the Go
# runtime's exit, the reaping of the process and of nsenter and timeout.
# breakdown PHASES WALLS TITLE [OWNFILE]: OWNFILE gets "ADD DEL", the own
# work's sums.
breakdown() {
	paste -d' ' "$1" "$2" | awk -v title="$3" -v ownfile="${4:-}" '
		{
			c = $1; sum = 0
			for (i = 2; i < NF - 1; i++) {
				split($i, kv, "="); k = kv[1]
				if (!((c, k) in seen)) { seen[c, k] = 1; order[c, ++n[c]] = k }
				v[c, k, ++cnt[c, k]] = kv[2]; sum += kv[2]
			}
			k = "exit"
			if (!((c, k) in seen)) { seen[c, k] = 1; order[c, ++n[c]] = k }
			v[c, k, ++cnt[c, k]] = ($NF - $(NF - 1)) * 1000 - sum
			k = "total"
			if (!((c, k) in seen)) { seen[c, k] = 1; order[c, ++n[c]] = k }
			v[c, k, ++cnt[c, k]] = ($NF - $(NF - 1)) * 1000
		}
		function med(c, k,   a, i, j, t, m) {
			m = cnt[c, k]
			for (i = 1; i <= m; i++) a[i] = v[c, k, i]
			for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
			return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
		}
		END {
			print title
			for (ci = 1; ci <= 2; ci++) {
				c = ci == 1 ? "ADD" : "DEL"; line = "  " c
				for (i = 1; i <= n[c]; i++) line = line sprintf(" %s=%.2f", order[c, i], med(c, order[c, i]))
				print line
			}
			# Own work of the plugin: steadier than a difference of pair
			# medians, which the RCU waits of the moves and the execs spread.
			line = "  own work (sum of the medians of all phases but start, move, exit):"
			for (ci = 1; ci <= 2; ci++) {
				c = ci == 1 ? "ADD" : "DEL"; w = 0
				for (i = 1; i <= n[c]; i++) {
					k = order[c, i]
					if (k != "start" && k != "move" && k != "exit" && k != "total") w += med(c, k)
				}
				line = line sprintf(" %s=%.2f", c, w); own = own " " w
			}
			print line
			if (ownfile != "") print own > ownfile
		}'
}
breakdown "$tmp/phases" "$tmp/walls" \
	"where the time goes (median ms per call; start = spawn of timeout, nsenter and the plugin, Go runtime start-up, package init):" \
	"$tmp/own"
initms=$(for _ in 1 2 3 4 5; do
	GODEBUG=inittrace=1 CNI_COMMAND=VERSION "$tmp/bin/kube-rdma" </dev/null 2>&1 >/dev/null |
		awk '$1 == "init" { s += $5 } END { printf "%.3f\n", s }'
done | sort -n | sed -n 3p)
echo "exec floors, same run (median ms per pair of execs through timeout and nsenter):" \
	"Go hello-world $hello_med, ip -V $ipv_med; package init of the plugin (GODEBUG=inittrace=1, median of 5) $initms ms per exec"
floor=$(awk -v r="$raw_med" -v h="$hello_med" -v i="$ipv_med" 'BEGIN { printf "%.1f", r + h - i }')
echo "floor for any Go plugin (raw pair + hello-world pair - ip -V pair): $floor ms = $(ratio "$floor" "$raw_med") x raw"
echo "GPU-aligned arm: a gpuAligned pool of 2 NICs, standalone mode (resourceName), RDMA netns mode exclusive;" \
	"each ADD asks PodResources (a grpc-go server on a unix socket) for the pod's 1 slot and 1 GPU, reads the GPUs" \
	"(sysfs, NVIDIA procfs), aligns (allocator.AlignToGPUs), moves the netdev (real) and the RDMA device, writes" \
	"nccl.conf, env and binding.json; each DEL moves both back. Checked on the warm-up ADD: $ga_bound"
echo "  NOTE: this kernel has no RDMA netlink, so the arm's plugin is built with -tags kuberdma_e2e and its RDMA" \
	"device move is the file-backed fake (internal/fakerdma: a JSON state file under an flock). It measures" \
	"everything but the kernel's RDMA move; a real RdmaLinkSetNsFd would add its own cost per direction." \
	"The other arms use shared mode and move no RDMA device."
echo "ratios, GPU-aligned (median / p90 / mean): gpu-aligned/raw=$(ratio "$ga_med" "$raw_med") / $(ratio "$ga_p90" "$raw_p90") / $(ratio "$ga_mean" "$raw_mean")" \
	"gpu-aligned/kube-rdma=$(ratio "$ga_med" "$ours_med") / $(ratio "$ga_p90" "$ours_p90") / $(ratio "$ga_mean" "$ours_mean")" \
	"(difference of the medians: $(awk -v a="$ga_med" -v b="$ours_med" 'BEGIN { printf "%+.1f", a - b }') ms per pair)"
breakdown "$tmp/ga-phases" "$tmp/ga-walls" \
	"GPU-aligned arm, where the time goes (median ms per call; plan = pool.json, PodResources, GPU scan; claims = claims and align; record3 = nccl.conf, env, binding.json and the final record):" \
	"$tmp/ga-own"
read -r own_add own_del <"$tmp/own"
read -r ga_own_add ga_own_del <"$tmp/ga-own"
awk -v a="$own_add" -v d="$own_del" -v ga="$ga_own_add" -v gd="$ga_own_del" 'BEGIN {
	printf "  GPU-aligned own work over the plain arm: ADD %+.2f, DEL %+.2f, %+.2f ms per pair (the fake RDMA move is in move)\n", ga - a, gd - d, ga - a + gd - d }'
# The targets, each against its bound, from this run's figures.
awk -v r="$(ratio "$ours_med" "$raw_med")" -v h="$(ratio "$ours_med" "$hd_med")" -v a="$own_add" -v d="$own_del" \
	-v g="$(ratio "$ga_med" "$ours_med")" 'function t(name, v, bound, unit) {
		return sprintf("%s %s%s (<= %s%s: %s)", name, v, unit, bound, unit, v + 0 <= bound ? "met" : "NOT met") }
	BEGIN { print "targets: " t("kube-rdma/raw", r, 1.10, "") ", " t("kube-rdma/host-device", h, 1.00, "") ", " \
		t("own work ADD", a, 3, " ms") ", " t("own work DEL", d, 2, " ms") ", " t("GPU-aligned/kube-rdma", g, 1.10, "") }'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
