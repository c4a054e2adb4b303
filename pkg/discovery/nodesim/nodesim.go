// Package nodesim writes sysfs and procfs trees in the kernel's real layout
// from a description of a node: PCI functions under their host bridges and
// switches, RDMA devices with ports and GID tables, netdevs, the uverbs/umad
// char device classes and the NVIDIA driver's procfs files. Discovery reads
// such a tree exactly as it reads /sys.
//
// Tests, benchmarks and the demo use it; it touches nothing outside the root
// it is given.
package nodesim

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The writer's own idea of sysfs names, kept apart from the parsers it
// feeds so that a parser bug is not mirrored here.
var (
	hostBridgeRE = regexp.MustCompile(`^pci[0-9a-f]{4,8}:[0-9a-f]{2}$`)
	pciAddrRE    = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$`)
)

// Topology describes a node.
type Topology struct {
	Name      string
	NUMANodes int
	PCI       []Function
	RDMA      []RDMA
	// VirtualNetdevs are netdevs not on PCI (veth, the parent of an rxe).
	VirtualNetdevs []string
}

// Function is one PCI function. Bridges on its path that are not listed get
// class 060400 and the function's NUMA node.
type Function struct {
	// Path is the sysfs path below devices/: "pci0000:15/0000:15:01.0/.../0000:18:00.0".
	Path     string
	Vendor   string // "15b3"
	Device   string // "1021"
	Class    string // "020700"
	Driver   string // "" for none
	NUMANode int    // -1 for unknown
	// PhysFn is the PF's address when this function is an SR-IOV VF.
	PhysFn  string
	Netdevs []Netdev
	// NVIDIA driver procfs data, written when UUID is set.
	UUID  string
	Minor int
}

// Address is the function's PCI address, the last element of its path.
func (f Function) Address() string { return filepath.Base(f.Path) }

// Netdev is a netdev under a PCI function's net/ directory.
type Netdev struct {
	Name    string
	DevPort int // 0-based port of a multi-port function
}

// RDMA is one RDMA device.
type RDMA struct {
	Name string
	// Parent is the PCI address of the function that owns it. For an SF it is
	// "<pf address>/<aux device>" ("0000:3b:00.0/mlx5_core.sf.2"). Empty for a
	// virtual device (soft-RoCE).
	Parent string
	// AuxNetdevs are the netdevs of an SF, under the auxiliary device.
	AuxNetdevs []Netdev
	// NetdevParent is a virtual device's netdev (the rxe's parent attribute).
	NetdevParent string
	NodeGUID     string
	Ports        []Port
	// NoMAD omits the umad/issm nodes (irdma, bnxt_re, rxe have none).
	NoMAD bool
}

// Port states, as numbers the kernel writes before the name.
const (
	StateDown   = 1
	StateInit   = 2
	StateArmed  = 3
	StateActive = 4

	PhysPolling  = 2
	PhysDisabled = 3
	PhysLinkUp   = 5
)

// Port is one port of an RDMA device.
type Port struct {
	State     int
	PhysState int
	LinkLayer string // "InfiniBand" or "Ethernet"
	Rate      string
	GIDs      []GID
}

// GID is one populated GID table slot.
type GID struct {
	Index  int
	GID    string
	Type   string // "IB/RoCE v1" or "RoCE v2"; empty on InfiniBand
	Netdev string
}

var stateNames = map[int]string{1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
var physNames = map[int]string{1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp", 6: "LinkErrorRecovery", 7: "Phy Test"}

// StateString renders a port state as the kernel does ("4: ACTIVE").
func StateString(s int) string { return fmt.Sprintf("%d: %s", s, stateNames[s]) }

// PhysStateString renders a phys_state as the kernel does ("5: LinkUp").
func PhysStateString(s int) string { return fmt.Sprintf("%d: %s", s, physNames[s]) }

// Tree is a written node: SysRoot and ProcRoot go to discovery.Scanner.
type Tree struct {
	Root     string
	SysRoot  string
	ProcRoot string
	w        *writer
}

// AddRDMA adds an RDMA device to a built tree, as a driver probe does; its
// parent function must be in the tree.
func (t Tree) AddRDMA(r RDMA) error {
	if t.w == nil {
		return fmt.Errorf("add rdma device %s: tree was not built by Build", r.Name)
	}
	t.w.made = map[string]bool{} // directories may have been removed since
	if err := t.w.rdma(r); err != nil {
		return fmt.Errorf("add rdma device %s: %w", r.Name, err)
	}
	return nil
}

// Build writes t under root (root/sys and root/proc) and returns the tree.
func Build(root string, t Topology) (Tree, error) {
	w := &writer{tree: Tree{Root: root, SysRoot: filepath.Join(root, "sys"), ProcRoot: filepath.Join(root, "proc")},
		made: map[string]bool{}, fns: map[string]string{}}
	if err := w.build(t); err != nil {
		return Tree{}, fmt.Errorf("build node %q under %s: %w", t.Name, root, err)
	}
	w.tree.w = w
	return w.tree, nil
}

type writer struct {
	tree   Tree
	made   map[string]bool   // directories created
	fns    map[string]string // PCI address -> device dir
	uverbs int
	umad   int
}

func (w *writer) sys(p ...string) string {
	return filepath.Join(append([]string{w.tree.SysRoot}, p...)...)
}

func (w *writer) mkdir(dir string) error {
	if w.made[dir] {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	w.made[dir] = true
	return nil
}

func (w *writer) file(path, content string) error {
	if err := w.mkdir(filepath.Dir(path)); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content+"\n"), 0o644)
}

// link makes a relative symlink at path pointing to target, as sysfs does.
func (w *writer) link(path, target string) error {
	if err := w.mkdir(filepath.Dir(path)); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(path), target)
	if err != nil {
		return err
	}
	return os.Symlink(rel, path)
}

func (w *writer) build(t Topology) error {
	if err := w.mkdir(w.tree.ProcRoot); err != nil {
		return err
	}
	for _, d := range []string{"devices/system/node", "class/infiniband", "class/net", "bus/pci/devices", "devices/virtual/net"} {
		if err := w.mkdir(w.sys(d)); err != nil {
			return err
		}
	}
	for i := range t.NUMANodes {
		if err := w.mkdir(w.sys("devices/system/node", fmt.Sprintf("node%d", i))); err != nil {
			return err
		}
	}
	for _, cls := range []string{"infiniband_verbs", "infiniband_mad"} {
		if err := w.file(w.sys("class", cls, "abi_version"), map[string]string{"infiniband_verbs": "6", "infiniband_mad": "5"}[cls]); err != nil {
			return err
		}
	}
	for _, f := range t.PCI {
		if err := w.function(f); err != nil {
			return err
		}
	}
	for _, f := range t.PCI {
		if f.PhysFn != "" {
			if err := w.sriov(f); err != nil {
				return err
			}
		}
	}
	for _, n := range t.VirtualNetdevs {
		if err := w.netdev(w.sys("devices/virtual/net"), Netdev{Name: n}); err != nil {
			return err
		}
	}
	for _, r := range t.RDMA {
		if err := w.rdma(r); err != nil {
			return fmt.Errorf("rdma device %s: %w", r.Name, err)
		}
	}
	return nil
}

func (w *writer) function(f Function) error {
	comps := strings.Split(f.Path, "/")
	hb := slices.IndexFunc(comps, hostBridgeRE.MatchString)
	if hb < 0 || hb == len(comps)-1 || !pciAddrRE.MatchString(comps[len(comps)-1]) {
		return fmt.Errorf("pci path %q has no host bridge followed by PCI functions", f.Path)
	}
	// Components up to the host bridge (VMBus on Hyper-V, say) and any
	// other non-function component are plain directories.
	dir := w.sys("devices", filepath.Join(comps[:hb+1]...))
	if err := w.mkdir(dir); err != nil {
		return err
	}
	for i, c := range comps[hb+1:] {
		dir = filepath.Join(dir, c)
		last := hb+1+i == len(comps)-1
		if _, known := w.fns[c]; known && !last {
			continue
		}
		if !last && !pciAddrRE.MatchString(c) {
			if err := w.mkdir(dir); err != nil {
				return err
			}
			continue
		}
		if !last {
			if err := w.pciAttrs(dir, c, "8086", "1234", "060400", "pcieport", f.NUMANode); err != nil {
				return err
			}
			continue
		}
		if _, dup := w.fns[c]; dup {
			return fmt.Errorf("pci function %s listed twice", c)
		}
		if err := w.pciAttrs(dir, c, f.Vendor, f.Device, f.Class, f.Driver, f.NUMANode); err != nil {
			return err
		}
	}
	for _, n := range f.Netdevs {
		if err := w.netdev(filepath.Join(dir, "net"), n); err != nil {
			return err
		}
	}
	if f.UUID != "" {
		info := fmt.Sprintf("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
			f.UUID, f.Address(), f.Minor)
		p := filepath.Join(w.tree.ProcRoot, "driver/nvidia/gpus", f.Address(), "information")
		if err := w.mkdir(filepath.Dir(p)); err != nil {
			return err
		}
		// procfs shows it 0444; writable here so that tests, which may run
		// as any user, can damage it.
		if err := os.WriteFile(p, []byte(info), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Every function's subsystem ID is its own vendor's, device 0000.
const subDevice = "0000"

func (w *writer) pciAttrs(dir, addr, vendor, device, class, driver string, numa int) error {
	w.fns[addr] = dir
	for name, v := range map[string]string{
		"vendor": "0x" + vendor, "device": "0x" + device, "class": "0x" + class, "revision": "0x00",
		"subsystem_vendor": "0x" + vendor, "subsystem_device": "0x" + subDevice,
		"numa_node": fmt.Sprint(numa), "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16",
		"modalias": Modalias(vendor, device, vendor, subDevice, class),
		"uevent":   PCIUevent(addr, vendor, device, vendor, subDevice, class, driver),
	} {
		if err := w.file(filepath.Join(dir, name), v); err != nil {
			return err
		}
	}
	if driver != "" {
		drv := w.sys("bus/pci/drivers", driver)
		if err := w.mkdir(drv); err != nil {
			return err
		}
		if err := w.link(filepath.Join(dir, "driver"), drv); err != nil {
			return err
		}
	}
	return w.link(w.sys("bus/pci/devices", addr), dir)
}

// Modalias renders a PCI function's modalias attribute as the kernel does
// (pci_uevent): IDs as upper-case hex, class split into base class, subclass
// and programming interface, "pci:v000015B3d0000101Bsv000015B3sd00000008bc02sc07i00".
// Tools that enumerate PCI through modalias (ghw) need it.
func Modalias(vendor, device, subVendor, subDevice, class string) string {
	up := strings.ToUpper
	return fmt.Sprintf("pci:v0000%sd0000%ssv0000%ssd0000%sbc%ssc%si%s",
		up(vendor), up(device), up(subVendor), up(subDevice), up(class[0:2]), up(class[2:4]), up(class[4:6]))
}

// PCIUevent renders a PCI function's uevent attribute as the kernel does
// (dev_uevent, then pci_uevent): DRIVER only when a driver is bound;
// PCI_CLASS is the 24-bit class printed with %04X, so without leading zeros
// ("20000" for 0x020000); IDs upper-case.
func PCIUevent(addr, vendor, device, subVendor, subDevice, class, driver string) string {
	var b strings.Builder
	if driver != "" {
		fmt.Fprintf(&b, "DRIVER=%s\n", driver)
	}
	var c uint64
	_, _ = fmt.Sscanf(class, "%x", &c) // fixtures' classes are hex; 0 otherwise
	fmt.Fprintf(&b, "PCI_CLASS=%04X\nPCI_ID=%s:%s\nPCI_SUBSYS_ID=%s:%s\nPCI_SLOT_NAME=%s\nMODALIAS=%s",
		c, strings.ToUpper(vendor), strings.ToUpper(device), strings.ToUpper(subVendor), strings.ToUpper(subDevice),
		addr, Modalias(vendor, device, subVendor, subDevice, class))
	return b.String()
}

func (w *writer) sriov(vf Function) error {
	pfDir, ok := w.fns[vf.PhysFn]
	if !ok {
		return fmt.Errorf("vf %s: physfn %s is not a listed function", vf.Address(), vf.PhysFn)
	}
	vfDir := w.fns[vf.Address()]
	if err := w.link(filepath.Join(vfDir, "physfn"), pfDir); err != nil {
		return err
	}
	n := 0
	for w.made[filepath.Join(pfDir, fmt.Sprintf("virtfn%d", n))] {
		n++
	}
	w.made[filepath.Join(pfDir, fmt.Sprintf("virtfn%d", n))] = true
	if err := w.link(filepath.Join(pfDir, fmt.Sprintf("virtfn%d", n)), vfDir); err != nil {
		return err
	}
	return w.file(filepath.Join(pfDir, "sriov_numvfs"), fmt.Sprint(n+1))
}

func (w *writer) netdev(netDir string, n Netdev) error {
	dir := filepath.Join(netDir, n.Name)
	if err := w.file(filepath.Join(dir, "dev_port"), fmt.Sprint(n.DevPort)); err != nil {
		return err
	}
	if err := w.file(filepath.Join(dir, "operstate"), "up"); err != nil {
		return err
	}
	return w.link(w.sys("class/net", n.Name), dir)
}
