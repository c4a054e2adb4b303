#!/usr/bin/env bash
# dp-idle.sh: idle RSS and CPU of the device plugin daemon on the 1,024-device
# synthetic node (nodesim.Synthetic(8, 16, 63)) against the kubelet stand-in.
# No root needed. Usage: hack/dp-idle.sh [seconds] [binary]   (default 30, and
# a daemon built here as `make build` builds it: static, stripped, -tags grpcnotrace)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
bin="${2:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -z "$bin" ]; then
	bin="$tmp/device-plugin"
	CGO_ENABLED=0 go build -tags grpcnotrace -trimpath -ldflags='-s -w' -o "$bin" ./cmd/device-plugin
fi
DP_IDLE_BIN="$(realpath "$bin")" DP_IDLE_SECONDS="$secs" \
	go test ./pkg/agent/ -run '^TestIdleFootprint$' -count=1 -v -timeout "$((secs + 300))s" |
	grep -E 'IDLE|idle over|registered and listed|^(ok|FAIL|---)'
