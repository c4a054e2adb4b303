package dra_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

const (
	attrPCIeRoot = resourceapi.QualifiedName("resource.kubernetes.io/pcieRoot")
	attrBusID    = resourceapi.QualifiedName("resource.kubernetes.io/pciBusID")
	attrNUMA     = resourceapi.QualifiedName("resource.kubernetes.io/numaNode")
)

func str(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, n resourceapi.QualifiedName) (string, bool) {
	v, ok := a[n]
	if !ok || v.StringValue == nil {
		return "", false
	}
	return *v.StringValue, true
}

func num(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, n resourceapi.QualifiedName) (int64, bool) {
	v, ok := a[n]
	if !ok || v.IntValue == nil {
		return 0, false
	}
	return *v.IntValue, true
}

// functions maps each PCI address of a topology to its function: the
// expected values come from the topology as written, not from discovery.
func functions(topo nodesim.Topology) map[string]nodesim.Function {
	m := map[string]nodesim.Function{}
	for _, f := range topo.PCI {
		m[f.Address()] = f
	}
	return m
}

// TestAttributesOnGoldenTopologies checks every published device of every
// golden topology against the topology it was built from.
func TestAttributesOnGoldenTopologies(t *testing.T) {
	for _, topo := range goldens() {
		t.Run(topo.Name, func(t *testing.T) {
			_, node := scan(t, topo)
			devs, errs := dra.Devices(node.RDMADevices, health(node))
			if len(errs) > 0 {
				t.Fatalf("Devices: %v", errs)
			}
			if len(devs) != len(node.RDMADevices) {
				t.Fatalf("published %d devices of %d", len(devs), len(node.RDMADevices))
			}
			fns := functions(topo)
			names := map[string]bool{}
			for _, d := range devs {
				a, r := d.API.Attributes, d.RDMA
				if errs := validation.IsDNS1123Label(d.API.Name); len(errs) > 0 {
					t.Errorf("%s: name %q: %v", r.Name, d.API.Name, errs)
				}
				if names[d.API.Name] {
					t.Errorf("%s: name %q published twice", r.Name, d.API.Name)
				}
				names[d.API.Name] = true
				if len(a) > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
					t.Errorf("%s: %d attributes", r.Name, len(a))
				}
				for n, v := range a {
					set := 0
					for _, p := range []bool{v.StringValue != nil, v.IntValue != nil, v.BoolValue != nil, v.VersionValue != nil} {
						if p {
							set++
						}
					}
					if set != 1 {
						t.Errorf("%s: attribute %s has %d values", r.Name, n, set)
					}
				}
				f, onPCI := fns[r.PCIAddress]
				root, ok := str(a, attrPCIeRoot)
				if onPCI {
					want := strings.Split(f.Path, "/")[0]
					if strings.Contains(f.Path, "/VMBUS:00/") { // Hyper-V: the root is below the VMBus device
						want = strings.Split(f.Path, "/")[len(strings.Split(f.Path, "/"))-2]
					}
					if !ok || root != want {
						t.Errorf("%s: pcieRoot = %q, %v; the topology puts it under %s", r.Name, root, ok, want)
					}
				} else if ok {
					t.Errorf("%s: off PCI but pcieRoot = %q", r.Name, root)
				}
				bus, ok := str(a, attrBusID)
				switch {
				case r.Kind == discovery.KindPF || r.Kind == discovery.KindVF:
					if !ok || bus != f.Address() {
						t.Errorf("%s: pciBusID = %q, %v; want %s", r.Name, bus, ok, f.Address())
					}
				case ok:
					t.Errorf("%s (%s): pciBusID = %q, want none", r.Name, r.Kind, bus)
				}
				numa, ok := num(a, attrNUMA)
				if wantNUMA := r.NUMANode; wantNUMA < 0 && ok || wantNUMA >= 0 && (!ok || numa != int64(wantNUMA)) {
					t.Errorf("%s: numaNode = %d, %v; device's %d", r.Name, numa, ok, r.NUMANode)
				}
				if onPCI && f.NUMANode >= 0 && numa != int64(f.NUMANode) {
					t.Errorf("%s: numaNode %d, topology %d", r.Name, numa, f.NUMANode)
				}
				kind, _ := str(a, dra.AttrKind)
				if kind != string(r.Kind) {
					t.Errorf("%s: kind %q, want %q", r.Name, kind, r.Kind)
				}
				p := r.Ports[0]
				ll, _ := str(a, dra.AttrLinkLayer)
				rate, _ := str(a, dra.AttrRate)
				nd, _ := str(a, dra.AttrNetdev)
				if ll != p.LinkLayer || rate != p.Rate || nd != p.Netdev || nd == "" {
					t.Errorf("%s: linkLayer %q rate %q netdev %q; port 1: %q %q %q", r.Name, ll, rate, nd, p.LinkLayer, p.Rate, p.Netdev)
				}
				gbps, ok := num(a, dra.AttrRateGbps)
				if !ok || !strings.HasPrefix(p.Rate, fmt.Sprintf("%d Gb/sec", gbps)) {
					t.Errorf("%s: rateGbps %d, %v for %q", r.Name, gbps, ok, p.Rate)
				}
				gid, ok := num(a, dra.AttrRoCEv2GIDIndex)
				if p.LinkLayer == "InfiniBand" && ok {
					t.Errorf("%s: InfiniBand with rocev2GIDIndex %d", r.Name, gid)
				}
				if p.LinkLayer == "Ethernet" {
					// The GID table the topology wrote: v2 at 1, the IPv4-mapped v2 at 3.
					want := int64(1)
					if len(p.GIDs) > 2 {
						want = 3
					}
					if !ok || gid != want {
						t.Errorf("%s: rocev2GIDIndex %d, %v; want %d", r.Name, gid, ok, want)
					}
				}
				state, _ := str(a, dra.AttrPortState)
				if state != p.State {
					t.Errorf("%s: portState %q, port 1 %q", r.Name, state, p.State)
				}
				if tainted := len(d.API.Taints) > 0; tainted == r.Healthy() {
					t.Errorf("%s: healthy %v but taints %v", r.Name, r.Healthy(), d.API.Taints)
				}
			}
		})
	}
}

// TestPCIeSwitch checks the switch identifier against the topologies'
// PCIe distances: devices that share a value are PIX to each other, and on
// the nodes whose GPUs and NICs sit under one switch, each GPU shares its
// PIX NIC's value and no other NIC's.
func TestPCIeSwitch(t *testing.T) {
	for _, topo := range goldens() {
		t.Run(topo.Name, func(t *testing.T) {
			_, node := scan(t, topo)
			devs, _ := dra.Devices(node.RDMADevices, health(node))
			type item struct {
				name string
				loc  discovery.Location
				sw   string
			}
			var items []item
			for _, d := range devs {
				sw, _ := str(d.API.Attributes, dra.AttrPCIeSwitch)
				if sw != dra.PCIeSwitch(d.RDMA.Location()) {
					t.Errorf("%s: attribute %q, PCIeSwitch %q", d.RDMA.Name, sw, dra.PCIeSwitch(d.RDMA.Location()))
				}
				// Under a switch: root port, upstream, downstream port, the function.
				if under := len(d.RDMA.PCIPath) >= 4; under != (sw != "") {
					t.Errorf("%s: path %v, pcieSwitch %q", d.RDMA.Name, d.RDMA.PCIPath, sw)
				}
				items = append(items, item{d.RDMA.Name, d.RDMA.Location(), sw})
			}
			for _, g := range node.GPUs {
				items = append(items, item{"gpu " + g.PCIAddress, g.Location(), dra.PCIeSwitch(g.Location())})
			}
			for i, a := range items {
				for _, b := range items[i+1:] {
					if a.sw == "" || a.sw != b.sw {
						continue
					}
					if l := discovery.Distance(a.loc, b.loc, topo.NUMANodes); l != discovery.PIX {
						t.Errorf("%s and %s share pcieSwitch %s but are %s", a.name, b.name, a.sw, l)
					}
				}
			}
		})
	}
	for _, topo := range []nodesim.Topology{nodesim.HGX(), nodesim.LocalNode(2), nodesim.RoCESRIOV()} {
		_, node := scan(t, topo)
		for _, g := range node.GPUs {
			gsw := dra.PCIeSwitch(g.Location())
			pix := 0
			for _, d := range node.RDMADevices {
				near := discovery.Distance(g.Location(), d.Location(), topo.NUMANodes) == discovery.PIX
				if same := dra.PCIeSwitch(d.Location()) == gsw; same != near {
					t.Errorf("%s: gpu %s (switch %s) and %s (switch %s): PIX %v", topo.Name, g.PCIAddress, gsw, d.Name, dra.PCIeSwitch(d.Location()), near)
				}
				if near {
					pix++
				}
			}
			if pix == 0 {
				t.Errorf("%s: gpu %s has no NIC under its switch", topo.Name, g.PCIAddress)
			}
		}
	}
	// DGX H100: each GPU sits below a second switch level, PXB to its NIC:
	// no GPU shares a NIC's (innermost) switch.
	_, node := scan(t, nodesim.DGXH100())
	for _, g := range node.GPUs {
		for _, d := range node.RDMADevices {
			if dra.PCIeSwitch(g.Location()) == dra.PCIeSwitch(d.Location()) {
				t.Errorf("dgx: gpu %s and %s share switch %s", g.PCIAddress, d.Name, dra.PCIeSwitch(d.Location()))
			}
		}
	}
}

// TestDeviceNamesStable: names follow the PCI address (or the auxiliary
// device, or the virtual device's own name), not the kernel's numbering:
// the same node with its RDMA devices renumbered and probed in the reverse
// order publishes the same names for the same functions.
func TestDeviceNamesStable(t *testing.T) {
	for _, topo := range goldens() {
		t.Run(topo.Name, func(t *testing.T) {
			_, node := scan(t, topo)
			renamed := topo
			renamed.RDMA = slices.Clone(topo.RDMA)
			slices.Reverse(renamed.RDMA)
			for i := range renamed.RDMA {
				if renamed.RDMA[i].Parent != "" { // virtual devices keep the name their creator gave
					renamed.RDMA[i].Name = fmt.Sprintf("mlx5_%d", i)
				}
			}
			_, node2 := scan(t, renamed)
			key := func(d discovery.RDMADevice) string {
				return string(d.Kind) + " " + d.PCIAddress + " " + d.AuxDevice + " " + d.Parent
			}
			byKey := func(n *discovery.Node) map[string]string {
				devs, errs := dra.Devices(n.RDMADevices, health(n))
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				m := map[string]string{}
				for _, d := range devs {
					m[key(d.RDMA)] = d.API.Name
				}
				return m
			}
			if diff := cmp.Diff(byKey(node), byKey(node2)); diff != "" {
				t.Errorf("names changed with the kernel's numbering (-before +after):\n%s", diff)
			}
		})
	}
	// The forms, for docs/dra.md.
	for _, c := range []struct {
		d    discovery.RDMADevice
		want string
	}{
		{discovery.RDMADevice{Name: "mlx5_3", Kind: discovery.KindPF, PCIAddress: "0000:3b:00.0"}, "pci-0000-3b-00-0"},
		{discovery.RDMADevice{Name: "mlx5_9", Kind: discovery.KindSF, PCIAddress: "0000:3b:00.0", AuxDevice: "mlx5_core.sf.2"}, "sf-mlx5-core-sf-2"},
		{discovery.RDMADevice{Name: "rxe0", Kind: discovery.KindVirtual}, "virtual-rxe0"},
		{discovery.RDMADevice{Name: "RXE_" + strings.Repeat("x", 80), Kind: discovery.KindVirtual}, ""},
	} {
		got := dra.DeviceName(c.d)
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("DeviceName(%s) = %q: %v", c.d.Name, got, errs)
		}
		if c.want != "" && got != c.want {
			t.Errorf("DeviceName(%s) = %q, want %q", c.d.Name, got, c.want)
		}
	}
	long := discovery.RDMADevice{Name: strings.Repeat("x", 80) + "a", Kind: discovery.KindVirtual}
	long2 := discovery.RDMADevice{Name: strings.Repeat("x", 80) + "b", Kind: discovery.KindVirtual}
	if dra.DeviceName(long) == dra.DeviceName(long2) {
		t.Errorf("two long names collide: %s", dra.DeviceName(long))
	}
}

// TestSlicesOfALargeNode: 1,024 devices fill 16 slices of 64, every device
// once, in name order.
func TestSlicesOfALargeNode(t *testing.T) {
	_, node := scan(t, nodesim.Synthetic(8, 16, 63))
	devs, errs := dra.Devices(node.RDMADevices, health(node))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	sl := dra.Slices(devs)
	var names []string
	for _, s := range sl {
		if len(s) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("a slice of %d devices", len(s))
		}
		for _, d := range s {
			names = append(names, d.Name)
		}
	}
	if len(sl) != 16 || len(names) != len(node.RDMADevices) || !slices.IsSorted(names) {
		t.Errorf("%d slices, %d devices of %d, sorted %v", len(sl), len(names), len(node.RDMADevices), slices.IsSorted(names))
	}
	if len(dra.Slices(nil)) != 0 {
		t.Errorf("slices of no devices: %v", dra.Slices(nil))
	}
}

// TestDuplicateNamesReported: two members with one identity (a broken scan)
// publish one device and report the other.
func TestDuplicateNamesReported(t *testing.T) {
	a := discovery.RDMADevice{Name: "mlx5_0", Kind: discovery.KindPF, PCIAddress: "0000:18:00.0"}
	b := a
	b.Name = "mlx5_1"
	devs, errs := dra.Devices([]discovery.RDMADevice{a, b}, map[string]bool{})
	if len(devs) != 1 || len(errs) != 1 {
		t.Errorf("got %d devices, errors %v", len(devs), errs)
	}
}

// TestPCIeSwitchValues pins the identifier to the switch's upstream port on
// nodes whose layout we know: switchPath(hb, dsp) is root port hb:01.0,
// upstream port (hb+1):00.0, downstream port (hb+2):dsp.0.
func TestPCIeSwitchValues(t *testing.T) {
	for _, c := range []struct {
		topo nodesim.Topology
		want map[string]string // RDMA device -> pcieSwitch ("" absent)
	}{
		{nodesim.HGX(), map[string]string{"mlx5_0": "0000:16:00.0", "mlx5_7": "0000:d8:00.0", "mlx5_8": "", "mlx5_9": ""}},
		{nodesim.DGXH100(), map[string]string{"mlx5_0": "0000:16:00.0", "mlx5_1": "0000:27:00.0", "mlx5_2": "0000:27:00.0"}},
		{nodesim.LocalNode(1), map[string]string{"mlx5_0": "0000:16:00.0", "mlx5_1": "0000:98:00.0", "mlx5_2": "0000:16:00.0", "mlx5_3": "0000:16:00.0"}},
		{nodesim.SoftRoCE(), map[string]string{"rxe0": ""}},
		{nodesim.VM(), map[string]string{"mlx5_0": "", "mlx5_1": ""}},
	} {
		_, node := scan(t, c.topo)
		devs, _ := dra.Devices(node.RDMADevices, health(node))
		got := map[string]string{}
		for _, d := range devs {
			if _, ok := c.want[d.RDMA.Name]; ok {
				got[d.RDMA.Name], _ = str(d.API.Attributes, dra.AttrPCIeSwitch)
			}
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: pcieSwitch (-want +got):\n%s", c.topo.Name, diff)
		}
	}
}
