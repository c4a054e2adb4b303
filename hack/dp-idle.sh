#!/usr/bin/env bash
# dp-idle.sh: idle RSS and CPU of the device plugin daemon on the 1,024-device
# synthetic node (nodesim.Synthetic(8, 16, 63)) against the kubelet stand-in.
# No root needed. Usage: hack/dp-idle.sh [seconds]   (default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/device-plugin" ./cmd/device-plugin
DP_IDLE_BIN="$tmp/device-plugin" DP_IDLE_SECONDS="$secs" \
	go test ./pkg/deviceplugin/ -run '^TestIdleFootprint$' -count=1 -v -timeout "$((secs + 120))s" |
	grep -E 'IDLE|idle over|registered and listed|^(ok|FAIL|---)'
