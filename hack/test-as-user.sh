#!/usr/bin/env bash
# hack/test-as-user.sh: the unit tests run as a non-root user, from test binaries compiled by the
# caller (root), so the user's run compiles nothing. What `make test` does as such a user, minus
# its compile: each package's test binary runs in its package's directory of a copy of the tree
# owned by the user, its output turned into `go test -json` events (go tool test2json) and read
# by hack/testsummary, which prints the skips by reason and exits 1 on a failure.
#
#   bash hack/test-as-user.sh USER HOME [PACKAGES...]     # default ./...
#
# KUBE_RDMA_TEST_APISERVER and KUBEBUILDER_ASSETS, when set, are handed to the tests (off: the
# tests against a real API server skip, saying so; internal/apiserverassets).
#
# Why not `go test` as the user: it compiles every package again into the user's own build cache
# (root's cannot be shared with another user: go writes its entries with the writer's umask),
# which on a cold machine costs as much as `make test`'s own build (about 10 minutes of CI's 90).
# Here root links the test binaries from its warm cache (about 2 minutes, two at a time) and the
# user only runs them. The tests that call the go command themselves (go list, for the import
# rules) run it as the user, with the user's own module cache.
set -euo pipefail
[[ $(id -u) == 0 ]] || { echo "test-as-user.sh: needs root (it builds as root and runs as USER)" >&2; exit 2; }
[[ $# -ge 2 ]] || { echo "usage: test-as-user.sh USER HOME [PACKAGES...]" >&2; exit 2; }
user=$1 home=$2
shift 2
[[ $# -gt 0 ]] || set -- ./...
cd "$(dirname "$0")/.."
repo=$PWD
goroot=$(go env GOROOT)

id "$user" >/dev/null 2>&1 || useradd --system --home-dir "$home" --shell /usr/sbin/nologin "$user"
mkdir -p "$home"
rm -rf "$home/src" "$home/tests" && mkdir "$home/src" "$home/tests"
git ls-files -z | tar -c --null -T - | tar -x -C "$home/src"

# The test binaries, built from this tree as root: "importpath dir" of each package with tests.
mapfile -t pkgs < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$@")
t0=$SECONDS
# shellcheck disable=SC2016 # $1 and $2 are sh -c's arguments
printf '%s\n' "${pkgs[@]}" | awk '{print $1}' |
  xargs -P 2 -I{} sh -c 'go test -c -o "$1/$(printf %s "$2" | tr / _).test" "$2"' _ "$home/tests" {}
go build -o "$home/tests/testsummary" ./hack/testsummary
go build -o "$home/tests/test2json" cmd/test2json
echo "test-as-user: ${#pkgs[@]} test binaries linked as root in $((SECONDS - t0)) s"
chown "$user:" "$home" && chown -R "$user:" "$home/src" "$home/tests"

# One package: its binary in its directory, as the user, under test2json, which reports the
# binary's exit status too (a crash without a FAIL line is a failed package).
run_one() {
  local ip=$1 dir=$2 rel bin
  rel=${dir#"$repo"}
  bin=$home/tests/$(printf %s "$ip" | tr / _).test
  [[ -x $bin ]] || { printf '{"Action":"fail","Package":"%s","Output":"no test binary\\n"}\n' "$ip"; return; }
  (cd "$home/src$rel" && runuser -u "$user" -- env -i PATH="$goroot/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin" \
    HOME="$home" GOCACHE="$home/gocache" GOMODCACHE="$home/gomod" GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
    ${KUBE_RDMA_TEST_APISERVER:+KUBE_RDMA_TEST_APISERVER="$KUBE_RDMA_TEST_APISERVER"} \
    ${KUBEBUILDER_ASSETS:+KUBEBUILDER_ASSETS="$KUBEBUILDER_ASSETS"} \
    "$home/tests/test2json" -t -p "$ip" "$bin" -test.v=test2json -test.count=1 -test.timeout=15m) || true
}
export -f run_one
export home user repo goroot
t0=$SECONDS
# shellcheck disable=SC2016 # $1 and $2 are bash -c's arguments
printf '%s\n' "${pkgs[@]}" | xargs -P 2 -L 1 bash -c 'run_one "$1" "$2" >"$home/tests/$(printf %s "$1" | tr / _).json"' _
echo "test-as-user: ran as $user in $((SECONDS - t0)) s"
cat "$home/tests"/*.json | "$home/tests/testsummary"
