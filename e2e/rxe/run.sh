#!/usr/bin/env bash
# e2e/rxe/run.sh: run the guest tests in e2e/rxe/guest inside a qemu (TCG) guest that boots a
# Debian kernel with netns-aware soft-RoCE (rdma_rxe), and report the result.
#
# Everything the guest needs comes from Debian packages fetched at run time and cached in
# $RXE_CACHE. Work files live in a temp dir that is removed on exit; the logs of the last run
# are copied to $RXE_LOG_DIR. See e2e/rxe/README.md.
set -Eeuo pipefail

START=$(date +%s)
SELF=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/../.." && pwd)

RXE_CACHE=${RXE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/kube-rdma-rxe}
RXE_LOG_DIR=${RXE_LOG_DIR:-$RXE_CACHE/last-run}
RXE_TIMEOUT=${RXE_TIMEOUT:-420}             # seconds the guest may run, boot included
RXE_TEST_TIMEOUT=${RXE_TEST_TIMEOUT:-360s}  # go test -test.timeout inside the guest
RXE_TEST_RUN=${RXE_TEST_RUN:-}              # optional -test.run regexp
RXE_MEM=${RXE_MEM:-2048}
RXE_SMP=${RXE_SMP:-2}
# thread=single: one host thread runs both vCPUs. With thread=multi (MTTCG) one of about twenty
# boots died with "Oops: int3" in code the kernel had just patched (a stale translation on the
# other vCPU), ib_write_bw stalled more often, and it was no faster here.
RXE_ACCEL=${RXE_ACCEL:-tcg,thread=single}
RXE_BOOT_ATTEMPTS=${RXE_BOOT_ATTEMPTS:-2}   # boots when the guest kernel crashes (not on timeout)
RXE_KERNEL_MIN=${RXE_KERNEL_MIN:-7.2}       # oldest kernel with netns-aware rxe
RXE_KERNEL_SUITES=${RXE_KERNEL_SUITES:-"sid trixie-backports"}
RXE_KERNEL_FLAVOUR=${RXE_KERNEL_FLAVOUR:-amd64}  # "cloud-amd64" has no rdma_rxe and no 9p
RXE_KERNEL_VERSION=${RXE_KERNEL_VERSION:-}  # pin a linux-image-amd64 version; default: newest
RXE_REFRESH_HOURS=${RXE_REFRESH_HOURS:-24}  # how often to re-read the kernel suites' indexes
RXE_MIRROR=${RXE_MIRROR:-}                  # default: the host's Debian mirror
RXE_KEEP_WORK=${RXE_KEEP_WORK:-0}
# RXE_PREPARE_ONLY=FILE: prepare the kernel and the initramfs, write "KDIR INITRD KVER" to FILE
# and exit without building or booting anything (e2e/rxe-cluster boots its own guests from them).
RXE_PREPARE_ONLY=${RXE_PREPARE_ONLY:-}

# Guest userland, from the host's own Debian suite. Shared libraries come from the "lib*"
# packages of their dependency closure.
TOOL_PKGS=(busybox-static iproute2 ibverbs-utils ibverbs-providers perftest rdmacm-utils
  containernetworking-plugins)
CNI_PLUGINS=(static host-local loopback)  # copied to /opt/cni/bin in the guest
# RXE_EXTRA_MODULES: space-separated module names.
read -ra EXTRA_MODULES <<<"${RXE_EXTRA_MODULES:-}"
GUEST_MODULES=(rdma_rxe ib_uverbs rdma_ucm veth macvlan ipvlan 9p 9pnet_virtio "${EXTRA_MODULES[@]}")
HOST_PKGS=(qemu-system-x86 cpio kmod xz-utils gzip)
HOST_CMDS=(qemu-system-x86_64 cpio modinfo xz gzip dpkg-deb apt-get ldd ldconfig flock timeout)

log() { printf '%s rxe-e2e: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
elapsed() { echo $(($(date +%s) - START)); }
first_existing() { local p; for p in "$@"; do [[ -e $p ]] && { echo "$p"; return 0; }; done; return 0; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rxe-e2e.XXXXXX")
QEMU_PID=
BUILD_PID=
# shellcheck disable=SC2317  # reached from cleanup, which runs from the EXIT trap
# kill_tree PID: stop PID and every process below it (children first found, then killed).
kill_tree() {
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local rc=$?
  if [[ -n $BUILD_PID ]] && kill -0 "$BUILD_PID" 2>/dev/null; then
    kill_tree "$BUILD_PID"
    wait "$BUILD_PID" 2>/dev/null || true
  fi
  if [[ -n $QEMU_PID ]] && kill -0 "$QEMU_PID" 2>/dev/null; then
    log "stopping qemu (pid $QEMU_PID)"
    kill "$QEMU_PID" 2>/dev/null || true
    wait "$QEMU_PID" 2>/dev/null || true
  fi
  if [[ $RXE_KEEP_WORK == 1 ]]; then log "work dir kept: $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "ERROR: line $LINENO: $BASH_COMMAND exited $?"' ERR
trap 'exit 130' INT TERM


# ---------------------------------------------------------------------------------------------
# host tools

HOST_APT_UPDATED=0
host_apt_update() {
  [[ $HOST_APT_UPDATED == 1 ]] && return 0
  log "apt-get update (host)"
  timeout 300 apt-get update -qq >"$WORK/apt-update.log" 2>&1 || { cat "$WORK/apt-update.log" >&2; die "apt-get update failed"; }
  HOST_APT_UPDATED=1
}

install_host_tools() {
  local missing=() c
  for c in "${HOST_CMDS[@]}"; do command -v "$c" >/dev/null || missing+=("$c"); done
  [[ ${#missing[@]} == 0 ]] && return 0
  log "installing host packages (missing: ${missing[*]})"
  host_apt_update
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
    "${HOST_PKGS[@]}" >"$WORK/apt-install.log" 2>&1 || { tail -20 "$WORK/apt-install.log" >&2; die "apt-get install failed"; }
}

# ---------------------------------------------------------------------------------------------
# guest userland packages (host suite)

# debs_for PKG...: print "name version file" for the candidate of each package, with the
# file name apt-get download gives it (an epoch's ":" becomes "%3a").
debs_for() {
  apt-cache show --no-all-versions "$@" 2>/dev/null | awk '
    /^Package: /{p=$2} /^Version: /{v=$2} /^Architecture: /{a=$2}
    /^$/{if (p != "") {f=v; gsub(":", "%3a", f); print p, v, p "_" f "_" a ".deb"}; p=""}
    END{if (p != "") {f=v; gsub(":", "%3a", f); print p, v, p "_" f "_" a ".deb"}}'
}

fetch_userland() {
  local dir=$RXE_CACHE/debs/userland closure want pkgs
  mkdir -p "$dir"
  # The closure needs the host's package lists; a fresh machine may have none.
  if ! apt-cache show --no-all-versions "${TOOL_PKGS[@]}" >/dev/null 2>&1; then host_apt_update; fi
  closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${TOOL_PKGS[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
  want=$( { printf '%s\n' "${TOOL_PKGS[@]}"; grep -E '^lib' <<<"$closure"; } | sort -u)
  mapfile -t pkgs <<<"$want"
  debs_for "${pkgs[@]}" >"$WORK/userland.list"
  [[ $(wc -l <"$WORK/userland.list") -ge $(wc -w <<<"$want") ]] || die "apt-cache knows only $(wc -l <"$WORK/userland.list") of $(wc -w <<<"$want") guest packages"
  local missing=() name ver file
  while read -r name ver file; do
    [[ -s $dir/$file ]] || missing+=("$name=$ver")
  done <"$WORK/userland.list"
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "downloading ${#missing[@]} guest userland packages"
    if ! (cd "$dir" && timeout 300 apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}") >"$WORK/dl.log" 2>&1; then
      # stale host lists: refresh once and retry with the new candidates
      host_apt_update
      debs_for "${pkgs[@]}" >"$WORK/userland.list"
      missing=()
      while read -r name ver file; do [[ -s $dir/$file ]] || missing+=("$name=$ver"); done <"$WORK/userland.list"
      if [[ ${#missing[@]} -gt 0 ]]; then
        (cd "$dir" && timeout 300 apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}") >"$WORK/dl.log" 2>&1 ||
          { cat "$WORK/dl.log" >&2; die "apt-get download of guest packages failed"; }
      fi
    fi
  fi
  # keep only what this run uses
  find "$dir" -name '*.deb' -printf '%f\n' | sort >"$WORK/have"
  awk '{print $3}' "$WORK/userland.list" | sort >"$WORK/used"
  comm -23 "$WORK/have" "$WORK/used" | while read -r f; do rm -f "$dir/$f"; done
  log "guest userland: $(wc -l <"$WORK/userland.list") packages ($(du -sh "$dir" | cut -f1) cached)"
}

# ---------------------------------------------------------------------------------------------
# guest kernel (newest linux-image-amd64 of $RXE_KERNEL_SUITES, through a private apt config)

KAPT=$RXE_CACHE/apt-kernel
KAPT_OPTS=()
setup_kernel_apt() {
  local mirror=$RXE_MIRROR s
  if [[ -z $mirror ]]; then
    mirror=$( { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | cut -d: -f2- | tr ' ' '\n'
      grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
        sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{print $1}'; } |
      grep -E '^(https?|file)://.*/debian/?$' | head -1 || true)
    mirror=${mirror:-http://deb.debian.org/debian}
  fi
  mirror=${mirror%/}
  mkdir -p "$KAPT/state/lists/partial" "$KAPT/cache/archives/partial" "$KAPT/empty"
  : >"$KAPT/state/status"
  : >"$KAPT/sources.list.new"
  for s in $RXE_KERNEL_SUITES; do
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $s main" >>"$KAPT/sources.list.new"
  done
  if ! cmp -s "$KAPT/sources.list.new" "$KAPT/sources.list"; then
    mv "$KAPT/sources.list.new" "$KAPT/sources.list"
    rm -f "$KAPT/state/lists/"*_* 2>/dev/null || true
  fi
  KAPT_OPTS=(-o "Dir::Etc::SourceList=$KAPT/sources.list" -o "Dir::Etc::SourceParts=$KAPT/empty"
    -o "Dir::State=$KAPT/state" -o "Dir::State::status=$KAPT/state/status" -o "Dir::Cache=$KAPT/cache"
    -o "Dir::Etc::Preferences=$KAPT/empty/none" -o "Dir::Etc::PreferencesParts=$KAPT/empty"
    -o APT::Architecture=amd64 -o APT::Architectures::=amd64 -o Acquire::Languages=none
    -o Acquire::PDiffs=false -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false -o APT::Sandbox::User=root)
  log "kernel suites: $RXE_KERNEL_SUITES from $mirror"
}

kernel_apt_update() {
  local stamp=$KAPT/state/updated
  if [[ -f $stamp ]] && [[ -z $(find "$stamp" -mmin +$((RXE_REFRESH_HOURS * 60)) 2>/dev/null) ]]; then
    return 0
  fi
  log "apt-get update (kernel suites)"
  if timeout 300 apt-get "${KAPT_OPTS[@]}" update -qq >"$WORK/kapt-update.log" 2>&1; then
    touch "$stamp"
  elif [[ -f $stamp ]]; then
    log "WARNING: kernel index refresh failed, using indexes from $(date -r "$stamp" +%F)"
  else
    cat "$WORK/kapt-update.log" >&2; die "apt-get update for $RXE_KERNEL_SUITES failed"
  fi
}

KVER=   # e.g. 7.3.4+deb13-amd64
KDIR=   # prepared kernel: vmlinuz, modules/*.ko, modules.load
select_kernel() {
  local meta=linux-image-$RXE_KERNEL_FLAVOUR ver best='' v sel=$KAPT/selected
  # apt-cache on sid's index takes seconds: reuse the choice made from the same indexes.
  if [[ -z $RXE_KERNEL_VERSION && -f $sel && $sel -nt $KAPT/state/updated ]] &&
    read -r KVER best <"$sel" && [[ -n $KVER && $(cat "$sel.key" 2>/dev/null) == "$meta" ]]; then
    KDIR=$RXE_CACHE/kernel/$KVER
    log "guest kernel: $KVER ($meta $best, chosen $(date -r "$sel" '+%F %R'))"
    return 0
  fi
  if [[ -n $RXE_KERNEL_VERSION ]]; then
    best=$RXE_KERNEL_VERSION
  else
    while read -r v; do
      if [[ -z $best ]] || dpkg --compare-versions "$v" gt "$best"; then best=$v; fi
    done < <(apt-cache "${KAPT_OPTS[@]}" madison "$meta" | awk -F'|' '{gsub(/ /,"",$2); print $2}')
  fi
  [[ -n $best ]] || die "no $meta in $RXE_KERNEL_SUITES"
  KVER=$(apt-cache "${KAPT_OPTS[@]}" show "$meta=$best" | sed -n 's/^Depends: //p' | tr ',' '\n' |
    sed -nE "s/^ *linux-image-([0-9][^ ]*-$RXE_KERNEL_FLAVOUR)( .*)?$/\1/p" | head -1)
  [[ -n $KVER ]] || die "cannot tell the kernel ABI of $meta $best"
  ver=${KVER%%[+-]*}
  if [[ $(printf '%s\n%s\n' "$RXE_KERNEL_MIN" "$ver" | sort -V | head -1) != "$RXE_KERNEL_MIN" ]]; then
    die "newest kernel in $RXE_KERNEL_SUITES is $KVER; rxe between netns needs >= $RXE_KERNEL_MIN"
  fi
  KDIR=$RXE_CACHE/kernel/$KVER
  [[ -n $RXE_KERNEL_VERSION ]] || { echo "$KVER $best" >"$sel"; echo "$meta" >"$sel.key"; }
  log "guest kernel: $KVER ($meta $best)"
}

# prepare_kernel: vmlinuz plus the decompressed closure of GUEST_MODULES, in load order.
prepare_kernel() {
  local key
  key=$(printf '%s\n' "${GUEST_MODULES[@]}" | sort | tr '\n' ' ')
  if [[ -f $KDIR/.complete ]] && [[ $(cat "$KDIR/.complete") == "$key" ]]; then return 0; fi
  local dl=$WORK/kdebs x=$WORK/kx pkgs p
  mkdir -p "$dl" "$x"
  # Since 7.3 linux-image-<abi> is a meta package over linux-binary/-modules/-base-<abi>;
  # before, it held everything. Take it and whichever of those it depends on.
  pkgs=("linux-image-$KVER")
  for p in $(apt-cache "${KAPT_OPTS[@]}" depends "linux-image-$KVER" | sed -nE 's/^ *Depends: //p'); do
    [[ $p =~ ^linux-(binary|modules|base|image)-${KVER//+/\\+}$ ]] && pkgs+=("$p")
  done
  log "downloading ${pkgs[*]}"
  (cd "$dl" && timeout 300 apt-get "${KAPT_OPTS[@]}" download -qq "${pkgs[@]}") >"$WORK/kdl.log" 2>&1 ||
    { cat "$WORK/kdl.log" >&2; die "kernel download failed"; }
  log "unpacking kernel ($(du -sh "$dl" | cut -f1))"
  for p in "$dl"/*.deb; do dpkg-deb -x "$p" "$x"; done
  local mods vmlinuz
  mods=$(first_existing "$x/usr/lib/modules/$KVER" "$x/lib/modules/$KVER")
  vmlinuz=$(first_existing "$mods/vmlinuz" "$x/boot/vmlinuz-$KVER")
  [[ -n $mods && -n $vmlinuz ]] || die "no modules dir or vmlinuz for $KVER in ${pkgs[*]}"

  declare -A path=() seen=()
  local f n order=()
  while IFS= read -r f; do n=${f##*/}; n=${n%%.ko*}; path[${n//-/_}]=$f; done < <(find "$mods/kernel" -name '*.ko*')
  resolve() {
    local m=${1//-/_} d
    [[ -n ${seen[$m]:-} ]] && return 0
    seen[$m]=1
    if [[ -z ${path[$m]:-} ]]; then
      sed -E 's#.*/##; s/\.ko.*//; s/-/_/g' "$mods/modules.builtin" 2>/dev/null | grep -qx "$m" ||
        die "module $m is neither built in nor shipped in $KVER"
      return 0
    fi
    for d in $(modinfo -F depends "${path[$m]}" | tr ',' ' '); do resolve "$d"; done
    order+=("$m")
  }
  for m in "${GUEST_MODULES[@]}"; do resolve "$m"; done

  rm -rf "$KDIR.tmp" && mkdir -p "$KDIR.tmp/modules"
  cp "$vmlinuz" "$KDIR.tmp/vmlinuz"
  for m in "${order[@]}"; do
    case ${path[$m]} in
      *.xz) xz -dc "${path[$m]}" ;;
      *.zst) zstd -dcq "${path[$m]}" ;;
      *.gz) gzip -dc "${path[$m]}" ;;
      *) cat "${path[$m]}" ;;
    esac >"$KDIR.tmp/modules/$m.ko"
    echo "$m.ko" >>"$KDIR.tmp/modules.load"
  done
  printf '%s' "$key" >"$KDIR.tmp/.complete"
  rm -rf "$KDIR" && mv "$KDIR.tmp" "$KDIR"
  # only the kernel in use stays cached
  find "$RXE_CACHE/kernel" -mindepth 1 -maxdepth 1 ! -name "$KVER" -exec rm -rf {} +
  rm -rf "$dl" "$x"
  log "kernel ready: ${#order[@]} modules (${order[*]})"
}

# ---------------------------------------------------------------------------------------------
# initramfs: busybox init + userland + modules. Test binaries come in over 9p at run time, so
# the image only changes with the packages, the kernel or this script.

write_init() {
  cat <<'EOF'
#!/bin/sh
# PID 1 of the rxe e2e guest (written by e2e/rxe/run.sh): mount, load modules, run
# /share/guest-run.sh, power off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
echo "rxe-guest: up, kernel $(uname -r), $(nproc) cpus"
while read -r m; do insmod "/lib/modules/rxe/$m" || echo "rxe-guest: insmod $m failed"; done </etc/rxe-modules.load
mkdir -p /share
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 share /share; then
  ip link set lo up
  if [ -f /share/guest-run.sh ]; then
    sh /share/guest-run.sh
    echo "rxe-guest: guest-run.sh exited $?"
  else
    echo "rxe-guest: /share/guest-run.sh missing"
  fi
  sync
  umount /share
else
  echo "rxe-guest: cannot mount the 9p share"
fi
echo "rxe-guest: powering off"
poweroff -f
sleep 5
echo o >/proc/sysrq-trigger
EOF
}

build_initramfs() {
  local debs key out
  debs=$(awk '{print $3}' "$WORK/userland.list" | sort | tr '\n' ' ')
  # The modules are part of the image: RXE_EXTRA_MODULES changes it.
  key=$( { echo "$KVER"; echo "$debs"; printf '%s\n' "${GUEST_MODULES[@]}" | sort; cat "$SELF"; } | sha256sum | cut -c1-16)
  out=$RXE_CACHE/initramfs/$key.cpio.gz
  INITRD=$out
  [[ -s $out ]] && { log "initramfs cached ($key)"; return 0; }

  log "building initramfs"
  local stage=$WORK/stage root=$WORK/root dir=$RXE_CACHE/debs/userland f
  mkdir -p "$stage" "$root"
  awk '{print $3}' "$WORK/userland.list" | while read -r f; do dpkg-deb -x "$dir/$f" "$stage"; done
  # merged /usr layout
  (cd "$root" && mkdir -p usr/bin usr/sbin usr/lib/x86_64-linux-gnu usr/lib/modules/rxe usr/lib64 etc \
    proc sys dev run tmp share opt/cni/bin root var && ln -s usr/bin bin && ln -s usr/sbin sbin &&
    ln -s usr/lib lib && ln -s usr/lib64 lib64 && ln -s ../run var/run)

  # Executables of the tool packages (not busybox, not the CNI plugins), by merged-/usr path.
  local libpath="$stage/lib/x86_64-linux-gnu:$stage/usr/lib/x86_64-linux-gnu"
  : >"$WORK/elfs"
  for p in "${TOOL_PKGS[@]}"; do
    [[ $p == busybox-static || $p == containernetworking-plugins ]] && continue
    f=$(awk -v p="$p" '$1==p{print $3}' "$WORK/userland.list")
    dpkg-deb --fsys-tarfile "$dir/$f" | tar -t | { grep -E '^\./(usr/)?s?bin/[^/]+$' || true; } | while read -r f; do
      local src=$stage/${f#./} dst=$root/usr/${f#./} t
      dst=${dst/\/usr\/usr\//\/usr\/}
      if [[ -L $src ]]; then  # e.g. /sbin/ip -> /bin/ip: copy the target
        t=$(readlink "$src")
        if [[ $t == /* ]]; then src=$stage$t; else src=$(dirname "$src")/$t; fi
      fi
      [[ -f $src ]] || continue
      install -D -m 0755 "$src" "$dst"
      if [[ $(head -c4 "$src" | od -An -c | tr -d ' ') == 177ELF ]]; then echo "$src" >>"$WORK/elfs"; fi
    done
  done
  mkdir -p "$root/usr/lib/x86_64-linux-gnu/libibverbs" "$root/etc/libibverbs.d"
  cp "$stage"/usr/lib/x86_64-linux-gnu/libibverbs/*.so "$root/usr/lib/x86_64-linux-gnu/libibverbs/"
  ls "$stage"/usr/lib/x86_64-linux-gnu/libibverbs/*.so >>"$WORK/elfs"
  cp "$stage"/etc/libibverbs.d/*.driver "$root/etc/libibverbs.d/"
  # Shared libraries, resolved against the staged packages. libgcc_s is dlopen()ed by
  # pthread_cancel (rping), so ldd does not list it.
  local soname p
  while read -r f; do
    LD_LIBRARY_PATH=$libpath ldd "$f" 2>/dev/null | grep '=>' || true
  done <"$WORK/elfs" | awk '{print $1, $3}' | sort -u >"$WORK/libs"
  if awk '$2=="not"{bad=1} END{exit !bad}' "$WORK/libs"; then
    awk '$2=="not"' "$WORK/libs" >&2; die "unresolved shared libraries"
  fi
  echo "libgcc_s.so.1 $stage/lib/x86_64-linux-gnu/libgcc_s.so.1" >>"$WORK/libs"
  while read -r soname p; do cp -L "$p" "$root/usr/lib/x86_64-linux-gnu/$soname"; done <"$WORK/libs"
  p=$(first_existing "$stage"/{,usr/}lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
  [[ -n $p ]] || die "no ld-linux-x86-64.so.2 in the staged libc6"
  cp -L "$p" "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
  ln -sf ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/usr/lib64/ld-linux-x86-64.so.2"
  printf '/usr/lib/x86_64-linux-gnu\n' >"$root/etc/ld.so.conf"
  ldconfig -r "$root"

  # busybox for everything else; iproute2's ip/tc/bridge win over busybox applets.
  install -m 0755 "$stage/bin/busybox" "$root/usr/bin/busybox"
  "$root/usr/bin/busybox" --list-full | grep / | while read -r f; do
    f=usr/${f#usr/}
    [[ -e $root/$f || -L $root/$f ]] || ln -s /usr/bin/busybox "$root/$f"
  done
  for f in "${CNI_PLUGINS[@]}"; do install -m 0755 "$stage/usr/lib/cni/$f" "$root/opt/cni/bin/$f"; done

  cp "$KDIR"/modules/*.ko "$root/usr/lib/modules/rxe/"
  cp "$KDIR/modules.load" "$root/etc/rxe-modules.load"
  write_init >"$root/init" && chmod 0755 "$root/init"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"

  mkdir -p "$RXE_CACHE/initramfs"
  rm -f "$RXE_CACHE"/initramfs/*.cpio.gz
  (cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$out.tmp"
  mv "$out.tmp" "$out"
  rm -rf "$stage" "$root"
  log "initramfs: $(du -h "$out" | cut -f1) ($key)"
}

# ---------------------------------------------------------------------------------------------
# guest binaries

SHARE=$WORK/share
build_guest_binaries() {
  mkdir -p "$SHARE/bin" "$SHARE/out"
  local modroot=$REPO pkg=./e2e/rxe/guest
  if [[ ! -f $REPO/go.mod ]]; then
    # The guest package uses only the standard library, so it builds in a scratch module
    # until the project has a go.mod.
    modroot=$WORK/mod
    mkdir -p "$modroot/e2e/rxe"
    cp -r "$REPO/e2e/rxe/guest" "$modroot/e2e/rxe/"
    printf 'module github.com/kube-rdma/kube-rdma\n\ngo 1.22\n' >"$modroot/go.mod"
    log "no go.mod in $REPO: building the guest tests in a scratch module"
  fi
  log "building guest test binary"
  (cd "$modroot" && CGO_ENABLED=0 go test -c -trimpath -tags rxe_guest -o "$SHARE/bin/guest.test" "$pkg") ||
    die "building $pkg failed"
  local name
  for name in cni device-plugin; do
    if [[ ! -f $REPO/go.mod || ! -d $REPO/cmd/$name ]]; then
      log "./cmd/$name does not exist yet: its guest tests will skip"
      continue
    fi
    (cd "$REPO" && go list "./cmd/$name" >/dev/null) || die "./cmd/$name exists but is not a buildable package"
    log "building ./cmd/$name"
    (cd "$REPO" && CGO_ENABLED=0 go build -tags grpcnotrace -trimpath -o "$SHARE/bin/$name" "./cmd/$name") || die "building ./cmd/$name failed"
  done
}

write_guest_run() {
  local args=(-test.v "-test.timeout=$RXE_TEST_TIMEOUT")
  [[ -n $RXE_TEST_RUN ]] && args+=("-test.run=$RXE_TEST_RUN")
  {
    echo '#!/bin/sh'
    echo '# Written by e2e/rxe/run.sh; run by the guest init with the share mounted at /share.'
    echo 'set -o pipefail'
    # settings for the guest tests pass through: KUBE_RDMA_RXE_*=...
    local v
    while IFS= read -r v; do printf 'export %s=%q\n' "$v" "${!v}"; done < <(compgen -e | grep '^KUBE_RDMA_RXE_' || true)
    echo 'export KUBE_RDMA_RXE_GUEST=1 KUBE_RDMA_OUT_DIR=/share/out KUBE_RDMA_CNI_PLUGINS_DIR=/opt/cni/bin TMPDIR=/tmp'
    [[ -f $SHARE/bin/cni ]] && echo 'export KUBE_RDMA_CNI_BIN=/share/bin/cni'
    [[ -f $SHARE/bin/device-plugin ]] && echo 'export KUBE_RDMA_DP_BIN=/share/bin/device-plugin'
    echo 'cd /tmp'
    # %q: a -test.run regexp such as 'A|B' must reach the test binary as one word.
    echo "/share/bin/guest.test $(printf '%q ' "${args[@]}")2>&1 | tee /share/out/guest-test.log"
    cat <<'EOF'
rc=$?
dmesg >/share/out/dmesg.txt 2>&1
echo "$rc" >/share/out/exit-code
exit "$rc"
EOF
  } >"$SHARE/guest-run.sh"
}

# ---------------------------------------------------------------------------------------------
# boot

CONSOLE=$WORK/console.log
boot_guest() {
  log "booting qemu ($RXE_ACCEL, ${RXE_SMP} cpus, ${RXE_MEM} MiB, limit ${RXE_TIMEOUT}s); console: $CONSOLE"
  local t0 rc=0
  t0=$(date +%s)
  local qemu=(qemu-system-x86_64
    -accel "$RXE_ACCEL" -smp "$RXE_SMP" -m "$RXE_MEM"
    -nographic -monitor none -serial "file:$CONSOLE" -no-reboot -nic none
    -kernel "$KDIR/vmlinuz" -initrd "$INITRD"
    -append "console=ttyS0 panic=-1 quiet mitigations=off"
    -virtfs "local,path=$SHARE,mount_tag=share,security_model=none,id=share,multidevs=remap")
  printf '%q ' "${qemu[@]}" >"$WORK/qemu.cmd"
  timeout -k 10 "$RXE_TIMEOUT" "${qemu[@]}" </dev/null >"$WORK/qemu.out" 2>&1 &
  QEMU_PID=$!
  wait "$QEMU_PID" || rc=$?
  QEMU_PID=
  GUEST_SECS=$(($(date +%s) - t0))
  if [[ $rc == 124 || $rc == 137 ]]; then
    log "guest hit the ${RXE_TIMEOUT}s limit"
  elif [[ $rc != 0 ]]; then
    log "qemu exited $rc: $(tail -5 "$WORK/qemu.out")"
  fi
  log "guest ran ${GUEST_SECS}s"
}

# console_tail N: the last N console lines, without the firmware's terminal escapes.
console_tail() { tail -n "$1" "$CONSOLE" 2>/dev/null | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' >&2 || true; }

# boot_until_report: boot; when the guest kernel crashed before the tests reported, boot again
# (up to RXE_BOOT_ATTEMPTS). A hang or timeout is not retried.
boot_until_report() {
  local attempt oops
  mkdir -p "$RXE_LOG_DIR"
  rm -f "$RXE_LOG_DIR"/*
  for ((attempt = 1; attempt <= RXE_BOOT_ATTEMPTS; attempt++)); do
    boot_guest
    [[ -f $SHARE/out/exit-code ]] && return 0
    oops=$(grep -m1 -E 'Kernel panic|Oops:|BUG:' "$CONSOLE" 2>/dev/null | tr -d '\r' || true)
    [[ -n $oops && $attempt -lt $RXE_BOOT_ATTEMPTS ]] || return 0
    cp "$CONSOLE" "$RXE_LOG_DIR/console-crash-$attempt.log"
    log "guest kernel crashed ($oops); console kept as $RXE_LOG_DIR/console-crash-$attempt.log; booting again"
    rm -f "$SHARE"/out/* "$CONSOLE"
  done
}

save_logs() {
  mkdir -p "$RXE_LOG_DIR"
  cp "$CONSOLE" "$RXE_LOG_DIR/console.log" 2>/dev/null || true
  cp "$WORK/qemu.cmd" "$RXE_LOG_DIR/qemu.cmd" 2>/dev/null || true
  cp "$SHARE"/out/* "$RXE_LOG_DIR/" 2>/dev/null || true
}

report() {
  local out=$SHARE/out rc passed failed skipped bw ratio kbw kgbps status
  save_logs
  if [[ ! -f $out/exit-code || ! -f $out/guest-test.log ]]; then
    log "the guest did not report a result; console tail ($RXE_LOG_DIR/console.log):"
    console_tail 60
    echo "rxe-e2e: FAIL (guest did not report) in $(elapsed)s, kernel $KVER"
    return 1
  fi
  rc=$(cat "$out/exit-code")
  passed=$(grep -c '^--- PASS' "$out/guest-test.log" || true)
  failed=$(grep -c '^--- FAIL' "$out/guest-test.log" || true)
  skipped=$(grep -c '^--- SKIP' "$out/guest-test.log" || true)
  grep -E '^(=== RUN|--- |    --- )|RXE_BW|^(PASS|FAIL|ok)' "$out/guest-test.log" | grep -v '^=== RUN' >&2 || true
  bw=$(grep -o 'RXE_BW .*' "$out/guest-test.log" | tail -1 || true)
  [[ -n $bw ]] && log "$bw"
  ratio=$(sed -nE 's/.*ratio=([0-9.]+).*/\1/p' <<<"$bw")
  # TestKubectlBWBetweenCNIPods: kubectl rdma bw's figure line
  kbw=$(cat "$out/kubectl-bw.txt" 2>/dev/null || true)
  [[ -n $kbw ]] && log "kubectl rdma bw: $kbw"
  kgbps=$(sed -nE 's/.*: ([0-9.]+) Gb\/sec average.*/\1/p' <<<"$kbw")
  status=PASS
  if [[ $rc != 0 || $failed != 0 || $passed == 0 ]]; then
    status=FAIL
    log "guest tests failed (exit $rc); test log: $RXE_LOG_DIR/guest-test.log; console tail:"
    console_tail 40
  fi
  # A plain count line that CI reads, then the summary.
  echo "rxe-e2e: $passed passed, $failed failed, $skipped skipped"
  echo "rxe-e2e: $status ($passed passed, $failed failed, $skipped skipped) in $(elapsed)s, kernel $KVER, pod/host ib_write_bw ratio ${ratio:-n/a}, kubectl rdma bw ${kgbps:-n/a} Gb/sec"
  if [[ $status == PASS ]]; then return 0; fi
  return 1
}

# ---------------------------------------------------------------------------------------------

# Everything runs from main, called on the last line, so bash has parsed the whole file before
# anything runs: editing run.sh (or switching branches) during a run cannot change that run.
main() {
  [[ $(id -u) == 0 ]] || die "must run as root (installs packages with apt-get)"
  [[ $(uname -m) == x86_64 ]] || die "only x86_64 hosts are supported"
  command -v go >/dev/null || die "go is not on PATH"
  mkdir -p "$RXE_CACHE"
  exec 9>"$RXE_CACHE/.lock"
  flock -w 600 9 || die "another run holds $RXE_CACHE/.lock"
  install_host_tools
  # Go builds (CPU) overlap the downloads (network).
  if [[ -z $RXE_PREPARE_ONLY ]]; then
    build_guest_binaries >"$WORK/go-build.log" 2>&1 &
    BUILD_PID=$!
  fi
  fetch_userland
  setup_kernel_apt
  kernel_apt_update
  select_kernel
  prepare_kernel
  build_initramfs
  flock -u 9
  if [[ -n $RXE_PREPARE_ONLY ]]; then
    echo "$KDIR $INITRD $KVER" >"$RXE_PREPARE_ONLY"
    exit 0
  fi
  build_rc=0
  wait "$BUILD_PID" || build_rc=$?
  BUILD_PID=
  cat "$WORK/go-build.log" >&2
  [[ $build_rc == 0 ]] || die "building the guest binaries failed"
  write_guest_run
  boot_until_report
  if report; then exit 0; fi
  exit 1
}

# shellcheck disable=SC2317  # main exits itself; the exit guards against a main that returns
{ main "$@"; exit $?; }
