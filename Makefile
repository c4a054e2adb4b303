# kube-rdma. `make demo` and `make test` are the README's two commands.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := bin
# Pinned; built from the Go module proxy on first use and cached in GOCACHE.
# v0.8.2 is staticcheck 2026.2.2, the newest release; it requires Go 1.26.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# v1.30.0 is errcheck's newest release. .errcheck-excludes lists the calls
# whose errors are dropped on purpose everywhere, each with its reason;
# elsewhere a dropped error is `_ =` in place, with a comment when not obvious.
ERRCHECK := github.com/kisielk/errcheck@v1.30.0

.PHONY: all build weight demo test fuzz fuzz-short bench bench-ghw dp-idle bench-cni promtool-test e2e-rxe e2e-local e2e-rxe-cluster test-apiserver scale scale-short scale-bin lint ci clean manifests helm-check local-node-build shellcheck generate verify-generate krew-dist arm64-check actionlint release release-check

all: build

# Version, commit and build date, linked into every binary (`<binary> --version`);
# a plain `go build` falls back to the VCS stamp the toolchain records.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE ?= $(shell date -u -d @$${SOURCE_DATE_EPOCH:-$$(date +%s)} +%Y-%m-%dT%H:%M:%SZ)
VPKG := github.com/kube-rdma/kube-rdma/internal/version
VFLAGS := -X $(VPKG).Version=$(VERSION) -X $(VPKG).Commit=$(COMMIT) -X $(VPKG).Date=$(DATE)

# The shipped binaries (the image carries these three), built as the
# Dockerfile builds them (docs/weight.md has the figures):
# - static (CGO_ENABLED=0): the image has no libc. For kubectl-rdma it also
#   matters for size: cli-runtime links kustomize, which imports Go's plugin
#   package, and with cgo that makes the linker export every symbol
#   dynamically (35 MB of the binary).
# - stripped (-s -w: no symbol table, no DWARF; panics still print file:line).
# - RELEASE_TAGS: grpcnotrace leaves out gRPC's golang.org/x/net/trace,
#   whose html/template makes the linker keep every exported method of every
#   linked type (reflect's MethodByName): 16 MB of the daemon.
# The CNI binary is named after the plugin type it implements ("kube-rdma"):
# runtimes look the type up in CNI_PATH; it is exec'd twice per pod, so its
# start-up is most of its cost (docs/cni.md). The Dockerfile and
# e2e/local-node/images.sh build with the same flags.
RELEASE_TAGS := grpcnotrace
RELEASE_LDFLAGS := -s -w $(VFLAGS)
RELEASE_BUILD := CGO_ENABLED=0 $(GO) build -tags $(RELEASE_TAGS) -trimpath -ldflags='$(RELEASE_LDFLAGS)'
build: hack/ensure-go.sh
	@bash hack/ensure-go.sh
	$(RELEASE_BUILD) -o $(BIN)/device-plugin ./cmd/device-plugin
	$(RELEASE_BUILD) -o $(BIN)/kube-rdma ./cmd/cni
	$(RELEASE_BUILD) -o $(BIN)/kubectl-rdma ./cmd/kubectl-rdma

# The weight of what ships, against its limits (docs/weight.md): the size of
# each release binary, and the daemon's idle RSS and CPU on the 1,024-device
# synthetic node (hack/dp-idle.sh). Fails when one is over.
weight: build
	bash hack/weight.sh $(BIN)

# Runs discovery, then the device plugin daemon against an in-process kubelet
# stand-in, on a built-in sample node (an 8-GPU HGX H100): no root, no
# cluster, no RDMA hardware. SAMPLE=dgx|roce|soft-roce|... for others. The
# demo is its own binary (bin/kube-rdma-demo), not shipped in the image; it
# builds the shipped ones too, which is how CI (.ci/run) builds them.
SAMPLE ?= hgx
demo: build
	$(GO) build -trimpath -ldflags='$(VFLAGS)' -o $(BIN)/kube-rdma-demo ./cmd/kube-rdma-demo
	$(BIN)/kube-rdma-demo run --sample $(SAMPLE)

# Unit and integration tests. As root, the tests that move links between real
# network namespaces run too (CI runs as root); as another user they re-run as
# root in a user namespace where the kernel allows it, else skip and say why.
# hack/testsummary prints what plain go test would, then the skips by reason.
test:
	@bash hack/ensure-go.sh
	@if [ "$$(id -u)" = 0 ]; then echo "make test: as root: the tests that create network namespaces and move links run"; \
	else echo "make test: as $$(id -un), not root: tests that create network namespaces re-run as root in a user namespace if the kernel allows it; tests that need root skip, with reasons at the end"; fi
	@set -o pipefail; $(GO) test -count=1 -timeout 15m -json ./... | $(GO) run ./hack/testsummary

# Every parser of what the host, the kubelet or the API server hands us
# (docs/security.md, "Parsers and fuzzing"): package:target, each run for
# FUZZTIME. make fuzz-short is CI's few seconds each.
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	./pkg/discovery/:FuzzParsers \
	./pkg/cni/netconf/:FuzzParse \
	./pkg/kubelet/podresources/:FuzzDecodePods \
	./pkg/kubelet/podresources/:FuzzReadResponse \
	./pkg/hostapi/claimrecord/:FuzzReadAll \
	./pkg/hostapi/attachment/:FuzzLoad \
	./pkg/hostapi/allocdir/:FuzzReadPoolFile \
	./pkg/hostapi/nodepools/:FuzzRead \
	./pkg/hostapi/cniops/:FuzzDrain \
	./pkg/agent/config/:FuzzParse \
	./pkg/agent/config/:FuzzParseMemlock \
	./pkg/cniinstall/:FuzzChainUnchain \
	./pkg/kubectlrdma/:FuzzNodeState

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

# CI's short form: a count, not a duration. With a duration, a target whose inputs take tens of
# milliseconds (a temp dir per input, on a loaded disk) can fail "context deadline exceeded" when
# the time runs out mid-input, with no crash found.
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=300x

# Discovery of a synthetic node with 8 GPUs, 16 PFs and 1,008 VFs.
bench:
	$(GO) test -run XXX -bench . -benchtime 20x ./pkg/discovery/

# Discovery against ghw's PCI scan (what the peer device plugins start with)
# on the same node, interleaved in one process: medians and the ratio. Its own
# module (bench/ghw), so ghw is no dependency of our binaries. Needs a pci.ids
# database (Debian: apt-get install pci.ids).
bench-ghw:
	cd bench/ghw && $(GO) run . -rounds 15

# Idle RSS and CPU of the daemon (bin/device-plugin) on the 1,024-device synthetic node.
dp-idle: build
	bash hack/dp-idle.sh 30 $(BIN)/device-plugin

# ADD+DEL with this plugin against Debian's host-device and the raw netns move.
bench-cni: build
	bash hack/bench-cni.sh

# The chart's alert rules (deploy/helm/kube-rdma/files/prometheus-rules.yaml) checked and unit
# tested with promtool (Debian's prometheus package; go test ./deploy/helm/ runs it too when found).
PROMTOOL ?= promtool
promtool-test:
	$(PROMTOOL) check rules deploy/helm/kube-rdma/files/prometheus-rules.yaml
	$(PROMTOOL) test rules deploy/helm/kube-rdma/files/tests/*.yaml

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

# Lint (defaults, each CNI mode, chained to a dra pool, no node state, NRI with a pool memlock, a gpuAligned pool, the monitoring objects), the rendered manifests up to date, the render tests.
helm-check:
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) --set cni.install=true,cni.mode=chained,cni.chained.pool=ib
	$(HELM) lint --strict $(CHART) --set cni.install=true,cni.mode=multus --set-json 'cni.networks=[{"name":"rdma-ib","pool":"ib"}]'
	$(HELM) lint --strict $(CHART) --set dra.enabled=true,cni.install=true,cni.mode=chained,cni.chained.pool=ib --set-json 'config.pools=[{"name":"ib","mode":"exclusive","frontend":"dra","selectors":{"linkLayers":["InfiniBand"]}}]'
	$(HELM) lint --strict $(CHART) --set nodeState.enabled=false
	$(HELM) lint --strict $(CHART) --set nri.enabled=true --set-json 'config.pools=[{"name":"hca","mode":"exclusive","memlock":"64Gi","selectors":{"kinds":["PF"]}}]'
	$(HELM) lint --strict $(CHART) --set-json 'config.pools=[{"name":"gpu-nics","mode":"exclusive","binding":"gpuAligned","selectors":{"linkLayers":["InfiniBand"]}}]'
	$(HELM) lint --strict $(CHART) --set monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true,devicePlugin.metricsHost=0.0.0.0
	HELM=$(HELM) bash hack/render-manifests.sh | diff -u deploy/manifests/device-plugin.yaml - || \
	  { echo "deploy/manifests/device-plugin.yaml differs from the chart: run make manifests"; exit 1; }
	HELM=$(HELM) $(GO) test -count=1 ./deploy/helm/

# Kubernetes, etcd, Helm, containerd for the local-node e2e, cached in $(E2E_CACHE).
local-node-build:
	E2E_CACHE=$(E2E_CACHE) bash e2e/local-node/build.sh

# kubectl-rdma's krew archives and manifest in dist/krew (every platform of deploy/krew/rdma.yaml),
# installed and uninstalled by krew (built from the module proxy) as a check. CI: linux/amd64 only.
krew-dist:
	bash hack/krew-dist.sh

# The shipped binaries cross-built for linux/arm64 (Grace nodes) with the release flags, each
# one's --version run under qemu-aarch64-static, and device-plugin discover -o json on the GB200
# sample node (nodesim.GB200) identical from the amd64 and the arm64 build (hack/arm64-check.sh).
# Debian: apt-get install qemu-user-static.
arm64-check:
	bash hack/arm64-check.sh

# A release (docs/release.md): the kube-rdma image for linux/amd64 and linux/arm64 as one OCI
# index (hack/ocibuild, reproducible), a CycloneDX SBOM per binary and platform, the chart with
# this version, the krew archives and manifest, under dist/release/$(VERSION). With REGISTRY
# (host:port/path) the image goes to REGISTRY/kube-rdma:<VERSION without v>, the SBOMs as its
# referrers, the chart to oci://REGISTRY/charts, its image.repository REGISTRY/kube-rdma.
# make release-check runs it twice against a local registry (hack/registry.sh) and checks it.
REGISTRY ?=
release:
	VERSION=$(VERSION) REGISTRY=$(REGISTRY) bash hack/release.sh

release-check:
	bash hack/release-check.sh

# The node-state publisher and kubectl-rdma against a real kube-apiserver and etcd (envtest)
# from local-node-build's cache (make test runs them too, when that cache exists).
test-apiserver:
	KUBEBUILDER_ASSETS=$(E2E_CACHE)/bin/current HELM=$(HELM) $(GO) test -count=1 -run 'TestAgainstAPIServer|TestPublishToAPIServer|TestAdmissionPolicyAgainstAPIServer|TestStatusAuthAgainstAPIServer|TestWriterAgainstAPIServer' -v ./pkg/kubectlrdma/ ./pkg/nodestate/ ./pkg/statusauth/ ./pkg/claimstatus/ ./deploy/helm/

# The control plane at N simulated GPU nodes (docs/scale.md): the local-node build's etcd,
# kube-apiserver, kube-scheduler and kube-controller-manager (make local-node-build), N nodes
# with the RDMANodeState of the real publisher and the ResourceSlices of the real DRA device
# builder, measured (etcd bytes, writes, kubectl rdma, DRA scheduling) and printed. make scale
# runs N=1,000 and 5,000 (about 20 min on 2 cores) as run SCALE_RUN (1; SCALE_RUN=2 adds a
# second run beside it) and redraws docs/scale.png from docs/scale.json; make scale-short is N=50 in under 2 minutes, for CI. Not in make test.
SCALE_N ?= 1000,5000
SCALE_RUN ?= 1
SCALE_ARGS ?=
scale-bin:
	$(RELEASE_BUILD) -o $(BIN)/kubectl-rdma ./cmd/kubectl-rdma
	$(GO) build -o $(BIN)/kube-rdma-scale ./hack/scale
scale: scale-bin
	nice -n 19 $(BIN)/kube-rdma-scale -bin $(E2E_CACHE)/bin/current -n $(SCALE_N) -run $(SCALE_RUN) -out docs/scale.json $(SCALE_ARGS)
	cd hack/scale/plot && $(GO) run . -in ../../../docs/scale.json -out ../../../docs/scale.png
scale-short: scale-bin
	nice -n 19 $(BIN)/kube-rdma-scale -bin $(E2E_CACHE)/bin/current -n 50 -steady 15s -storm 15s -sched-pods 60 -sched-rate 10 -check $(SCALE_ARGS)

# The e2e suite (e2e/suite) on a real single-node cluster built here (root; e2e/local-node);
# ARGS goes to its go test, e.g. ARGS='-run TestCluster/faults'.
e2e-local:
	E2E_CACHE=$(E2E_CACHE) bash e2e/local-node/run.sh $(ARGS)

# The e2e suite (its rxe-cluster harness) on a cluster of two qemu (TCG) soft-RoCE guests, each
# running containerd and a kubelet, joined to a control plane in a network namespace made for
# the run (root; e2e/rxe-cluster). ARGS goes to its go test; RXEC_NODES=1 for one guest.
e2e-rxe-cluster:
	E2E_CACHE=$(E2E_CACHE) bash e2e/rxe-cluster/run.sh $(ARGS)

# Deep copies of pkg/apis and the CRD in the chart's crds/ (controller-gen, pinned), and the
# typed client with apply configurations in pkg/client (client-gen, applyconfiguration-gen of
# k8s.io/code-generator at go.mod's k8s.io/client-go version: hack/update-codegen.sh). Run it
# after changing pkg/apis and commit the result; make lint checks pkg/client is up to date
# (verify-generate).
CONTROLLER_GEN := sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
generate:
	$(GO) run $(CONTROLLER_GEN) object paths=./pkg/apis/... crd:crdVersions=v1 output:crd:artifacts:config=deploy/helm/kube-rdma/crds
	GO=$(GO) bash hack/update-codegen.sh

verify-generate:
	GO=$(GO) bash hack/verify-codegen.sh

# The last two lines check the local-node e2e's build of the binaries (tag kuberdma_e2e: fake RDMA
# netlink, internal/fakerdma), which the others do not compile.
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	GO=$(GO) bash hack/verify-codegen.sh
	$(GO) vet -tags kuberdma_e2e ./cmd/cni ./cmd/device-plugin ./internal/fakerdma
	$(GO) run $(STATICCHECK) -tags kuberdma_e2e ./cmd/cni ./cmd/device-plugin ./internal/fakerdma
	$(GO) run $(ERRCHECK) -exclude .errcheck-excludes ./...
	$(GO) run $(ERRCHECK) -exclude .errcheck-excludes -tags kuberdma_e2e ./cmd/cni ./cmd/device-plugin ./internal/fakerdma
	# The soft-RoCE guest's tests build only with their tag, inside make e2e-rxe: vet them here
	# too, so an API change does not first show up an hour into CI.
	$(GO) vet -tags rxe_guest ./e2e/rxe/guest/

# Every shell script in the repository (git ls-files '*.sh') and .ci/run. Debian: apt-get
# install shellcheck (bookworm: 0.9.0). A warning that is wrong for one line is disabled on
# that line with its reason: `# shellcheck disable=SCxxxx  # why`.
SHELLCHECK ?= shellcheck
shellcheck:
	@command -v $(SHELLCHECK) >/dev/null || { echo "make shellcheck: $(SHELLCHECK) not found (Debian: apt-get install shellcheck)"; exit 1; }
	@$(SHELLCHECK) --version | sed -n 's/^version: /make shellcheck: shellcheck /p'
	git ls-files -z '*.sh' .ci/run | xargs -0 $(SHELLCHECK) -x

# The GitHub Actions workflows (.github/workflows): actionlint (pinned, built from the module proxy
# into $(E2E_CACHE)/bin), which runs shellcheck on every run: block; it fails without shellcheck.
actionlint:
	E2E_CACHE=$(E2E_CACHE) SHELLCHECK=$(SHELLCHECK) bash hack/actionlint.sh

ci:
	bash .ci/run

clean:
	rm -rf $(BIN)
