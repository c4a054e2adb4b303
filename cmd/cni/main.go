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

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kube-rdma/kube-rdma/pkg/cni"
)

func main() {
	p, err := cni.New(os.Stderr)
	if err != nil {
		types.NewError(types.ErrInternal, "start kube-rdma", err.Error()).Print()
		os.Exit(1)
	}
	e := skel.PluginMainFuncsWithError(p.Funcs(context.Background()), cni.Versions, "kube-rdma CNI plugin: RDMA NIC netdev and RDMA device into the pod and back")
	p.HostNS.Close()
	if e != nil {
		if err := e.Print(); err != nil {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
