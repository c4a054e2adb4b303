#!/usr/bin/env bash
# e2e/rxe-cluster/down.sh: stop the rxe cluster up.sh started: power the guests off (each gets
# 20 s, then qemu is killed), stop the control plane, delete the run's network namespace (its
# bridges and taps go with it) and $RXEC_RUN. Logs of the run are kept in $RXEC_CACHE/last-run.
set -Euo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$HERE/lib.sh"

[[ $(id -u) == 0 ]] || die "needs root"
if [[ -d $RXEC_RUN ]]; then
  for d in "$RXEC_RUN"/node*/share/cmd; do [[ -d $d ]] && touch "$d/poweroff"; done
  deadline=$(($(date +%s) + 20))
  while grep -q '^qemu' "$RXEC_RUN/pids" 2>/dev/null && [[ $(date +%s) -lt $deadline ]]; do
    running=0
    while read -r name pid; do [[ $name == qemu* ]] && alive "$pid" && running=1; done <"$RXEC_RUN/pids"
    [[ $running == 1 ]] || break
    sleep 0.5
  done
  if [[ -f $RXEC_RUN/pids ]]; then
    tac "$RXEC_RUN/pids" | while read -r name pid; do stop "$pid"; done
  fi
  # Logs of the run, for after.
  rm -rf "$RXEC_CACHE/last-run" && mkdir -p "$RXEC_CACHE/last-run"
  cp -r "$RXEC_RUN/logs" "$RXEC_RUN/times" "$RXEC_CACHE/last-run/" 2>/dev/null || true
  for d in "$RXEC_RUN"/node*; do
    [[ -d $d ]] || continue
    mkdir -p "$RXEC_CACHE/last-run/${d##*/}"
    cp "$d/console.log" "$d/qemu.cmd" "$RXEC_CACHE/last-run/${d##*/}/" 2>/dev/null || true
    cp "$d"/share/out/* "$RXEC_CACHE/last-run/${d##*/}/" 2>/dev/null || true
  done
fi
if ip netns list | grep -qw "$NETNS"; then
  # Anything still in the namespace was started by this cluster.
  for pid in $(ip netns pids "$NETNS" 2>/dev/null); do stop "$pid"; done
  ip netns del "$NETNS"
fi
rm -rf "$RXEC_RUN"
log "down"
