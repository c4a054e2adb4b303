//go:build !kuberdma_e2e

package main

import "github.com/kube-rdma/kube-rdma/pkg/agent"

// e2eNetnsMode is nil: the daemon asks the kernel (RDMA netlink). Only the
// local-node e2e's build (tag kuberdma_e2e, e2e_on.go) says otherwise.
func e2eNetnsMode() agent.NetnsModeReader { return nil }
