package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// accelerator classes by vendor: what counts as a GPU. NVSwitches (10de,
// class 0680), audio functions and a BMC's VGA (ASPEED 1a03, Matrox 102b) are
// not listed, so they are not GPUs.
var acceleratorClasses = map[string][]string{
	"10de": {"0300", "0302"},         // NVIDIA: VGA, 3D controller
	"1002": {"0300", "0380", "1200"}, // AMD: VGA, display, processing accelerator (Instinct)
	"1da3": {"1200"},                 // Habana Labs (Intel Gaudi)
}

// IsAccelerator reports whether a PCI vendor and class (both lower-case hex,
// class 6 digits) name a GPU or data-centre accelerator.
func IsAccelerator(vendor, class string) bool {
	if len(class) < 4 {
		return false
	}
	return slices.Contains(acceleratorClasses[vendor], class[:4])
}

// scanGPUs reads the PCI functions not in skip (functions already known to be
// RDMA NICs).
func (s Scanner) scanGPUs(skip map[string]bool) ([]GPU, []string, error) {
	busDir := filepath.Join(s.SysRoot, "bus/pci/devices")
	names, err := readDirNames(busDir)
	if err != nil {
		return nil, nil, fmt.Errorf("list pci devices in %s: %w", busDir, err)
	}
	slices.Sort(names)
	devicesDir := filepath.Join(s.SysRoot, "devices")
	gpus := []GPU{}
	var warnings []string
	for _, addr := range names {
		if skip[addr] {
			continue
		}
		dir := filepath.Join(busDir, addr)
		vendor, err := readParsed(filepath.Join(dir, "vendor"), ParseHexID)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("skip pci device %s: %v", addr, err))
			continue
		}
		if _, ok := acceleratorClasses[vendor]; !ok {
			continue
		}
		g, err := s.readGPU(devicesDir, busDir, addr, vendor)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("skip pci device %s: %v", addr, err))
			continue
		}
		if g != nil {
			gpus = append(gpus, *g)
		}
	}
	return gpus, warnings, nil
}

func (s Scanner) readGPU(devicesDir, busDir, addr, vendor string) (*GPU, error) {
	dir := filepath.Join(busDir, addr)
	class, err := readParsed(filepath.Join(dir, "class"), ParseClass)
	if err != nil {
		return nil, err
	}
	if !IsAccelerator(vendor, class) {
		return nil, nil
	}
	g := &GPU{PCIAddress: strings.ToLower(addr), Vendor: vendor, Class: class, NUMANode: -1}
	if g.Device, err = readParsed(filepath.Join(dir, "device"), ParseHexID); err != nil {
		return nil, err
	}
	if v, err := readAttr(filepath.Join(dir, "numa_node")); err == nil {
		if g.NUMANode, err = ParseNUMANode(v); err != nil {
			return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "numa_node"), err)
		}
	}
	if g.Driver, err = readLinkBase(filepath.Join(dir, "driver")); err != nil {
		return nil, fmt.Errorf("read driver link: %w", err)
	}
	real, err := resolveClassLink(busDir, addr)
	if err != nil {
		return nil, err
	}
	g.PCIeRoot, g.PCIPath = pciTopology(devicesDir, real)
	if vendor == "10de" && s.ProcRoot != "" {
		p := filepath.Join(s.ProcRoot, "driver/nvidia/gpus", g.PCIAddress, "information")
		text, err := os.ReadFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist), err == nil && len(bytes.TrimSpace(text)) == 0:
			// No NVIDIA driver bound (vfio, nouveau) or no procfs: no UUID.
			// Empty: procfs files have size 0, so a tar copy keeps nothing.
		case err != nil:
			return nil, err
		default:
			info, err := ParseNVIDIAInformation(string(text))
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", p, err)
			}
			g.UUID, g.Minor = info.UUID, &info.Minor
		}
	}
	return g, nil
}

// GPUs reads only the node's GPUs (with their NVIDIA UUIDs and minors when
// ProcRoot is set), for callers that need no RDMA scan: the CNI plugin maps
// the kubelet's GPU IDs to PCI locations with it. The warnings name the PCI
// functions skipped.
func (s Scanner) GPUs() ([]GPU, []string, error) {
	if err := s.checkRoots(); err != nil {
		return nil, nil, err
	}
	return s.scanGPUs(nil)
}
