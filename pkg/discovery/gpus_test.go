package discovery_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestGPUsMatchesScan: the GPU-only read gives the GPUs a full scan gives.
func TestGPUsMatchesScan(t *testing.T) {
	for _, name := range nodesim.Names() {
		t.Run(name, func(t *testing.T) {
			topo, _ := nodesim.Named(name)
			n, tree := scan(t, topo)
			got, _, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.GPUs()
			if err != nil {
				t.Fatalf("GPUs: %v", err)
			}
			if diff := cmp.Diff(n.GPUs, got); diff != "" {
				t.Errorf("GPUs() differs from Scan().GPUs (-scan +GPUs):\n%s", diff)
			}
		})
	}
	if _, _, err := (discovery.Scanner{SysRoot: t.TempDir()}).GPUs(); err == nil {
		t.Error("GPUs on a root that is not sysfs: no error")
	}
}
