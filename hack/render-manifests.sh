#!/usr/bin/env bash
# hack/render-manifests.sh: print deploy/manifests/device-plugin.yaml, the kube-rdma chart
# rendered with its default values and its CRD, for users who `kubectl apply` instead of using Helm.
# `make manifests` writes it; `make helm-check` fails when the committed file differs.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=${HELM:-$(command -v helm || echo "${E2E_CACHE:-/var/cache/kube-rdma-e2e}/bin/current/helm")}
[[ -x $HELM ]] || { echo "render-manifests: no helm (set HELM or run e2e/local-node/build.sh helm)" >&2; exit 1; }
cat <<'HEAD'
# kube-rdma device plugin: advertises RDMA devices to the kubelet as extended
# resources (one per pool), with health from port state and NUMA topology.
# Generated from deploy/helm/kube-rdma with its default values by `make manifests`;
# edit the chart, not this file. Apply with:
#   kubectl apply -f deploy/manifests/device-plugin.yaml
# Docs: docs/device-plugin.md
apiVersion: v1
kind: Namespace
metadata:
  name: kube-rdma
HEAD
"$HELM" template kube-rdma deploy/helm/kube-rdma --namespace kube-rdma --include-crds
