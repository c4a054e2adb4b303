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
