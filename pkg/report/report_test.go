package report

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

func node() *discovery.Node {
	return &discovery.Node{
		RDMADevices: []discovery.RDMADevice{
			{Name: "mlx5_0", Kind: discovery.KindPF, PCIAddress: "0000:18:00.0", NUMANode: 0, PCIeRoot: "pci0000:15", LinkLayer: "InfiniBand",
				Netdevs: []string{"ibp24s0"}, CharDevices: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/umad0", "/dev/infiniband/issm0"},
				Ports: []discovery.Port{{Port: 1, State: "ACTIVE", Rate: "400 Gb/sec (4X NDR)"}}},
			{Name: "rxe0", Kind: discovery.KindVirtual, NUMANode: -1, LinkLayer: "Ethernet",
				Netdevs: []string{"eth0"}, CharDevices: []string{"/dev/infiniband/uverbs1"},
				Ports: []discovery.Port{{Port: 1, State: "DOWN", Rate: "10 Gb/sec (1X QDR)"}, {Port: 2, State: "ACTIVE"}}},
		},
		GPUs: []discovery.GPU{
			{PCIAddress: "0000:1b:00.0", NUMANode: 0, PCIeRoot: "pci0000:15", UUID: "GPU-aaaa"},
			{PCIAddress: "0000:9d:00.0", NUMANode: 1},
		},
		Affinity: []discovery.Affinity{
			{GPU: "0000:1b:00.0", RDMADevice: "mlx5_0", Level: discovery.PXB},
			{GPU: "0000:1b:00.0", RDMADevice: "rxe0", Level: discovery.SYS},
			{GPU: "0000:9d:00.0", RDMADevice: "mlx5_0", Level: discovery.SYS},
		},
		Warnings: []string{"skipped /sys/class/infiniband/mlx5_9: bad vendor"},
	}
}

const legend = `
Legend:
  PIX  = both under one PCIe switch
  PXB  = through several PCIe bridges or switches, without the host bridge
  PHB  = through a PCIe host bridge (same root complex, different root ports)
  NODE = between PCIe host bridges within one NUMA node
  SYS  = across NUMA nodes (or NUMA placement unknown on a multi-node host)
`

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := WriteTable(&b, node()); err != nil {
		t.Fatal(err)
	}
	// A pair discovery did not report is "?", never a made-up level; empty
	// fields are "-"; char devices lose their /dev/infiniband/ prefix.
	want := `RDMA DEVICE  KIND     PCI           NUMA  PCIE ROOT   NETDEV   PORTS            LINK        RATE                 CHAR DEVICES
mlx5_0       PF       0000:18:00.0  0     pci0000:15  ibp24s0  1:ACTIVE         InfiniBand  400 Gb/sec (4X NDR)  uverbs0,umad0,issm0
rxe0         virtual  -             -     -           eth0     1:DOWN,2:ACTIVE  Ethernet    10 Gb/sec (1X QDR)   uverbs1

     mlx5_0 rxe0 PCI          NUMA PCIE ROOT  UUID
GPU0 PXB    SYS  0000:1b:00.0 0    pci0000:15 GPU-aaaa
GPU1 SYS    ?    0000:9d:00.0 1    -          -
` + legend + `warning: skipped /sys/class/infiniband/mlx5_9: bad vendor
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestWriteTableEmpty(t *testing.T) {
	var b strings.Builder
	if err := WriteTable(&b, &discovery.Node{}); err != nil {
		t.Fatal(err)
	}
	want := "RDMA DEVICE  KIND  PCI  NUMA  PCIE ROOT  NETDEV  PORTS  LINK  RATE  CHAR DEVICES\n(no RDMA devices)\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("empty node (-want +got):\n%s", diff)
	}
}

func TestWriteTableNoCharDevices(t *testing.T) {
	var b strings.Builder
	n := node()
	n.GPUs, n.Warnings = nil, nil
	if err := WriteTableWith(&b, n, TableOptions{NoCharDevices: true}); err != nil {
		t.Fatal(err)
	}
	want := `RDMA DEVICE  KIND     PCI           NUMA  PCIE ROOT   NETDEV   PORTS            LINK        RATE
mlx5_0       PF       0000:18:00.0  0     pci0000:15  ibp24s0  1:ACTIVE         InfiniBand  400 Gb/sec (4X NDR)
rxe0         virtual  -             -     -           eth0     1:DOWN,2:ACTIVE  Ethernet    10 Gb/sec (1X QDR)
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table without char devices (-want +got):\n%s", diff)
	}
}
