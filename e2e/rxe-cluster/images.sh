#!/usr/bin/env bash
# e2e/rxe-cluster/images.sh: build localhost/rdma-perf:e2e, the pods' image of the rxe cluster,
# as an OCI image layout tar in $RXEC_CACHE/images, without a container engine (hack/ocibuild):
# busybox-static plus rdma-core's tools, perftest (ib_write_bw, which `kubectl rdma bw` runs in
# the pods) and rdmacm-utils (rping), and for the MPI job Open MPI, UCX, dropbear (the workers'
# SSH server), OpenSSH's client (mpirun's launcher) and mpi-check (mpi-check.c, compiled here
# against the suite's own libopenmpi-dev headers), unpacked from the host's Debian suite.
# Cached by the exact package versions. The other images (kube-rdma, pause) are
# e2e/local-node/images.sh's.
set -Eeuo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
PKGS=(busybox-static ibverbs-utils ibverbs-providers perftest rdmacm-utils
  openmpi-bin openmpi-common libopenmpi3 ucx-utils dropbear-bin openssh-client)
# mpi.h and libmpi.so for mpi-check: unpacked beside the image, not installed
DEV_PKGS=(libopenmpi-dev)
OUT=$RXEC_CACHE/images
PATH=$PATH:/usr/local/go/bin
mkdir -p "$OUT"

if ! apt-cache show --no-all-versions "${PKGS[@]}" >/dev/null 2>&1; then
  log "apt-get update (host package lists)"
  timeout 300 apt-get update -qq || die "apt-get update failed"
fi
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances "${PKGS[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
want=$( { printf '%s\n' "${PKGS[@]}"; grep -E '^(lib|zlib)' <<<"$closure"; } | sort -u)
# shellcheck disable=SC2086
list=$(apt-cache show --no-all-versions $want "${DEV_PKGS[@]}" | awk '
  /^Package: /{p=$2} /^Version: /{v=$2} /^Architecture: /{a=$2}
  /^$/{if (p != "") {f=v; gsub(":", "%3a", f); print p, v, p "_" f "_" a ".deb"}; p=""}')
key=$( { echo "$list"; cat "$0" "$HERE/mpi-check.c"; } | sha256sum | cut -c1-12)
if [[ -s $OUT/rdma-perf.tar && $(cat "$OUT/rdma-perf.key" 2>/dev/null) == "$key" ]]; then
  echo "$OUT/rdma-perf.tar"
  exit 0
fi
debs=$E2E_CACHE/debs
mkdir -p "$debs"
missing=()
while read -r name ver file; do [[ -s $debs/$file ]] || missing+=("$name=$ver"); done <<<"$list"
if [[ ${#missing[@]} -gt 0 ]]; then
  log "downloading ${#missing[@]} packages for the rdma-perf image"
  (cd "$debs" && timeout 300 apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}") ||
    die "apt-get download failed"
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rxec-images.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
root=$WORK/root
mkdir -p "$root"
dev=$WORK/dev
mkdir -p "$dev"
while read -r name ver file; do
  if [[ " ${DEV_PKGS[*]} " == *" $name "* ]]; then dpkg-deb -x "$debs/$file" "$dev"; else dpkg-deb -x "$debs/$file" "$root"; fi
done <<<"$list"
lib=usr/lib/x86_64-linux-gnu
mkdir -p "$root/usr/local/bin"
gcc -O2 -Wall -o "$root/usr/local/bin/mpi-check" "$HERE/mpi-check.c" -I"$dev/$lib/openmpi/include" \
  -L"$root/$lib" -l:libmpi.so.40 -Wl,-rpath-link,"$root/$lib" || die "gcc mpi-check.c failed"
# orted-env: Open MPI's launch agent in the pods (orte_launch_agent). An SSH session does not
# carry the container's environment, where the agent put UCX_NET_DEVICES and the rest; the
# pod's start writes it to /tmp/pod-env (export -p) and every orted, and so every rank it
# starts, reads it back.
cat >"$root/usr/local/bin/orted-env" <<'AGENT'
#!/bin/sh
[ -r /tmp/pod-env ] && . /tmp/pod-env
exec orted "$@"
AGENT
chmod 755 "$root/usr/local/bin/orted-env"
# The alternatives Debian's postinst would make.
ln -s mpirun.openmpi "$root/usr/bin/mpirun"
ln -s mpiexec.openmpi "$root/usr/bin/mpiexec"
# dropbear and ssh look root up: its home holds authorized_keys.
mkdir -p "$root/etc" "$root/root/.ssh" "$root/etc/dropbear"
chmod 700 "$root/root" "$root/root/.ssh"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale" "$root/usr/share/lintian"
mkdir -p "$root/bin" "$root/sbin"
for a in $("$root/bin/busybox" --list); do
  [[ -e $root/bin/$a || -e $root/usr/bin/$a || -e $root/usr/sbin/$a ]] || ln -s busybox "$root/bin/$a"
done
(cd "$REPO" && CGO_ENABLED=0 go build -o "$WORK/ocibuild" ./hack/ocibuild)
"$WORK/ocibuild" -o "$OUT/rdma-perf.tar.tmp" -name "localhost/rdma-perf:e2e" \
  -tree "$root:/" -dir /tmp:1777 -env PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
  -cmd '["/bin/sh"]'
mv "$OUT/rdma-perf.tar.tmp" "$OUT/rdma-perf.tar"
echo "$key" >"$OUT/rdma-perf.key"
log "rdma-perf image: $(wc -l <<<"$list") packages, $(du -h "$OUT/rdma-perf.tar" | cut -f1)"
echo "$OUT/rdma-perf.tar"
