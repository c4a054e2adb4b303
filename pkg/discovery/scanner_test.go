package discovery_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func scan(t testing.TB, topo nodesim.Topology) (*discovery.Node, nodesim.Tree) {
	t.Helper()
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
	n, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return n, tree
}

func device(t *testing.T, n *discovery.Node, name string) discovery.RDMADevice {
	t.Helper()
	for _, d := range n.RDMADevices {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no rdma device %s in %v", name, names(n))
	return discovery.RDMADevice{}
}

func names(n *discovery.Node) []string {
	var s []string
	for _, d := range n.RDMADevices {
		s = append(s, d.Name)
	}
	return s
}

// levels returns the affinity matrix as rows of levels, GPUs in PCI order,
// devices in the order given.
func levels(n *discovery.Node, devs ...string) [][]discovery.Level {
	m := map[[2]string]discovery.Level{}
	for _, a := range n.Affinity {
		m[[2]string{a.GPU, a.RDMADevice}] = a.Level
	}
	var out [][]discovery.Level
	for _, g := range n.GPUs {
		var row []discovery.Level
		for _, d := range devs {
			row = append(row, m[[2]string{g.PCIAddress, d}])
		}
		out = append(out, row)
	}
	return out
}

const (
	PIX, PXB, PHB, NODE, SYS = discovery.PIX, discovery.PXB, discovery.PHB, discovery.NODE, discovery.SYS
)

func TestScanHGX(t *testing.T) {
	n, _ := scan(t, nodesim.HGX())
	if len(n.Warnings) != 0 {
		t.Errorf("warnings: %v", n.Warnings)
	}
	want := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"}
	if diff := cmp.Diff(want, names(n)); diff != "" {
		t.Errorf("rdma devices (-want +got):\n%s", diff)
	}
	// NVSwitches (class 0680) and the BMC's ASPEED VGA are not GPUs.
	if len(n.GPUs) != 8 {
		t.Fatalf("got %d GPUs, want 8: %+v", len(n.GPUs), n.GPUs)
	}
	wantLevels := [][]discovery.Level{
		{PIX, NODE, NODE, NODE, SYS, SYS, SYS, SYS, NODE, SYS},
		{NODE, PIX, NODE, NODE, SYS, SYS, SYS, SYS, NODE, SYS},
		{NODE, NODE, PIX, NODE, SYS, SYS, SYS, SYS, NODE, SYS},
		{NODE, NODE, NODE, PIX, SYS, SYS, SYS, SYS, NODE, SYS},
		{SYS, SYS, SYS, SYS, PIX, NODE, NODE, NODE, SYS, NODE},
		{SYS, SYS, SYS, SYS, NODE, PIX, NODE, NODE, SYS, NODE},
		{SYS, SYS, SYS, SYS, NODE, NODE, PIX, NODE, SYS, NODE},
		{SYS, SYS, SYS, SYS, NODE, NODE, NODE, PIX, SYS, NODE},
	}
	if diff := cmp.Diff(wantLevels, levels(n, want...)); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}
	g := n.GPUs[0]
	if g.UUID != "GPU-5a3f0000-1c2d-4e5f-8a9b-c0ffee000000" || g.Minor == nil || *g.Minor != 0 || g.Class != "030200" {
		t.Errorf("GPU0 = %+v", g)
	}
	d := device(t, n, "mlx5_0")
	wantDev := discovery.RDMADevice{
		Name: "mlx5_0", Kind: discovery.KindPF, PCIAddress: "0000:18:00.0", Vendor: "15b3", Device: "1021",
		Driver: "mlx5_core", NUMANode: 0, PCIeRoot: "pci0000:15",
		PCIPath:  []string{"0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"},
		NodeGUID: "b859:9f03:0000:0000", LinkLayer: "InfiniBand",
		Ports: []discovery.Port{{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "InfiniBand",
			Rate: "400 Gb/sec (4X NDR)", Netdev: "ibp24s0",
			GIDs: []discovery.GID{{Index: 0, GID: "fe80:0000:0000:0000:b859:9f03:00d4:8a2e"}}}},
		Netdevs:     []string{"ibp24s0"},
		CharDevices: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/umad0", "/dev/infiniband/issm0"},
	}
	if diff := cmp.Diff(wantDev, d); diff != "" {
		t.Errorf("mlx5_0 (-want +got):\n%s", diff)
	}
	roce := device(t, n, "mlx5_8")
	if roce.LinkLayer != "Ethernet" || !slices.Equal(roce.Ports[0].RoCEv2GIDIndexes, []int{1, 3}) || roce.Ports[0].Netdev != "enp39s0np0" {
		t.Errorf("mlx5_8 = %+v", roce)
	}
}

func TestScanDGXH100(t *testing.T) {
	n, _ := scan(t, nodesim.DGXH100())
	// Each GPU to its own NIC is PXB (GPU behind a second switch level).
	own := map[string]string{
		"0000:1b:00.0": "mlx5_0", "0000:43:00.0": "mlx5_3", "0000:52:00.0": "mlx5_4", "0000:61:00.0": "mlx5_5",
		"0000:9d:00.0": "mlx5_6", "0000:c3:00.0": "mlx5_9", "0000:d1:00.0": "mlx5_10", "0000:df:00.0": "mlx5_11",
	}
	if len(n.GPUs) != 8 || len(n.RDMADevices) != 12 {
		t.Fatalf("got %d GPUs and %d rdma devices, want 8 and 12", len(n.GPUs), len(n.RDMADevices))
	}
	gpuNUMA := map[string]int{}
	for _, g := range n.GPUs {
		gpuNUMA[g.PCIAddress] = g.NUMANode
	}
	devNUMA := map[string]int{}
	for _, d := range n.RDMADevices {
		devNUMA[d.Name] = d.NUMANode
	}
	for _, a := range n.Affinity {
		want := SYS
		switch {
		case own[a.GPU] == a.RDMADevice:
			want = PXB
		case gpuNUMA[a.GPU] == devNUMA[a.RDMADevice]:
			want = NODE
		}
		if a.Level != want {
			t.Errorf("%s <-> %s = %s, want %s", a.GPU, a.RDMADevice, a.Level, want)
		}
	}
	ib, eth := device(t, n, "mlx5_1"), device(t, n, "mlx5_2")
	if ib.LinkLayer != "InfiniBand" || eth.LinkLayer != "Ethernet" || ib.PCIAddress != "0000:29:00.0" || eth.PCIAddress != "0000:29:00.1" {
		t.Errorf("storage card: mlx5_1 %s %s, mlx5_2 %s %s", ib.PCIAddress, ib.LinkLayer, eth.PCIAddress, eth.LinkLayer)
	}
	if got := device(t, n, "mlx5_11").Netdevs; !slices.Equal(got, []string{"ibp220s0"}) {
		t.Errorf("mlx5_11 netdevs = %v", got)
	}
}

func TestScanRoCESRIOV(t *testing.T) {
	n, _ := scan(t, nodesim.RoCESRIOV())
	if len(n.GPUs) != 8 || len(n.RDMADevices) != 13 {
		t.Fatalf("got %d GPUs and %d rdma devices, want 8 and 13: %v", len(n.GPUs), len(n.RDMADevices), n.Warnings)
	}
	pfs := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}
	got := levels(n, pfs...)
	// GPU0/1 PIX to NIC0/1, NODE to NIC2/3 (other switch, same socket), SYS across sockets.
	if diff := cmp.Diff([]discovery.Level{PIX, PIX, NODE, NODE, SYS, SYS, SYS, SYS}, got[0]); diff != "" {
		t.Errorf("GPU0 row (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]discovery.Level{SYS, SYS, SYS, SYS, NODE, NODE, PIX, PIX}, got[7]); diff != "" {
		t.Errorf("GPU7 row (-want +got):\n%s", diff)
	}
	vf := device(t, n, "mlx5_8")
	if vf.Kind != discovery.KindVF || vf.PhysFn != device(t, n, "mlx5_0").PCIAddress || vf.Device != "101e" ||
		!slices.Equal(vf.Netdevs, []string{"gpu0rdma0v0"}) || !slices.Equal(vf.Ports[0].RoCEv2GIDIndexes, []int{1}) {
		t.Errorf("VF mlx5_8 = %+v", vf)
	}
	if l := levels(n, "mlx5_8")[0][0]; l != PIX {
		t.Errorf("GPU0 <-> VF of NIC0 = %s, want PIX", l)
	}
	sf := device(t, n, "mlx5_12")
	if sf.Kind != discovery.KindSF || sf.AuxDevice != "mlx5_core.sf.2" || sf.PCIAddress != device(t, n, "mlx5_2").PCIAddress ||
		sf.Driver != "mlx5_core.sf" || !slices.Equal(sf.Netdevs, []string{"gpu2rdma0s2"}) {
		t.Errorf("SF mlx5_12 = %+v", sf)
	}
}

func TestScanSoftRoCE(t *testing.T) {
	n, _ := scan(t, nodesim.SoftRoCE())
	want := discovery.RDMADevice{
		Name: "rxe0", Kind: discovery.KindVirtual, NUMANode: -1, NodeGUID: "5054:00ff:fe12:3456",
		LinkLayer: "Ethernet", Parent: "enp0s3", Netdevs: []string{"enp0s3"},
		CharDevices: []string{"/dev/infiniband/uverbs0"},
	}
	got := device(t, n, "rxe0")
	if diff := cmp.Diff(want, got, cmpIgnorePorts); diff != "" {
		t.Errorf("rxe0 (-want +got):\n%s", diff)
	}
	if p := got.Ports[0]; p.Netdev != "enp0s3" || !slices.Equal(p.RoCEv2GIDIndexes, []int{1, 3}) || p.GIDs[3].GID != "0000:0000:0000:0000:0000:ffff:0a00:020f" {
		t.Errorf("rxe0 port = %+v", p)
	}
	if len(n.GPUs) != 0 || len(n.Affinity) != 0 {
		t.Errorf("GPUs %v, affinity %v; want none", n.GPUs, n.Affinity)
	}
}

var cmpIgnorePorts = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Ports" }, cmp.Ignore())

func TestScanPortDown(t *testing.T) {
	n, _ := scan(t, nodesim.PortDown())
	up, down := device(t, n, "mlx5_0").Ports[0], device(t, n, "mlx5_1").Ports[0]
	if !up.Active() || up.PhysState != "LinkUp" {
		t.Errorf("mlx5_0 port = %+v, want ACTIVE/LinkUp", up)
	}
	if down.Active() || down.State != "DOWN" || down.PhysState != "Disabled" {
		t.Errorf("mlx5_1 port = %+v, want DOWN/Disabled", down)
	}
	// One NUMA node: different host bridges are NODE.
	if diff := cmp.Diff([][]discovery.Level{{PIX, NODE}, {NODE, PIX}}, levels(n, "mlx5_0", "mlx5_1")); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}
}

func TestScanVM(t *testing.T) {
	n, _ := scan(t, nodesim.VM())
	for _, a := range n.Affinity {
		if a.Level != SYS {
			t.Errorf("%s <-> %s = %s; a VM with hidden NUMA on two nodes must not claim locality", a.GPU, a.RDMADevice, a.Level)
		}
	}
	for _, d := range n.RDMADevices {
		// A passed-through VF has no physfn link: its PCI ID says VF.
		if d.NUMANode != -1 || d.Kind != discovery.KindVF || d.PhysFn != "" || d.PCIeRoot == "" {
			t.Errorf("%s = kind %s numa %d root %q", d.Name, d.Kind, d.NUMANode, d.PCIeRoot)
		}
	}
}

// TestScanAzure: on a Hyper-V guest the PCI host bridges sit below VMBus,
// not directly under devices/. Every function is on its own domain, so NUMA
// alone decides; the IB VFs have no physfn and are still VFs.
func TestScanAzure(t *testing.T) {
	n, _ := scan(t, nodesim.Azure())
	if len(n.GPUs) != 8 || len(n.RDMADevices) != 9 {
		t.Fatalf("got %d GPUs and %d rdma devices, want 8 and 9", len(n.GPUs), len(n.RDMADevices))
	}
	ib0 := device(t, n, "mlx5_ib0")
	want := discovery.RDMADevice{Name: "mlx5_ib0", Kind: discovery.KindVF, PCIAddress: "0101:00:00.0", PCIeRoot: "pci0101:00",
		PCIPath: []string{"0101:00:00.0"}, NUMANode: 0, Vendor: "15b3", Device: "101e", Driver: "mlx5_core", LinkLayer: "InfiniBand",
		Netdevs: []string{"ib0"}}
	got := discovery.RDMADevice{Name: ib0.Name, Kind: ib0.Kind, PCIAddress: ib0.PCIAddress, PCIeRoot: ib0.PCIeRoot,
		PCIPath: ib0.PCIPath, NUMANode: ib0.NUMANode, Vendor: ib0.Vendor, Device: ib0.Device, Driver: ib0.Driver,
		LinkLayer: ib0.LinkLayer, Netdevs: ib0.Netdevs, PhysFn: ib0.PhysFn}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mlx5_ib0 (-want +got):\n%s", diff)
	}
	if g := n.GPUs[0]; g.PCIAddress != "0001:00:00.0" || g.PCIeRoot != "pci0001:00" || g.NUMANode != 0 {
		t.Errorf("GPU0 = %s root %q numa %d", g.PCIAddress, g.PCIeRoot, g.NUMANode)
	}
	devs := []string{"mlx5_an0", "mlx5_ib0", "mlx5_ib3", "mlx5_ib4", "mlx5_ib7"}
	near := []discovery.Level{NODE, NODE, NODE, SYS, SYS}
	far := []discovery.Level{SYS, SYS, SYS, NODE, NODE}
	if diff := cmp.Diff([][]discovery.Level{near, near, near, near, far, far, far, far}, levels(n, devs...)); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}
}

// TestJSONContract pins the field names the kubectl plugin and tests read.
func TestJSONContract(t *testing.T) {
	n, _ := scan(t, nodesim.HGX())
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		RDMADevices []map[string]json.RawMessage `json:"rdmaDevices"`
		GPUs        []map[string]json.RawMessage `json:"gpus"`
		Affinity    []map[string]json.RawMessage `json:"affinity"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	has := func(what string, m map[string]json.RawMessage, keys ...string) {
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s has no %q field", what, k)
			}
		}
	}
	has("rdmaDevices[0]", raw.RDMADevices[0], "name", "pciAddress", "vendor", "device", "driver", "numaNode", "pcieRoot",
		"physFn", "nodeGUID", "linkLayer", "ports", "netdevs", "charDevices")
	var ports []map[string]json.RawMessage
	if err := json.Unmarshal(raw.RDMADevices[0]["ports"], &ports); err != nil {
		t.Fatal(err)
	}
	has("ports[0]", ports[0], "port", "state", "physState", "linkLayer", "rate", "netdev")
	has("gpus[0]", raw.GPUs[0], "pciAddress", "vendor", "device", "numaNode", "pcieRoot", "uuid")
	has("affinity[0]", raw.Affinity[0], "gpu", "rdmaDevice", "level")
	if string(raw.RDMADevices[0]["vendor"]) != `"15b3"` {
		t.Errorf("vendor = %s, want lower-case hex without 0x", raw.RDMADevices[0]["vendor"])
	}
}

func TestLookupRDMA(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.RoCESRIOV())
	if err != nil {
		t.Fatal(err)
	}
	s := discovery.Scanner{SysRoot: tree.SysRoot}
	for id, want := range map[string]string{
		"mlx5_1": "mlx5_1", "0000:15:00.0": "mlx5_0", "0000:15:00.3": "mlx5_9", "mlx5_core.sf.2": "mlx5_12",
	} {
		d, err := s.LookupRDMA(id)
		if err != nil || d.Name != want {
			t.Errorf("LookupRDMA(%q) = %s, %v; want %s", id, d.Name, err, want)
		}
	}
	if _, err := s.LookupRDMA("mlx5_99"); !errorsIs(err, discovery.ErrNotFound) {
		t.Errorf("LookupRDMA(mlx5_99) error = %v, want ErrNotFound", err)
	}
}

// BenchmarkScan1024Devices scans the synthetic node: 8 GPUs, 16 PFs and 1,008
// VFs, each with a RoCE port of 4 GIDs (make bench; figures in
// docs/device-plugin.md, "Discovery measurements"). make bench-ghw compares
// it with ghw's PCI scan.
func BenchmarkScan1024Devices(b *testing.B) {
	tree, err := nodesim.Build(b.TempDir(), nodesim.Synthetic(8, 16, 63))
	if err != nil {
		b.Fatal(err)
	}
	s := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}
	var n *discovery.Node
	for b.Loop() {
		if n, err = s.Scan(); err != nil {
			b.Fatal(err)
		}
	}
	if len(n.RDMADevices) != 1024 || len(n.GPUs) != 8 || len(n.Warnings) != 0 {
		b.Fatalf("scanned %d rdma devices, %d GPUs, warnings %v", len(n.RDMADevices), len(n.GPUs), n.Warnings)
	}
	b.ReportMetric(float64(len(n.RDMADevices)), "rdma-devices")
}

func ExampleScanner_Scan() {
	dir, _ := tempDir()
	tree, _ := nodesim.Build(dir, nodesim.PortDown())
	n, _ := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	for _, d := range n.RDMADevices {
		fmt.Println(d.Name, d.PCIAddress, d.Ports[0].State)
	}
	cleanup(dir)
	// Output:
	// mlx5_0 0000:18:00.0 ACTIVE
	// mlx5_1 0000:3a:00.0 DOWN
}
