#!/usr/bin/env bash
# e2e/local-node/build.sh: build the upstream binaries the local-node e2e runs (Kubernetes,
# etcd, Helm, containerd, the CNI reference plugins) from the Go module proxy, and fetch the
# Debian package it uses (runc), into a cache that outlives the run.
#
#   bash e2e/local-node/build.sh [COMPONENT...]     # default: all; prints the bin directory
#
# all: kubernetes etcd helm containerd debs cniplugins multus (the Multus CNI thick plugin, for the multus
# phase: images.sh images it). Only when named: registry (the CNCF distribution registry,
# hack/registry.sh) and crane (go-containerregistry's CLI, at the kube-rdma go.mod's version),
# for make release-check; kubernetes-newest (the newest supported Kubernetes minor, for
# e2e/rxe-cluster: its binaries are linked from $E2E_CACHE/bin/kubernetes-newest/, not from
# current/, which keeps modules/kubernetes's, the oldest supported minor).
#
# Each component is a throw-away Go module under e2e/local-node/modules/<name> (go.mod pins the
# release, go.sum pins every dependency, tools.go names the commands). Its binaries go to
#   $E2E_CACHE/bin/<name>-<version>-<hash of go.mod and go.sum and this script's flags>/
# which is complete or absent (built in a temporary directory, then renamed), so a second run
# with the same recipe costs nothing, and a changed recipe builds next to the old one. GOCACHE
# and GOMODCACHE live in the same cache: a recipe change rebuilds in seconds to minutes.
# $E2E_CACHE/bin/current/<binary> links to the binaries of the last successful run.
# E2E_REBUILD=1 rebuilds even when the output directory exists (to time a warm build).
#
# The machines are shared: every build runs under `nice -n 19` with one package at a time
# (E2E_BUILD_JOBS); a component is built by one build.sh at a time ($E2E_CACHE/bin/.<name>.lock).
set -Eeuo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
E2E_CACHE=${E2E_CACHE:-/var/cache/kube-rdma-e2e}
E2E_BUILD_JOBS=${E2E_BUILD_JOBS:-1}
ALL=(kubernetes etcd helm containerd debs cniplugins multus)
# Built only when named (make release, make release-check).
EXTRA=(registry crane kubernetes-newest)

log() { printf '%s local-node-build: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

export GOCACHE=$E2E_CACHE/gocache GOMODCACHE=$E2E_CACHE/gomod
export GOFLAGS="-p=$E2E_BUILD_JOBS -mod=readonly -trimpath" CGO_ENABLED=0 GOTOOLCHAIN=local
PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || die "go not found (hack/ensure-go.sh installs it)"

# required_version MODULE_DIR MODULE: the version go.mod requires.
required_version() {
  awk -v m="$2" '$1 == "require" && $2 == m {print $3} $1 == m {print $2}' "$HERE/modules/$1/go.mod" | head -1
}

# recipe_key NAME FLAGS...: a short hash of what the output depends on.
recipe_key() {
  local name=$1; shift
  { cat "$HERE/modules/$name/go.mod" "$HERE/modules/$name/go.sum"; printf '%s\n' "$@"; go env GOVERSION; } |
    sha256sum | cut -c1-12
}

# go_component NAME VERSION LDFLAGS TAGS OUT PKG...: build PKG... of module NAME into its cache
# dir; OUT names the binary when there is one package, else empty (go's names). The binaries
# are linked from $E2E_CACHE/bin/$LINK_DIR (default current).
go_component() {
  local name=$1 version=$2 ldflags=$3 tags=$4 out=$5; shift 5
  local key dir start
  key=$(recipe_key "$name" "$ldflags" "$tags" "$out" "$@")
  dir=$E2E_CACHE/bin/$name-$version-$key
  [[ ${E2E_REBUILD:-0} != 1 ]] || rm -rf "$dir"
  if [[ -d $dir ]]; then
    log "$name $version: cached ($dir)"
  else
    log "$name $version: building $* (jobs $E2E_BUILD_JOBS, nice 19)"
    start=$(date +%s)
    rm -rf "$dir.tmp"
    mkdir -p "$dir.tmp"
    (cd "$HERE/modules/$name" && nice -n 19 go build -tags "$tags" -ldflags "$ldflags" -o "$dir.tmp/$out" "$@") ||
      die "$name: go build failed"
    mv "$dir.tmp" "$dir"
    log "$name $version: built in $(($(date +%s) - start)) s"
    echo "$(date -u +%FT%TZ) $name $version $key $(($(date +%s) - start))s" >>"$E2E_CACHE/build-times.log"
  fi
  link_current "$dir"
}

link_current() {
  local f links=$E2E_CACHE/bin/${LINK_DIR:-current}
  mkdir -p "$links"
  for f in "$1"/*; do ln -sfn "$f" "$links/$(basename "$f")"; done
}

# build_kubernetes [MODULE]: the Kubernetes commands of modules/MODULE (default kubernetes).
build_kubernetes() {
  local m=${1:-kubernetes} v ld p
  v=$(required_version "$m" k8s.io/kubernetes)
  ld="-s -w"
  # What hack/lib/version.sh sets, minus the commit (the module proxy does not carry it).
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=$(cut -d. -f1 <<<"${v#v}") -X $p.gitMinor=$(cut -d. -f2 <<<"$v")"
    ld+=" -X $p.gitTreeState=clean"
  done
  go_component "$m" "$v" "$ld" "" "" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
}

build_kubernetes_newest() { LINK_DIR=kubernetes-newest build_kubernetes kubernetes-newest; }

build_etcd() {
  local v
  v=$(required_version etcd go.etcd.io/etcd/server/v3)
  go_component etcd "$v" "-s -w" "" etcd go.etcd.io/etcd/server/v3
}

build_helm() {
  local v kv ld
  v=$(required_version helm helm.sh/helm/v3)
  # As Helm's Makefile: the default Kubernetes version for lint and template is the client-go one.
  kv=$(required_version helm k8s.io/client-go)
  kv=${kv#v0.}; kv=${kv%%.*}
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$v -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  ld+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kv"
  ld+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kv"
  go_component helm "$v" "$ld" "" "" helm.sh/helm/v3/cmd/helm
}

build_containerd() {
  local v ld p=github.com/containerd/containerd/v2
  v=$(required_version containerd $p)
  # Static (CGO off drops btrfs, whose snapshotter needs cgo; the tag says so explicitly).
  ld="-s -w -X $p/version.Version=$v -X $p/version.Package=$p"
  go_component containerd "$v" "$ld" "no_btrfs osusergo netgo" "" \
    $p/cmd/containerd $p/cmd/containerd-shim-runc-v2 $p/cmd/ctr
}

# The CNCF distribution registry (hack/registry.sh runs it for make release-check), and crane
# to read what a release pushed. Neither is in the default set: name them.
build_registry() {
  local v p=github.com/distribution/distribution/v3
  v=$(required_version registry $p)
  go_component registry "$v" "-s -w -X $p/version.version=$v -X $p/version.mainpkg=$p" "" registry $p/cmd/registry
}

build_crane() {
  local v want m=github.com/google/go-containerregistry
  v=$(required_version crane $m)
  # The same go-containerregistry as hack/ocibuild links: what pushes and what reads agree.
  want=$(awk -v m="$m" '$1 == m {print $2} $1 == "require" && $2 == m {print $3}' "$HERE/../../go.mod" | head -1)
  [[ $v == "$want" ]] || die "crane: modules/crane/go.mod has $m $v, the kube-rdma go.mod $want"
  go_component crane "$v" "-s -w -X $m/cmd/crane/cmd.Version=$v" "" crane $m/cmd/crane
}

# The CNI reference plugins of the node's primary network, into cni/: a release that implements
# CNI 1.1.0 (STATUS and GC), so that a primary conflist of cniVersion 1.1.0 works and containerd
# 2.x asks the network's STATUS, as it does on a current node (Debian 12's package speaks 1.0.0).
build_cniplugins() {
  local v p=github.com/containernetworking/plugins
  v=$(required_version cniplugins $p)
  go_component cniplugins "$v" "-s -w -X $p/pkg/utils/buildversion.BuildVersion=$v" "" cni/ \
    $p/plugins/main/bridge $p/plugins/ipam/host-local $p/plugins/main/loopback $p/plugins/ipam/static
}

# The Multus CNI thick plugin: multus-daemon (the DaemonSet's process, which runs the delegates),
# multus-shim (the CNI binary the runtime calls, which asks the daemon over its socket),
# install_multus (the init container's copy of the shim and passthru into the node's CNI bin
# directory) and passthru-cni. The version strings are what upstream's build sets
# (hack/build-go.sh), minus the commit.
build_multus() {
  local v p=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
  v=$(required_version multus $p)
  go_component multus "$v" "-s -w -X $p/pkg/multus.version=$v -X $p/pkg/multus.gitTreeState=clean" "" "" \
    $p/cmd/multus-daemon $p/cmd/multus-shim $p/cmd/install_multus $p/cmd/passthru-cni
}

# Debian packages of the host's suite, unpacked (never installed) into the cache: runc.
DEBS=(runc)
build_debs() {
  local dir=$E2E_CACHE/debs list want name ver file key root
  mkdir -p "$dir"
  if ! apt-cache show --no-all-versions "${DEBS[@]}" >/dev/null 2>&1; then
    log "apt-get update (host package lists)"
    timeout 300 apt-get update -qq || die "apt-get update failed"
  fi
  list=$(apt-cache show --no-all-versions "${DEBS[@]}" | awk '
    /^Package: /{p=$2} /^Version: /{v=$2} /^Architecture: /{a=$2}
    /^$/{if (p != "") {f=v; gsub(":", "%3a", f); print p, v, p "_" f "_" a ".deb"}; p=""}')
  key=$(sha256sum <<<"$list" | cut -c1-12)
  root=$E2E_CACHE/bin/debs-$key
  if [[ -d $root ]]; then
    log "debs: cached ($root)"
  else
    want=()
    while read -r name ver file; do [[ -s $dir/$file ]] || want+=("$name=$ver"); done <<<"$list"
    if [[ ${#want[@]} -gt 0 ]]; then
      log "debs: downloading ${want[*]}"
      (cd "$dir" && timeout 300 apt-get download -qq -o APT::Sandbox::User=root "${want[@]}") || die "apt-get download failed"
    fi
    rm -rf "$root.tmp" "$root.x"
    mkdir -p "$root.tmp" "$root.x"
    while read -r name ver file; do dpkg-deb -x "$dir/$file" "$root.x"; done <<<"$list"
    cp -a "$root.x/usr/sbin/runc" "$root.tmp/runc"
    rm -rf "$root.x"
    mv "$root.tmp" "$root"
    log "debs: $(awk '{printf "%s %s  ", $1, $2}' <<<"$list")"
  fi
  link_current "$root"
}

main() {
  local c comps=("$@")
  [[ ${#comps[@]} -gt 0 ]] || comps=("${ALL[@]}")
  for c in "${comps[@]}"; do
    [[ " ${ALL[*]} ${EXTRA[*]} " == *" $c "* ]] || die "unknown component $c (known: ${ALL[*]} ${EXTRA[*]})"
  done
  mkdir -p "$E2E_CACHE/bin"
  for c in "${comps[@]}"; do
    # One build of a component at a time (concurrent CI runs); different components may
    # build in parallel (separate build.sh runs).
    exec 9>"$E2E_CACHE/bin/.$c.lock"
    flock 9
    "build_${c//-/_}"
    exec 9>&-
  done
  echo "$E2E_CACHE/bin/current"
}

main "$@"
