#!/usr/bin/env bash
# weight.sh: the release binaries' sizes and the daemon's idle footprint
# against their limits (docs/weight.md); exits 1 when one is over.
# Usage: hack/weight.sh [bindir]   (default bin, as `make build` leaves it)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-bin}"
# Limits. Sizes in MB (10^6 bytes), RSS in MiB (VmRSS kB / 1024, as docs/benchmarks.md quotes it),
# CPU in % of one core. The CNI limit is ours: it runs twice per pod.
max_dp_mb=40 max_kubectl_mb=60 max_cni_mb=6 max_rss_mb=30 max_cpu=0.5
secs="${WEIGHT_IDLE_SECONDS:-30}"
fail=0
check() { # name value limit unit
	local verdict=ok
	if awk -v v="$2" -v l="$3" 'BEGIN { exit !(v > l) }'; then verdict=OVER; fail=1; fi
	printf '%-26s %8s %-3s (limit %s) %s\n' "$1" "$2" "$4" "$3" "$verdict"
}
mb() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f", b / 1e6 }'; }
check "bin/device-plugin size" "$(mb "$dir/device-plugin")" "$max_dp_mb" MB
check "bin/kubectl-rdma size" "$(mb "$dir/kubectl-rdma")" "$max_kubectl_mb" MB
check "bin/kube-rdma (CNI) size" "$(mb "$dir/kube-rdma")" "$max_cni_mb" MB
# The shipped daemon links no WASM runtime (nri's pkg/api would bring wazero).
n=$(go list -tags grpcnotrace -deps ./cmd/device-plugin | grep -c wazero || true)
check "device-plugin wazero pkgs" "$n" 0 ""
out=$(bash hack/dp-idle.sh "$secs" "$dir/device-plugin")
line=$(grep '^IDLE ' <<<"$out") || { echo "$out"; echo "weight: no IDLE line from hack/dp-idle.sh"; exit 1; }
rss_kb=$(sed -E 's/.* rss="([0-9]+) kB".*/\1/' <<<"$line")
cpu=$(sed -E 's/.*cpu_percent=([0-9.]+).*/\1/' <<<"$line")
check "daemon idle RSS" "$(awk -v k="$rss_kb" 'BEGIN { printf "%.1f", k / 1024 }')" "$max_rss_mb" MB
check "daemon idle CPU" "$cpu" "$max_cpu" "%"
echo "$line"
exit "$fail"
