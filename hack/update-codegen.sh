#!/usr/bin/env bash
# Generates the typed client of pkg/apis/v1alpha1 (RDMANodeState) with
# k8s.io/code-generator at the version of k8s.io/client-go in go.mod:
#   pkg/client/applyconfiguration  applyconfiguration-gen: apply configurations
#   pkg/client/clientset           client-gen: the clientset, with Apply and ApplyStatus
# into the repository, or into $1 (a directory standing for the repository
# root: hack/verify-codegen.sh, TestGeneratedClientUpToDate).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=${1:-.}
module=github.com/kube-rdma/kube-rdma
version=$($GO list -m -f '{{.Version}}' k8s.io/client-go)
gen="k8s.io/code-generator/cmd"
rm -rf "$out/pkg/client"
$GO run "$gen/applyconfiguration-gen@$version" \
  --go-header-file hack/boilerplate.go.txt \
  --output-dir "$out/pkg/client/applyconfiguration" \
  --output-pkg "$module/pkg/client/applyconfiguration" \
  "$module/pkg/apis/v1alpha1"
$GO run "$gen/client-gen@$version" \
  --go-header-file hack/boilerplate.go.txt \
  --clientset-name clientset \
  --input-base "$module/pkg" --input apis/v1alpha1 \
  --apply-configuration-package "$module/pkg/client/applyconfiguration" \
  --fake-clientset=false \
  --output-dir "$out/pkg/client" \
  --output-pkg "$module/pkg/client"
