//go:build kuberdma_e2e

package main

import (
	"github.com/kube-rdma/kube-rdma/internal/fakerdma"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
)

// e2eNetnsMode reports the exclusive RDMA netns mode (internal/fakerdma):
// the e2e build only, for the GPU-aligned phase of the local-node e2e on a
// kernel without RDMA netlink. Never in a shipped image (deps_test.go).
func e2eNetnsMode() agent.NetnsModeReader { return fakerdma.Mode{} }
