package discovery

import (
	"fmt"
	"path/filepath"
	"slices"
)

// RereadPorts re-reads one scanned device's ports (state, link layer, rate,
// netdev names, GID tables and RoCE v2 indexes) and its netdev list, and
// returns the device with them replaced; everything else (PCI identity,
// char devices) is kept. It costs a few dozen small reads per port, not a
// scan: a watcher calls it when addresses or links change, which changes
// GID tables without adding or removing devices.
func (s Scanner) RereadPorts(d RDMADevice) (RDMADevice, error) {
	classDir := filepath.Join(s.SysRoot, "class/infiniband")
	ibPath, err := resolveClassLink(classDir, d.Name)
	if err != nil {
		return d, fmt.Errorf("reread ports of %s: %w", d.Name, err)
	}
	ib, err := openDir(ibPath)
	if err != nil {
		return d, fmt.Errorf("reread ports of %s: %w", d.Name, err)
	}
	defer ib.close()
	var netdevs []string
	netByPort := map[int]string{}
	if d.Kind != KindVirtual {
		parent, err := openDir(filepath.Dir(filepath.Dir(ibPath)))
		if err != nil {
			return d, fmt.Errorf("reread ports of %s: %w", d.Name, err)
		}
		netdevs, netByPort = readNetDir(parent)
		parent.close()
	}
	out := d
	out.Ports, out.LinkLayer = []Port{}, ""
	if err := readPorts(&out, ib, netByPort, len(netdevs) == 1); err != nil {
		return d, fmt.Errorf("reread ports of %s: %w", d.Name, err)
	}
	if len(out.Ports) > 0 {
		out.LinkLayer = out.Ports[0].LinkLayer
	}
	out.Netdevs = mergeNetdevs(netdevs, out.Ports, out.Parent)
	return out, nil
}

// mergeNetdevs is the sorted union of a device's net/ entries, its ports'
// netdevs and its parent netdev (rxe), as Scan reports Netdevs.
func mergeNetdevs(netdevs []string, ports []Port, parent string) []string {
	out := slices.Clone(netdevs)
	for _, p := range ports {
		if p.Netdev != "" && !slices.Contains(out, p.Netdev) {
			out = append(out, p.Netdev)
		}
	}
	if parent != "" && !slices.Contains(out, parent) {
		out = append(out, parent)
	}
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}
