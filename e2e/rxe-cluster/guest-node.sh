#!/bin/sh
# e2e/rxe-cluster/guest-node.sh: run by the e2e/rxe guest init (/share/guest-run.sh) in each
# qemu guest of the rxe cluster. It makes the guest a Kubernetes node: its NICs (eth0 on the
# control network, eth1 the soft-RoCE link with rxe0 on it, no address), cgroup v2, containerd with the
# images of the run imported, a kubelet registered with the API server on the host side of the
# control network. Then it serves commands from the host (hook.sh, lib.sh guest_exec): each
# /share/cmd/<id>.sh is run with its output in <id>.out and exit status in <id>.rc. It returns
# (and the init powers the guest off) when /share/cmd/poweroff appears.
#
# /share (9p, read-write) is this guest's: node.env, cmd/, out/. /opt/rxec (9p, read-only) is the
# run's: the binaries, CNI plugins, images, PKI and libseccomp for runc.
# shellcheck disable=SC1091  # written by up.sh into the guest's share
. /share/node.env
up() { cut -d' ' -f1 /proc/uptime; }
mark() { echo "rxec-guest: $* (uptime $(up) s)"; echo "$1 $(up)" >>/share/out/times; }
mark boot
mkdir -p /opt/rxec
# cache=loose: the guest keeps what it read of the share in its page cache. up.sh writes the
# share before the guests boot and nothing changes it after, and without a cache every exec of
# runc, the shim or ctr read the binary again through 9p (cache=none, the default).
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,ro,cache=loose rxec /opt/rxec || { echo "rxec-guest: no rxec share"; exit 1; }
export PATH="/opt/rxec/bin:$PATH"
cp /opt/rxec/lib/* /usr/lib/x86_64-linux-gnu/
hostname "$NODE_NAME"
echo "127.0.0.1 localhost $NODE_NAME" >/etc/hosts
echo "nameserver $CTL_GW" >/etc/resolv.conf

# --- network: eth0 control, eth1 the RDMA link with rxe0 ---------------------------------------
ip link set eth0 up
ip addr add "$NODE_IP/24" dev eth0
ip route add default via "$CTL_GW"
# The other nodes' pod networks, through their control NICs (cross-node pod traffic: the
# out-of-band TCP exchange of perftest and rping runs over the pods' eth0).
j=1
while [ $j -le "$NODES" ]; do
  [ $j = "$NODE_INDEX" ] || ip route add "10.244.$j.0/24" via "$CTL_PREFIX.1$j"
  j=$((j + 1))
done
# eth1 has no address of the node's: a pod's NIC comes back without the addresses it had
# (docs/cni.md, DEL restores name, MTU, MAC and up state). hook.sh host-bw adds RDMA_IP for
# its run and takes it away after.
ip link set eth1 up
rdma link add rxe0 type rxe netdev eth1 || echo "rxec-guest: rdma link add rxe0 failed"
[ "$RDMA_NETNS_MODE" = exclusive ] && rdma system set netns exclusive

# --- mounts: cgroup v2, a shared / (the chart's reclaimer mounts /var/run/netns with
# HostToContainer propagation), a tmpfs for the kubelet's and containerd's state ---------------
mount -t cgroup2 none /sys/fs/cgroup
for c in cpuset cpu io memory hugetlb pids rdma; do
  echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
done
mount --make-rshared /
mkdir -p /var/lib /var/log /etc/cni/net.d /etc/cdi /var/run/cdi /var/run/netns /var/lib/cni/networks
mount -t tmpfs -o size=2g tmpfs /var/lib
mkdir -p /var/lib/cni/networks /var/lib/kubelet /var/lib/containerd
for p in bridge host-local loopback static; do cp "/opt/rxec/cni/$p" /opt/cni/bin/; done
cat >/etc/cni/net.d/10-rxec.conflist <<CNI
{"cniVersion": "1.0.0", "name": "rxec",
 "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "dataDir": "/var/lib/cni/primary-ipam", "routes": [{"dst": "0.0.0.0/0"}]}}]}
CNI
sysctl -qw net.ipv4.ip_forward=1 || true
# The chart's chained IPAM is one host-local range for every node: each node after the first
# starts 32 addresses further (host-local allocates after last_reserved_ip). Its leases are in
# /var/lib/cni/networks/rxec (the network's name); the primary network keeps its own in
# /var/lib/cni/primary-ipam, else its last_reserved_ip.0 would be this one.
if [ "$NODE_INDEX" -gt 1 ]; then
  mkdir -p /var/lib/cni/networks/rxec
  # No newline: host-local parses the file's content as an IP as it is.
  printf '%s' "$RDMA_PREFIX.$((64 + 32 * (NODE_INDEX - 1) - 1))" >/var/lib/cni/networks/rxec/last_reserved_ip.0
fi

# --- containerd ----------------------------------------------------------------------------------
mkdir -p /etc/containerd
cat >/etc/containerd/config.toml <<TOML
version = 3
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "localhost/pause:e2e"
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/opt/rxec/bin/runc"
        # The root file system is the initramfs, from which pivot_root cannot move away.
        NoPivotRoot = true
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  # containerd closes a plugin that misses this (2 s by default) and creates the container
  # without it: on a slow host the TCG guest's daemon took longer for one CreateContainer,
  # and that pod got the runtime's 8 MiB memlock (docs/device-plugin.md, NRI).
  plugin_request_timeout = "10s"
TOML
containerd --config /etc/containerd/config.toml >/share/out/containerd.log 2>&1 &
i=0
until ctr version >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 600 ] || break; sleep 0.2; done
mark containerd
for img in /opt/rxec/images/*.tar; do
  ctr -n k8s.io images import --all-platforms "$img" >>/share/out/images.log 2>&1 || echo "rxec-guest: import $img failed"
done
mark images

# --- kubelet -------------------------------------------------------------------------------------
mkdir -p /var/lib/kubelet
cat >/var/lib/kubelet/kubeconfig <<KC
apiVersion: v1
kind: Config
clusters:
- name: rxec
  cluster: {server: "https://$CTL_GW:$API_PORT", certificate-authority: /opt/rxec/pki/ca.crt}
users:
- name: admin
  user: {client-certificate: /opt/rxec/pki/admin.crt, client-key: /opt/rxec/pki/admin.key}
contexts:
- name: rxec
  context: {cluster: rxec, user: admin}
current-context: rxec
KC
cat >/var/lib/kubelet/config.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: /opt/rxec/pki/ca.crt}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
resolvConf: /etc/resolv.conf
serializeImagePulls: false
syncFrequency: 10s
registerNode: true
featureGates: {$FEATURE_GATES_YAML}
YAML
# The kubelet's start, also for hook.sh restart-kubelet.
cat >/run/rxec-kubelet.sh <<KS
/opt/rxec/bin/kubelet --config /var/lib/kubelet/config.yaml --kubeconfig /var/lib/kubelet/kubeconfig \\
  --root-dir /var/lib/kubelet --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \\
  >>/share/out/kubelet.log 2>&1 &
echo \$! >/run/kubelet.pid
KS
sh /run/rxec-kubelet.sh
mark kubelet

# --- the host's commands -------------------------------------------------------------------------
mkdir -p /share/cmd
while [ ! -e /share/cmd/poweroff ]; do
  for f in /share/cmd/*.sh; do
    [ -e "$f" ] || continue
    id=${f%.sh}
    mv "$f" "$id.run" || continue
    (sh "$id.run" >"$id.out.tmp" 2>&1; rc=$?; mv "$id.out.tmp" "$id.out"; echo $rc >"$id.rc.tmp"; mv "$id.rc.tmp" "$id.rc"; rm -f "$id.run") &
  done
  sleep 0.2
done
mark poweroff
dmesg >/share/out/dmesg.txt 2>&1
