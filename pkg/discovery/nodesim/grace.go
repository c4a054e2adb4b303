package nodesim

import "fmt"

// PCI IDs of Grace Blackwell parts. 10de:2941 is the Blackwell GPU of a
// GB200 superchip as lspci prints it on a GB200 NVL72 compute tray
// ("3D controller [0302]: NVIDIA Corporation Device [10de:2941]", subsystem
// 10de:2046, in NVIDIA's nvgrace-gpu-vfio-pci instructions and in Meta's
// Catalina OpenBMC notes); the discrete HGX B200 is 10de:2901.
const (
	dGB200   = "2941"
	dBF3     = "a2dc"
	classDPU = classEthernet
)

// graceNIC is one NIC of a GB200 compute tray, at the address and with the
// netdev name public captures of the tray show.
type graceNIC struct {
	domain int
	device string
	class  string
	netdev string
}

// GB200 is one compute tray of a GB200 NVL72 rack, an arm64 host as its
// kernel writes sysfs: two Grace CPUs (NUMA nodes 0 and 1) and four
// Blackwell GPUs, two per Grace, each GPU attached to its Grace through
// NVLink-C2C and shown on PCI as the only device of its own root port, one
// PCI domain per root port (0008, 0009 on Grace 0; 0018, 0019 on Grace 1:
// lspci in NVIDIA/mig-parted#227, NVIDIA/kubevirt-gpu-device-plugin#154 and
// NVIDIA's GB200 vfio instructions). Four ConnectX-7 400G InfiniBand NICs,
// one rail per GPU, at 0000:03:00.0 (ibp3s0), 0002:03:00.0 (ibP2p3s0),
// 0010:03:00.0 (ibP16p3s0) and 0012:03:00.0 (ibP18p3s0), and two
// BlueField-3 for north-south traffic at 0006:03:00.0 and 0016:03:00.0
// (the same addresses and names in the network-operator's udev rule tests
// and public GB200 node reports; NVIDIA's multi-node NVLink tuning guide,
// "Understanding Your Grace-Blackwell Systems": 4 GPUs per 1RU compute tray,
// the two BF-3 carry the external network on 400G ports). Bus 03 below a domain's root port means a
// switch (upstream and downstream port) between them. Domains 0000-000f
// belong to Grace 0 and 0010-001f to Grace 1: numa_node is set per domain.
//
// No GPU shares a root port or switch with a NIC, so no pair is PIX or PXB:
// discovery calls a GPU and a NIC of the same Grace NODE and of the other
// Grace SYS. nvidia-smi topo -m on a GB200 tray (driver 570.172.08, posted in
// sgl-project/sglang#11208) prints SYS for every GPU-NIC pair, CPU affinity
// 0-71 for GPU0/1 and 72-143 for GPU2/3; it also lists the GPUs' memory as
// NUMA nodes of their own (GPU NUMA IDs 2, 10, 18, 26, nodes up to 33), which
// is why this node has 34 NUMA nodes while the PCI functions sit on 0 and 1.
// The RDMA devices carry the kernel's names (mlx5_0..5 in probe order: by
// domain); with rdma-core's persistent naming they would be ibp3s0 etc.
func GB200() Topology {
	t := Topology{Name: "gb200", NUMANodes: 34}
	for i, dom := range []int{0x0008, 0x0009, 0x0018, 0x0019} {
		t.PCI = append(t.PCI, Function{Path: fmt.Sprintf("pci%04x:00/%s/%s", dom, bdf(dom, 0, 0, 0), bdf(dom, 1, 0, 0)),
			Vendor: vNVIDIA, Device: dGB200, Class: class3D, Driver: "nvidia", NUMANode: graceOf(dom),
			UUID: gpuUUID(0x3000 + i), Minor: i})
	}
	nics := []graceNIC{
		{0x0000, dCX7, classIB, "ibp3s0"},
		{0x0002, dCX7, classIB, "ibP2p3s0"},
		{0x0006, dBF3, classDPU, "enP6p3s0f0np0"},
		{0x0010, dCX7, classIB, "ibP16p3s0"},
		{0x0012, dCX7, classIB, "ibP18p3s0"},
		{0x0016, dBF3, classDPU, "enP22p3s0f0np0"},
	}
	for i, n := range nics {
		dom := n.domain
		addr := bdf(dom, 3, 0, 0)
		path := fmt.Sprintf("pci%04x:00/%s/%s/%s/%s", dom, bdf(dom, 0, 0, 0), bdf(dom, 1, 0, 0), bdf(dom, 2, 0, 0), addr)
		t.PCI = append(t.PCI, Function{Path: path, Vendor: vMellanox, Device: n.device, Class: n.class, Driver: "mlx5_core",
			NUMANode: graceOf(dom), Netdevs: []Netdev{{Name: n.netdev}}})
		port := activeIB()
		if n.class == classDPU {
			port = rocePort(n.netdev, [4]byte{10, 4, byte(i), 1}, StateActive)
			port.Rate = "400 Gb/sec (4X NDR)"
		}
		t.RDMA = append(t.RDMA, RDMA{Name: fmt.Sprintf("mlx5_%d", i), Parent: addr, NodeGUID: guid(0x800 + i), Ports: []Port{port}})
	}
	return t
}

// graceOf is the Grace (NUMA node) of a PCI domain on a GB200 tray.
func graceOf(domain int) int { return domain >> 4 }
