package dra

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// DeviceName is the name a device is published under: a DNS label derived
// from the same identity the device plugin's device IDs use
// (deviceplugin.DeviceID), so it does not change across restarts, driver
// reloads or the order in which the kernel probed the devices:
//
//   - a PF or VF: its PCI address, "pci-0000-3b-00-0" for 0000:3b:00.0. The
//     RDMA name (mlx5_3) is not used: the kernel numbers devices in probe
//     order, and udev's naming rules may rename them.
//   - an SF: its auxiliary device, "sf-mlx5-core-sf-2" for mlx5_core.sf.2.
//   - a virtual device (rxe, siw): its RDMA name, which its creator chose,
//     "virtual-rxe0".
//
// Characters a DNS label does not allow become "-", upper case is lowered,
// and a name longer than 63 characters is cut and given a hash of the
// whole identity so two long names do not collide.
func DeviceName(d discovery.RDMADevice) string {
	var prefix, id string
	switch {
	case d.Kind == discovery.KindSF && d.AuxDevice != "":
		prefix, id = "sf-", d.AuxDevice
	case d.PCIAddress != "" && d.Kind != discovery.KindSF:
		prefix, id = "pci-", d.PCIAddress
	default:
		prefix, id = "virtual-", d.Name
	}
	var b strings.Builder
	b.WriteString(prefix)
	for _, r := range strings.ToLower(id) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.TrimRight(b.String(), "-")
	if len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(prefix + id))
	return fmt.Sprintf("%s-%08x", strings.TrimRight(name[:54], "-"), h.Sum32())
}
