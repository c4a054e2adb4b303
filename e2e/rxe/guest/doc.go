// Package guest holds end-to-end tests that run inside the qemu guest booted by
// e2e/rxe/run.sh, where a Debian kernel provides netns-aware soft-RoCE (rdma_rxe).
//
// The tests are behind the rxe_guest build tag: they create network namespaces, veth pairs and
// RDMA devices, so a plain `go test ./...` on a host never builds or runs them. Inside the
// guest they also skip unless KUBE_RDMA_RXE_GUEST=1, which only the harness sets.
//
// Only the pure parsers in parse_test.go build without the tag; they run on the host too.
//
// The harness passes project binaries in on the 9p share and names them in the environment:
//
//	KUBE_RDMA_CNI_BIN          /share/bin/cni (from ./cmd/cni), unset when it does not exist
//	KUBE_RDMA_DP_BIN           /share/bin/device-plugin (from ./cmd/device-plugin), likewise
//	KUBE_RDMA_CNI_PLUGINS_DIR  /opt/cni/bin with the static, host-local and loopback plugins
//	KUBE_RDMA_OUT_DIR          /share/out, copied back to the host after the run
//
// Tests that need a binary skip with the reason when it is absent.
package guest
