//go:build !kuberdma_e2e

package main

import "github.com/kube-rdma/kube-rdma/pkg/cni"

// withE2EFakes returns the plugin as it is. Only the local-node e2e's build
// (tag kuberdma_e2e, e2e_on.go) replaces its RDMA netlink.
func withE2EFakes(p *cni.Plugin, err error) (*cni.Plugin, error) { return p, err }
