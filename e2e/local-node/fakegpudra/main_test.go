package main

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// TestAlignedWithNICs: on the e2e's fixture node, each GPU's pcieRoot and pcieSwitch are
// those kube-rdma's driver publishes for the InfiniBand HCA on its switch, and differ from
// the other HCA's: what the e2e's matchAttribute claims rely on.
func TestAlignedWithNICs(t *testing.T) {
	tree, err := nodesim.Build(filepath.Join(t.TempDir(), "node"), nodesim.LocalNode(2))
	if err != nil {
		t.Fatal(err)
	}
	node, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	devs, spec, err := publish(node.GPUs)
	if err != nil {
		t.Fatal(err)
	}
	nicAttrs := map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for _, d := range node.RDMADevices {
		nicAttrs[d.Name] = dra.Attributes(d, true)
	}
	str := func(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, n resourceapi.QualifiedName) string {
		if v, ok := a[n]; ok && v.StringValue != nil {
			return *v.StringValue
		}
		return ""
	}
	// The fixture's layout (nodesim.LocalNode): GPU0 and mlx5_0 on one switch, GPU1 and mlx5_1
	// on another, under different host bridges.
	want := map[string]struct{ same, other, bus string }{
		"gpu-0000-19-00-0": {"mlx5_0", "mlx5_1", "0000:19:00.0"},
		"gpu-0000-9b-00-0": {"mlx5_1", "mlx5_0", "0000:9b:00.0"},
	}
	if len(devs) != len(want) || len(spec.Devices) != len(want) {
		t.Fatalf("published %d GPUs, %d CDI devices; want %d", len(devs), len(spec.Devices), len(want))
	}
	for i, d := range devs {
		w, ok := want[d.Name]
		if !ok {
			t.Errorf("GPU %s: not in the fixture", d.Name)
			continue
		}
		if got := str(d.Attributes, deviceattribute.StandardDeviceAttributePCIBusID); got != w.bus {
			t.Errorf("GPU %s: pciBusID %q, want %q", d.Name, got, w.bus)
		}
		for _, attr := range []resourceapi.QualifiedName{deviceattribute.StandardDeviceAttributePCIeRoot, dra.AttrPCIeSwitch} {
			g, same, other := str(d.Attributes, attr), str(nicAttrs[w.same], attr), str(nicAttrs[w.other], attr)
			if g == "" || g != same || g == other {
				t.Errorf("GPU %s: %s %q; %s has %q (want equal), %s %q (want different)", d.Name, attr, g, w.same, same, w.other, other)
			}
		}
		if diff := cmp.Diff([]string{EnvName(w.bus) + "=" + w.bus}, spec.Devices[i].ContainerEdits.Env); diff != "" || spec.Devices[i].Name != d.Name {
			t.Errorf("CDI device %s (-want +got env):\n%s", spec.Devices[i].Name, diff)
		}
	}
}
