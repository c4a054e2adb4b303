package discovery_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestScanGB200: a GB200 NVL72 compute tray (arm64, nodesim.GB200 says where
// each fact comes from). Every GPU is alone below a root port in a PCI domain
// of its own, and so is every NIC (behind a switch), so no GPU-NIC pair
// shares a PCIe switch or root port: a GPU and the NICs of its own Grace are
// NODE, those of the other Grace SYS, the Ethernet BlueField-3 included.
// nvidia-smi topo -m on such a tray prints SYS for every pair: it does not
// count two PCI domains of one Grace as one NUMA node; discovery does, from
// each function's numa_node.
func TestScanGB200(t *testing.T) {
	n, _ := scan(t, nodesim.GB200())
	if len(n.Warnings) != 0 {
		t.Errorf("warnings: %v", n.Warnings)
	}
	devs := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"}
	if diff := cmp.Diff(devs, names(n)); diff != "" {
		t.Errorf("rdma devices (-want +got):\n%s", diff)
	}
	var gpus []string
	for _, g := range n.GPUs {
		gpus = append(gpus, g.PCIAddress+" "+g.Vendor+":"+g.Device+" "+g.PCIeRoot)
	}
	wantGPUs := []string{
		"0008:01:00.0 10de:2941 pci0008:00", "0009:01:00.0 10de:2941 pci0009:00",
		"0018:01:00.0 10de:2941 pci0018:00", "0019:01:00.0 10de:2941 pci0019:00",
	}
	if diff := cmp.Diff(wantGPUs, gpus); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	//          ibp3s0 ibP2p3s0 BF-3 ibP16p3s0 ibP18p3s0 BF-3
	grace0 := []discovery.Level{NODE, NODE, NODE, SYS, SYS, SYS}
	grace1 := []discovery.Level{SYS, SYS, SYS, NODE, NODE, NODE}
	if diff := cmp.Diff([][]discovery.Level{grace0, grace0, grace1, grace1}, levels(n, devs...)); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}
	d := device(t, n, "mlx5_3")
	got := discovery.RDMADevice{Name: d.Name, Kind: d.Kind, PCIAddress: d.PCIAddress, PCIeRoot: d.PCIeRoot, PCIPath: d.PCIPath,
		NUMANode: d.NUMANode, Vendor: d.Vendor, Device: d.Device, LinkLayer: d.LinkLayer, Netdevs: d.Netdevs}
	want := discovery.RDMADevice{Name: "mlx5_3", Kind: discovery.KindPF, PCIAddress: "0010:03:00.0", PCIeRoot: "pci0010:00",
		PCIPath:  []string{"0010:00:00.0", "0010:01:00.0", "0010:02:00.0", "0010:03:00.0"},
		NUMANode: 1, Vendor: "15b3", Device: "1021", LinkLayer: "InfiniBand", Netdevs: []string{"ibP16p3s0"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mlx5_3 (-want +got):\n%s", diff)
	}
	if bf3 := device(t, n, "mlx5_5"); bf3.Device != "a2dc" || bf3.LinkLayer != "Ethernet" || bf3.NUMANode != 1 {
		t.Errorf("mlx5_5 (BlueField-3) = device %s link %s numa %d", bf3.Device, bf3.LinkLayer, bf3.NUMANode)
	}
}
