package netconf

import (
	"fmt"

	"github.com/kube-rdma/kube-rdma/internal/natsort"
)

// Assignment gives one device its interface name in the pod.
type Assignment struct {
	DeviceID string
	IfName   string
	// Shared is set for a device of a shared pool: the pod gets a child of
	// its netdev, not the netdev.
	Shared bool
}

// PlanNames names the pod interfaces of devices. With a deviceID (Multus)
// the one device gets the runtime's ifName. In standalone mode the devices,
// in the order given, get interfaceNames when configured, else net1, net2,
// ..., skipping the runtime's own ifName.
func PlanNames(c *Conf, ifName string, devices []string) ([]Assignment, error) {
	if !c.Standalone() {
		if len(devices) != 1 {
			return nil, fmt.Errorf("%w: a deviceID names one device, got %d", ErrInvalid, len(devices))
		}
		return []Assignment{{DeviceID: devices[0], IfName: ifName}}, nil
	}
	if len(c.InterfaceNames) > 0 && len(c.InterfaceNames) < len(devices) {
		return nil, fmt.Errorf("%w: %d devices allocated but %d interfaceNames configured",
			ErrInvalid, len(devices), len(c.InterfaceNames))
	}
	out := make([]Assignment, 0, len(devices))
	next := 1
	for i, d := range devices {
		var name string
		if len(c.InterfaceNames) > 0 {
			name = c.InterfaceNames[i]
		} else {
			for name == "" || name == ifName {
				name = fmt.Sprintf("net%d", next)
				next++
			}
		}
		if name == ifName {
			return nil, fmt.Errorf("%w: interface name %q is the runtime's CNI_IFNAME", ErrInvalid, name)
		}
		out = append(out, Assignment{DeviceID: d, IfName: name})
	}
	return out, nil
}

// SortDevices orders device IDs so that "mlx5_2" comes before "mlx5_10",
// giving a pod's interfaces a stable order.
func SortDevices(ids []string) {
	natsort.Sort(ids)
}
