#!/usr/bin/env bash
# e2e/local-node/down.sh: stop the node up.sh started and restore the host: pods deleted while
# the kubelet still runs (so their CNI DEL happens), then the processes up.sh recorded stopped
# by PID in reverse start order (plus the containerd shims serving its socket), mounts below
# $NODE_RUN unmounted, the cgroup subtree removed, the bridge deleted, the sysctls the kubelet
# changed set back, the iptables chains it added deleted (only those), $NODE_RUN removed.
# Safe to run twice, and after a failed up.sh.
set -Euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"
PATH=$BIN:$PATH
H=$NODE_RUN/host

[[ -d $NODE_RUN ]] || { log "nothing to stop ($NODE_RUN absent)"; exit 0; }
[[ $(id -u) == 0 ]] || die "needs root"

# 1. Pods go while kubelet, containerd and the API server still run.
if alive "$(pid_of kubelet)" && alive "$(pid_of kube-apiserver)"; then
  kubectl delete pods --all --all-namespaces --grace-period=5 --timeout=60s --wait >/dev/null 2>&1 ||
    log "WARNING: not every pod was deleted in time"
fi
# 2. Sandboxes the kubelet did not get to (crashed kubelet, timeouts): stop and remove them via
#    the CRI, which runs their CNI DEL.
if alive "$(pid_of containerd)"; then
  for s in $(ctr -n k8s.io containers ls -q 2>/dev/null); do
    ctr -n k8s.io tasks kill -s SIGKILL "$s" >/dev/null 2>&1 || true
  done
fi

# 3. Processes, in reverse start order.
if [[ -f $H/pids ]]; then
  tac "$H/pids" | while read -r name pid; do
    if alive "$pid"; then log "stopping $name (pid $pid)"; stop "$pid"; fi
  done
fi
# Shims outlive containerd by design; ours are the ones serving our containerd's address.
for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_ADDRESS( |$)" 2>/dev/null); do
  log "stopping shim (pid $pid)"; stop "$pid"
done

# 4. Mounts below $NODE_RUN (pod volumes, overlay snapshots, netns, shm), deepest first.
findmnt -rn -o TARGET | awk -v r="$NODE_RUN/" 'index($0, r) == 1' | sort -r | while read -r m; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "WARNING: cannot unmount $m"
done

# 5. The cgroup subtree, deepest first; a cgroup with a process left in it is reported.
#    Containers killed a moment ago may still be leaving their cgroups: retry for 10 s.
for c in /sys/fs/cgroup/*/"$CGROUP_ROOT"; do
  for ((i = 0; i < 50; i++)); do
    [[ -d $c ]] || break
    find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [[ -d $c ]] && sleep 0.2
  done
  [[ ! -d $c ]] || log "WARNING: $c still exists: $(wc -l <"$c/cgroup.procs" 2>/dev/null) processes left"
done

# 6. Network: the bridge and any veth the bridge plugin left behind.
if [[ -f $H/bridge ]] && ip link show "$(cat "$H/bridge")" >/dev/null 2>&1; then
  ip link del "$(cat "$H/bridge")" || log "WARNING: cannot delete bridge $(cat "$H/bridge")"
fi

# The fixture node's veth links: deleting the namespace of their far ends deletes them all
# (a link still in a pod's namespace too, but pods are gone by now).
if [[ -f $H/netns ]] && ip netns list | grep -qw "$(cat "$H/netns")"; then
  ip netns del "$(cat "$H/netns")" || log "WARNING: cannot delete netns $(cat "$H/netns")"
fi

# 7. Sysctls and iptables chains.
if [[ -f $H/sysctls ]]; then
  while read -r key val; do
    [[ $(sysctl -n "$key") == "$val" ]] || sysctl -q -w "$key=$val" || log "WARNING: cannot restore $key=$val"
  done <"$H/sysctls"
fi
if [[ -f $H/iptables-chains ]]; then
  iptables_chains | sort >"$H/iptables-chains.now"
  sort "$H/iptables-chains" | comm -13 - "$H/iptables-chains.now" | while read -r ipt table chain; do
    # Only the kubelet's chains (KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, KUBE-FIREWALL).
    [[ $chain == KUBE-* ]] || { log "WARNING: chain $table/$chain appeared meanwhile, not ours"; continue; }
    log "deleting $ipt -t $table chain $chain"
    # A chain that did not exist before up.sh has no jumps older than up.sh: delete every
    # jump to it (the kubelet puts KUBE-FIREWALL first in INPUT and OUTPUT), then the chain.
    "$ipt" -w 5 -t "$table" -S | grep -E -- "^-A [^ ]+ (.* )?-j $chain( |\$)" | while read -r rule; do
      eval "set -- ${rule#-A }"
      "$ipt" -w 5 -t "$table" -D "$@" || log "WARNING: cannot delete $table rule: $rule"
    done
    if ! { "$ipt" -w 5 -t "$table" -F "$chain" && "$ipt" -w 5 -t "$table" -X "$chain"; }; then
      log "WARNING: cannot delete $chain"
    fi
  done
fi

# 8. Host directories up.sh saw absent and the kubelet creates (/var/lib/kubelet).
if [[ -f $H/created-dirs ]]; then
  while read -r d; do
    if findmnt -rn -o TARGET | grep -q "^$d/"; then log "WARNING: mounts below $d; not removing it"; else rm -rf "$d"; fi
  done <"$H/created-dirs"
fi

# 9. State, unless something is still mounted there.
if findmnt -rn -o TARGET | grep -q "^$NODE_RUN/"; then
  log "WARNING: mounts left below $NODE_RUN; not removing it"
  exit 1
fi
# The containers' logs too (the kubelet's --pod-logs-dir), for a daemon that crashed.
cp -a "$NODE_RUN/logs" "$E2E_CACHE/last-node-logs.tmp" 2>/dev/null &&
  { cp -a "$NODE_RUN/pod-logs" "$E2E_CACHE/last-node-logs.tmp/pods" 2>/dev/null || true; } &&
  rm -rf "$E2E_CACHE/last-node-logs" &&
  mv "$E2E_CACHE/last-node-logs.tmp" "$E2E_CACHE/last-node-logs"
rm -rf "$NODE_RUN"
rmdir "$(dirname "$NODE_RUN")" 2>/dev/null || true
log "stopped; logs in $E2E_CACHE/last-node-logs"
