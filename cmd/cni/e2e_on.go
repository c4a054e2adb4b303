//go:build kuberdma_e2e

package main

import (
	"github.com/kube-rdma/kube-rdma/internal/fakerdma"
	"github.com/kube-rdma/kube-rdma/pkg/cni"
)

// withE2EFakes gives the plugin a fake RDMA netlink (internal/fakerdma):
// the e2e build only, for the GPU-aligned phase of the local-node e2e on a
// kernel without RDMA netlink, and for its faults phase, which makes it stop
// answering (fakerdma.Down). Never in a shipped image
// (cmd/device-plugin/deps_test.go).
func withE2EFakes(p *cni.Plugin, err error) (*cni.Plugin, error) {
	if err == nil {
		p.RDMA = fakerdma.Down{RDMA: fakerdma.Devices{StateFile: fakerdma.StateFile()}, File: fakerdma.DefaultDownFile}
	}
	return p, err
}
