#!/usr/bin/env bash
# e2e/local-node/up.sh: start a single-node Kubernetes cluster on this machine from the
# binaries of build.sh and the images of images.sh: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd (CDI and NRI on) and a kubelet, all on
# 127.0.0.1, all state below $NODE_RUN. Waits until the node is Ready and the images are
# imported, then prints the KUBECONFIG path. e2e/local-node/down.sh stops it and restores the
# host. On failure up.sh runs down.sh itself.
#
#   bash e2e/local-node/build.sh && bash e2e/local-node/images.sh
#   bash e2e/local-node/up.sh        # prints KUBECONFIG
#   bash e2e/local-node/down.sh
#
# Needs root, cgroup v1 (kubelet 1.34 with failCgroupV1: false) and no other node using
# $NODE_RUN. Host paths of the node's own CNI network are harness-owned ($NODE_RUN/cni), never
# /etc/cni/net.d or /opt/cni/bin.
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
START=$(date +%s.%N)
IMAGES=${E2E_IMAGES:-$E2E_CACHE/images}
READY_TIMEOUT=${READY_TIMEOUT:-120}

[[ $(id -u) == 0 ]] || die "needs root"
node_lock
if [[ -e $NODE_RUN/host/pids ]]; then
  node_in_use && die "$NODE_RUN is in use: a node is running (down.sh stops it)"
  log "$NODE_RUN is left from a node whose processes are gone: cleaning it up (down.sh)"
  bash "$HERE/down.sh"
fi
# The chart's default allocDir is a host path outside $NODE_RUN: a pools file an earlier run
# left there (releases before the uninstall hook removed it) would be "before" state that the
# phases' helm uninstall then removes.
if [[ -e /var/run/kube-rdma/alloc/_pools.json ]]; then
  log "removing /var/run/kube-rdma/alloc/_pools.json, left by an earlier run"
  rm -f /var/run/kube-rdma/alloc/_pools.json
fi
# The kubelet serves the device plugin API in /var/lib/kubelet/device-plugins whatever its
# --root-dir (a constant of k8s.io/kubelet): another kubelet on this host would share it.
[[ ! -e /var/lib/kubelet ]] || die "/var/lib/kubelet exists: another kubelet on this host?"
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl containerd \
  containerd-shim-runc-v2 ctr runc cni/bridge cni/host-local cni/loopback; do
  [[ -x $BIN/$b ]] || die "$BIN/$b missing: run e2e/local-node/build.sh"
done
for i in pause kube-rdma kube-rdma-fakerdma rdma-test multus; do
  [[ -s $IMAGES/$i.tar ]] || die "$IMAGES/$i.tar missing: run e2e/local-node/images.sh"
done

failed() {
  local rc=$?
  trap - ERR EXIT
  log "start failed (exit $rc); logs in $NODE_RUN/logs; tearing down"
  tail -n 5 "$NODE_RUN"/logs/*.log >&2 2>/dev/null || true
  [[ ${E2E_KEEP_FAILED:-0} == 1 ]] || bash "$HERE/down.sh" || true
  exit "$rc"
}
trap failed ERR
trap 'exit 130' INT TERM

mkdir -p "$NODE_RUN"/{host,logs,pki,etcd,kubelet,cdi,nri/plugins,nri/conf.d,containerd/root,containerd/state,runc}
mkdir -p "$NODE_RUN"/cni/{bin,net.d,ipam}
echo /var/lib/kubelet >"$NODE_RUN/host/created-dirs"
PATH=$BIN:$PATH:/usr/local/go/bin

# --- host state to restore --------------------------------------------------------------------
for s in "${KUBELET_SYSCTLS[@]}"; do echo "$s $(sysctl -n "$s")"; done >"$NODE_RUN/host/sysctls"
iptables_chains >"$NODE_RUN/host/iptables-chains"
echo "$BRIDGE" >"$NODE_RUN/host/bridge"
# The kubelet wants its cgroup root to exist in every controller.
cgroup_controllers >"$NODE_RUN/host/cgroup-controllers"
while read -r c; do mkdir -p "$c/$CGROUP_ROOT"; done <"$NODE_RUN/host/cgroup-controllers"

# --- the fixture RDMA node --------------------------------------------------------------------
# nodesim.LocalNode (2 InfiniBand HCAs, a RoCE PF with $FIXTURE_VFS VFs, 2 GPUs) written below
# $FIXTURE: the device plugin's and the CNI plugin's sysfs root. Each of its netdevs is a veth
# link of that name (this kernel has no dummy links), the other end in $PEER_NETNS. Each of its
# uverbs/umad/issm devices is a device node of the same major:minor in /dev/infiniband: the
# kubelet and containerd resolve a device plugin's host paths in the host's /dev, so they must
# exist there (the node's kernel has no RDMA driver: the nodes exist, opening one fails).
fixture_node() {
  local n i=0 f name maj min
  [[ ! -e /dev/infiniband ]] || die "/dev/infiniband exists: the fixture node needs a host without RDMA devices"
  ! ip netns list | grep -qw "$PEER_NETNS" || die "netns $PEER_NETNS exists (run down.sh first)"
  (cd "$REPO" && go build -o "$NODE_RUN/fixture-writer" ./e2e/local-node/fixture &&
    go build -o "$NODE_RUN/fakegpu" ./e2e/local-node/fakegpu &&
    go build -o "$NODE_RUN/fakegpudra" ./e2e/local-node/fakegpudra)
  # The gpu-aligned phase's image creates it; down.sh removes it.
  [[ ! -e $FAKE_RDMA_DIR ]] || die "$FAKE_RDMA_DIR exists (left by an earlier run?)"
  echo "$FAKE_RDMA_DIR" >>"$NODE_RUN/host/created-dirs"
  "$NODE_RUN/fixture-writer" -root "$FIXTURE" -vfs "$FIXTURE_VFS" >/dev/null
  for n in "$FIXTURE"/sys/class/net/*; do
    n=$(basename "$n")
    ! ip link show "$n" >/dev/null 2>&1 || die "a link named $n exists on this host"
  done
  echo "$PEER_NETNS" >"$NODE_RUN/host/netns"
  ip netns add "$PEER_NETNS"
  for n in "$FIXTURE"/sys/class/net/*; do
    n=$(basename "$n")
    ip link add "$n" type veth peer name "p$i" netns "$PEER_NETNS"
    ip link set "$n" up
    ip -n "$PEER_NETNS" link set "p$i" up
    i=$((i + 1))
  done
  echo /dev/infiniband >>"$NODE_RUN/host/created-dirs"
  mkdir -m 0755 /dev/infiniband
  for f in "$FIXTURE"/sys/class/infiniband_verbs/*/dev "$FIXTURE"/sys/class/infiniband_mad/*/dev; do
    name=$(basename "$(dirname "$f")")
    IFS=: read -r maj min <"$f"
    mknod -m 0666 "/dev/infiniband/$name" c "$maj" "$min"
  done
  mkdir -p "$CNI_STATE_DIR" "$RDMA_IPAM_DIR"
  log "fixture node: $i netdevs (veth), $(find /dev/infiniband -type c | wc -l) device nodes"
}
fixture_node

# --- PKI: one CA; the API server's serving cert; one admin client cert for every component ----
pki() {
  local d=$NODE_RUN/pki
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kube-rdma-e2e-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout "$d/apiserver.key" \
    -out "$d/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n' >"$d/apiserver.ext"
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
    -extfile "$d/apiserver.ext" -out "$d/apiserver.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-rdma-e2e-admin" \
    -keyout "$d/admin.key" -out "$d/admin.csr" 2>/dev/null
  openssl x509 -req -in "$d/admin.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
    -out "$d/admin.crt" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  cat >"$KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$d/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$d/admin.crt", client-key: "$d/admin.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
EOF
}
pki

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
  local what=$1 limit=$2 deadline; shift 2
  deadline=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    [[ $(date +%s) -lt $deadline ]] || die "$what: not after ${limit}s"
    sleep 0.2
  done
  log "$what ($(elapsed)s)"
}
elapsed() { awk -v s="$START" -v n="$(date +%s.%N)" 'BEGIN {printf "%.1f", n - s}'; }

# --- control plane -----------------------------------------------------------------------------
# Alpha DRA features of 1.34 the DRA phase of run.sh uses, on in every component (one list: a
# component ignores the gates it has no code for). DRADeviceTaints: the API server keeps the
# taints of ResourceSlice devices and the scheduler honours them; with it the scheduler and the
# controller manager also watch DeviceTaintRules, which are in resource.k8s.io/v1alpha3 only
# (off by default): without that API their informers never sync. DRAConsumableCapacity: shared
# devices' capacity (kube-rdma publishes none yet; on as a cluster using it would have it).
# DRAExtendedResource: a DeviceClass's extendedResourceName (API server), a claim made for a
# pod's extended resource (scheduler), prepared for its containers (kubelet).
# ResourceHealthStatus (alpha in 1.34, on by default from 1.36): the kubelet writes the health of
# a pod's devices into its status (API server: the field kept), which the PortDown test checks.
FEATURE_GATES=${E2E_FEATURE_GATES-DRADeviceTaints=true,DRAConsumableCapacity=true,DRAExtendedResource=true,ResourceHealthStatus=true}
RUNTIME_CONFIG=${E2E_RUNTIME_CONFIG-resource.k8s.io/v1alpha3=true}
start etcd etcd --name e2e --data-dir "$NODE_RUN/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" --quota-backend-bytes 1073741824 --unsafe-no-fsync
wait_for "etcd healthy" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

# The API server listens on 127.0.0.1 only, but publishes a non-loopback address in the
# "kubernetes" Endpoints (which reject loopback addresses); nothing in the e2e uses it.
ADVERTISE=$(ip -4 route get 192.0.2.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}')
[[ -n $ADVERTISE ]] || die "no non-loopback IPv4 address (the kubelet refuses a loopback node IP)"
NODE_IP=$ADVERTISE
start kube-apiserver kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address "$ADVERTISE" --secure-port "$API_PORT" \
  --cert-dir "$NODE_RUN/pki" --tls-cert-file "$NODE_RUN/pki/apiserver.crt" --tls-private-key-file "$NODE_RUN/pki/apiserver.key" \
  --client-ca-file "$NODE_RUN/pki/ca.crt" --authorization-mode Node,RBAC \
  --kubelet-client-certificate "$NODE_RUN/pki/admin.crt" --kubelet-client-key "$NODE_RUN/pki/admin.key" \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$NODE_RUN/pki/sa.pub" \
  --service-account-signing-key-file "$NODE_RUN/pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
  --kubelet-preferred-address-types InternalIP --allow-privileged=true --profiling=false \
  --feature-gates "$FEATURE_GATES" --runtime-config "$RUNTIME_CONFIG"
wait_for "kube-apiserver ready" 90 kubectl get --raw /readyz

start kube-controller-manager kube-controller-manager --kubeconfig "$KUBECONFIG" \
  --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
  --service-account-private-key-file "$NODE_RUN/pki/sa.key" --root-ca-file "$NODE_RUN/pki/ca.crt" \
  --cluster-signing-cert-file "$NODE_RUN/pki/ca.crt" --cluster-signing-key-file "$NODE_RUN/pki/ca.key" \
  --leader-elect=false --secure-port 0 --profiling=false --feature-gates "$FEATURE_GATES"
start kube-scheduler kube-scheduler --kubeconfig "$KUBECONFIG" \
  --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
  --leader-elect=false --secure-port 0 --profiling=false --feature-gates "$FEATURE_GATES"

# --- containerd --------------------------------------------------------------------------------
cp "$BIN"/cni/{bridge,host-local,loopback} "$NODE_RUN/cni/bin/"
# ipMasq and isGateway off: no iptables rules, no IP forwarding; pods reach nothing but
# themselves, which is all the e2e needs.
cat >"$NODE_RUN/cni/net.d/10-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "dataDir": "$NODE_RUN/cni/ipam"}}
  ]
}
EOF
# The pods' network namespaces: with netns_mounts_under_state_dir (below), containerd 2.2 mounts
# them under its CRI plugin's state dir. A mount point of its own, shared, as / is on a systemd
# node (here / is private): the chart's reclaimer mounts this directory into the daemon with
# HostToContainer propagation, so that a netns the runtime unmounts here is unmounted there too (a
# copy would keep the netns, and the NIC in it, alive), and the kubelet refuses that propagation
# from a private mount; the multus phase's Multus daemon looks at a pod's netns itself and runs its
# delegates chrooted in a copy of the host's root taken at its start. down.sh unmounts it.
CRI_NETNS_DIR=$NODE_RUN/containerd/state/io.containerd.grpc.v1.cri/netns
mkdir -p "$CRI_NETNS_DIR"
mount --bind "$CRI_NETNS_DIR" "$CRI_NETNS_DIR"
mount --make-rshared "$CRI_NETNS_DIR"
mkdir -p "$NODE_RUN/containerd/certs.d/$REGISTRY_ADDR"
cat >"$NODE_RUN/containerd/certs.d/$REGISTRY_ADDR/hosts.toml" <<EOF
server = "http://$REGISTRY_ADDR"
[host."http://$REGISTRY_ADDR"]
  capabilities = ["pull", "resolve"]
EOF
cat >"$NODE_RUN/containerd/config.toml" <<EOF
version = 3
root = "$NODE_RUN/containerd/root"
state = "$NODE_RUN/containerd/state"

[grpc]
  address = "$CONTAINERD_ADDRESS"
[ttrpc]
  address = "$CONTAINERD_ADDRESS.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.registry]
    # hosts.toml per registry: the local one (lib.sh REGISTRY_ADDR) speaks plain HTTP.
    config_path = "$NODE_RUN/containerd/certs.d"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "localhost/pause:e2e"

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["$NODE_RUN/cdi"]
  # The kubelet gives pods OOM score adjustments below containerd's own; on a shared host
  # containerd does not run at -999, so it must clamp them.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$BIN/runc"
        Root = "$NODE_RUN/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$NODE_RUN/cni/bin"]
    conf_dir = "$NODE_RUN/cni/net.d"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "$NODE_RUN/nri/nri.sock"
  plugin_path = "$NODE_RUN/nri/plugins"
  plugin_config_path = "$NODE_RUN/nri/conf.d"
EOF
# The shim finds runc through PATH. containerd's soft RLIMIT_MEMLOCK, which a container
# gets when nothing sets its limit, is 2 MiB (its hard limit is this shell's): below every
# pool's memlock, so the memlock hook's raise of the soft limit shows even where this machine
# cannot raise a hard limit (hook.sh runtime-memlock reports it).
start containerd env PATH="$BIN:$PATH" prlimit --memlock=2097152: containerd --config "$NODE_RUN/containerd/config.toml"
wait_for "containerd serving" 30 ctr version
imports=(pause rdma-test multus)
# From the registry (lib.sh E2E_FROM_REGISTRY), the kubelet has containerd pull ours.
[[ $E2E_FROM_REGISTRY == 1 ]] || imports+=(kube-rdma kube-rdma-fakerdma)
for i in "${imports[@]}"; do
  ctr images import --all-platforms "$IMAGES/$i.tar" >>"$NODE_RUN/logs/images.log" 2>&1
done
# The previous release's images (prev.sh), for the suite's upgrade phases: kube-rdma, and
# its fakerdma variant for upgrade-gpu-aligned.
for i in kube-rdma kube-rdma-fakerdma; do
  if [[ -s $PREV_IMAGES/$i.tar ]]; then
    ctr images import --all-platforms "$PREV_IMAGES/$i.tar" >>"$NODE_RUN/logs/images.log" 2>&1
  fi
done
log "images imported: $(ctr images ls -q | grep -c '^localhost/') ($(elapsed)s)"

# --- kubelet -----------------------------------------------------------------------------------
cat >"$NODE_RUN/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# On the node IP, where the API server looks for it (logs, exec); client certificates of the
# harness CA only.
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$NODE_RUN/pki/ca.crt"}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: "unix://$CONTAINERD_ADDRESS"
cgroupDriver: cgroupfs
cgroupRoot: "/$CGROUP_ROOT"
failSwapOn: false
failCgroupV1: false
# Nothing can be pulled again: never remove an image.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
podLogsDir: "$NODE_RUN/pod-logs"
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# A ConfigMap change reaches a pod's volume within the sync period (default 1m plus jitter): the
# suite's helm upgrade changes the pools' ConfigMap and waits for the daemon to reload it.
syncFrequency: 10s
registerNode: true
# The control plane's gates, as the config file's map.
featureGates: {$(sed 's/=/: /g; s/,/, /g' <<<"$FEATURE_GATES")}
EOF
echo "$NODE_IP" >"$NODE_RUN/host/node-ip"
start_kubelet
wait_for "node registered" 60 kubectl get node "$NODE_NAME"
wait_for "node Ready" "$READY_TIMEOUT" kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
# Pods are refused until the controller manager has made the namespace's service account.
wait_for "default service account" 60 kubectl get serviceaccount default
trap - ERR
echo "$KUBECONFIG"
