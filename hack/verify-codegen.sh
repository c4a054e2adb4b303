#!/usr/bin/env bash
# Fails when pkg/client is not what hack/update-codegen.sh generates from
# pkg/apis/v1alpha1 now: regenerates into a temporary directory and diffs.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash hack/update-codegen.sh "$tmp"
diff -ru pkg/client "$tmp/pkg/client" || {
  echo "pkg/client differs from what client-gen and applyconfiguration-gen generate: run make generate"
  exit 1
}
