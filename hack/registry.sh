#!/usr/bin/env bash
# hack/registry.sh: a local OCI registry for make release-check and for scripts that push
# images (the CNCF distribution registry, github.com/distribution/distribution/v3, built from
# the module proxy once by e2e/local-node/build.sh and cached in $E2E_CACHE/bin).
#
#   bash hack/registry.sh start [PORT]    # prints 127.0.0.1:PORT once /v2/ answers
#   bash hack/registry.sh stop [PORT]     # stops it and removes its storage
#   bash hack/registry.sh status [PORT]   # exit 0 and the address when it runs
#
# PORT defaults to $REGISTRY_PORT, else 5000. It listens on 127.0.0.1 only, plain HTTP (no
# TLS, no auth: push with `--plain-http` for helm; go-containerregistry and crane use HTTP for
# 127.0.0.1 by themselves), with filesystem storage in its state directory
# ${REGISTRY_STATE:-${TMPDIR:-/tmp}/kube-rdma-registry-PORT} (config.yml, data/, pid, log).
# start on a port where this script's registry already runs says so and prints the address
# (idempotent); stop of one that is not running succeeds.
set -Eeuo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
E2E_CACHE=${E2E_CACHE:-/var/cache/kube-rdma-e2e}
log() { printf '%s registry: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cmd=${1:-}
PORT=${2:-${REGISTRY_PORT:-5000}}
[[ $PORT =~ ^[0-9]+$ ]] || die "port $PORT is not a number"
STATE=${REGISTRY_STATE:-${TMPDIR:-/tmp}/kube-rdma-registry-$PORT}
ADDR=127.0.0.1:$PORT

running() { [[ -f $STATE/pid ]] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; }
answers() { curl -fsS -o /dev/null --max-time 2 "http://$ADDR/v2/"; }

case $cmd in
start)
  if running; then
    log "already running on $ADDR (pid $(cat "$STATE/pid"), $STATE)"
    echo "$ADDR"
    exit 0
  fi
  ! answers 2>/dev/null || die "something else answers on $ADDR"
  bin=$(bash "$REPO/e2e/local-node/build.sh" registry)/registry
  [[ -x $bin ]] || die "no registry binary at $bin"
  rm -rf "$STATE"
  mkdir -p "$STATE/data"
  cat >"$STATE/config.yml" <<YAML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $STATE/data
  delete:
    enabled: true
http:
  addr: $ADDR
YAML
  # setsid: the registry outlives this script, in its own process group. It keeps none of the
  # caller's descriptors above 2: one may be a run's lock (the local-node e2e's flock), which
  # a registry outliving a killed run would otherwise hold, and the next run wait for.
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if [[ $fd -gt 2 ]]; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$bin" serve "$STATE/config.yml" >"$STATE/log" 2>&1 </dev/null
  ) &
  echo $! >"$STATE/pid"
  for _ in $(seq 100); do
    answers 2>/dev/null && { log "$("$bin" --version 2>/dev/null | head -1) on $ADDR, storage $STATE/data"; echo "$ADDR"; exit 0; }
    running || { cat "$STATE/log" >&2; die "the registry exited"; }
    sleep 0.1
  done
  cat "$STATE/log" >&2
  die "the registry does not answer on $ADDR"
  ;;
stop)
  if running; then
    pid=$(cat "$STATE/pid")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$pid" 2>/dev/null || die "registry pid $pid did not stop"
    log "stopped the registry on $ADDR"
  fi
  rm -rf "$STATE"
  ;;
status)
  running && answers || exit 1
  echo "$ADDR"
  ;;
*)
  die "usage: hack/registry.sh start|stop|status [PORT]"
  ;;
esac
