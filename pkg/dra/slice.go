package dra

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// Domain qualifies our attributes and taint keys.
const Domain = "kube-rdma.io"

// Our attributes. CEL reads them as device.attributes["kube-rdma.io"].<name>.
const (
	// AttrPCIeSwitch identifies the PCIe switch the device sits under (see
	// PCIeSwitch); absent when it hangs directly off a root port.
	AttrPCIeSwitch resourceapi.QualifiedName = Domain + "/pcieSwitch"
	// AttrLinkLayer is port 1's link layer: "InfiniBand" or "Ethernet".
	AttrLinkLayer resourceapi.QualifiedName = Domain + "/linkLayer"
	// AttrRate is port 1's rate as the kernel writes it ("400 Gb/sec (4X NDR)").
	AttrRate resourceapi.QualifiedName = Domain + "/rate"
	// AttrRateGbps is the same rate as a whole number of Gb/s, for CEL
	// comparisons; absent when the rate cannot be read as a number.
	AttrRateGbps resourceapi.QualifiedName = Domain + "/rateGbps"
	// AttrPortState is port 1's logical state (ACTIVE, DOWN, INIT, ARMED).
	AttrPortState resourceapi.QualifiedName = Domain + "/portState"
	// AttrRoCEv2GIDIndex is the GID index NCCL_IB_GID_INDEX names for a
	// RoCE device; absent on InfiniBand and when the port has no RoCE v2 GID.
	AttrRoCEv2GIDIndex resourceapi.QualifiedName = Domain + "/rocev2GIDIndex"
	// AttrKind is the function kind: PF, VF, SF or virtual (rxe, siw), the
	// values pool selectors' kinds use.
	AttrKind resourceapi.QualifiedName = Domain + "/kind"
	// AttrNetdev is port 1's netdev (or the device's first, or a virtual
	// device's parent); absent when it has none.
	AttrNetdev resourceapi.QualifiedName = Domain + "/netdev"
	// AttrRDMADevice is the kernel's RDMA device name (mlx5_3). It names
	// the device today, not across reboots: select on it only by hand.
	AttrRDMADevice resourceapi.QualifiedName = Domain + "/rdmaDevice"
	// AttrPool is the configured pool the device is published in (the
	// config's name, as written): the chart's DeviceClass of the pool
	// selects on it, since CEL sees no pool name.
	AttrPool resourceapi.QualifiedName = Domain + "/pool"
)

// InPool sets AttrPool on the devices of the configured pool pool.
func InPool(devs []Device, pool string) {
	for i := range devs {
		if devs[i].API.Attributes == nil {
			devs[i].API.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
		}
		devs[i].API.Attributes[AttrPool] = resourceapi.DeviceAttribute{StringValue: &pool}
	}
}

// TaintPortDown is the key of the taint a device whose port is not ACTIVE
// carries; its value is the port state.
const TaintPortDown = Domain + "/port-down"

// MaxDevicesPerSlice is how many devices one ResourceSlice holds: the API's
// limit for slices whose devices use taints.
const MaxDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// PCIeSwitch identifies the innermost PCIe switch above a PCI function: the
// PCI address of the switch's upstream port. A switch appears on the
// function's path as two bridges, its upstream port and the downstream
// port the function hangs off, so the identifier is the bridge two above
// the function: every function under the switch, on any of its downstream
// ports (and a VF with its PF), gets the same value, and two functions with
// the same value are PIX to each other (discovery.Distance). "" when the
// path has no switch: the function is on a root port (or the platform hides
// the PCIe tree, as VMs do). A GPU DRA driver that publishes the same value
// for its GPUs lets a claim align a GPU and a NIC under one switch with
// matchAttribute.
func PCIeSwitch(loc discovery.Location) string {
	bridges := loc.Bridges()
	if len(bridges) < 3 { // root port, upstream port, downstream port
		return ""
	}
	return bridges[len(bridges)-2]
}

// Device is a device as published: its DRA device with attributes and
// taints, and the RDMA device behind it.
type Device struct {
	API  resourceapi.Device
	RDMA discovery.RDMADevice
}

// Devices builds the published devices of a pool's members, sorted by
// name. healthy is the watcher's health (discovery.RDMADevice.Healthy,
// kept current by the port-state poll); it decides the taint and, when it
// disagrees with a scanned ACTIVE state, the published port state. A member
// whose name another member already has is left out and reported.
func Devices(members []discovery.RDMADevice, healthy map[string]bool) ([]Device, []error) {
	var out []Device
	var errs []error
	seen := map[string]string{}
	for _, d := range members {
		name := DeviceName(d)
		if other, dup := seen[name]; dup {
			errs = append(errs, fmt.Errorf("rdma device %s: device name %s is taken by %s", d.Name, name, other))
			continue
		}
		seen[name] = d.Name
		ok := healthy[d.Name]
		out = append(out, Device{RDMA: d, API: resourceapi.Device{
			Name: name, Attributes: Attributes(d, ok), Taints: Taints(d, ok),
		}})
	}
	slices.SortFunc(out, func(a, b Device) int { return strings.Compare(a.API.Name, b.API.Name) })
	return out, errs
}

// Slices cuts the devices into ResourceSlice device lists, in order.
func Slices(devs []Device) [][]resourceapi.Device {
	var out [][]resourceapi.Device
	for chunk := range slices.Chunk(devs, MaxDevicesPerSlice) {
		api := make([]resourceapi.Device, 0, len(chunk))
		for _, d := range chunk {
			api = append(api, d.API)
		}
		out = append(out, api)
	}
	return out
}

// Attributes are a device's published attributes.
//
// The standard ones follow k8s.io/dynamic-resource-allocation/deviceattribute:
// pcieRoot is "pci<domain>:<bus>", the host bridge at the top of the
// device's sysfs path (what discovery records as PCIeRoot, and what the
// helper GetPCIeRootAttributeByPCIBusID derives from the same path);
// pciBusID is the extended BDF of a PF or VF, validated by the helper; an
// SF is not a PCI function, so it gets the PF's pcieRoot but no pciBusID.
// numaNode is the scalar form, absent when the kernel reports none (-1),
// as the helper requires.
func Attributes(d discovery.RDMADevice, healthy bool) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	str := func(name resourceapi.QualifiedName, v string) {
		if v != "" {
			a[name] = resourceapi.DeviceAttribute{StringValue: &v}
		}
	}
	num := func(name resourceapi.QualifiedName, v int) {
		n := int64(v)
		a[name] = resourceapi.DeviceAttribute{IntValue: &n}
	}
	str(deviceattribute.StandardDeviceAttributePCIeRoot, d.PCIeRoot)
	if d.PCIAddress != "" && d.Kind != discovery.KindSF {
		if attr, err := deviceattribute.GetPCIBusIDAttribute(d.PCIAddress); err == nil {
			a[attr.Name] = attr.Value
		}
	}
	if d.NUMANode >= 0 {
		if attr, err := deviceattribute.GetNUMANodeAttribute(d.NUMANode, deviceattribute.ScalarAttribute); err == nil {
			a[attr.Name] = attr.Value
		}
	}
	str(AttrPCIeSwitch, PCIeSwitch(d.Location()))
	str(AttrKind, string(d.Kind))
	str(AttrRDMADevice, d.Name)
	str(AttrLinkLayer, d.LinkLayer)
	str(AttrNetdev, netdev(d))
	if len(d.Ports) > 0 {
		p := d.Ports[0]
		str(AttrRate, p.Rate)
		if g, ok := rateGbps(p.Rate); ok {
			num(AttrRateGbps, g)
		}
		if p.LinkLayer == "Ethernet" {
			if i, ok := discovery.RoCEv2GIDIndex(p); ok {
				num(AttrRoCEv2GIDIndex, i)
			}
		}
	}
	str(AttrPortState, portState(d, healthy))
	return a
}

// Taints are the device's taints: one NoSchedule taint while it is
// unhealthy (a port not ACTIVE, or the device gone from sysfs), none
// otherwise. The taint carries no TimeAdded: the API server sets it when
// the taint first appears and the ResourceSlice controller keeps the
// stored one on later updates, so republishing does not change it.
func Taints(d discovery.RDMADevice, healthy bool) []resourceapi.DeviceTaint {
	if healthy {
		return nil
	}
	return []resourceapi.DeviceTaint{{Key: TaintPortDown, Value: portState(d, false), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
}

// portState is port 1's state, corrected by the watcher's health: the
// snapshot's ports are those of the last full scan, while health follows
// every tick. A device found unhealthy whose scan still says ACTIVE is
// published as DOWN.
func portState(d discovery.RDMADevice, healthy bool) string {
	s := ""
	if len(d.Ports) > 0 {
		s = d.Ports[0].State
	}
	switch {
	case healthy:
		return "ACTIVE"
	case s == "" || s == "ACTIVE":
		return "DOWN"
	}
	return s
}

func netdev(d discovery.RDMADevice) string {
	if len(d.Ports) > 0 && d.Ports[0].Netdev != "" {
		return d.Ports[0].Netdev
	}
	if len(d.Netdevs) > 0 {
		return d.Netdevs[0]
	}
	return d.Parent
}

// rateGbps reads "400 Gb/sec (4X NDR)" as 400; fractional rates ("2.5 Gb/sec")
// are rounded down.
func rateGbps(rate string) (int, bool) {
	num, unit, ok := strings.Cut(rate, " ")
	if !ok || !strings.HasPrefix(unit, "Gb/sec") {
		return 0, false
	}
	num, _, _ = strings.Cut(num, ".")
	n, err := strconv.Atoi(num)
	return n, err == nil && n >= 0
}
