// Command kube-rdma is the CNI plugin that moves an RDMA NIC's netdev and
// RDMA device into a pod and back. The runtime runs it with CNI_* variables
// and the network configuration on stdin; see docs/cni.md.
//
// It is exec'd for every ADD and DEL, so start-up counts: build it static
// and stripped (CGO_ENABLED=0 go build -trimpath -ldflags='-s -w'), which
// takes about a fifth off an ADD+DEL pair on a loaded node.
package main

import (
	"context"
	"os"

	"github.com/kube-rdma/kube-rdma/pkg/cni"
)

func main() {
	newPlugin := func() (*cni.Plugin, error) { return cni.New(os.Stderr) }
	os.Exit(cni.Main(context.Background(), newPlugin, "kube-rdma CNI plugin: RDMA NIC netdev and RDMA device into the pod and back"))
}
