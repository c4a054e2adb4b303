package dra_test

import (
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// scan builds a topology's sysfs tree and scans it as the daemon does.
func scan(t *testing.T, topo nodesim.Topology) (nodesim.Tree, *discovery.Node) {
	t.Helper()
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
	return tree, rescan(t, tree)
}

func rescan(t *testing.T, tree nodesim.Tree) *discovery.Node {
	t.Helper()
	n, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// health is the watcher's health rule applied to a scan.
func health(n *discovery.Node) map[string]bool {
	h := map[string]bool{}
	for _, d := range n.RDMADevices {
		h[d.Name] = d.Healthy()
	}
	return h
}

// goldens are the topologies every slice test runs on.
func goldens() []nodesim.Topology {
	return []nodesim.Topology{nodesim.HGX(), nodesim.DGXH100(), nodesim.LocalNode(2), nodesim.RoCESRIOV(),
		nodesim.SoftRoCE(), nodesim.PortDown(), nodesim.VM(), nodesim.Azure()}
}
