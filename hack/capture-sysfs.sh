#!/usr/bin/env bash
# capture-sysfs.sh: copy exactly the sysfs and procfs files kube-rdma's discovery
# reads from this node into a tarball, keeping sysfs's symlinks, so the node's
# RDMA/GPU topology can be attached to a bug report and turned into a fixture.
#
# It reads only: RDMA devices (/sys/class/infiniband and their ports and GID
# tables), the uverbs/umad char device classes, every PCI function's identity
# (vendor, device, class, numa_node, driver, SR-IOV links, net/*/dev_port) and
# the bridges above them, NUMA node names, and NVIDIA's per-GPU information
# files. No hostnames, logs or configuration. GIDs embed the NICs' IP
# addresses: pass --no-gids to leave them out.
set -euo pipefail
shopt -s nullglob

usage() {
  cat <<'USAGE'
usage: capture-sysfs.sh [-o FILE] [--sysfs-root DIR] [--proc-root DIR] [--no-gids]

  -o FILE          tarball to write (default: kube-rdma-sysfs-<date>.tar.gz)
  --sysfs-root DIR sysfs to read (default /sys)
  --proc-root DIR  procfs to read (default /proc)
  --no-gids        leave GID values out (they embed the NICs' IP addresses)

Then: device-plugin discover --sysfs-root <extracted>/sys --proc-root <extracted>/proc
USAGE
}

sys=/sys proc=/proc out="kube-rdma-sysfs-$(date -u +%Y%m%dT%H%M%SZ).tar.gz" gids=1
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=${2:?-o needs a file}; shift 2 ;;
    --sysfs-root) sys=${2:?--sysfs-root needs a directory}; shift 2 ;;
    --proc-root) proc=${2:?--proc-root needs a directory}; shift 2 ;;
    --no-gids) gids=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "capture-sysfs.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
[ -d "$sys/devices" ] || { echo "capture-sysfs.sh: $sys is not a sysfs tree (no devices/)" >&2; exit 1; }
sys=$(cd "$sys" && pwd -P)
case "$out" in /*) ;; *) out=$PWD/$out ;; esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dst=$work/capture

# The script runs a constant number of processes whatever the node's size (a
# fork costs milliseconds on some VMs, and a node may have a thousand VFs):
# class and bus links are resolved by one realpath, all links are copied as
# links by one tar, directories made by one mkdir, and attribute contents read
# with bash builtins.
files=() links=() dirs=("$dst/sys/devices" "$dst/sys/class/infiniband" "$dst/proc")
declare -A seen=()

add_file() { [ -f "$1" ] && files+=("$1"); return 0; }
add_link() {
  if [ -L "$1" ] && [ -z "${seen[L$1]:-}" ]; then seen[L$1]=1; links+=("${1#"$sys"/}"); fi
  return 0
}
add_dir() { dirs+=("$dst/sys/${1#"$sys"/}"); }

# add_pci DIR: a PCI function's identity and links, then its parents' up to
# the host bridge.
add_pci() {
  local d=$1 a n
  while [ "${d#"$sys"/devices/}" != "$d" ] && [ -z "${seen[D$d]:-}" ]; do
    seen[D$d]=1
    add_dir "$d"
    for a in vendor device class numa_node sriov_numvfs max_link_speed max_link_width; do add_file "$d/$a"; done
    for a in "$d/driver" "$d/physfn" "$d"/virtfn*; do add_link "$a"; done
    for n in "$d"/net/*; do add_dir "$n"; add_file "$n/dev_port"; done
    d=${d%/*}
  done
}

entries=("$sys"/bus/pci/devices/* "$sys"/class/infiniband/* "$sys"/class/infiniband_verbs/* "$sys"/class/infiniband_mad/*)
reals=()
if [ ${#entries[@]} -gt 0 ]; then mapfile -t reals < <(realpath -m -- "${entries[@]}"); fi
declare -A real=()
for i in "${!entries[@]}"; do real[${entries[$i]}]=${reals[$i]}; done

for l in "$sys"/bus/pci/devices/*; do
  add_link "$l"
  add_pci "${real[$l]}"
done

for l in "$sys"/class/infiniband/*; do
  add_link "$l"
  ib=${real[$l]}
  [ -d "$ib" ] || continue
  add_dir "$ib"
  for a in node_guid node_type parent fw_ver hca_type; do add_file "$ib/$a"; done
  for p in "$ib"/ports/*; do
    for a in state phys_state link_layer rate; do add_file "$p/$a"; done
    add_dir "$p/gids"
    if [ "$gids" = 1 ]; then
      add_dir "$p/gid_attrs/types"; add_dir "$p/gid_attrs/ndevs"
      for g in "$p"/gids/*; do files+=("$g"); done
    fi
  done
  parent=${ib%/infiniband/*}
  case "$parent" in
    */virtual) ;;
    *)
      add_dir "$parent"
      add_link "$parent/driver"
      for n in "$parent"/net/*; do add_dir "$n"; add_file "$n/dev_port"; done
      add_pci "${parent%/*}"
      ;;
  esac
done

for cls in infiniband_verbs infiniband_mad; do
  add_file "$sys/class/$cls/abi_version"
  for l in "$sys"/class/"$cls"/*; do
    [ -L "$l" ] || continue
    add_link "$l"
    for a in ibdev dev port; do add_file "${real[$l]}/$a"; done
  done
done
for n in "$sys"/devices/system/node/node*; do add_dir "$n"; done
for f in "${files[@]}"; do r=${f#"$sys"/}; dirs+=("$dst/sys/${r%/*}"); done
printf '%s\0' "${dirs[@]}" | xargs -0 mkdir -p

# copy FILE: copy one attribute's content; an attribute that does not read
# (an empty GID slot fails with EINVAL) or reads empty is left out.
copy() {
  local f=$1 v="" line
  { while IFS= read -r line || [ -n "$line" ]; do v+="$line"$'\n'; done < "$f"; } 2>/dev/null || true
  [ -n "$v" ] || return 1
  printf '%s' "$v" > "$dst/sys/${f#"$sys"/}"
}
for f in "${files[@]}"; do
  copy "$f" || continue
  case "$f" in
    */gids/*) # a populated GID slot: its type and netdev too
      p=${f%/gids/*} i=${f##*/}
      copy "$p/gid_attrs/types/$i" || true
      copy "$p/gid_attrs/ndevs/$i" || true
      ;;
  esac
done

# Links as links (their relative targets kept), in one tar.
if [ ${#links[@]} -gt 0 ]; then
  printf '%s\n' "${links[@]}" > "$work/links"
  tar -C "$sys" --no-recursion -cf - -T "$work/links" | tar -C "$dst/sys" -xf -
fi

if [ -d "$proc/driver/nvidia/gpus" ]; then
  for g in "$proc"/driver/nvidia/gpus/*; do
    [ -f "$g/information" ] || continue
    mkdir -p "$dst/proc/driver/nvidia/gpus/${g##*/}"
    cat "$g/information" > "$dst/proc/driver/nvidia/gpus/${g##*/}/information"
  done
fi

printf 'kernel: %s\ncaptured: %s\n' "$(uname -r)" "$(date -u +%FT%TZ)" > "$dst/capture-info.txt"
tar -C "$dst" -czf "$out" sys proc capture-info.txt
echo "capture-sysfs.sh: wrote $out (${#files[@]} attributes read, ${#links[@]} links)" >&2
