package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// emptyGIDRun is how many empty GID slots in a row end a port's GID scan.
// The kernel's GID cache fills the lowest free slot, so populated entries sit
// at the front of the table; a 255-slot table is not read to the end.
const emptyGIDRun = 8

func (s Scanner) scanRDMA() ([]RDMADevice, []string, error) {
	classDir := filepath.Join(s.SysRoot, "class/infiniband")
	names, err := readDirNames(classDir)
	if err != nil {
		return nil, nil, fmt.Errorf("list rdma devices in %s: %w", classDir, err)
	}
	slices.Sort(names)
	rings := s.rings(min(s.workers(), max(len(names), 1)))
	defer func() {
		for _, r := range rings {
			r.close()
		}
	}()
	chars, warnings := s.charDevices(rings[0])
	devs := make([]RDMADevice, len(names))
	errs := make([]error, len(names))
	parallel(len(names), len(rings), func(w, i int) {
		devs[i], errs[i] = s.readRDMADevice(rings[w], classDir, names[i], chars[names[i]])
	})
	out := devs[:0]
	for i := range devs {
		if errs[i] != nil {
			warnings = append(warnings, fmt.Sprintf("skip rdma device %s: %v", names[i], errs[i]))
			continue
		}
		out = append(out, devs[i])
	}
	sortDevices(out)
	return out, warnings, nil
}

// rings returns n io_uring rings, one per worker, or n nils where io_uring
// is not available (the scan then reads one attribute at a time).
func (s Scanner) rings(n int) []*ring {
	rings := make([]*ring, n)
	if s.noURing {
		return rings
	}
	for i := range rings {
		r, err := newRing()
		if err != nil {
			break
		}
		rings[i] = r
	}
	return rings
}

// readRDMADevice reads one device; r batches its reads (nil: one by one).
func (s Scanner) readRDMADevice(r *ring, classDir, name string, chars []string) (RDMADevice, error) {
	d := RDMADevice{Name: name, NUMANode: -1, Ports: []Port{}, Netdevs: []string{}, CharDevices: chars}
	if d.CharDevices == nil {
		d.CharDevices = []string{}
	}
	ibPath, err := resolveClassLink(classDir, name)
	if err != nil {
		return d, err
	}
	ib, err := openDir(ibPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return d, fmt.Errorf("dangling link %s: %w", filepath.Join(classDir, name), err)
		}
		return d, err
	}
	defer ib.close()
	cache := newAttrCache()
	ib.cache = cache
	// ibPath is <parent>/infiniband/<name>; the parent is the PCI function,
	// the auxiliary (SF) device, or nothing for a virtual device.
	parentPath := filepath.Dir(filepath.Dir(ibPath))
	root, path := pciTopology(filepath.Join(s.SysRoot, "devices"), parentPath)
	var netdevs []string
	netByPort := map[int]string{}
	switch {
	case root == "":
		d.Kind = KindVirtual
		prefetch(r, cache, ib, dir{fd: -1}, dir{fd: -1})
		d.Parent, _ = ib.read("parent")
	case len(path) == 0:
		return d, fmt.Errorf("device path %s has no PCI function", parentPath)
	default:
		d.PCIeRoot, d.PCIPath = root, path
		d.PCIAddress = path[len(path)-1]
		// Read through the device's own directory ("../../vendor"): the
		// kernel walks two components, not the dozen above the PCI
		// function again, and no directory is opened and closed.
		parent := ib.sub("../../", parentPath)
		pci := parent
		if base := filepath.Base(parentPath); !IsPCIAddress(base) {
			d.Kind, d.AuxDevice = KindSF, base
			pci = ib.sub("../../../", filepath.Dir(parentPath))
		}
		prefetch(r, cache, ib, pci, parent)
		if err := readPCIAttrs(&d, pci, parent); err != nil {
			return d, err
		}
		netdevs, netByPort = readNetDir(parent)
	}
	if v, err := ib.read("node_guid"); err == nil {
		if d.NodeGUID, err = ParseGUID(v); err != nil {
			return d, &fs.PathError{Op: "parse", Path: filepath.Join(ibPath, "node_guid"), Err: err}
		}
	}
	if err := readPorts(&d, ib, netByPort, len(netdevs) == 1); err != nil {
		return d, err
	}
	if len(d.Ports) > 0 {
		d.LinkLayer = d.Ports[0].LinkLayer
	}
	seen := map[string]bool{}
	for _, n := range netdevs {
		seen[n] = true
	}
	for _, p := range d.Ports {
		if p.Netdev != "" && !seen[p.Netdev] {
			seen[p.Netdev] = true
			netdevs = append(netdevs, p.Netdev)
		}
	}
	if d.Parent != "" && !seen[d.Parent] {
		netdevs = append(netdevs, d.Parent)
	}
	slices.Sort(netdevs)
	if netdevs != nil {
		d.Netdevs = netdevs
	}
	return d, nil
}

// knownVF lists PCI IDs that only SR-IOV virtual functions carry, so that a
// VF is known as one inside a VM, where it has no physfn link: Mellanox
// ConnectX-4 1014, ConnectX-4 Lx 1016, ConnectX-5 1018, ConnectX-5 Ex 101a,
// ConnectX-6 101c, and the generic mlx5 VF 101e (ConnectX-6 Dx onwards).
var knownVF = map[string]bool{
	"15b3:1014": true, "15b3:1016": true, "15b3:1018": true,
	"15b3:101a": true, "15b3:101c": true, "15b3:101e": true,
}

// readPCIAttrs fills the PCI identity. pci is the PCI function (the PF for an
// SF); fn is the device's own directory (its driver link).
func readPCIAttrs(d *RDMADevice, pci, fn dir) error {
	var err error
	if d.Vendor, err = pci.parsed("vendor", ParseHexID); err != nil {
		return err
	}
	if d.Device, err = pci.parsed("device", ParseHexID); err != nil {
		return err
	}
	if v, err := pci.read("numa_node"); err == nil {
		if d.NUMANode, err = ParseNUMANode(v); err != nil {
			return &fs.PathError{Op: "parse", Path: filepath.Join(pci.path, "numa_node"), Err: err}
		}
	}
	if d.Driver, err = fn.linkBase("driver"); err != nil {
		return err
	}
	if d.Kind == KindSF {
		return nil
	}
	pf, err := pci.linkBase("physfn")
	if err != nil {
		return err
	}
	d.Kind = KindPF
	if pf == "" && knownVF[d.Vendor+":"+d.Device] {
		// A VF passed through to a VM (Azure ND, OCI, GCP A3): no physfn
		// here, the PF is the hypervisor's.
		d.Kind = KindVF
	}
	if pf != "" {
		if !IsPCIAddress(pf) {
			return &fs.PathError{Op: "parse", Path: filepath.Join(pci.path, "physfn"), Err: malformed("pci address", pf)}
		}
		d.Kind, d.PhysFn = KindVF, strings.ToLower(pf)
	}
	return nil
}

func readParsed(path string, parse func(string) (string, error)) (string, error) {
	v, err := readAttr(path)
	if err != nil {
		return "", err
	}
	out, err := parse(v)
	if err != nil {
		return "", &fs.PathError{Op: "parse", Path: path, Err: err}
	}
	return out, nil
}

// readNetDir lists the netdevs under a device's net/ directory and maps each
// to its port (dev_port is 0-based, ports are 1-based).
func readNetDir(fn dir) ([]string, map[int]string) {
	names, _ := fn.names("net")
	byPort := map[int]string{}
	slices.Sort(names)
	for _, n := range names {
		port := 1
		if v, err := fn.read("net/" + n + "/dev_port"); err == nil {
			if p, err := strconv.Atoi(v); err == nil && p >= 0 {
				port = p + 1
			}
		}
		if _, dup := byPort[port]; !dup {
			byPort[port] = n
		}
	}
	return names, byPort
}

func readPorts(d *RDMADevice, ib dir, netByPort map[int]string, oneNetdev bool) error {
	names, err := ib.names("ports")
	if err != nil {
		return err
	}
	for _, name := range names {
		num, err := strconv.Atoi(name)
		if err != nil || num < 1 {
			continue
		}
		p, err := readPort(ib, "ports/"+name+"/", num)
		if err != nil {
			return err
		}
		if p.Netdev == "" {
			p.Netdev = netByPort[num]
		}
		if p.Netdev == "" && oneNetdev && len(names) == 1 {
			for _, n := range netByPort {
				p.Netdev = n
			}
		}
		if p.Netdev == "" && d.Parent != "" {
			p.Netdev = d.Parent
		}
		d.Ports = append(d.Ports, p)
	}
	slices.SortFunc(d.Ports, func(a, b Port) int { return a.Port - b.Port })
	return nil
}

// readPort reads port num; prefix is "ports/<num>/" below ib.
func readPort(ib dir, prefix string, num int) (Port, error) {
	p := Port{Port: num}
	var err error
	if p.State, err = ib.parsed(prefix+"state", ParseEnumValue); err != nil {
		return p, err
	}
	if v, err := ib.read(prefix + "phys_state"); err == nil {
		if p.PhysState, err = ParseEnumValue(v); err != nil {
			return p, &fs.PathError{Op: "parse", Path: filepath.Join(ib.path, prefix, "phys_state"), Err: err}
		}
	}
	if p.LinkLayer, err = ib.read(prefix + "link_layer"); err != nil {
		return p, err
	}
	switch p.LinkLayer {
	case "InfiniBand", "Ethernet":
	default:
		return p, &fs.PathError{Op: "parse", Path: filepath.Join(ib.path, prefix, "link_layer"), Err: malformed("link layer", p.LinkLayer)}
	}
	p.Rate, _ = ib.read(prefix + "rate")
	if p.GIDs, err = readGIDs(ib, prefix, p.LinkLayer == "Ethernet"); err != nil {
		return p, err
	}
	for _, g := range p.GIDs {
		if g.Type == "RoCE v2" {
			p.RoCEv2GIDIndexes = append(p.RoCEv2GIDIndexes, g.Index)
		}
	}
	for _, g := range p.GIDs {
		if g.Netdev != "" {
			p.Netdev = g.Netdev // slot 0's when populated: GIDs are in index order
			break
		}
	}
	return p, nil
}

// readGIDs reads the populated GID slots. On InfiniBand only slot 0 (the port
// GID) is read. On Ethernet the slots are read in order until emptyGIDRun
// empty slots in a row; an empty slot reads as EINVAL (or, on old kernels, as
// the zero GID).
func readGIDs(ib dir, prefix string, roce bool) ([]GID, error) {
	idx := []int{0}
	if roce {
		names, err := ib.names(prefix + "gids")
		if err != nil {
			return nil, err
		}
		idx = idx[:0]
		for _, n := range names {
			if i, err := strconv.Atoi(n); err == nil && i >= 0 {
				idx = append(idx, i)
			}
		}
		slices.Sort(idx)
	}
	var gids []GID
	empty := 0
	for _, i := range idx {
		if empty >= emptyGIDRun {
			break
		}
		si := strconv.Itoa(i)
		g := GID{Index: i}
		v, err := ib.read(prefix + "gids/" + si)
		if err != nil {
			if isEmptySlot(err) {
				empty++
				continue
			}
			return nil, err
		}
		if g.GID, err = ParseGID(v); err != nil {
			return nil, &fs.PathError{Op: "parse", Path: filepath.Join(ib.path, prefix, "gids", si), Err: err}
		}
		if g.GID == "" {
			empty++
			continue
		}
		empty = 0
		if roce {
			g.Type, _ = ib.read(prefix + "gid_attrs/types/" + si)
			g.Netdev, _ = ib.read(prefix + "gid_attrs/ndevs/" + si)
		}
		gids = append(gids, g)
	}
	return gids, nil
}

func isEmptySlot(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && (errors.Is(pe.Err, fs.ErrNotExist) || errors.Is(pe.Err, unix.EINVAL))
}
