package nodesim

import "fmt"

// LocalNode is the node the local-node e2e (e2e/local-node) gives its kubelet: two H100 GPUs
// on two sockets, each on a PCIe switch with a ConnectX-7 InfiniBand HCA (GPU0 mlx5_0
// ibp24s0, GPU1 mlx5_1 ibp154s0: PIX), and a ConnectX-7 RoCE NIC on GPU0's switch (mlx5_2
// enp28s0np0) with vfs SR-IOV VFs (mlx5_3... enp28s0v0...): PIX to GPU0, SYS to GPU1. Pools
// of every kind (exclusive InfiniBand, exclusive VFs whose netdevs move into pods, a shared
// PF) have devices, and GPU-aligned choices differ by GPU. Netdev names fit IFNAMSIZ: the
// harness creates veth links under these names for the CNI plugin to move.
func LocalNode(vfs int) Topology {
	t := Topology{Name: fmt.Sprintf("local-node-%dvf", vfs), NUMANodes: 2}
	const hb = 0x15
	for i, h := range []int{hb, 0x97} {
		nic := bdf(0, h+3, 0, 0)
		netdev := fmt.Sprintf("ibp%ds0", h+3)
		t.PCI = append(t.PCI,
			Function{Path: switchPath(h, 0) + "/" + nic, Vendor: vMellanox, Device: dCX7, Class: classIB,
				Driver: "mlx5_core", NUMANode: i, Netdevs: []Netdev{{Name: netdev}}},
			Function{Path: switchPath(h, 1) + "/" + bdf(0, h+4, 0, 0), Vendor: vNVIDIA, Device: dH100SXM,
				Class: class3D, Driver: "nvidia", NUMANode: i, UUID: gpuUUID(0x3000 + i), Minor: i})
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", i), Parent: nic, NodeGUID: guid(0x3000 + i),
			Ports: []Port{activeIB()}})
	}
	pf, pfNetdev := bdf(0, 0x1c, 0, 0), "enp28s0np0"
	t.PCI = append(t.PCI, Function{Path: switchPath(hb, 2) + "/" + pf, Vendor: vMellanox, Device: dCX7,
		Class: classEthernet, Driver: "mlx5_core", NUMANode: 0, Netdevs: []Netdev{{Name: pfNetdev}}})
	t.RDMA = append(t.RDMA, RDMA{Name: "mlx5_2", Parent: pf, NodeGUID: guid(0x3002),
		Ports: []Port{rocePort(pfNetdev, [4]byte{10, 77, 0, 1}, StateActive)}})
	for v := range vfs {
		slot := v + 1
		vf := bdf(0, 0x1c+slot/64, slot%64/8, slot%8)
		netdev := fmt.Sprintf("enp28s0v%d", v)
		t.PCI = append(t.PCI, Function{Path: switchPath(hb, 2) + "/" + vf, Vendor: vMellanox, Device: dMlx5VF,
			Class: classEthernet, Driver: "mlx5_core", NUMANode: 0, PhysFn: pf, Netdevs: []Netdev{{Name: netdev}}})
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", 3+v), Parent: vf, NodeGUID: guid(0x3003 + v),
			Ports: []Port{rocePort(netdev, [4]byte{10, 77, 1, byte(v + 1)}, StateActive)}})
	}
	return t
}
