#!/usr/bin/env bash
# ensure-go.sh: check that a Go toolchain new enough for go.mod is on PATH,
# and say how to get one if not. Go 1.21 and newer fetch the toolchain that
# go.mod names from the Go module proxy by themselves (GOTOOLCHAIN=auto).
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin
if ! command -v go >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure-go.sh: no Go on PATH; installing Debian's golang-go" >&2
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go >/dev/null
  fi
fi
if ! command -v go >/dev/null; then
  echo "ensure-go.sh: Go is not installed. Install Go 1.21 or newer (https://go.dev/doc/install, or" >&2
  echo "  'apt-get install golang-go' on Debian 13); it fetches the version go.mod names itself." >&2
  exit 1
fi
minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "${minor:-0}" -lt 21 ]; then
  echo "ensure-go.sh: $(go env GOVERSION) is too old to fetch the toolchain go.mod names; install Go 1.21 or newer" >&2
  exit 1
fi
