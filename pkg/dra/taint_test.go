package dra_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// published is mlx5_0's device as the daemon would publish it after a
// scan of the tree.
func published(t *testing.T, tree nodesim.Tree, dev string) resourceapi.Device {
	t.Helper()
	node := rescan(t, tree)
	devs, errs := dra.Devices(node.RDMADevices, health(node))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, d := range devs {
		if d.RDMA.Name == dev {
			return d.API
		}
	}
	t.Fatalf("%s not published", dev)
	return resourceapi.Device{}
}

// TestTaintLifecycle: a port that goes down taints its device, the taint
// is the same on every republish while it stays down, and a port back up
// removes it and gives back the device as it was.
func TestTaintLifecycle(t *testing.T) {
	tree, _ := scan(t, nodesim.HGX())
	up := published(t, tree, "mlx5_0")
	if len(up.Taints) != 0 {
		t.Fatalf("healthy device tainted: %v", up.Taints)
	}
	if s := *up.Attributes[dra.AttrPortState].StringValue; s != "ACTIVE" {
		t.Fatalf("portState %q", s)
	}
	if err := tree.SetPortState("mlx5_0", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	down := published(t, tree, "mlx5_0")
	want := []resourceapi.DeviceTaint{{Key: "kube-rdma.io/port-down", Value: "DOWN", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	if diff := cmp.Diff(want, down.Taints); diff != "" {
		t.Errorf("port down: taints (-want +got):\n%s", diff)
	}
	if s := *down.Attributes[dra.AttrPortState].StringValue; s != "DOWN" {
		t.Errorf("port down: portState %q", s)
	}
	if again := published(t, tree, "mlx5_0"); !cmp.Equal(down, again) {
		t.Errorf("republish while down changed the device:\n%s", cmp.Diff(down, again))
	}
	// Another device's port going down leaves this one alone.
	if other := published(t, tree, "mlx5_1"); len(other.Taints) != 0 {
		t.Errorf("mlx5_1 tainted: %v", other.Taints)
	}
	if err := tree.SetPortState("mlx5_0", 1, nodesim.StateInit, nodesim.PhysLinkUp); err != nil {
		t.Fatal(err)
	}
	if init := published(t, tree, "mlx5_0"); len(init.Taints) != 1 || init.Taints[0].Value != "INIT" {
		t.Errorf("port INIT: taints %v", init.Taints)
	}
	if err := tree.SetPortState("mlx5_0", 1, nodesim.StateActive, nodesim.PhysLinkUp); err != nil {
		t.Fatal(err)
	}
	if back := published(t, tree, "mlx5_0"); !cmp.Equal(up, back) {
		t.Errorf("port back up: device differs from before (-before +after):\n%s", cmp.Diff(up, back))
	}
}

// TestTaintsFollowHealth: the watcher's health, which follows every tick,
// wins over the last scan's port state: a device the scan saw ACTIVE but
// the watcher found down is tainted and published as DOWN.
func TestTaintsFollowHealth(t *testing.T) {
	d := discovery.RDMADevice{Name: "mlx5_0", Kind: discovery.KindPF, PCIAddress: "0000:18:00.0",
		Ports: []discovery.Port{{Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand"}}}
	for _, c := range []struct {
		healthy bool
		state   string
		want    []resourceapi.DeviceTaint
	}{
		{true, "ACTIVE", nil},
		{false, "DOWN", []resourceapi.DeviceTaint{{Key: dra.TaintPortDown, Value: "DOWN", Effect: resourceapi.DeviceTaintEffectNoSchedule}}},
	} {
		if diff := cmp.Diff(c.want, dra.Taints(d, c.healthy)); diff != "" {
			t.Errorf("healthy %v: taints (-want +got):\n%s", c.healthy, diff)
		}
		if s := *dra.Attributes(d, c.healthy)[dra.AttrPortState].StringValue; s != c.state {
			t.Errorf("healthy %v: portState %q, want %q", c.healthy, s, c.state)
		}
	}
}
