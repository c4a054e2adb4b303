package nodesim

import "fmt"

// PCI IDs from ../../shared/TOPOLOGIES.md.
const (
	vMellanox = "15b3"
	vNVIDIA   = "10de"

	dCX7      = "1021"
	dCX6Dx    = "101d"
	dMlx5VF   = "101e"
	dH100SXM  = "2330"
	dA100SXM  = "20b0"
	dNVSwitch = "22a3"

	classIB       = "020700"
	classEthernet = "020000"
	class3D       = "030200"
	classBridgeNV = "068000"
)

func bdf(domain, bus, dev, fn int) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, fn)
}

// switchPaths returns a host bridge and the path to a switch's downstream
// port number dsp: root port, upstream port, downstream port.
func switchPath(hb, dsp int) string {
	return fmt.Sprintf("pci0000:%02x/%s/%s/%s", hb, bdf(0, hb, 1, 0), bdf(0, hb+1, 0, 0), bdf(0, hb+2, dsp, 0))
}

func ibPort(state, phys int, rate string) Port {
	return Port{State: state, PhysState: phys, LinkLayer: "InfiniBand", Rate: rate,
		GIDs: []GID{{Index: 0, GID: "fe80:0000:0000:0000:b859:9f03:00d4:8a2e"}}}
}

func activeIB() Port { return ibPort(StateActive, PhysLinkUp, "400 Gb/sec (4X NDR)") }

// rocePort has the link-local GIDs (v1 at 0, v2 at 1) and, when ipv4 is set,
// the IPv4-mapped pair at 2 and 3, as mlx5 fills its table.
func rocePort(netdev string, ipv4 [4]byte, state int) Port {
	phys := PhysLinkUp
	if state != StateActive {
		phys = PhysDisabled
	}
	p := Port{State: state, PhysState: phys, LinkLayer: "Ethernet", Rate: "200 Gb/sec (2X HDR)"}
	ll := fmt.Sprintf("fe80:0000:0000:0000:0a%02x:%02xff:fe%02x:%02x%02x", ipv4[1], ipv4[2], ipv4[3], ipv4[2], ipv4[3])
	p.GIDs = []GID{
		{Index: 0, GID: ll, Type: "IB/RoCE v1", Netdev: netdev},
		{Index: 1, GID: ll, Type: "RoCE v2", Netdev: netdev},
	}
	if ipv4 != [4]byte{} {
		v4 := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", ipv4[0], ipv4[1], ipv4[2], ipv4[3])
		p.GIDs = append(p.GIDs,
			GID{Index: 2, GID: v4, Type: "IB/RoCE v1", Netdev: netdev},
			GID{Index: 3, GID: v4, Type: "RoCE v2", Netdev: netdev})
	}
	return p
}

func guid(n int) string {
	return fmt.Sprintf("b859:9f03:00%02x:%04x", n>>16&0xff, n&0xffff)
}

func gpuUUID(n int) string {
	return fmt.Sprintf("GPU-%08x-1c2d-4e5f-8a9b-%012x", 0x5a3f0000+n, 0xc0ffee000000+n)
}

// HGX is an 8-GPU HGX H100 OEM node: each GPU and its ConnectX-7 InfiniBand
// NIC hang off one PCIe switch (PIX); four pairs per socket, each pair behind
// its own host bridge; two ConnectX-6 Dx RoCE NICs not attached to a GPU;
// four NVSwitches and the BMC's VGA, which are not GPUs.
func HGX() Topology {
	t := Topology{Name: "hgx-h100", NUMANodes: 2}
	hbs := []int{0x15, 0x37, 0x48, 0x59, 0x97, 0xb7, 0xc7, 0xd7}
	for i, hb := range hbs {
		numa := i / 4
		nic := bdf(0, hb+3, 0, 0)
		gpu := bdf(0, hb+4, 0, 0)
		netdev := fmt.Sprintf("ibp%ds0", hb+3)
		t.PCI = append(t.PCI,
			Function{Path: switchPath(hb, 0) + "/" + nic, Vendor: vMellanox, Device: dCX7, Class: classIB, Driver: "mlx5_core",
				NUMANode: numa, Netdevs: []Netdev{{Name: netdev}}},
			Function{Path: switchPath(hb, 1) + "/" + gpu, Vendor: vNVIDIA, Device: dH100SXM, Class: class3D, Driver: "nvidia",
				NUMANode: numa, UUID: gpuUUID(i), Minor: i})
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", i), Parent: nic, NodeGUID: guid(i), Ports: []Port{activeIB()}})
	}
	for i, hb := range []int{0x26, 0xa7} {
		nic := bdf(0, hb+1, 0, 0)
		netdev := fmt.Sprintf("enp%ds0np0", hb+1)
		t.PCI = append(t.PCI, Function{Path: fmt.Sprintf("pci0000:%02x/%s/%s", hb, bdf(0, hb, 1, 0), nic), Vendor: vMellanox,
			Device: dCX6Dx, Class: classEthernet, Driver: "mlx5_core", NUMANode: i, Netdevs: []Netdev{{Name: netdev}}})
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", 8+i), Parent: nic, NodeGUID: guid(8 + i),
			Ports: []Port{rocePort(netdev, [4]byte{10, 0, byte(i), 1}, StateActive)}})
	}
	for i := range 4 {
		t.PCI = append(t.PCI, Function{Path: fmt.Sprintf("pci0000:e5/0000:e5:01.0/%s", bdf(0, 0xe6+i, 0, 0)), Vendor: vNVIDIA,
			Device: dNVSwitch, Class: classBridgeNV, Driver: "nvidia-nvswitch", NUMANode: 1})
	}
	t.PCI = append(t.PCI, Function{Path: "pci0000:00/0000:00:1c.5/0000:02:00.0/0000:03:00.0", Vendor: "1a03", Device: "2000",
		Class: "030000", Driver: "ast", NUMANode: 0})
	return t
}

// DGXH100 is a DGX H100: GPUs at buses 1b, 43, 52, 61 (NUMA 0) and 9d, c3,
// d1, df (NUMA 1), each behind a second switch level below the switch that
// holds its ConnectX-7 (PXB); NICs named as on the real system (mlx5_0
// ibp24s0 ... mlx5_11 ibp220s0), and two dual-port storage cards with one
// InfiniBand and one Ethernet port each (mlx5_1/2, mlx5_7/8).
func DGXH100() Topology {
	t := Topology{Name: "dgx-h100", NUMANodes: 2}
	nics := []struct {
		name string
		bus  int
	}{{"mlx5_0", 0x18}, {"mlx5_3", 0x40}, {"mlx5_4", 0x4f}, {"mlx5_5", 0x5e},
		{"mlx5_6", 0x9a}, {"mlx5_9", 0xc0}, {"mlx5_10", 0xce}, {"mlx5_11", 0xdc}}
	for i, n := range nics {
		hb, numa := n.bus-3, i/4
		nic := bdf(0, n.bus, 0, 0)
		// GPU: second downstream port -> upstream port of a second switch -> its downstream port -> GPU.
		gpuPath := fmt.Sprintf("%s/%s/%s/%s", switchPath(hb, 1), bdf(0, n.bus+1, 0, 0), bdf(0, n.bus+2, 0, 0), bdf(0, n.bus+3, 0, 0))
		t.PCI = append(t.PCI,
			Function{Path: switchPath(hb, 0) + "/" + nic, Vendor: vMellanox, Device: dCX7, Class: classIB, Driver: "mlx5_core",
				NUMANode: numa, Netdevs: []Netdev{{Name: fmt.Sprintf("ibp%ds0", n.bus)}}},
			Function{Path: gpuPath, Vendor: vNVIDIA, Device: dH100SXM, Class: class3D, Driver: "nvidia",
				NUMANode: numa, UUID: gpuUUID(i), Minor: i})
		t.RDMA = append(t.RDMA, RDMA{Name: n.name, Parent: nic, NodeGUID: guid(0x100 + i), Ports: []Port{activeIB()}})
	}
	for i, s := range []struct {
		ib, eth string
		bus     int
	}{{"mlx5_1", "mlx5_2", 0x29}, {"mlx5_7", "mlx5_8", 0xaa}} {
		hb := s.bus - 3
		f0, f1 := bdf(0, s.bus, 0, 0), bdf(0, s.bus, 0, 1)
		base := switchPath(hb, 0)
		eth := fmt.Sprintf("enp%ds0f1np1", s.bus)
		t.PCI = append(t.PCI,
			Function{Path: base + "/" + f0, Vendor: vMellanox, Device: dCX7, Class: classIB, Driver: "mlx5_core", NUMANode: i,
				Netdevs: []Netdev{{Name: fmt.Sprintf("ibp%ds0f0", s.bus)}}},
			Function{Path: base + "/" + f1, Vendor: vMellanox, Device: dCX7, Class: classEthernet, Driver: "mlx5_core", NUMANode: i,
				Netdevs: []Netdev{{Name: eth}}})
		t.RDMA = append(t.RDMA,
			RDMA{Name: s.ib, Parent: f0, NodeGUID: guid(0x200 + 2*i), Ports: []Port{activeIB()}},
			RDMA{Name: s.eth, Parent: f1, NodeGUID: guid(0x201 + 2*i), Ports: []Port{rocePort(eth, [4]byte{192, 168, byte(i), 10}, StateActive)}})
	}
	for i := range 4 {
		t.PCI = append(t.PCI, Function{Path: fmt.Sprintf("pci0000:e5/0000:e5:01.0/%s", bdf(0, 0xe6+i, 0, 0)), Vendor: vNVIDIA,
			Device: dNVSwitch, Class: classBridgeNV, Driver: "nvidia-nvswitch", NUMANode: 1})
	}
	return t
}

// RoCESRIOV is a cloud RoCE node: four PCIe switches, two per socket, each
// with two A100s and two ConnectX-6 Dx NICs (netdevs gpu<N>rdma0), so GPU0/1
// are PIX to NIC0/1, NODE to NIC2/3 and SYS to NIC4-7. NIC0 and NIC1 carry two
// SR-IOV VFs each, and NIC2 a scalable function.
func RoCESRIOV() Topology {
	t := Topology{Name: "roce-sriov", NUMANodes: 2}
	hbs := []int{0x00 + 0x10, 0x30, 0x90, 0xb0}
	n := 0
	for s, hb := range hbs {
		numa := s / 2
		for k := range 2 {
			idx := 2*s + k
			gpu := bdf(0, hb+3+k, 0, 0)
			t.PCI = append(t.PCI, Function{Path: switchPath(hb, k) + "/" + gpu, Vendor: vNVIDIA, Device: dA100SXM,
				Class: class3D, Driver: "nvidia", NUMANode: numa, UUID: gpuUUID(0x40 + idx), Minor: idx})
		}
		for k := range 2 {
			idx := 2*s + k
			bus := hb + 5 + k
			pf := bdf(0, bus, 0, 0)
			netdev := fmt.Sprintf("gpu%drdma0", idx)
			t.PCI = append(t.PCI, Function{Path: switchPath(hb, 2+k) + "/" + pf, Vendor: vMellanox, Device: dCX6Dx,
				Class: classEthernet, Driver: "mlx5_core", NUMANode: numa, Netdevs: []Netdev{{Name: netdev}}})
			t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", n), Parent: pf, NodeGUID: guid(0x300 + n),
				Ports: []Port{rocePort(netdev, [4]byte{10, 1, byte(idx), 1}, StateActive)}})
			n++
		}
	}
	// VFs after all PFs, as mlx5 numbers them after enabling SR-IOV.
	for pfIdx := range 2 {
		bus := hbs[0] + 5 + pfIdx
		pf := bdf(0, bus, 0, 0)
		for v := range 2 {
			vf := bdf(0, bus, 0, 2+v)
			netdev := fmt.Sprintf("gpu%drdma0v%d", pfIdx, v)
			t.PCI = append(t.PCI, Function{Path: switchPath(hbs[0], 2+pfIdx) + "/" + vf, Vendor: vMellanox, Device: dMlx5VF,
				Class: classEthernet, Driver: "mlx5_core", NUMANode: 0, PhysFn: pf, Netdevs: []Netdev{{Name: netdev}}})
			t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", n), Parent: vf, NodeGUID: guid(0x300 + n),
				Ports: []Port{rocePort(netdev, [4]byte{}, StateActive)}})
			n++
		}
	}
	sfPF := bdf(0, hbs[1]+5, 0, 0)
	t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", n), Parent: sfPF + "/mlx5_core.sf.2", NodeGUID: guid(0x300 + n),
		AuxNetdevs: []Netdev{{Name: "gpu2rdma0s2"}}, Ports: []Port{rocePort("gpu2rdma0s2", [4]byte{10, 1, 2, 2}, StateActive)}})
	return t
}

// SoftRoCE is a small VM: one virtio NIC with a soft-RoCE device (rxe0) on
// its netdev, and one NUMA node. rxe has no umad/issm.
func SoftRoCE() Topology {
	return Topology{
		Name: "soft-roce", NUMANodes: 1,
		PCI: []Function{{Path: "pci0000:00/0000:00:03.0", Vendor: "1af4", Device: "1041", Class: classEthernet,
			Driver: "virtio-pci", NUMANode: -1, Netdevs: []Netdev{{Name: "enp0s3"}}}},
		RDMA: []RDMA{{Name: "rxe0", NetdevParent: "enp0s3", NodeGUID: "5054:00ff:fe12:3456", NoMAD: true,
			Ports: []Port{rocePort("enp0s3", [4]byte{10, 0, 2, 15}, StateActive)}}},
	}
}

// PortDown is a two-GPU, two-NIC InfiniBand node whose second NIC's port is
// down (cable pulled: DOWN / Disabled).
func PortDown() Topology {
	t := Topology{Name: "port-down", NUMANodes: 1}
	for i, hb := range []int{0x15, 0x37} {
		nic, gpu := bdf(0, hb+3, 0, 0), bdf(0, hb+4, 0, 0)
		t.PCI = append(t.PCI,
			Function{Path: switchPath(hb, 0) + "/" + nic, Vendor: vMellanox, Device: dCX7, Class: classIB, Driver: "mlx5_core",
				Netdevs: []Netdev{{Name: fmt.Sprintf("ibp%ds0", hb+3)}}},
			Function{Path: switchPath(hb, 1) + "/" + gpu, Vendor: vNVIDIA, Device: dH100SXM, Class: class3D, Driver: "nvidia",
				UUID: gpuUUID(0x80 + i), Minor: i})
		port := activeIB()
		if i == 1 {
			port = ibPort(StateDown, PhysDisabled, "10 Gb/sec (4X SDR)")
		}
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", i), Parent: nic, NodeGUID: guid(0x400 + i), Ports: []Port{port}})
	}
	return t
}

// VM is a cloud VM: every GPU and NIC on its own PCI domain, NUMA unknown
// (-1) on a two-node guest, the NICs mlx5 VFs passed through (no physfn in
// the guest). PCIe distance is hidden, so every pair is SYS.
func VM() Topology {
	t := Topology{Name: "vm", NUMANodes: 2}
	for i := range 2 {
		gpu, nic := bdf(1+2*i, 0, 0, 0), bdf(2+2*i, 0, 0, 0)
		netdev := fmt.Sprintf("enP%ds%d", 2+2*i, 2+2*i)
		t.PCI = append(t.PCI,
			Function{Path: fmt.Sprintf("pci%04x:00/%s", 1+2*i, gpu), Vendor: vNVIDIA, Device: dA100SXM, Class: class3D,
				Driver: "nvidia", NUMANode: -1, UUID: gpuUUID(0x90 + i), Minor: i},
			Function{Path: fmt.Sprintf("pci%04x:00/%s", 2+2*i, nic), Vendor: vMellanox, Device: dMlx5VF, Class: classEthernet,
				Driver: "mlx5_core", NUMANode: -1, Netdevs: []Netdev{{Name: netdev}}})
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", i), Parent: nic, NodeGUID: guid(0x500 + i),
			Ports: []Port{rocePort(netdev, [4]byte{172, 16, byte(i), 4}, StateActive)}})
	}
	return t
}

// Azure is a Hyper-V guest like Azure's ND H100 v5: eight H100 GPUs and
// eight ConnectX-7 InfiniBand VFs (15b3:101e, no physfn in the guest), each
// function on its own PCI domain below a VMBus device
// (devices/LNXSYSTM:00/.../VMBUS:00/<guid>/pciDDDD:00/DDDD:00:00.0), NUMA
// given by the host (GPUs and NICs 0-3 on node 0, 4-7 on node 1), plus the
// accelerated-networking Ethernet VF. The RDMA devices carry the names the
// Azure HPC images' udev rules give them (mlx5_ib0.., mlx5_an0). The PCIe
// switches are hidden, so no pair is closer than NODE.
func Azure() Topology {
	t := Topology{Name: "azure", NUMANodes: 2}
	vmbus := func(n int, dom int) string {
		return fmt.Sprintf("LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/%08x-0000-4000-8000-%012x/pci%04x:00/%s", n, dom, dom, bdf(dom, 0, 0, 0))
	}
	for i := range 8 {
		numa := i / 4
		t.PCI = append(t.PCI, Function{Path: vmbus(0x100+i, 1+i), Vendor: vNVIDIA, Device: dH100SXM, Class: class3D,
			Driver: "nvidia", NUMANode: numa, UUID: gpuUUID(0x2000 + i), Minor: i})
		ib := vmbus(0x200+i, 0x101+i)
		netdev := fmt.Sprintf("ib%d", i)
		t.PCI = append(t.PCI, Function{Path: ib, Vendor: vMellanox, Device: dMlx5VF, Class: classIB,
			Driver: "mlx5_core", NUMANode: numa, Netdevs: []Netdev{{Name: netdev}}})
		p := activeIB()
		p.GIDs = []GID{{Index: 0, GID: fmt.Sprintf("fe80:0000:0000:0000:0015:5dff:fd33:%04x", 0xff00+i)}}
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_ib%d", i), Parent: bdf(0x101+i, 0, 0, 0), NodeGUID: guid(0x700 + i),
			Ports: []Port{p}})
	}
	an := fmt.Sprintf("LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/%08x-0000-4000-8000-%012x/pci%04x:00/%s", 0x300, 0xc4f5, 0xc4f5, bdf(0xc4f5, 0, 2, 0))
	t.PCI = append(t.PCI, Function{Path: an, Vendor: vMellanox, Device: dMlx5VF, Class: classEthernet,
		Driver: "mlx5_core", NUMANode: 0, Netdevs: []Netdev{{Name: "enP50421s1"}}})
	t.RDMA = append(t.RDMA, RDMA{Name: "mlx5_an0", Parent: bdf(0xc4f5, 0, 2, 0), NodeGUID: guid(0x7ff),
		Ports: []Port{rocePort("enP50421s1", [4]byte{10, 0, 0, 4}, StateActive)}})
	return t
}

// Synthetic is a large node for benchmarks: gpus GPUs, pfs RoCE PFs spread
// over one switch per GPU, and vfsPerPF VFs on each PF, every one an RDMA
// device with an IPv4 GID pair. Synthetic(8, 16, 63) has 1,024 RDMA devices.
func Synthetic(gpus, pfs, vfsPerPF int) Topology {
	t := Topology{Name: fmt.Sprintf("synthetic-%dgpu-%dpf-%dvf", gpus, pfs, vfsPerPF), NUMANodes: 2}
	perSwitch := max(1, (pfs+gpus-1)/max(gpus, 1))
	n := 0
	for g := range gpus {
		hb := 0x10 + g*0x18
		numa := g * 2 / max(gpus, 1)
		t.PCI = append(t.PCI, Function{Path: switchPath(hb, 0) + "/" + bdf(0, hb+3, 0, 0), Vendor: vNVIDIA, Device: dH100SXM,
			Class: class3D, Driver: "nvidia", NUMANode: numa, UUID: gpuUUID(0x1000 + g), Minor: g})
	}
	for p := range pfs {
		g := min(p/perSwitch, max(gpus, 1)-1)
		hb := 0x10 + g*0x18
		numa := g * 2 / max(gpus, 1)
		bus := hb + 4 + p%perSwitch*2
		dsp := 1 + p%perSwitch
		pf := bdf(0, bus, 0, 0)
		netdev := fmt.Sprintf("enp%ds0np0", bus)
		t.PCI = append(t.PCI, Function{Path: switchPath(hb, dsp) + "/" + pf, Vendor: vMellanox, Device: dCX7,
			Class: classEthernet, Driver: "mlx5_core", NUMANode: numa, Netdevs: []Netdev{{Name: netdev}}})
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", n), Parent: pf, NodeGUID: guid(n),
			Ports: []Port{rocePort(netdev, [4]byte{10, 2, byte(p), 1}, StateActive)}})
		n++
		for v := range vfsPerPF {
			slot := v + 1
			vf := bdf(0, bus+slot/64, slot%64/8, slot%8)
			vnet := fmt.Sprintf("enp%ds0v%d", bus, v)
			t.PCI = append(t.PCI, Function{Path: switchPath(hb, dsp) + "/" + vf, Vendor: vMellanox, Device: dMlx5VF,
				Class: classEthernet, Driver: "mlx5_core", NUMANode: numa, PhysFn: pf, Netdevs: []Netdev{{Name: vnet}}})
			t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", n), Parent: vf, NodeGUID: guid(n),
				Ports: []Port{rocePort(vnet, [4]byte{10, 3, byte(p), byte(v + 1)}, StateActive)}})
			n++
		}
	}
	return t
}

// Named returns a canned topology by name, for the demo and the CLI.
func Named(name string) (Topology, bool) {
	switch name {
	case "hgx", "hgx-h100":
		return HGX(), true
	case "dgx", "dgx-h100":
		return DGXH100(), true
	case "roce", "roce-sriov":
		return RoCESRIOV(), true
	case "soft-roce", "rxe":
		return SoftRoCE(), true
	case "port-down":
		return PortDown(), true
	case "vm":
		return VM(), true
	case "azure", "azure-nd-h100-v5":
		return Azure(), true
	case "gb200", "gb200-nvl72":
		return GB200(), true
	case "synthetic":
		return Synthetic(8, 16, 63), true
	}
	return Topology{}, false
}

// Names lists the names Named accepts, one per topology.
func Names() []string {
	return []string{"hgx", "dgx", "roce", "soft-roce", "port-down", "vm", "azure", "gb200", "synthetic"}
}
