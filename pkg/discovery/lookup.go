package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNotFound is returned when no RDMA device matches an identifier.
var ErrNotFound = errors.New("rdma device not found")

// LookupRDMA reads the one RDMA device that id names: its RDMA device name
// ("mlx5_0", "rxe0"), its PCI address ("0000:3b:00.1") or, for an SF, its
// auxiliary device name ("mlx5_core.sf.2"). It reads only that device's
// attributes, so a CNI ADD does not pay for a scan of the whole node.
func (s Scanner) LookupRDMA(id string) (RDMADevice, error) {
	if err := s.checkRoots(); err != nil {
		return RDMADevice{}, err
	}
	classDir := filepath.Join(s.SysRoot, "class/infiniband")
	names, err := readDirNames(classDir)
	if err != nil {
		return RDMADevice{}, fmt.Errorf("list rdma devices in %s: %w", classDir, err)
	}
	slices.Sort(names)
	match := ""
	if slices.Contains(names, id) {
		match = id
	} else {
		want := strings.ToLower(id)
		for _, n := range names {
			real, err := resolveClassLink(classDir, n)
			if err != nil {
				continue
			}
			parent := filepath.Base(filepath.Dir(filepath.Dir(real)))
			if strings.ToLower(parent) == want {
				match = n
				break
			}
		}
	}
	if match == "" {
		return RDMADevice{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	chars, _ := s.charDevices(nil)
	d, err := s.readRDMADevice(nil, classDir, match, chars[match])
	if err != nil {
		return RDMADevice{}, fmt.Errorf("read rdma device %s: %w", match, err)
	}
	return d, nil
}

// PCIFunctionExists reports whether the PCI function addr
// ("0000:3b:00.0") is on the node: <sysfs>/bus/pci/devices/<addr> exists.
// The CNI plugin asks it of a NIC whose netdev it cannot find, to tell a
// NIC the kernel is still returning from a dying network namespace (its
// PCI function is there) from one that is gone.
func (s Scanner) PCIFunctionExists(addr string) (bool, error) {
	if s.SysRoot == "" {
		return false, fmt.Errorf("sysfs root is not set")
	}
	if addr == "" || strings.ContainsAny(addr, "/\x00") || addr == "." || addr == ".." {
		return false, fmt.Errorf("%q is not a PCI address", addr)
	}
	_, err := os.Lstat(filepath.Join(s.SysRoot, "bus/pci/devices", addr))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("read pci function %s: %w", addr, err)
}

// FunctionNetdevs reports whether the function behind an RDMA device is on
// the node and names the netdevs it has in the netns whose sysfs this is
// (the host's, for the daemon and the CNI plugin): for an SF, its
// auxiliary device auxDev ("mlx5_core.sf.2", whose netdev hangs under it);
// otherwise the PCI function pciAddr ("0000:3b:00.0"). The CNI plugin asks
// it of a NIC it cannot find by MAC when its pod's netns is gone: a VF
// that was re-probed (an FLR, mlx5 health recovery) comes back under any
// name with a new MAC, and an SF that was deleted never comes back even
// though its PF is still there. Switchdev representors
// (phys_port_name pfNvfM, pfNsfM, optionally with a cN controller prefix)
// hang under their PF's PCI function too and are left out: they are never
// what a pod was given.
func (s Scanner) FunctionNetdevs(pciAddr, auxDev string) (present bool, netdevs []string, err error) {
	if s.SysRoot == "" {
		return false, nil, fmt.Errorf("sysfs root is not set")
	}
	bus, name := "bus/pci/devices", pciAddr
	if auxDev != "" {
		bus, name = "bus/auxiliary/devices", auxDev
	}
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return false, nil, fmt.Errorf("%q is not a PCI address or an auxiliary device name", name)
	}
	dir := filepath.Join(s.SysRoot, bus, name)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil, nil
		}
		return false, nil, fmt.Errorf("read function %s: %w", name, err)
	}
	names, err := readDirNames(filepath.Join(dir, "net"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, nil, fmt.Errorf("list the netdevs of %s: %w", name, err)
	}
	slices.Sort(names)
	for _, n := range names {
		b, _ := os.ReadFile(filepath.Join(dir, "net", n, "phys_port_name"))
		if representorPort(strings.TrimSpace(string(b))) {
			continue
		}
		netdevs = append(netdevs, n)
	}
	return true, netdevs, nil
}

// representorPort reports whether a phys_port_name is a switchdev
// representor's: "pf0vf3", "pf1sf7", "c1pf0vf2" (the kernel's
// devlink port naming); an uplink's is "p0", a plain function's "".
func representorPort(name string) bool {
	if c, ok := strings.CutPrefix(name, "c"); ok {
		i := strings.IndexFunc(c, func(r rune) bool { return r < '0' || r > '9' })
		if i <= 0 {
			return false
		}
		name = c[i:]
	}
	rest, ok := strings.CutPrefix(name, "pf")
	if !ok {
		return false
	}
	i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if i <= 0 {
		return false
	}
	kind, num := rest[i:min(i+2, len(rest))], rest[min(i+2, len(rest)):]
	return (kind == "vf" || kind == "sf") && num != "" && strings.Trim(num, "0123456789") == ""
}
