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
	chars, warnings := s.charDevices()
	devs := make([]RDMADevice, len(names))
	errs := make([]error, len(names))
	parallel(len(names), s.workers(), func(i int) {
		devs[i], errs[i] = s.readRDMADevice(classDir, names[i], chars[names[i]])
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

func (s Scanner) readRDMADevice(classDir, name string, chars []string) (RDMADevice, error) {
	d := RDMADevice{Name: name, NUMANode: -1, Ports: []Port{}, Netdevs: []string{}, CharDevices: chars}
	if d.CharDevices == nil {
		d.CharDevices = []string{}
	}
	ibDir, err := resolveClassLink(classDir, name)
	if err != nil {
		return d, err
	}
	devicesDir := filepath.Join(s.SysRoot, "devices")
	// ibDir is <parent>/infiniband/<name>; the parent is the PCI function,
	// the auxiliary (SF) device, or nothing for a virtual device.
	parent := filepath.Dir(filepath.Dir(ibDir))
	root, path := pciTopology(devicesDir, parent)
	var netDir string
	switch {
	case root == "":
		d.Kind = KindVirtual
		d.Parent, _ = readAttr(filepath.Join(ibDir, "parent"))
	case len(path) == 0:
		return d, fmt.Errorf("device path %s has no PCI function", parent)
	default:
		d.PCIeRoot, d.PCIPath = root, path
		d.PCIAddress = path[len(path)-1]
		pciDir := parent
		if base := filepath.Base(parent); !IsPCIAddress(base) {
			d.Kind, d.AuxDevice, pciDir = KindSF, base, filepath.Dir(parent)
		}
		netDir = filepath.Join(parent, "net")
		if err := s.readPCIAttrs(&d, pciDir, parent); err != nil {
			return d, err
		}
	}
	if v, err := readAttr(filepath.Join(ibDir, "node_guid")); err == nil {
		if d.NodeGUID, err = ParseGUID(v); err != nil {
			return d, fmt.Errorf("read %s: %w", filepath.Join(ibDir, "node_guid"), err)
		}
	}
	netByPort := map[int]string{}
	var netdevs []string
	if netDir != "" {
		netdevs, netByPort = readNetDir(netDir)
	}
	if err := s.readPorts(&d, ibDir, netByPort, len(netdevs) == 1); err != nil {
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

// readPCIAttrs fills the PCI identity. pciDir is the PCI function (the PF for
// an SF); fnDir is the device's own directory (its driver link).
func (s Scanner) readPCIAttrs(d *RDMADevice, pciDir, fnDir string) error {
	var err error
	if d.Vendor, err = readParsed(filepath.Join(pciDir, "vendor"), ParseHexID); err != nil {
		return err
	}
	if d.Device, err = readParsed(filepath.Join(pciDir, "device"), ParseHexID); err != nil {
		return err
	}
	if v, err := readAttr(filepath.Join(pciDir, "numa_node")); err == nil {
		if d.NUMANode, err = ParseNUMANode(v); err != nil {
			return fmt.Errorf("read %s: %w", filepath.Join(pciDir, "numa_node"), err)
		}
	}
	if d.Driver, err = readLinkBase(filepath.Join(fnDir, "driver")); err != nil {
		return fmt.Errorf("read driver link: %w", err)
	}
	if d.Kind == KindSF {
		return nil
	}
	pf, err := readLinkBase(filepath.Join(pciDir, "physfn"))
	if err != nil {
		return fmt.Errorf("read physfn link: %w", err)
	}
	d.Kind = KindPF
	if pf != "" {
		if !IsPCIAddress(pf) {
			return fmt.Errorf("physfn link %s: %w", filepath.Join(pciDir, "physfn"), malformed("pci address", pf))
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
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// readNetDir lists the netdevs under a PCI function's net/ directory and
// maps each to its port (dev_port is 0-based, ports are 1-based).
func readNetDir(dir string) ([]string, map[int]string) {
	names, _ := readDirNames(dir)
	byPort := map[int]string{}
	slices.Sort(names)
	for _, n := range names {
		port := 1
		if v, err := readAttr(filepath.Join(dir, n, "dev_port")); err == nil {
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

func (s Scanner) readPorts(d *RDMADevice, ibDir string, netByPort map[int]string, oneNetdev bool) error {
	portsDir := filepath.Join(ibDir, "ports")
	names, err := readDirNames(portsDir)
	if err != nil {
		return fmt.Errorf("list ports: %w", err)
	}
	for _, name := range names {
		num, err := strconv.Atoi(name)
		if err != nil || num < 1 {
			continue
		}
		p, err := readPort(filepath.Join(portsDir, name), num)
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

func readPort(dir string, num int) (Port, error) {
	p := Port{Port: num}
	var err error
	if p.State, err = readParsed(filepath.Join(dir, "state"), ParseEnumValue); err != nil {
		return p, err
	}
	if v, err := readAttr(filepath.Join(dir, "phys_state")); err == nil {
		if p.PhysState, err = ParseEnumValue(v); err != nil {
			return p, fmt.Errorf("read %s: %w", filepath.Join(dir, "phys_state"), err)
		}
	}
	if p.LinkLayer, err = readAttr(filepath.Join(dir, "link_layer")); err != nil {
		return p, err
	}
	switch p.LinkLayer {
	case "InfiniBand", "Ethernet":
	default:
		return p, fmt.Errorf("read %s: %w", filepath.Join(dir, "link_layer"), malformed("link layer", p.LinkLayer))
	}
	p.Rate, _ = readAttr(filepath.Join(dir, "rate"))
	if p.GIDs, err = readGIDs(dir, p.LinkLayer == "Ethernet"); err != nil {
		return p, err
	}
	for _, g := range p.GIDs {
		if g.Type == "RoCE v2" {
			p.RoCEv2GIDIndexes = append(p.RoCEv2GIDIndexes, g.Index)
		}
		if g.Index == 0 && g.Netdev != "" {
			p.Netdev = g.Netdev
		}
	}
	if p.Netdev == "" {
		for _, g := range p.GIDs {
			if g.Netdev != "" {
				p.Netdev = g.Netdev
				break
			}
		}
	}
	return p, nil
}

// readGIDs reads the populated GID slots. On InfiniBand only slot 0 (the port
// GID) is read. On Ethernet the slots are read in order until emptyGIDRun
// empty slots in a row; an empty slot reads as EINVAL (or, on old kernels, as
// the zero GID).
func readGIDs(portDir string, roce bool) ([]GID, error) {
	idx := []int{0}
	if roce {
		names, err := readDirNames(filepath.Join(portDir, "gids"))
		if err != nil {
			return nil, fmt.Errorf("list gids: %w", err)
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
		v, err := readAttr(filepath.Join(portDir, "gids", si))
		if err != nil {
			if isEmptySlot(err) {
				empty++
				continue
			}
			return nil, err
		}
		if g.GID, err = ParseGID(v); err != nil {
			return nil, fmt.Errorf("read %s: %w", filepath.Join(portDir, "gids", si), err)
		}
		if g.GID == "" {
			empty++
			continue
		}
		empty = 0
		if roce {
			g.Type, _ = readAttr(filepath.Join(portDir, "gid_attrs/types", si))
			g.Netdev, _ = readAttr(filepath.Join(portDir, "gid_attrs/ndevs", si))
		}
		gids = append(gids, g)
	}
	return gids, nil
}

func isEmptySlot(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && (errors.Is(pe.Err, fs.ErrNotExist) || errors.Is(pe.Err, unix.EINVAL))
}

// charDevices maps RDMA device names to their /dev/infiniband nodes:
// uverbsN first, then umadN and issmN.
func (s Scanner) charDevices() (map[string][]string, []string) {
	out := map[string][]string{}
	var warnings []string
	for _, class := range []string{"infiniband_verbs", "infiniband_mad"} {
		dir := filepath.Join(s.SysRoot, "class", class)
		names, err := readDirNames(dir)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("list %s: %v", dir, err))
			continue
		}
		// uverbsN, then umadN before issmN, each in numeric order.
		slices.SortFunc(names, func(a, b string) int {
			if c := charRank(a) - charRank(b); c != 0 {
				return c
			}
			return naturalCompare(a, b)
		})
		for _, n := range names {
			if !strings.HasPrefix(n, "uverbs") && !strings.HasPrefix(n, "umad") && !strings.HasPrefix(n, "issm") {
				continue // abi_version
			}
			ib, err := readAttr(filepath.Join(dir, n, "ibdev"))
			if err != nil || ib == "" {
				warnings = append(warnings, fmt.Sprintf("skip char device %s: cannot read ibdev: %v", n, err))
				continue
			}
			out[ib] = append(out[ib], "/dev/infiniband/"+n)
		}
	}
	return out, warnings
}

func charRank(name string) int {
	switch {
	case strings.HasPrefix(name, "uverbs"):
		return 0
	case strings.HasPrefix(name, "umad"):
		return 1
	default:
		return 2
	}
}
