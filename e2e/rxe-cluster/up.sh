#!/usr/bin/env bash
# e2e/rxe-cluster/up.sh: start the rxe cluster: a network namespace made for the run ($NETNS,
# lib.sh) holding the control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler from e2e/local-node/build.sh) and $RXEC_NODES qemu (TCG) guests, each booting
# the Debian kernel of e2e/rxe with containerd and a kubelet (guest-node.sh), joined by a
# bridge for the control traffic and one for their soft-RoCE NICs. Waits until every node is
# Ready, writes the figures to $RXEC_RUN/times and prints the KUBECONFIG path. down.sh stops
# it; on failure up.sh runs down.sh itself (RXEC_KEEP_FAILED=1 keeps it).
#
#   bash e2e/local-node/build.sh && bash e2e/local-node/images.sh && bash e2e/rxe-cluster/images.sh
#   bash e2e/rxe-cluster/up.sh
#   bash e2e/rxe-cluster/down.sh
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
T0=$(date +%s.%N)
elapsed() { awk -v s="$T0" -v n="$(date +%s.%N)" 'BEGIN {printf "%.1f", n - s}'; }

[[ $(id -u) == 0 ]] || die "needs root"
[[ ! -e $RXEC_RUN/pids ]] || die "$RXEC_RUN/pids exists: a cluster is running or was not stopped (down.sh)"
! ip netns list | grep -qw "$NETNS" || die "netns $NETNS exists (down.sh removes it)"
IMAGES=$E2E_CACHE/images
for b in etcd containerd containerd-shim-runc-v2 ctr runc cni/bridge cni/host-local cni/loopback cni/static; do
  [[ -x $BIN/$b ]] || die "$BIN/$b missing: run e2e/local-node/build.sh"
done
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  [[ -x $KBIN/$b ]] || die "$KBIN/$b missing: run e2e/local-node/build.sh$([[ $RXEC_KUBE == newest ]] && echo " kubernetes-newest")"
done
for i in pause kube-rdma rdma-test; do
  [[ -s $IMAGES/$i.tar ]] || die "$IMAGES/$i.tar missing: run e2e/local-node/images.sh"
done
[[ -s $RXEC_CACHE/images/rdma-perf.tar ]] || die "$RXEC_CACHE/images/rdma-perf.tar missing: run e2e/rxe-cluster/images.sh"

failed() {
  local rc=$?
  trap - ERR EXIT
  log "start failed (exit $rc); logs in $RXEC_RUN/logs"
  tail -n 5 "$RXEC_RUN"/logs/*.log >&2 2>/dev/null || true
  [[ ${RXEC_KEEP_FAILED:-0} == 1 ]] || bash "$HERE/down.sh" || true
  exit "$rc"
}
trap failed ERR
trap 'exit 130' INT TERM

mkdir -p "$RXEC_RUN"/{logs,pki,etcd} "$RXEC_RUN"/common/{bin,cni,lib,images,pki}
: >"$RXEC_RUN/pids"
PATH=$KBIN:$BIN:$PATH

# --- the guest kernel and initramfs (e2e/rxe/run.sh, cache of its own) ---------------------------
RXE_CACHE=$RXEC_CACHE/rxe RXE_EXTRA_MODULES=$RXEC_MODULES RXE_PREPARE_ONLY=$RXEC_RUN/guest-image \
  bash "$REPO/e2e/rxe/run.sh" 2>"$RXEC_RUN/logs/guest-image.log" ||
  { cat "$RXEC_RUN/logs/guest-image.log" >&2; die "preparing the guest kernel and initramfs failed"; }
read -r KDIR INITRD KVER <"$RXEC_RUN/guest-image"
log "guest kernel $KVER ($(elapsed)s)"

# --- what every guest reads from its read-only share ---------------------------------------------
cp -L "$KBIN/kubelet" "$BIN"/{containerd,containerd-shim-runc-v2,ctr,runc} "$RXEC_RUN/common/bin/"
cp -L "$BIN"/cni/{bridge,host-local,loopback,static} "$RXEC_RUN/common/cni/"
cp -L /usr/lib/x86_64-linux-gnu/libseccomp.so.2 "$RXEC_RUN/common/lib/"
cp "$IMAGES"/{pause,kube-rdma,rdma-test}.tar "$RXEC_CACHE/images/rdma-perf.tar" "$RXEC_RUN/common/images/"

# --- PKI: one CA, the API server's serving cert, one admin client cert for every component ------
pki() {
  local d=$RXEC_RUN/pki
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kube-rdma-rxec-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout "$d/apiserver.key" \
    -out "$d/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:%s.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n' "$CTL_NET" >"$d/apiserver.ext"
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
    -extfile "$d/apiserver.ext" -out "$d/apiserver.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-rdma-rxec-admin" \
    -keyout "$d/admin.key" -out "$d/admin.csr" 2>/dev/null
  openssl x509 -req -in "$d/admin.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
    -out "$d/admin.crt" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  cp "$d"/{ca.crt,admin.crt,admin.key} "$RXEC_RUN/common/pki/"
  cat >"$KUBECONFIG" <<KC
apiVersion: v1
kind: Config
clusters:
- name: rxec
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$d/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$d/admin.crt", client-key: "$d/admin.key"}
contexts:
- name: rxec
  context: {cluster: rxec, user: admin}
current-context: rxec
KC
}
pki

# --- the run's network namespace ----------------------------------------------------------------
ip netns add "$NETNS"
in_ns ip link set lo up
in_ns ip link add "$CTL_BRIDGE" type bridge
in_ns ip addr add "$CTL_NET.1/24" dev "$CTL_BRIDGE"
in_ns ip link set "$CTL_BRIDGE" up
in_ns ip link add "$RDMA_BRIDGE" type bridge
in_ns ip link set "$RDMA_BRIDGE" up
for ((i = 1; i <= RXEC_NODES; i++)); do
  in_ns ip tuntap add "rxec${i}c" mode tap
  in_ns ip link set "rxec${i}c" master "$CTL_BRIDGE" up
  in_ns ip tuntap add "rxec${i}r" mode tap
  in_ns ip link set "rxec${i}r" master "$RDMA_BRIDGE" up
done

wait_for() {
  local what=$1 limit=$2 deadline; shift 2
  deadline=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    [[ $(date +%s) -lt $deadline ]] || die "$what: not after ${limit}s"
    sleep 0.5
  done
  log "$what ($(elapsed)s)"
}

# --- control plane (as e2e/local-node/up.sh, in $NETNS) -----------------------------------------
# The newest minor runs with its default feature gates (device taints, consumable capacity,
# extended resources and pod resource health are on by default from 1.36/1.37); the oldest
# needs the alpha gates, and the v1alpha3 API of DeviceTaintRules, as the local-node e2e.
if [[ $RXEC_KUBE == newest ]]; then
  FEATURE_GATES=${E2E_FEATURE_GATES-}
  RUNTIME_CONFIG=${E2E_RUNTIME_CONFIG-}
else
  FEATURE_GATES=${E2E_FEATURE_GATES-DRADeviceTaints=true,DRAConsumableCapacity=true,DRAExtendedResource=true}
  RUNTIME_CONFIG=${E2E_RUNTIME_CONFIG-resource.k8s.io/v1alpha3=true}
fi
echo "${FEATURE_GATES:-the defaults}" >"$RXEC_RUN/feature-gates"
gates=() api=()
[[ -z $FEATURE_GATES ]] || gates=(--feature-gates "$FEATURE_GATES")
[[ -z $RUNTIME_CONFIG ]] || api=(--runtime-config "$RUNTIME_CONFIG")
start etcd "$BIN/etcd" --name rxec --data-dir "$RXEC_RUN/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:2380" --initial-advertise-peer-urls "http://127.0.0.1:2380" \
  --initial-cluster "rxec=http://127.0.0.1:2380" --quota-backend-bytes 1073741824 --unsafe-no-fsync
wait_for "etcd healthy" 30 in_ns curl -sf "http://127.0.0.1:$ETCD_PORT/health"
start kube-apiserver "$KBIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 0.0.0.0 --advertise-address "$CTL_NET.1" --secure-port "$API_PORT" \
  --cert-dir "$RXEC_RUN/pki" --tls-cert-file "$RXEC_RUN/pki/apiserver.crt" --tls-private-key-file "$RXEC_RUN/pki/apiserver.key" \
  --client-ca-file "$RXEC_RUN/pki/ca.crt" --authorization-mode Node,RBAC \
  --kubelet-client-certificate "$RXEC_RUN/pki/admin.crt" --kubelet-client-key "$RXEC_RUN/pki/admin.key" \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$RXEC_RUN/pki/sa.pub" \
  --service-account-signing-key-file "$RXEC_RUN/pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
  --kubelet-preferred-address-types InternalIP --allow-privileged=true --profiling=false \
  "${gates[@]}" "${api[@]}"
start kube-controller-manager "$KBIN/kube-controller-manager" --kubeconfig "$KUBECONFIG" \
  --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
  --service-account-private-key-file "$RXEC_RUN/pki/sa.key" --root-ca-file "$RXEC_RUN/pki/ca.crt" \
  --cluster-signing-cert-file "$RXEC_RUN/pki/ca.crt" --cluster-signing-key-file "$RXEC_RUN/pki/ca.key" \
  --leader-elect=false --secure-port 0 --profiling=false "${gates[@]}"
start kube-scheduler "$KBIN/kube-scheduler" --kubeconfig "$KUBECONFIG" \
  --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
  --leader-elect=false --secure-port 0 --profiling=false "${gates[@]}"

# --- the guests (booting while the API server starts) --------------------------------------------
for ((i = 1; i <= RXEC_NODES; i++)); do
  d=$RXEC_RUN/node$i
  mkdir -p "$d/share/out" "$d/share/cmd"
  cp "$HERE/guest-node.sh" "$d/share/guest-run.sh"
  cat >"$d/share/node.env" <<ENV
NODE_NAME=$(node_name "$i")
NODE_IP=$(node_ip "$i")
RDMA_IP=$(node_rdma_ip "$i")
CTL_GW=$CTL_NET.1
CTL_PREFIX=$CTL_NET
RDMA_PREFIX=$RDMA_NET
NODE_INDEX=$i
NODES=$RXEC_NODES
API_PORT=$API_PORT
KUBELET_PORT=$KUBELET_PORT
POD_SUBNET=10.244.$i.0/24
RDMA_NETNS_MODE=${RXEC_RDMA_NETNS_MODE:-shared}
FEATURE_GATES_YAML="$(sed 's/=/: /g; s/,/, /g' <<<"$FEATURE_GATES")"
ENV
  qemu=(qemu-system-x86_64 -accel "$RXEC_ACCEL" -smp "$RXEC_SMP" -m "$RXEC_MEM"
    -nographic -monitor none -serial "file:$d/console.log" -no-reboot
    -kernel "$KDIR/vmlinuz" -initrd "$INITRD"
    -append "console=ttyS0 panic=-1 quiet mitigations=off"
    -virtfs "local,path=$d/share,mount_tag=share,security_model=none,id=share,multidevs=remap"
    -virtfs "local,path=$RXEC_RUN/common,mount_tag=rxec,security_model=none,id=rxec,readonly=on,multidevs=remap"
    -netdev "tap,id=ctl,ifname=rxec${i}c,script=no,downscript=no"
    -device "virtio-net-pci,netdev=ctl,mac=$(node_mac "$i" 0)"
    -netdev "tap,id=rdma,ifname=rxec${i}r,script=no,downscript=no"
    -device "virtio-net-pci,netdev=rdma,mac=$(node_mac "$i" 1)")
  printf '%q ' "${qemu[@]}" >"$d/qemu.cmd"
  start "qemu$i" "${qemu[@]}"
  echo "$(node_name "$i") boot $(elapsed)" >>"$RXEC_RUN/times"
done
log "$RXEC_NODES guest(s) booting ($(elapsed)s)"
wait_for "kube-apiserver ready" 120 in_ns kubectl get --raw /readyz

for ((i = 1; i <= RXEC_NODES; i++)); do
  n=$(node_name "$i")
  wait_for "node $n registered" "$RXEC_READY_TIMEOUT" in_ns kubectl get node "$n"
  echo "$n registered $(elapsed)" >>"$RXEC_RUN/times"
  wait_for "node $n Ready" "$RXEC_READY_TIMEOUT" in_ns kubectl wait --for=condition=Ready "node/$n" --timeout=1s
  echo "$n ready $(elapsed)" >>"$RXEC_RUN/times"
done
wait_for "default service account" 60 in_ns kubectl get serviceaccount default
trap - ERR
echo "$KUBECONFIG"
