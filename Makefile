# kube-rdma. `make demo` and `make test` are the README's two commands.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := bin

.PHONY: all build demo test fuzz bench dp-idle bench-cni e2e-rxe lint ci clean manifests helm-check local-node-build

all: build

# The CNI binary is named after the plugin type it implements ("kube-rdma"):
# runtimes look the type up in CNI_PATH. It is exec'd twice per pod, so it is
# built static and stripped (start-up is most of its cost; docs/cni.md).
build: hack/ensure-go.sh
	@bash hack/ensure-go.sh
	$(GO) build -trimpath -o $(BIN)/device-plugin ./cmd/device-plugin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/kube-rdma ./cmd/cni
	$(GO) build -trimpath -o $(BIN)/kubectl-rdma ./cmd/kubectl-rdma

# Runs discovery, then the device plugin daemon against an in-process kubelet
# stand-in, on a built-in sample node (an 8-GPU HGX H100): no root, no
# cluster, no RDMA hardware. SAMPLE=dgx|roce|soft-roce|... for others.
SAMPLE ?= hgx
demo: build
	$(BIN)/device-plugin demo --sample $(SAMPLE)

# Unit and integration tests. As root, the tests that move links between real
# network namespaces run too (CI runs as root); otherwise they skip and say why.
test:
	@bash hack/ensure-go.sh
	$(GO) test -count=1 -timeout 15m ./...

fuzz:
	$(GO) test -run XXX -fuzz FuzzParsers -fuzztime 30s ./pkg/discovery/
	$(GO) test -run XXX -fuzz FuzzParse -fuzztime 30s ./pkg/cni/netconf/
	$(GO) test -run XXX -fuzz FuzzDecodePods -fuzztime 30s ./pkg/cni/podres/

# Discovery of a synthetic node with 8 GPUs, 16 PFs and 1,008 VFs.
bench:
	$(GO) test -run XXX -bench . -benchtime 20x ./pkg/discovery/

# Idle RSS and CPU of the daemon on the 1,024-device synthetic node.
dp-idle: build
	bash hack/dp-idle.sh 30

# ADD+DEL with this plugin against Debian's host-device and the raw netns move.
bench-cni: build
	bash hack/bench-cni.sh

# Real RDMA traffic: soft-RoCE in a qemu guest (downloads Debian packages).
e2e-rxe:
	bash e2e/rxe/run.sh

# Helm chart. HELM defaults to helm in PATH, else the one e2e/local-node/build.sh builds.
E2E_CACHE ?= /var/cache/kube-rdma-e2e
HELM ?= $(shell command -v helm 2>/dev/null || echo $(E2E_CACHE)/bin/current/helm)
CHART := deploy/helm/kube-rdma

# deploy/manifests/ is the chart rendered with its default values.
manifests:
	HELM=$(HELM) bash hack/render-manifests.sh >deploy/manifests/device-plugin.yaml.tmp
	mv deploy/manifests/device-plugin.yaml.tmp deploy/manifests/device-plugin.yaml

# Lint (defaults and each CNI mode), the rendered manifests up to date, the render tests.
helm-check:
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) --set cni.install=true,cni.mode=chained,cni.chained.pool=ib
	$(HELM) lint --strict $(CHART) --set cni.install=true,cni.mode=multus --set-json 'cni.networks=[{"name":"rdma-ib","pool":"ib"}]'
	HELM=$(HELM) bash hack/render-manifests.sh | diff -u deploy/manifests/device-plugin.yaml - || \
	  { echo "deploy/manifests/device-plugin.yaml differs from the chart: run make manifests"; exit 1; }
	HELM=$(HELM) $(GO) test -count=1 ./deploy/helm/

# Kubernetes, etcd, Helm, containerd for the local-node e2e, cached in $(E2E_CACHE).
local-node-build:
	E2E_CACHE=$(E2E_CACHE) bash e2e/local-node/build.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

ci:
	bash .ci/run

clean:
	rm -rf $(BIN)
