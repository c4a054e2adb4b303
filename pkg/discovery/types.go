package discovery

import "encoding/json"

// Node is everything discovery saw on one node. Its JSON form is a stable
// contract read by the kubectl plugin, the device plugin and tests.
type Node struct {
	RDMADevices []RDMADevice `json:"rdmaDevices"`
	GPUs        []GPU        `json:"gpus"`
	Affinity    []Affinity   `json:"affinity"`
	// Warnings name devices or files that were skipped, with the reason.
	Warnings []string `json:"warnings"`
}

// MarshalJSON writes every list of the contract, empty ones as [] (never
// null or absent), so readers need not tell "none" from "not reported".
func (n Node) MarshalJSON() ([]byte, error) {
	type plain Node // without this method
	p := plain(n)
	if p.RDMADevices == nil {
		p.RDMADevices = []RDMADevice{}
	}
	if p.GPUs == nil {
		p.GPUs = []GPU{}
	}
	if p.Affinity == nil {
		p.Affinity = []Affinity{}
	}
	if p.Warnings == nil {
		p.Warnings = []string{}
	}
	return json.Marshal(p)
}

// DeviceKind says what kind of function backs an RDMA device.
type DeviceKind string

const (
	KindPF      DeviceKind = "PF"      // a PCI physical function
	KindVF      DeviceKind = "VF"      // an SR-IOV virtual function (also one passed through to a VM)
	KindSF      DeviceKind = "SF"      // an auxiliary (scalable function) device on a PF
	KindVirtual DeviceKind = "virtual" // a software device such as soft-RoCE (rxe)
)

// RDMADevice is one entry of /sys/class/infiniband.
type RDMADevice struct {
	Name string     `json:"name"`
	Kind DeviceKind `json:"kind"`
	// PCIAddress is the PCI function ("0000:3b:00.0"); for an SF, the PF it
	// lives on; "" for a virtual device.
	PCIAddress string `json:"pciAddress"`
	// AuxDevice is the auxiliary device name of an SF ("mlx5_core.sf.2").
	AuxDevice string `json:"auxDevice,omitempty"`
	Vendor    string `json:"vendor"` // lower-case hex, no 0x: "15b3"
	Device    string `json:"device"` // lower-case hex, no 0x: "1021"
	Driver    string `json:"driver"`
	NUMANode  int    `json:"numaNode"` // -1 when unknown
	// PCIeRoot is the host bridge component of the sysfs path ("pci0000:15");
	// "" for a virtual device.
	PCIeRoot string `json:"pcieRoot"`
	// PCIPath lists the PCI functions from the root port down to the device
	// itself, as they appear in its sysfs path.
	PCIPath []string `json:"pciPath,omitempty"`
	// PhysFn is the PF address of a VF, "" otherwise, and "" for a VF passed
	// through to a VM, whose PF is on the hypervisor: such a VF has no
	// physfn link and is recognised by its PCI ID.
	PhysFn    string `json:"physFn"`
	NodeGUID  string `json:"nodeGUID"`
	LinkLayer string `json:"linkLayer"` // port 1's link layer
	// Parent is the netdev a software device (rxe) is bound to.
	Parent      string   `json:"parent,omitempty"`
	Ports       []Port   `json:"ports"`
	Netdevs     []string `json:"netdevs"`
	CharDevices []string `json:"charDevices"`
}

// Port is one entry of /sys/class/infiniband/<dev>/ports.
type Port struct {
	Port      int    `json:"port"`
	State     string `json:"state"`     // "ACTIVE", "DOWN", "INIT", "ARMED"
	PhysState string `json:"physState"` // "LinkUp", "Disabled", "Polling", ...
	LinkLayer string `json:"linkLayer"` // "InfiniBand" or "Ethernet"
	Rate      string `json:"rate"`      // "400 Gb/sec (4X NDR)"
	Netdev    string `json:"netdev"`
	// GIDs lists the populated GID table entries (RoCE and IB).
	GIDs []GID `json:"gids,omitempty"`
	// RoCEv2GIDIndexes lists the indexes of RoCE v2 GIDs, ascending.
	RoCEv2GIDIndexes []int `json:"rocev2GIDIndexes,omitempty"`
}

// GID is one populated entry of a port's GID table.
type GID struct {
	Index  int    `json:"index"`
	GID    string `json:"gid"`
	Type   string `json:"type,omitempty"`   // "IB/RoCE v1" or "RoCE v2"
	Netdev string `json:"netdev,omitempty"` // from gid_attrs/ndevs
}

// Active reports whether the port's logical state is ACTIVE.
func (p Port) Active() bool { return p.State == "ACTIVE" }

// GPU is one accelerator found on the PCI bus.
type GPU struct {
	PCIAddress string   `json:"pciAddress"`
	Vendor     string   `json:"vendor"`
	Device     string   `json:"device"`
	Class      string   `json:"class"` // "030200"
	Driver     string   `json:"driver,omitempty"`
	NUMANode   int      `json:"numaNode"`
	PCIeRoot   string   `json:"pcieRoot"`
	PCIPath    []string `json:"pciPath,omitempty"`
	UUID       string   `json:"uuid"`            // NVIDIA only, from /proc/driver/nvidia
	Minor      *int     `json:"minor,omitempty"` // NVIDIA device minor (/dev/nvidiaN)
}

// Affinity is the PCIe distance between one GPU and one RDMA device.
type Affinity struct {
	GPU        string `json:"gpu"`        // the GPU's PCI address
	RDMADevice string `json:"rdmaDevice"` // the RDMA device's name
	Level      Level  `json:"level"`
}

// Location places a PCI function in the node's PCIe and NUMA topology.
type Location struct {
	PCIeRoot string   // "pci0000:15"; "" when not on PCI
	PCIPath  []string // root port ... function
	NUMANode int      // -1 when unknown
}

// Location returns where the device sits.
func (d RDMADevice) Location() Location {
	return Location{PCIeRoot: d.PCIeRoot, PCIPath: d.PCIPath, NUMANode: d.NUMANode}
}

// Location returns where the GPU sits.
func (g GPU) Location() Location {
	return Location{PCIeRoot: g.PCIeRoot, PCIPath: g.PCIPath, NUMANode: g.NUMANode}
}
